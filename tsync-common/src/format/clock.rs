//! The node's clocks as recorded: clock samples (monotonic, raw, realtime, TSC read back to back)
//! and the kernel's clock-discipline states.

use serde::{Deserialize, Serialize};

/// The node's clocks read back to back, so that event times (CLOCK_MONOTONIC, what
/// `bpf_ktime_get_ns` reads, slewed by NTP) can later be mapped to the raw, un-slewed timeline
/// (CLOCK_MONOTONIC_RAW), the TSC and wall-clock time.
///
/// The raw reading lies between the two monotonic readings: the true CLOCK_MONOTONIC at the
/// instant CLOCK_MONOTONIC_RAW read `monotonic_raw_ns` is within
/// `[monotonic_ns, monotonic_after_ns]`. The agent keeps the tightest of a few tries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClockSample {
    /// CLOCK_MONOTONIC read just before the raw clock, after `--clock-skew` like the events.
    pub monotonic_ns: u64,
    /// CLOCK_MONOTONIC_RAW: the clocksource without NTP's frequency and phase corrections.
    pub monotonic_raw_ns: u64,
    pub realtime_ns: i64,
    /// `rdtsc` (0 where the CPU has none).
    pub tsc: u64,
    /// CLOCK_MONOTONIC read just after the raw clock, skewed like `monotonic_ns` (equal to it in
    /// version 1 files, whose pairing has no known bound).
    pub monotonic_after_ns: u64,
}

impl ClockSample {
    /// Width of the monotonic bracket around the raw reading (ns).
    pub fn bracket_ns(&self) -> u64 {
        self.monotonic_after_ns.saturating_sub(self.monotonic_ns)
    }
}

/// A version 1 clock sample as stored (no second monotonic reading).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct ClockSampleV1 {
    pub(super) monotonic_ns: u64,
    pub(super) monotonic_raw_ns: u64,
    pub(super) realtime_ns: i64,
    pub(super) tsc: u64,
}

/// The kernel's clock discipline (`adjtimex(2)` with modes 0), recorded when the recording starts
/// and whenever it changes: what NTP or chrony did to CLOCK_MONOTONIC's rate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KernelClock {
    /// CLOCK_MONOTONIC (skewed like the events) when the state was read.
    pub monotonic_ns: u64,
    /// Frequency offset, ppm with a 16-bit fraction (`timex.freq`).
    pub freq: i64,
    /// Remaining phase offset the kernel is slewing away (`timex.offset`, ns with STA_NANO, else µs).
    pub offset: i64,
    /// Microseconds per tick (`timex.tick`; 10000 at USER_HZ 100 is nominal).
    pub tick: i64,
    /// `timex.status` flags (STA_PLL, STA_NANO, STA_UNSYNC, ...).
    pub status: i32,
    /// Maximum error estimate (µs), as the NTP daemon set it.
    pub maxerror: i64,
    /// Return value of adjtimex: TIME_OK, TIME_INS, ..., TIME_ERROR.
    pub state: i32,
}
