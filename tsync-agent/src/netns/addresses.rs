//! A network namespace's IP addresses, read from procfs: `/proc/PID/net/fib_trie` (IPv4) and
//! `/proc/PID/net/if_inet6` (IPv6) show the namespace of process PID to any reader, without
//! entering it and without a privilege (`setns` needs CAP_SYS_ADMIN, which an agent given only
//! CAP_BPF and CAP_PERFMON lacks); a namespace without a process (`ip netns add`) is read the
//! same way from a thread that entered it (`/proc/thread-self/net/…`, see [`super::enter`]).
//! netlink (RTM_GETADDR) would give the IPv4 prefix lengths exactly, but only inside the
//! namespace, so every namespace would have to be entered at every scan; the two files are
//! plain text and cost a read each.
use std::{
    collections::BTreeSet,
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    path::Path,
};

use tsync_common::format::IpPrefix;

/// The flag of an IPv6 address whose duplicate address detection failed (`IFA_F_DADFAILED`):
/// another node holds it, this one does not use it.
const IFA_F_DADFAILED: u32 = 0x08;

/// The addresses worth telling the analyzer about: not loopback (every namespace has them), not
/// link-local (they mean nothing beyond their link, and every interface has one), not
/// unspecified.
pub fn kept(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()),
        IpAddr::V6(v6) => !(v6.is_loopback() || v6.is_unicast_link_local() || v6.is_unspecified()),
    }
}

/// The local IPv4 addresses in a `fib_trie` listing, with their prefix lengths.
///
/// The kernel lists each local address as a leaf with a `/32 host LOCAL` entry (in the local
/// table; with no policy routing the tables are merged and print the same, hence the
/// deduplication). The listing does not tell an address's prefix length: it is taken as that of
/// the longest on-link route (`link UNICAST`, the prefix route the kernel adds with the
/// address; a default route is none) that contains it, and 32 when none does (an address added
/// with `/32` or `noprefixroute`, as routed pod networks do). Ownership, what the analyzer needs,
/// depends on the address alone.
pub fn parse_fib_trie(text: &str) -> Vec<IpPrefix> {
    let mut locals = BTreeSet::new();
    let mut on_link: Vec<(u32, u8)> = Vec::new();
    let mut leaf: Option<Ipv4Addr> = None;
    for line in text.lines() {
        let line = line.trim_start();
        if let Some(addr) = line.strip_prefix("|-- ") {
            leaf = addr.trim().parse().ok();
            continue;
        }
        let (Some(entry), Some(addr)) = (line.strip_prefix('/'), leaf) else {
            if !line.starts_with('/') {
                // A table name or an inner node of the trie: no leaf until the next `|--`.
                leaf = None;
            }
            continue;
        };
        let mut words = entry.split_whitespace();
        let (Some(Ok(len)), Some(scope), Some(kind)) = (
            words.next().map(str::parse::<u8>),
            words.next(),
            words.next(),
        ) else {
            continue;
        };
        match (len, scope, kind) {
            (32, _, "LOCAL") => {
                locals.insert(addr);
            }
            (1..=32, "link", "UNICAST") => on_link.push((u32::from(addr), len)),
            _ => {}
        }
    }
    locals
        .into_iter()
        .map(|addr| {
            let bits = u32::from(addr);
            let len = on_link
                .iter()
                .filter(|&&(net, len)| (bits ^ net) >> (32 - u32::from(len)) == 0)
                .map(|&(_, len)| len)
                .max()
                .unwrap_or(32);
            IpPrefix {
                ip: IpAddr::V4(addr),
                len,
            }
        })
        .collect()
}

/// The IPv6 addresses in an `if_inet6` listing: one line per address, `ADDRESS IFINDEX PREFIXLEN
/// SCOPE FLAGS NAME` (hexadecimal but for the name); addresses whose duplicate address detection
/// failed are left out. Lines that do not parse are skipped.
pub fn parse_if_inet6(text: &str) -> Vec<IpPrefix> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let addr = words.next()?;
            let _ifindex = words.next()?;
            let len = u8::from_str_radix(words.next()?, 16).ok()?;
            let _scope = words.next()?;
            let flags = u32::from_str_radix(words.next()?, 16).ok()?;
            if addr.len() != 32 || len > 128 || flags & IFA_F_DADFAILED != 0 {
                return None;
            }
            let ip = Ipv6Addr::from(u128::from_str_radix(addr, 16).ok()?);
            Some(IpPrefix {
                ip: IpAddr::V6(ip),
                len,
            })
        })
        .collect()
}

/// The addresses worth recording ([`kept`]) of a namespace, from its `fib_trie` and `if_inet6`
/// listings: sorted, each once.
pub fn from_listings(fib_trie: &str, if_inet6: &str) -> Vec<IpPrefix> {
    let all: BTreeSet<IpPrefix> = parse_fib_trie(fib_trie)
        .into_iter()
        .chain(parse_if_inet6(if_inet6))
        .filter(|a| kept(a.ip))
        .collect();
    all.into_iter().collect()
}

/// The addresses of the namespace whose `/proc/…/net` directory is `net_dir`
/// (`/proc/PID/net`, `/proc/thread-self/net`). A namespace without IPv6 has no `if_inet6`.
pub fn read(net_dir: &Path) -> io::Result<Vec<IpPrefix>> {
    let fib_trie = std::fs::read_to_string(net_dir.join("fib_trie"))?;
    let if_inet6 = match std::fs::read_to_string(net_dir.join("if_inet6")) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        other => other?,
    };
    Ok(from_listings(&fib_trie, &if_inet6))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/net/fib_trie` of a namespace with 10.244.1.5/24 on eth0, 10.96.0.10/32 on a dummy
    /// (a service address, as kube-proxy's IPVS mode adds), 169.254.3.1/16 and loopback; the
    /// tables merged (no policy routing), so Main and Local list the same.
    const FIB_TRIE: &str = "\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.0.0.0/8 2 0 2
        +-- 10.96.0.10/32 0 0 0
        |-- 10.96.0.10
           /32 host LOCAL
        +-- 10.244.1.0/24 2 0 2
           |-- 10.244.1.0
              /24 link UNICAST
           |-- 10.244.1.5
              /32 host LOCAL
           |-- 10.244.1.255
              /32 link BROADCAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     |-- 169.254.0.0
        /16 link UNICAST
     |-- 169.254.3.1
        /32 host LOCAL
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 10.244.1.0/24 2 0 2
        |-- 10.244.1.0
           /24 link UNICAST
        |-- 10.244.1.5
           /32 host LOCAL
";

    /// `/proc/net/if_inet6`: a global address, a tentative one, one whose DAD failed, a
    /// link-local one and loopback.
    const IF_INET6: &str = "\
fd000000000000000000000000000002 04 40 00 80     eth0
fd000000000000000000000000000003 04 40 00 40     eth0
fd000000000000000000000000000004 04 40 00 08     eth0
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
00000000000000000000000000000001 01 80 10 80       lo
2001db8 garbage
";

    fn text(prefixes: &[IpPrefix]) -> Vec<String> {
        prefixes.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn local_ipv4_addresses_take_the_prefix_of_their_on_link_route() {
        assert_eq!(
            text(&parse_fib_trie(FIB_TRIE)),
            [
                "10.96.0.10/32",
                "10.244.1.5/24",
                "127.0.0.1/32",
                "169.254.3.1/16"
            ]
        );
        assert!(parse_fib_trie("").is_empty());
        // A leaf's entries belong to it only: an inner node in between ends the leaf.
        assert!(
            parse_fib_trie("  |-- 10.0.0.1\n  +-- 10.0.0.0/8 2 0 2\n  /32 host LOCAL\n").is_empty()
        );
    }

    #[test]
    fn ipv6_addresses_whose_detection_failed_are_left_out() {
        assert_eq!(
            text(&parse_if_inet6(IF_INET6)),
            [
                "fd00::2/64",
                "fd00::3/64",
                "fe80::fc:ff:fe00:1/64",
                "::1/128"
            ]
        );
    }

    #[test]
    fn loopback_and_link_local_addresses_are_not_recorded() {
        assert_eq!(
            text(&from_listings(FIB_TRIE, IF_INET6)),
            ["10.96.0.10/32", "10.244.1.5/24", "fd00::2/64", "fd00::3/64"]
        );
    }

    #[test]
    fn this_process_namespace_reads() {
        // Whatever this namespace holds, reading it works and keeps only what `kept` keeps.
        let addresses = read(Path::new("/proc/self/net")).unwrap();
        assert!(addresses.iter().all(|a| kept(a.ip)), "{addresses:?}");
    }
}
