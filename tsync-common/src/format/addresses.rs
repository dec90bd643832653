//! The node's addresses (chunk kind 10, format version 5 on): which IP addresses the recorded
//! node held, in which of its network namespaces, and when.
//!
//! Why: a node that forwards packets (a Kubernetes node routing or bridging its pods' traffic,
//! a Docker host) records each passage twice, and the analyzer tells the node that sent or
//! received a packet from the nodes that only forwarded it by who owns its source and
//! destination addresses. Pods live in network namespaces of their own, created and deleted
//! while the agent records, so the agent scans every namespace it can see and writes a whole
//! [`AddressTable`] at the start and again whenever the table changed. A table holds from its
//! time until the next one; [`held_addresses`] turns the tables into one interval per address.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Damage, FormatError, TraceReader};

/// An IP address with the length of its prefix (`10.0.0.1/24`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpPrefix {
    pub ip: IpAddr,
    /// Prefix length in bits (at most 32 for IPv4, 128 for IPv6).
    pub len: u8,
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.len)
    }
}

/// The addresses of one network namespace of the node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct NamespaceAddresses {
    /// The namespace's inode number (`stat -L /proc/PID/ns/net`), as in
    /// [`Interface::netns_inode`](super::Interface::netns_inode) and
    /// [`RecordedNetns::inode`](super::RecordedNetns::inode).
    pub inode: u64,
    /// Whether the agent records the packets of this namespace.
    pub recorded: bool,
    /// Its IPv4 and IPv6 addresses, sorted, without loopback (127/8, ::1) and link-local
    /// (169.254/16, fe80::/10) addresses, which every namespace has or which mean nothing
    /// beyond their link.
    pub addresses: Vec<IpPrefix>,
}

/// Every namespace the agent saw, with its addresses, at one instant (one chunk of kind 10).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct AddressTable {
    /// CLOCK_MONOTONIC when the scan started, after `--clock-skew` like the events. The first
    /// table describes the node from the start of the recording, each later one from its time.
    pub monotonic_ns: u64,
    /// The namespaces, sorted by inode.
    pub namespaces: Vec<NamespaceAddresses>,
}

/// One address the node held without interruption.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldAddress {
    pub address: IpPrefix,
    /// The namespace that held it.
    pub netns_inode: u64,
    /// Whether the agent recorded that namespace's packets.
    pub recorded: bool,
    /// The time of the first table that lists it (ns, as [`AddressTable::monotonic_ns`]).
    pub from_ns: u64,
    /// The time of the first later table that no longer lists it; None if the last table still
    /// does (held until the end of the recording, as far as the file tells).
    pub until_ns: Option<u64>,
}

/// The addresses of a run of tables: one [`HeldAddress`] per address, namespace and interval,
/// sorted by address, then time. Tables must be in file order (the order of their times).
pub fn held_addresses(tables: &[AddressTable]) -> Vec<HeldAddress> {
    type Key = (IpPrefix, u64, bool);
    let mut open: BTreeMap<Key, u64> = BTreeMap::new();
    let mut held = Vec::new();
    for table in tables {
        let now: BTreeMap<Key, ()> = table
            .namespaces
            .iter()
            .flat_map(|ns| {
                ns.addresses
                    .iter()
                    .map(move |&a| ((a, ns.inode, ns.recorded), ()))
            })
            .collect();
        open.retain(|key, from_ns| {
            let still = now.contains_key(key);
            if !still {
                held.push(held_address(*key, *from_ns, Some(table.monotonic_ns)));
            }
            still
        });
        for key in now.into_keys() {
            open.entry(key).or_insert(table.monotonic_ns);
        }
    }
    held.extend(
        open.into_iter()
            .map(|(key, from_ns)| held_address(key, from_ns, None)),
    );
    held.sort_by_key(|h| (h.address, h.from_ns, h.netns_inode));
    held
}

fn held_address(
    (address, netns_inode, recorded): (IpPrefix, u64, bool),
    from_ns: u64,
    until_ns: Option<u64>,
) -> HeldAddress {
    HeldAddress {
        address,
        netns_inode,
        recorded,
        from_ns,
        until_ns,
    }
}

/// A trace file's address tables, as far as the file is readable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AddressTables {
    /// In file order; empty for files before format version 5.
    pub tables: Vec<AddressTable>,
    /// Where the file stops being readable, if it does (tables after it are lost).
    pub damage: Option<Damage>,
}

/// Reads the address tables of the trace file at `path` in a pass that reads only chunk headers,
/// the tables and the end chunk: it seeks over every other payload (events, clock samples,
/// lost counts) without reading, checking or decompressing it. For the analyzer, which needs
/// every node's addresses before it matches anything.
pub fn read_address_tables(path: &Path) -> Result<AddressTables, FormatError> {
    let file = File::open(path)
        .map_err(|e| FormatError::io(format!("cannot open {}", path.display()), e))?;
    // Unbuffered: the pass reads a chunk header, then seeks over the payload. A buffer would
    // read ahead into payloads that are passed over (measured with a 64 KiB one: 7 to 20
    // times the file's size read, a buffer's worth per chunk).
    let mut reader = TraceReader::new(file)?;
    reader.only_address_tables();
    while reader.next_events()?.is_some() {}
    Ok(AddressTables {
        tables: reader.address_tables().to_vec(),
        damage: reader.damage().cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(s: &str) -> IpPrefix {
        let (ip, len) = s.split_once('/').unwrap();
        IpPrefix {
            ip: ip.parse().unwrap(),
            len: len.parse().unwrap(),
        }
    }

    fn table(t: u64, namespaces: &[(u64, bool, &[&str])]) -> AddressTable {
        AddressTable {
            monotonic_ns: t,
            namespaces: namespaces
                .iter()
                .map(|&(inode, recorded, addrs)| NamespaceAddresses {
                    inode,
                    recorded,
                    addresses: addrs.iter().map(|a| prefix(a)).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn addresses_are_held_from_the_table_that_lists_them_until_one_that_does_not() {
        let node = (1, true, &["192.0.2.1/24"][..]);
        let tables = [
            table(100, &[node]),
            table(200, &[node, (7, false, &["10.244.1.5/24", "fd00::5/64"])]),
            table(300, &[node]),
            table(400, &[node, (8, false, &["10.244.1.5/24"])]),
        ];
        let held = held_addresses(&tables);
        let text: Vec<String> = held
            .iter()
            .map(|h| {
                format!(
                    "{} {} {} {:?}",
                    h.address, h.netns_inode, h.from_ns, h.until_ns
                )
            })
            .collect();
        assert_eq!(
            text,
            [
                "10.244.1.5/24 7 200 Some(300)",
                "10.244.1.5/24 8 400 None",
                "192.0.2.1/24 1 100 None",
                "fd00::5/64 7 200 Some(300)",
            ]
        );
        assert!(held_addresses(&[]).is_empty());
    }

    #[test]
    fn prefixes_print_as_addresses_with_their_length() {
        assert_eq!(prefix("fd00::1/64").to_string(), "fd00::1/64");
        assert_eq!(prefix("10.0.0.1/32").to_string(), "10.0.0.1/32");
    }
}
