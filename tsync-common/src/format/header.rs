//! The header chunk: what a trace says about itself (node, kernel, clock, agent options).
//!
//! bincode is not self-describing: a field added to [`Header`] changes the layout, so each
//! layout a version wrote is kept ([`HeaderV4`] for versions 1 to 4) and read by version.

use serde::{Deserialize, Serialize};

use super::FormatError;
use super::chunk::{decode, encode};

/// Self-description of a trace: which node, which kernel, which clock, which options.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Header {
    /// Name the user gave the node (`--node`), the hostname by default.
    pub node: String,
    pub hostname: String,
    /// `/proc/sys/kernel/random/boot_id`: monotonic times are only comparable within one boot.
    pub boot_id: String,
    pub kernel_release: String,
    /// Current clocksource (`tsc`, `kvm-clock`, ...): tells how trustworthy the clock is.
    pub clocksource: String,
    /// Interfaces of the recorded network namespaces, with their addresses (files before version
    /// 5: of the agent's own namespace only).
    pub interfaces: Vec<Interface>,
    /// CLOCK_REALTIME when recording started.
    pub start_realtime_ns: i64,
    /// CLOCK_MONOTONIC when recording started (after `--clock-skew`, like the events).
    pub start_monotonic_ns: u64,
    pub options: AgentOptions,
}

/// One network interface of the recorded node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Interface {
    pub ifindex: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    /// Addresses with prefix length, e.g. `10.0.0.1/24`, `fe80::1/64`.
    pub addresses: Vec<String>,
    /// Inode number of the network namespace the interface is in: interface indexes are per
    /// namespace, so an agent recording several namespaces lists the same ifindex more than once
    /// (format version 5 on). Files before version 5 listed the agent's own namespace only: its
    /// interfaces read with `options.netns_inode`, or 0 (unknown) when that was not recorded
    /// (`--all-netns`).
    pub netns_inode: u64,
}

/// The options the agent ran with, recorded so a trace explains itself.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AgentOptions {
    pub agent_version: String,
    pub ring_size: u64,
    pub all_netns: bool,
    /// Inode of the network namespace the agent filtered on (None with `--all-netns`).
    pub netns_inode: Option<u64>,
    pub duration_s: Option<f64>,
    /// A known skew applied to every written timestamp, to test synchronization against the truth.
    /// The analyzer never reads it to help itself.
    pub clock_skew: Option<ClockSkew>,
    pub command_line: Vec<String>,
    /// The network namespaces recorded, as chosen: the agent's own by default, those of
    /// `--netns`, none with `--all-netns` (every namespace is). Format version 5 on; files
    /// before it read `netns_inode` as the agent's own namespace here.
    pub recorded_netns: Vec<RecordedNetns>,
}

/// A network namespace the agent recorded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct RecordedNetns {
    /// Its inode number (`stat -L`, `ls -iL`, `readlink /proc/PID/ns/net`).
    pub inode: u64,
    /// The namespace file the agent resolved it from: `/proc/self/ns/net` for its own,
    /// `/run/netns/NAME` or `/proc/PID/ns/net` as given to `--netns`, and for an inode number
    /// the file it was found under.
    pub path: String,
}

/// A linear transformation of the node's clock: `t + offset_ns + t * drift_ppm * 1e-6`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
pub struct ClockSkew {
    pub offset_ns: i64,
    pub drift_ppm: f64,
}

impl ClockSkew {
    /// Applies the skew to a monotonic time in ns. The drift term is computed in f64 with the
    /// product `t * ppm` split so that its rounding error stays below a nanosecond for any
    /// realistic uptime; the result saturates at the bounds of `u64`.
    pub fn apply(&self, t_ns: u64) -> u64 {
        let drift = (t_ns as f64) * self.drift_ppm * 1e-6;
        let skewed = t_ns as i128 + self.offset_ns as i128 + drift.round() as i128;
        skewed.clamp(0, u64::MAX as i128) as u64
    }
}

/// The path files before version 5 stand for: the agent recorded its own namespace.
const OWN_NETNS: &str = "/proc/self/ns/net";

/// [`Header`] as versions 1 to 4 store it: interfaces without their namespace, options without
/// the recorded namespaces.
#[derive(Serialize, Deserialize)]
struct HeaderV4 {
    node: String,
    hostname: String,
    boot_id: String,
    kernel_release: String,
    clocksource: String,
    interfaces: Vec<InterfaceV4>,
    start_realtime_ns: i64,
    start_monotonic_ns: u64,
    options: AgentOptionsV4,
}

/// [`Interface`] before version 5.
#[derive(Serialize, Deserialize)]
struct InterfaceV4 {
    ifindex: u32,
    name: String,
    mac: Option<[u8; 6]>,
    addresses: Vec<String>,
}

/// [`AgentOptions`] before version 5.
#[derive(Serialize, Deserialize)]
struct AgentOptionsV4 {
    agent_version: String,
    ring_size: u64,
    all_netns: bool,
    netns_inode: Option<u64>,
    duration_s: Option<f64>,
    clock_skew: Option<ClockSkew>,
    command_line: Vec<String>,
}

impl From<HeaderV4> for Header {
    fn from(old: HeaderV4) -> Self {
        let o = old.options;
        // Such an agent listed, and without --all-netns recorded, its own namespace.
        let own = o.netns_inode.unwrap_or(0);
        Header {
            node: old.node,
            hostname: old.hostname,
            boot_id: old.boot_id,
            kernel_release: old.kernel_release,
            clocksource: old.clocksource,
            interfaces: old
                .interfaces
                .into_iter()
                .map(|i| Interface {
                    ifindex: i.ifindex,
                    name: i.name,
                    mac: i.mac,
                    addresses: i.addresses,
                    netns_inode: own,
                })
                .collect(),
            start_realtime_ns: old.start_realtime_ns,
            start_monotonic_ns: old.start_monotonic_ns,
            options: AgentOptions {
                agent_version: o.agent_version,
                ring_size: o.ring_size,
                all_netns: o.all_netns,
                netns_inode: o.netns_inode,
                duration_s: o.duration_s,
                clock_skew: o.clock_skew,
                command_line: o.command_line,
                recorded_netns: o
                    .netns_inode
                    .map(|inode| RecordedNetns {
                        inode,
                        path: OWN_NETNS.into(),
                    })
                    .into_iter()
                    .collect(),
            },
        }
    }
}

impl From<&Header> for HeaderV4 {
    /// Leaves out what version 4 has no place for (each interface's namespace, the list of
    /// recorded namespaces): metadata only, for the tests and benchmarks that write older
    /// versions from newer recordings.
    fn from(h: &Header) -> Self {
        let o = &h.options;
        HeaderV4 {
            node: h.node.clone(),
            hostname: h.hostname.clone(),
            boot_id: h.boot_id.clone(),
            kernel_release: h.kernel_release.clone(),
            clocksource: h.clocksource.clone(),
            interfaces: h
                .interfaces
                .iter()
                .map(|i| InterfaceV4 {
                    ifindex: i.ifindex,
                    name: i.name.clone(),
                    mac: i.mac,
                    addresses: i.addresses.clone(),
                })
                .collect(),
            start_realtime_ns: h.start_realtime_ns,
            start_monotonic_ns: h.start_monotonic_ns,
            options: AgentOptionsV4 {
                agent_version: o.agent_version.clone(),
                ring_size: o.ring_size,
                all_netns: o.all_netns,
                netns_inode: o.netns_inode,
                duration_s: o.duration_s,
                clock_skew: o.clock_skew,
                command_line: o.command_line.clone(),
            },
        }
    }
}

/// The header chunk's payload in the layout of format `version`.
pub(super) fn encode_header(header: &Header, version: u32) -> Result<Vec<u8>, FormatError> {
    if version >= 5 {
        encode(header)
    } else {
        encode(&HeaderV4::from(header))
    }
}

/// Decodes a header chunk's payload in the layout of format `version`.
pub(super) fn decode_header(payload: &[u8], version: u32) -> Result<Header, String> {
    if version >= 5 {
        decode(payload)
    } else {
        decode::<HeaderV4>(payload).map(Into::into)
    }
}
