//! The node's clocks: reading them, the clock-correlation samples, the kernel's clock
//! discipline (adjtimex), and `--clock-skew`.
use tsync_common::format::{ClockSample, ClockSkew, KernelClock};

/// Reads a POSIX clock in nanoseconds.
fn read_clock(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clocks used here always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CLOCK_MONOTONIC in ns: the clock `bpf_ktime_get_ns` reads, i.e. the event time base.
pub fn monotonic_ns() -> u64 {
    read_clock(libc::CLOCK_MONOTONIC) as u64
}

/// CLOCK_REALTIME in ns since the epoch.
pub fn realtime_ns() -> i64 {
    read_clock(libc::CLOCK_REALTIME)
}

/// The CPU's free-running counter, recorded in the clock samples' `tsc` field (0 where there is
/// none): the time-stamp counter on x86_64, the generic timer's virtual count (`CNTVCT_EL0`) on
/// aarch64. Both tick at a constant rate whatever NTP does, so they show the kernel clock's slewing.
pub fn cpu_counter() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let count: u64;
        // The `isb` keeps the read from being hoisted above the clock reads before it (the
        // counter read is not ordered by itself, as the kernel's own `arch_timer_read_cntvct_el0`
        // knows). CNTVCT_EL0 is readable at EL0 on Linux (the kernel sets CNTKCTL_EL1.EL0VCTEN).
        // SAFETY: reads a system register, no memory access, no side effect.
        unsafe {
            core::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) count,
                             options(nomem, nostack, preserves_flags));
        }
        count
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
    }
}

/// The frequency of [`cpu_counter`] in Hz where the architecture states it (`CNTFRQ_EL0` on
/// aarch64); None on x86_64, whose TSC rate the kernel measures at boot and does not export.
pub fn cpu_counter_hz() -> Option<u64> {
    #[cfg(target_arch = "aarch64")]
    {
        let hz: u64;
        // SAFETY: reads a system register, no memory access, no side effect.
        unsafe {
            core::arch::asm!("mrs {}, cntfrq_el0", out(reg) hz,
                             options(nomem, nostack, preserves_flags));
        }
        (hz != 0).then_some(hz)
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        None
    }
}

/// The name of [`cpu_counter`] on this architecture, for messages.
pub const CPU_COUNTER_NAME: &str = if cfg!(target_arch = "aarch64") {
    "CNTVCT_EL0"
} else if cfg!(target_arch = "x86_64") {
    "TSC"
} else {
    "none"
};

/// Tries per clock sample; the one with the tightest monotonic bracket is kept.
pub const TRIES: usize = 3;

/// Reads the clocks for one clock sample: CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME
/// and CLOCK_MONOTONIC again in a tight sequence, so that the true CLOCK_MONOTONIC at the raw and
/// at the realtime reading lies between the two monotonic readings; then the TSC beside them.
/// (Realtime was read after the bracket before: an interrupt there — such as the flush of a
/// quiet CPU's batch of events, `crate::batches` — delayed it unseen, by microseconds.) Of
/// [`TRIES`] tries it keeps the one whose bracket is narrowest (a try the scheduler or an
/// interrupt cut into is wide; one of three rarely is). Both monotonic readings get the same skew
/// as the events, so the analyzer can relate event times to the raw, TSC and wall-clock
/// timelines.
pub fn sample(skew: Option<&ClockSkew>) -> ClockSample {
    let mut best: Option<ClockSample> = None;
    for _ in 0..TRIES {
        let before = read_clock(libc::CLOCK_MONOTONIC) as u64;
        let raw = read_clock(libc::CLOCK_MONOTONIC_RAW) as u64;
        let real = realtime_ns();
        let after = read_clock(libc::CLOCK_MONOTONIC) as u64;
        let tsc = cpu_counter();
        let s = ClockSample {
            monotonic_ns: before,
            monotonic_raw_ns: raw,
            realtime_ns: real,
            tsc,
            monotonic_after_ns: after,
        };
        if best.is_none_or(|b| s.bracket_ns() < b.bracket_ns()) {
            best = Some(s);
        }
    }
    let mut s = best.expect("at least one try");
    if let Some(skew) = skew {
        s.monotonic_ns = skew.apply(s.monotonic_ns);
        s.monotonic_after_ns = skew.apply(s.monotonic_after_ns);
    }
    s
}

/// The kernel's clock discipline now: `adjtimex(2)` with modes 0, which reads and changes
/// nothing (no privilege needed). `monotonic_ns` is CLOCK_MONOTONIC read just before, skewed like
/// the events.
pub fn kernel_clock(skew: Option<&ClockSkew>) -> std::io::Result<KernelClock> {
    let mono = monotonic_ns();
    // SAFETY: `timex` is plain old data; all zeros is a valid value (and modes 0 = read only).
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, writable timex; with modes 0 the call only fills it in.
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(KernelClock {
        monotonic_ns: skew.map_or(mono, |s| s.apply(mono)),
        freq: tx.freq as i64,
        offset: tx.offset as i64,
        tick: tx.tick as i64,
        status: tx.status,
        maxerror: tx.maxerror as i64,
        state,
    })
}

/// Remembers the last kernel clock state recorded, to record the next only when it differs.
#[derive(Default)]
pub struct KernelClockWatch {
    last: Option<(i64, i64, i64, i32)>,
}

impl KernelClockWatch {
    /// The state to record now: the first one, and then each whose frequency, phase offset, tick
    /// or status differs from the last one recorded (`maxerror` grows every second by itself and
    /// is not compared).
    pub fn changed(&mut self, state: KernelClock) -> Option<KernelClock> {
        let key = (state.freq, state.offset, state.tick, state.status);
        (self.last != Some(key)).then(|| {
            self.last = Some(key);
            state
        })
    }
}

/// Parses `OFFSET_NS,DRIFT_PPM` (e.g. `-2500000,30.5`).
pub fn parse_skew(s: &str) -> Result<ClockSkew, String> {
    let (offset, drift) = s
        .split_once(',')
        .ok_or_else(|| format!("expected OFFSET_NS,DRIFT_PPM (e.g. 1000000,-20), got {s:?}"))?;
    let offset_ns: i64 = offset
        .trim()
        .parse()
        .map_err(|_| format!("OFFSET_NS must be an integer number of ns, got {offset:?}"))?;
    let drift_ppm: f64 = drift
        .trim()
        .parse()
        .map_err(|_| format!("DRIFT_PPM must be a number, got {drift:?}"))?;
    // A drift of -1e6 ppm or less would stop or reverse time, and the file must stay time-sorted.
    if !drift_ppm.is_finite() || drift_ppm <= -1e6 || drift_ppm >= 1e6 {
        return Err(format!(
            "DRIFT_PPM must be within (-1000000, 1000000), got {drift_ppm}"
        ));
    }
    Ok(ClockSkew {
        offset_ns,
        drift_ppm,
    })
}

/// Checks that the skew keeps today's timestamps positive (they are unsigned in the file).
pub fn check_skew(skew: &ClockSkew, now_ns: u64) -> Result<(), String> {
    let skewed = now_ns as f64 * (1.0 + skew.drift_ppm * 1e-6) + skew.offset_ns as f64;
    if skewed < 0.0 {
        return Err(format!(
            "--clock-skew offset {} ns would make timestamps negative (the monotonic clock reads {now_ns} ns)",
            skew.offset_ns
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_offset_and_drift() {
        let s = parse_skew("-2500000, 30.5").unwrap();
        assert_eq!(s.offset_ns, -2_500_000);
        assert_eq!(s.drift_ppm, 30.5);
        assert_eq!(s.apply(1_000_000_000), 1_000_000_000 - 2_500_000 + 30_500);
    }

    #[test]
    fn rejects_bad_skews() {
        assert!(
            parse_skew("100")
                .unwrap_err()
                .contains("OFFSET_NS,DRIFT_PPM")
        );
        assert!(parse_skew("1.5,0").unwrap_err().contains("integer"));
        assert!(parse_skew("0,abc").unwrap_err().contains("number"));
        assert!(parse_skew("0,-1000000").unwrap_err().contains("within"));
        assert!(parse_skew("0,NaN").is_err());
    }

    #[test]
    fn negative_results_are_refused() {
        let s = parse_skew("-2000,0").unwrap();
        assert!(check_skew(&s, 1000).is_err());
        assert!(check_skew(&s, 5000).is_ok());
    }

    #[test]
    fn the_cpu_counter_ticks_forward() {
        if CPU_COUNTER_NAME == "none" {
            return;
        }
        let before = cpu_counter();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let after = cpu_counter();
        assert!(after > before, "{CPU_COUNTER_NAME}: {before} then {after}");
        if cfg!(target_arch = "aarch64") {
            // The architecture states the frequency: 1 GHz from Armv8.6 on, 1–100 MHz before.
            let hz = cpu_counter_hz().expect("CNTFRQ_EL0 is set by the firmware");
            assert!((1_000_000..=1_000_000_000).contains(&hz), "{hz} Hz");
        }
    }

    #[test]
    fn samples_are_consistent() {
        let a = sample(None);
        let b = sample(None);
        assert!(b.monotonic_ns >= a.monotonic_ns);
        assert!(b.monotonic_raw_ns >= a.monotonic_raw_ns);
        assert!(a.realtime_ns > 1_600_000_000_000_000_000); // after 2020
        let skew = ClockSkew {
            offset_ns: 1_000_000_000,
            drift_ppm: 0.0,
        };
        let c = sample(Some(&skew));
        assert!(c.monotonic_ns >= b.monotonic_ns + 1_000_000_000);
        assert!(c.monotonic_after_ns >= c.monotonic_ns);
    }

    #[test]
    fn the_raw_reading_is_bracketed_tightly() {
        let widths: Vec<u64> = (0..200)
            .map(|_| {
                let s = sample(None);
                assert!(s.monotonic_after_ns >= s.monotonic_ns, "{s:?}");
                s.bracket_ns()
            })
            .collect();
        let mut sorted = widths.clone();
        sorted.sort_unstable();
        // Three back-to-back vDSO reads take well under a microsecond; a preempted try is
        // replaced by one of the other two.
        assert!(sorted[100] < 10_000, "median bracket {} ns", sorted[100]);
    }

    #[test]
    fn the_skew_applies_to_both_monotonic_readings() {
        let skew = ClockSkew {
            offset_ns: 5_000_000_000,
            drift_ppm: 100.0,
        };
        let s = sample(Some(&skew));
        let plain = sample(None);
        assert!(s.monotonic_ns > plain.monotonic_ns + 4_000_000_000);
        assert!(s.monotonic_after_ns > plain.monotonic_after_ns + 4_000_000_000);
        assert!(s.monotonic_after_ns >= s.monotonic_ns);
    }

    #[test]
    fn kernel_clock_is_read_and_recorded_only_when_it_changes() {
        let k = kernel_clock(None).expect("adjtimex with modes 0 needs no privilege");
        assert!(k.tick > 0, "{k:?}");
        assert!(k.monotonic_ns > 0);
        let mut watch = KernelClockWatch::default();
        assert_eq!(watch.changed(k), Some(k), "the first state is recorded");
        let later = KernelClock {
            maxerror: k.maxerror + 500,
            monotonic_ns: k.monotonic_ns + 1,
            ..k
        };
        assert_eq!(watch.changed(later), None, "maxerror alone is no change");
        let slewed = KernelClock {
            freq: k.freq + 65536,
            ..later
        };
        assert_eq!(watch.changed(slewed), Some(slewed));
        assert_eq!(watch.changed(slewed), None);
    }
}
