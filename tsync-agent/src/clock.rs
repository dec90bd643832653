//! The node's clocks: reading them, the clock-correlation samples, and `--clock-skew`.
use tsync_common::format::{ClockSample, ClockSkew};

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

/// The CPU's time-stamp counter, 0 where there is none.
fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// Reads all clocks back to back. The monotonic reading gets the same skew as the events, so the
/// analyzer can relate event times to the raw, TSC and wall-clock timelines.
pub fn sample(skew: Option<&ClockSkew>) -> ClockSample {
    let mono = monotonic_ns();
    let raw = read_clock(libc::CLOCK_MONOTONIC_RAW) as u64;
    let tsc = tsc();
    let real = realtime_ns();
    ClockSample {
        monotonic_ns: skew.map_or(mono, |s| s.apply(mono)),
        monotonic_raw_ns: raw,
        realtime_ns: real,
        tsc,
        monotonic_after_ns: skew.map_or(mono, |s| s.apply(mono)),
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
    }
}
