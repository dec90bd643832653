//! The agent's sampling timer, simulated: a clock sample every 20 ms of the node's
//! CLOCK_MONOTONIC, the kernel's clock discipline whenever it changes, a flush every 0.5 s.
//!
//! Each sample reads CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC again and
//! CLOCK_REALTIME, as the agent does; the agent keeps the tightest of three tries, so the two
//! monotonic reads are 20–80 ns apart (uniform here) with the raw read somewhere between them.
//! Reads truncate, as the kernel's do, except the closing monotonic read, rounded up, so that the
//! bracket always holds the true CLOCK_MONOTONIC at the raw read: the guarantee the analyzer
//! builds its slew-free timebase on.

use rand::Rng;
use rand::rngs::StdRng;
use tsync_common::format::{ClockSample, KernelClock};

use crate::clock::{BOOT_NS, ClockModel, adjtimex_freq_tick};

/// Time between clock samples on the node's CLOCK_MONOTONIC (ns).
pub const SAMPLE_INTERVAL_NS: f64 = 20e6;
/// Samples per flush of the trace file (every 0.5 s).
pub const SAMPLES_PER_FLUSH: u64 = 25;

/// `timex.status` bits.
const STA_UNSYNC: i32 = 0x0040;
const STA_NANO: i32 = 0x2000;
/// adjtimex return values.
const TIME_OK: i32 = 0;
const TIME_ERROR: i32 = 5;

/// One round of the agent's sampling timer.
pub struct Reading {
    /// The clock sample.
    pub sample: ClockSample,
    /// The kernel's discipline, when it differs from the one last written.
    pub kernel: Option<KernelClock>,
    /// Whether the agent flushes its file after this sample.
    pub flush: bool,
}

/// The agent's sampling timer on one node.
pub struct Sampler {
    rng: StdRng,
    /// MONO − boot at which the timer fired first; it fires every [`SAMPLE_INTERVAL_NS`] after.
    first_mono: f64,
    taken: u64,
    /// True time of the next sample's raw read, and its bracket (ns before and after it).
    next: (f64, f64, f64),
    last_kernel: Option<KernelClock>,
    disciplined: bool,
}

impl Sampler {
    /// A timer that first fires at true time 0; `disciplined` says whether a daemon runs.
    pub fn new(clock: &ClockModel, disciplined: bool, rng: StdRng) -> Self {
        let mut sampler = Sampler {
            rng,
            first_mono: clock.mono(0.0),
            taken: 0,
            next: (0.0, 0.0, 0.0),
            last_kernel: None,
            disciplined,
        };
        sampler.schedule(clock);
        sampler
    }

    /// True time of the next sample's raw read: events before it go into the file first.
    pub fn next_true_ns(&self) -> f64 {
        self.next.0
    }

    /// Takes the sample due at [`next_true_ns`](Self::next_true_ns) and schedules the next one.
    pub fn take(&mut self, clock: &ClockModel) -> Reading {
        let (t, before, after) = self.next;
        let reading = self.read_at(clock, t, before, after);
        self.taken += 1;
        self.schedule(clock);
        reading
    }

    /// A last sample at true time `t` (the agent's when it stops), whatever the timer says.
    pub fn take_final(&mut self, clock: &ClockModel, t: f64) -> Reading {
        let before = self.rng.random_range(10.0..40.0);
        let reading = self.read_at(clock, t, before, 20.0 + before);
        Reading {
            flush: true,
            ..reading
        }
    }

    fn schedule(&mut self, clock: &ClockModel) {
        let fires = clock.true_time(self.first_mono + self.taken as f64 * SAMPLE_INTERVAL_NS);
        // The timer wakes the agent a little late; the bracket's width and where the raw read
        // falls inside it vary from one sample to the next.
        let wake = self.rng.random_range(2e3..50e3);
        let width = self.rng.random_range(20.0..80.0);
        let before = width * self.rng.random_range(0.05..0.95);
        self.next = (fires.max(0.0) + wake + before, before, width - before);
    }

    fn read_at(&mut self, clock: &ClockModel, t: f64, before: f64, after: f64) -> Reading {
        let sample = read_clocks(clock, t, before, after);
        let state = self.kernel_state(clock, t, sample.monotonic_ns);
        let changed = self.last_kernel.is_none_or(|last| {
            (last.freq, last.offset, last.tick, last.status)
                != (state.freq, state.offset, state.tick, state.status)
        });
        if changed {
            self.last_kernel = Some(state);
        }
        Reading {
            sample,
            kernel: changed.then_some(state),
            flush: self.taken % SAMPLES_PER_FLUSH == SAMPLES_PER_FLUSH - 1,
        }
    }

    /// What `adjtimex` (modes 0) reports at true time `t`: chrony's way, the whole correction
    /// (frequency estimate and phase slew) in `freq` and `tick`, no kernel PLL offset. An
    /// undisciplined node reports an unsynchronized clock with no correction.
    fn kernel_state(&self, clock: &ClockModel, t: f64, monotonic_ns: u64) -> KernelClock {
        let ppm = clock.slew_at(t).map_or(0.0, |s| s.ppm);
        let (freq, tick) = adjtimex_freq_tick(ppm);
        KernelClock {
            monotonic_ns,
            freq,
            offset: 0,
            tick,
            status: if self.disciplined {
                STA_NANO
            } else {
                STA_UNSYNC | STA_NANO
            },
            maxerror: if self.disciplined { 1_000 } else { 16_000_000 },
            state: if self.disciplined {
                TIME_OK
            } else {
                TIME_ERROR
            },
        }
    }
}

/// The sample whose raw read happens at true time `t`, the monotonic reads `before` ns earlier
/// and `after` ns later, and the realtime read 15 ns after that.
fn read_clocks(clock: &ClockModel, t: f64, before: f64, after: f64) -> ClockSample {
    let monotonic_after_ns = (clock.mono(t + after) + BOOT_NS).ceil() as u64;
    ClockSample {
        monotonic_ns: (clock.mono(t - before) + BOOT_NS).floor() as u64,
        monotonic_raw_ns: (clock.raw(t) + BOOT_NS).floor() as u64,
        realtime_ns: ((clock.mono(t + after + 15.0) + BOOT_NS).floor() as i64)
            .saturating_add(clock.realtime_minus_monotonic_ns),
        tsc: 0,
        monotonic_after_ns,
    }
}
