//! What a guest tells the host (`guest-K.json` in the shared output folder): written by the guest
//! program, read by the host's checks. The guest never decides whether the lab passed.
use serde::{Deserialize, Serialize};

use super::tscpage::{Handshake, OffsetBracket};

/// The guests' subnet on the multicast hub: guest k's address.
pub fn address(k: usize) -> String {
    format!("10.77.0.{}", k + 1)
}

/// A tight reading of CLOCK_MONOTONIC and CLOCK_MONOTONIC_RAW against the TSC: MONOTONIC was
/// read between TSC readings `t1` and `t2`, RAW between `t2` and `t3`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockPair {
    pub t1: u64,
    pub mono: u64,
    pub t2: u64,
    pub raw: u64,
    pub t3: u64,
}

/// What a guest reports to the host (`guest-K.json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct GuestReport {
    pub index: usize,
    /// The guest's architecture (`uname -m`); reports without it came from x86_64 guests.
    #[serde(default = "x86_64")]
    pub arch: String,
    pub kernel: String,
    pub clocksource: String,
    /// TSC offset from the host's, before the traffic and after it.
    pub offset_start: OffsetBracket,
    pub offset_end: OffsetBracket,
    /// TSC ticks per second of CLOCK_MONOTONIC_RAW (from the first and last pair).
    pub tsc_hz: f64,
    /// On a guest whose counter is not the host's TSC (aarch64): a handshake every
    /// [`HANDSHAKE_EVERY`] from before the agent started until after it stopped, through which
    /// a line maps the counter onto the host's TSC. Empty on x86_64 guests.
    #[serde(default)]
    pub handshakes: Vec<Handshake>,
    /// `tsync-agent check`'s exit status and output, run before recording.
    #[serde(default)]
    pub agent_check: Option<(String, String)>,
    /// Every 10 ms, from before the agent started until after it stopped.
    pub pairs: Vec<ClockPair>,
    /// The adjtimex frequency (ppm) before and after the slew, and when (CLOCK_MONOTONIC ns).
    pub slew: Option<AppliedSlew>,
    /// The agent's summary: (events written, events lost); exit status.
    pub agent_events: u64,
    pub agent_lost: u64,
    pub agent_status: String,
    /// BPF programs still loaded after the agent exited.
    pub programs_left: usize,
    /// Request/response exchanges the traffic generator completed.
    pub exchanges: u64,
    /// The NIC's offload features as the kernel reports them.
    pub offloads: Vec<String>,
}

/// How often an aarch64 guest measures its counter against the host's TSC.
pub const HANDSHAKE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

fn x86_64() -> String {
    "x86_64".into()
}

/// An `adjtimex` frequency change, as applied.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedSlew {
    pub freq_before_ppm: f64,
    pub freq_after_ppm: f64,
    pub at_mono_ns: u64,
}
