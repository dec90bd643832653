//! The header chunk: what a trace says about itself (node, kernel, clock, agent options).

use serde::{Deserialize, Serialize};

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
    /// Interfaces of the recorded network namespace, with their addresses.
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
