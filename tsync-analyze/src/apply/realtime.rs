//! CLOCK_REALTIME ↔ the node's recorded CLOCK_MONOTONIC, through the clock samples its agent
//! wrote (every 20 ms, each a CLOCK_REALTIME reading taken inside a bracketing CLOCK_MONOTONIC
//! pair; just after it by agents before the per-CPU batches).
//!
//! Why samples and not one offset: most logs and spans are stamped with CLOCK_REALTIME, but the
//! clock maps start from CLOCK_MONOTONIC. The kernel derives both from one timekeeper, so NTP's
//! slewing moves them together and `realtime − monotonic` stays constant — except when realtime
//! is *stepped* (`settimeofday`, chrony's `makestep`, ntpd beyond 128 ms, a leap second), and
//! except for `--clock-skew`, which skews the recorded monotonic clock but not realtime (so the
//! difference drifts at the skew's rate). Interpolating between samples follows the drift
//! exactly; steps are handled as follows.
//!
//! **Steps.** Two consecutive samples whose `realtime − monotonic` differs by more than
//! [`STEP_THRESHOLD_NS`] plus [`STEP_THRESHOLD_PPM`] of the time between them (far beyond the
//! reading jitter and any skew) mark a step somewhere between them. The samples are cut there
//! into *runs*, each a continuous piecewise-linear relation. A realtime value is mapped through
//! the run whose realtime range holds it. When two runs hold it (the clock was stepped back, so
//! the value occurred twice), the run the previous value was mapped through is kept while values
//! go forward, and the next run is taken once a value goes back (a log written in order goes back
//! exactly when the clock did); such values are counted as ambiguous. A value that no run holds
//! (before the first sample, after the last one, or in the gap a forward step leaves) goes
//! through the nearest run, extrapolated, and is counted as outside the recorded span.
//! Monotonic → realtime (for the reference's side) is a function: in the ≤ 20 ms between the two
//! samples around a step, the step's instant is unknown and the nearer run is used.

use tsync_common::format::ClockSample;

/// A step is at least this large (ns) beyond what the time between two samples allows.
pub const STEP_THRESHOLD_NS: i64 = 20_000;
/// ... plus this many ppm of the time between the two samples (a `--clock-skew` drift is at most
/// a few hundred ppm; NTP slewing moves both clocks alike).
pub const STEP_THRESHOLD_PPM: f64 = 1000.0;

/// One continuous stretch of samples: realtime and monotonic both increasing.
#[derive(Clone, Debug)]
struct Run {
    /// Monotonic time of each sample: the middle of its bracket.
    mono: Vec<i64>,
    /// Realtime of each sample.
    real: Vec<i64>,
}

impl Run {
    fn real_range(&self) -> (i64, i64) {
        (self.real[0], *self.real.last().expect("a run has samples"))
    }

    fn mono_range(&self) -> (i64, i64) {
        (self.mono[0], *self.mono.last().expect("a run has samples"))
    }
}

/// Interpolates `x → y` through the points (`xs` increasing), extrapolating with the nearest
/// chord (slope 1 for a single point). `hint` is the chord the previous value fell in.
fn interpolate(xs: &[i64], ys: &[i64], x: i64, hint: &mut usize) -> i64 {
    if xs.len() == 1 {
        return ys[0].saturating_add(x.saturating_sub(xs[0]));
    }
    let last = xs.len() - 2;
    let fits = |i: usize| (i == 0 || xs[i] <= x) && (i == last || x < xs[i + 1]);
    if !(*hint <= last && fits(*hint)) {
        *hint = if *hint < last && fits(*hint + 1) {
            *hint + 1
        } else {
            xs.partition_point(|&v| v <= x).saturating_sub(1).min(last)
        };
    }
    let i = *hint;
    let (x0, x1, y0, y1) = (xs[i], xs[i + 1], ys[i], ys[i + 1]);
    // Deltas are small (tens of ms between samples), so this is exact to well below a ns.
    let slope = (y1 - y0) as f64 / (x1 - x0) as f64;
    y0.saturating_add((x.saturating_sub(x0) as f64 * slope).round() as i64)
}

/// The largest distance of a sample's `realtime − monotonic` from the line through the two
/// nearest other samples of the run (its neighbours; the next two at either end), rounded up; 0
/// for runs of fewer than 3 samples.
fn pairing_error(run: &Run) -> i64 {
    let n = run.mono.len();
    if n < 3 {
        return 0;
    }
    // Differences in i64 first: realtime is ~1.7·10¹⁸, where an f64 steps by 256 ns.
    let d = |i: usize| run.real[i].wrapping_sub(run.mono[i]);
    (0..n)
        .map(|i| {
            let (a, b) = match i {
                0 => (1, 2),
                i if i == n - 1 => (n - 3, n - 2),
                i => (i - 1, i + 1),
            };
            let (dx, dx_ab) = (run.mono[i] - run.mono[a], run.mono[b] - run.mono[a]);
            let line = d(b).wrapping_sub(d(a)) as f64 * dx as f64 / dx_ab as f64;
            (d(i).wrapping_sub(d(a)) as f64 - line).abs().ceil() as i64
        })
        .max()
        .unwrap_or(0)
}

/// A node's CLOCK_REALTIME against its recorded CLOCK_MONOTONIC.
#[derive(Clone, Debug)]
pub struct RealtimeClock {
    runs: Vec<Run>,
    /// Largest half bracket of the samples (ns): how far a sample's monotonic reading may be from
    /// the instant realtime was read, before the reading gap.
    pub half_bracket_ns: i64,
    /// Largest distance (ns) of a sample's `realtime − monotonic` from the line through its
    /// neighbours' (the relation is linear between steps): a realtime reading that an interrupt
    /// delayed after the bracket shows here. Agents read realtime inside the bracket since the
    /// programs batch their events (the flush of a quiet CPU's batch is an interrupt); files
    /// of older agents read it just after, and this bounds what that costs.
    pub pairing_error_ns: i64,
    /// Where realtime was stepped: (monotonic time of the last sample before, size of the step
    /// in ns: positive forward).
    pub steps: Vec<(i64, i64)>,
}

/// Where a realtime value was mapped, beyond its time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RealtimeNote {
    /// No run holds the value (before, after, or in a forward step's gap).
    pub outside: bool,
    /// Two runs hold it (the clock was stepped back): chosen by the order of the values.
    pub ambiguous: bool,
}

/// Where the previous realtime value went (values mostly follow each other).
#[derive(Clone, Copy, Debug, Default)]
pub struct RealtimeCursor {
    run: usize,
    chord: usize,
    previous: Option<i64>,
}

impl RealtimeClock {
    /// The relation the samples give, or None without samples.
    pub fn from_samples(samples: &[ClockSample]) -> Option<RealtimeClock> {
        let mut runs: Vec<Run> = Vec::new();
        let mut steps = Vec::new();
        let mut half_bracket_ns = 0i64;
        let mut previous: Option<(i64, i64)> = None;
        for s in samples {
            let (Ok(before), Ok(after)) = (
                i64::try_from(s.monotonic_ns),
                i64::try_from(s.monotonic_after_ns.max(s.monotonic_ns)),
            ) else {
                continue;
            };
            let mono = before + (after - before) / 2;
            half_bracket_ns = half_bracket_ns.max(after - mono);
            let real = s.realtime_ns;
            let cut = match previous {
                None => true,
                Some((m0, r0)) => {
                    let dm = mono - m0;
                    let dr = real - r0;
                    if dm <= 0 {
                        // A sample that does not advance (duplicate or damaged): skipped.
                        continue;
                    }
                    let allowed = STEP_THRESHOLD_NS as f64 + dm as f64 * STEP_THRESHOLD_PPM * 1e-6;
                    let step = dr - dm;
                    if (step as f64).abs() > allowed || dr <= 0 {
                        steps.push((m0, step));
                        true
                    } else {
                        false
                    }
                }
            };
            if cut {
                runs.push(Run {
                    mono: Vec::new(),
                    real: Vec::new(),
                });
            }
            let run = runs.last_mut().expect("pushed");
            run.mono.push(mono);
            run.real.push(real);
            previous = Some((mono, real));
        }
        let pairing_error_ns = runs.iter().map(pairing_error).max().unwrap_or(0);
        (!runs.is_empty()).then_some(RealtimeClock {
            runs,
            half_bracket_ns,
            pairing_error_ns,
            steps,
        })
    }

    /// The recorded monotonic span the samples cover.
    pub fn mono_span(&self) -> (i64, i64) {
        (
            self.runs[0].mono[0],
            *self.runs.last().and_then(|r| r.mono.last()).expect("runs"),
        )
    }

    /// A realtime value on the recorded monotonic clock.
    pub fn to_monotonic(&self, real: i64, cursor: &mut RealtimeCursor) -> (i64, RealtimeNote) {
        let mut note = RealtimeNote::default();
        let holds = |k: usize| {
            let (a, b) = self.runs[k].real_range();
            a <= real && real <= b
        };
        let went_back = cursor.previous.is_some_and(|p| real < p);
        let current = cursor.run.min(self.runs.len() - 1);
        let run = if holds(current) && !(went_back && self.later_run_holds(current, real)) {
            if current + 1 < self.runs.len() && holds(current + 1) {
                note.ambiguous = true;
            }
            current
        } else {
            let holding: Vec<usize> = (0..self.runs.len()).filter(|&k| holds(k)).collect();
            match holding.as_slice() {
                [] => {
                    note.outside = true;
                    self.nearest_by(|r| r.real_range(), real)
                }
                [only] => *only,
                several => {
                    note.ambiguous = true;
                    let after = |k: &&usize| {
                        if went_back {
                            **k > current
                        } else {
                            **k >= current
                        }
                    };
                    *several
                        .iter()
                        .find(after)
                        .unwrap_or(several.last().expect("several"))
                }
            }
        };
        if run != cursor.run {
            cursor.chord = 0;
        }
        cursor.run = run;
        cursor.previous = Some(real);
        let r = &self.runs[run];
        (interpolate(&r.real, &r.mono, real, &mut cursor.chord), note)
    }

    /// How far (ns) a realtime value interpolated between two samples of a run may be from
    /// the recorded monotonic time it was read at: each sample's bracket, twice the largest
    /// stray of a sample from its neighbours' line (a small step that no run cut, between two
    /// samples, makes its neighbours stray by half of it and the interpolation err by all of
    /// it), and the rounding.
    pub fn interpolation_bound_ns(&self) -> i64 {
        self.half_bracket_ns + 2 * self.pairing_error_ns + 1
    }

    /// The recorded monotonic interval that certainly holds the instant a realtime value was
    /// read, for events that must keep a guarantee (span messages of a node whose agent trace
    /// gives its clock): the interpolation ± [`interpolation_bound_ns`]. None where the samples
    /// do not tell the instant for certain: outside them (a step could hide before the first or
    /// after the last), and wherever a step makes it ambiguous: a value held by two runs (the
    /// clock went back over it) or within reach of a neighbouring run across the samples around
    /// a step (the step's instant between them is unknown). Unlike
    /// [`to_monotonic`](Self::to_monotonic) it never guesses from the order of the values.
    ///
    /// [`interpolation_bound_ns`]: Self::interpolation_bound_ns
    pub fn monotonic_bounds(&self, real: i64, cursor: &mut RealtimeCursor) -> Option<(i64, i64)> {
        let n = self.runs.len();
        // Realtime around a step: before its instant the old run continues, after it the new
        // one starts, anywhere in the samples' gap; realtime cannot run more than twice as fast
        // as the monotonic clock (far beyond any skew) between them.
        let reach = |k: usize| -> (i64, i64) {
            let (a, b) = self.runs[k].real_range();
            let before = (k > 0).then(|| {
                let gap = self.runs[k].mono[0] - self.runs[k - 1].mono_range().1;
                a - 2 * gap - STEP_THRESHOLD_NS
            });
            let after = (k + 1 < n).then(|| {
                let gap = self.runs[k + 1].mono[0] - self.runs[k].mono_range().1;
                b + 2 * gap + STEP_THRESHOLD_NS
            });
            (before.unwrap_or(a), after.unwrap_or(b))
        };
        let mut found = None;
        for k in 0..n {
            let (lo, hi) = reach(k);
            if lo <= real && real <= hi {
                if found.is_some() {
                    return None;
                }
                found = Some(k);
            }
        }
        let k = found?;
        let (a, b) = self.runs[k].real_range();
        if real < a || real > b {
            return None;
        }
        if k != cursor.run {
            cursor.chord = 0;
        }
        cursor.run = k;
        let r = &self.runs[k];
        let m = interpolate(&r.real, &r.mono, real, &mut cursor.chord);
        let e = self.interpolation_bound_ns();
        Some((m.saturating_sub(e), m.saturating_add(e)))
    }

    fn later_run_holds(&self, current: usize, real: i64) -> bool {
        self.runs[current + 1..].iter().any(|r| {
            let (a, b) = r.real_range();
            a <= real && real <= b
        })
    }

    /// A recorded monotonic time as CLOCK_REALTIME.
    pub fn to_realtime(&self, mono: i64, cursor: &mut RealtimeCursor) -> i64 {
        let current = cursor.run.min(self.runs.len() - 1);
        let inside = |k: usize| {
            let (a, b) = self.runs[k].mono_range();
            a <= mono && mono <= b
        };
        let run = if inside(current) {
            current
        } else {
            self.nearest_by(|r| r.mono_range(), mono)
        };
        if run != cursor.run {
            cursor.chord = 0;
        }
        cursor.run = run;
        let r = &self.runs[run];
        interpolate(&r.mono, &r.real, mono, &mut cursor.chord)
    }

    /// The run whose range (by `range`) is nearest to `x`.
    fn nearest_by(&self, range: impl Fn(&Run) -> (i64, i64), x: i64) -> usize {
        (0..self.runs.len())
            .min_by_key(|&k| {
                let (a, b) = range(&self.runs[k]);
                if x < a {
                    a.abs_diff(x)
                } else if x > b {
                    x.abs_diff(b)
                } else {
                    0
                }
            })
            .expect("runs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mono: u64, real: i64) -> ClockSample {
        ClockSample {
            monotonic_ns: mono,
            monotonic_raw_ns: mono,
            realtime_ns: real,
            tsc: 0,
            monotonic_after_ns: mono + 40,
        }
    }

    const E: i64 = 1_700_000_000_000_000_000;
    const MS: u64 = 1_000_000;

    #[test]
    fn a_constant_offset_maps_both_ways_exactly() {
        let samples: Vec<_> = (0..50)
            .map(|i| {
                sample(
                    1_000 * MS + i * 20 * MS,
                    E + (1_000 * MS + i * 20 * MS) as i64 + 20,
                )
            })
            .collect();
        let c = RealtimeClock::from_samples(&samples).unwrap();
        assert!(c.steps.is_empty());
        let mut cur = RealtimeCursor::default();
        let t = 1_234_567_891i64;
        let (m, note) = c.to_monotonic(E + t, &mut cur);
        assert_eq!(m, t);
        assert_eq!(note, RealtimeNote::default());
        assert_eq!(c.to_realtime(t, &mut RealtimeCursor::default()), E + t);
        // Before the first sample: extrapolated, and said.
        let (m, note) = c.to_monotonic(E + 10, &mut RealtimeCursor::default());
        assert_eq!(m, 10);
        assert!(note.outside);
    }

    /// A realtime reading delayed by 5 µs (an interrupt after the bracket, as older agents read
    /// it) stands 5 µs off the line of its neighbours, which a skewed clock alone never does.
    #[test]
    fn a_delayed_realtime_reading_is_measured() {
        let rec = |t: f64| (t * (1.0 + 100e-6) + 5e6).round() as u64;
        let mut samples: Vec<_> = (0..100)
            .map(|i| {
                let t = 1e12 + i as f64 * 2e7;
                sample(rec(t) - 20, E + t as i64)
            })
            .collect();
        let clean = RealtimeClock::from_samples(&samples).unwrap();
        assert!(clean.pairing_error_ns <= 1, "{}", clean.pairing_error_ns);
        for i in [0, 40, 99] {
            let mut glitched = samples.clone();
            glitched[i].realtime_ns += 5_000;
            let c = RealtimeClock::from_samples(&glitched).unwrap();
            assert!(c.steps.is_empty());
            assert!(
                (4_999..=5_002).contains(&c.pairing_error_ns),
                "sample {i}: {}",
                c.pairing_error_ns
            );
        }
        samples.truncate(2);
        assert_eq!(
            RealtimeClock::from_samples(&samples)
                .unwrap()
                .pairing_error_ns,
            0
        );
    }

    #[test]
    fn a_skewed_monotonic_clock_is_followed_between_samples() {
        // Recorded monotonic = true · (1 + 100 ppm) + 5 ms; realtime = E + true.
        let rec = |t: f64| (t * (1.0 + 100e-6) + 5e6).round() as u64;
        let samples: Vec<_> = (0..100)
            .map(|i| {
                let t = 1e12 + i as f64 * 2e7;
                sample(rec(t) - 20, E + t as i64)
            })
            .collect();
        let c = RealtimeClock::from_samples(&samples).unwrap();
        assert!(c.steps.is_empty(), "{:?}", c.steps);
        let mut cur = RealtimeCursor::default();
        for k in 0..1000 {
            let t = 1e12 + 1234.0 + k as f64 * 1.7e6;
            let (m, _) = c.to_monotonic(E + t as i64, &mut cur);
            assert!((m - rec(t) as i64).abs() <= 1, "{m} vs {}", rec(t));
        }
    }

    #[test]
    fn a_step_back_is_taken_in_the_order_of_the_values() {
        // Realtime stepped back by 1 s between the samples at 100 and 120 ms of monotonic time.
        let mut samples = Vec::new();
        for i in 0..=5u64 {
            let m = i * 20 * MS;
            samples.push(sample(m, E + m as i64));
        }
        for i in 6..=20u64 {
            let m = i * 20 * MS;
            samples.push(sample(m, E + m as i64 - 1_000_000_000));
        }
        let c = RealtimeClock::from_samples(&samples).unwrap();
        assert_eq!(c.steps.len(), 1);
        assert_eq!(c.steps[0].0, 100 * MS as i64 + 20);
        let mut cur = RealtimeCursor::default();
        // Before the step: 50 ms.
        // (Each sample's monotonic time is the middle of its 40 ns bracket.)
        let (m, _) = c.to_monotonic(E + 50 * MS as i64, &mut cur);
        assert_eq!(m, 50 * MS as i64 + 20);
        // After it, realtime reads 1 s less: 300 ms of monotonic time shows as E − 700 ms.
        let (m, note) = c.to_monotonic(E - 700 * MS as i64, &mut cur);
        assert_eq!(m, 300 * MS as i64 + 20);
        assert!(!note.ambiguous);
    }

    #[test]
    fn bounds_hold_the_instant_and_refuse_what_a_step_makes_uncertain() {
        // Stepped back by 50 ms between the samples at 200 and 220 ms: realtime E+[150, 220]
        // ms occurred twice, and just around the step the instant is unknown.
        let mut samples = Vec::new();
        for i in 0..=10u64 {
            let m = i * 20 * MS;
            samples.push(sample(m, E + m as i64));
        }
        for i in 11..=30u64 {
            let m = i * 20 * MS;
            samples.push(sample(m, E + m as i64 - 50 * MS as i64));
        }
        let c = RealtimeClock::from_samples(&samples).unwrap();
        assert_eq!(c.interpolation_bound_ns(), 21);
        let mut cur = RealtimeCursor::default();
        let at = |ms: i64| E + ms * MS as i64;
        // Well before the step: one run holds it, the instant within the bound.
        let (lo, hi) = c.monotonic_bounds(at(50), &mut cur).unwrap();
        let truth = 50 * MS as i64 + 20;
        assert!(lo <= truth && truth <= hi && hi - lo == 42, "{lo} {hi}");
        // Occurred twice, or within reach of the other run across the step: refused whatever
        // the order. (100 ms occurred once, before the step; 260 ms once, after it.)
        for ms in [140, 170, 199, 215, 235] {
            assert_eq!(c.monotonic_bounds(at(ms), &mut cur), None, "{ms} ms");
        }
        for (ms, mono) in [(100, 100), (260, 310)] {
            let (lo, hi) = c.monotonic_bounds(at(ms), &mut cur).unwrap();
            let truth = mono * MS as i64 + 20;
            assert!(lo <= truth && truth <= hi, "{ms} ms: {lo} {hi}");
        }
        // Well after: the later run.
        let (lo, hi) = c.monotonic_bounds(at(400), &mut cur).unwrap();
        let truth = 450 * MS as i64 + 20;
        assert!(lo <= truth && truth <= hi, "{lo} {hi}");
        // Outside the samples: refused.
        assert_eq!(c.monotonic_bounds(E - 1, &mut cur), None);
        assert_eq!(c.monotonic_bounds(at(600), &mut cur), None);
    }

    #[test]
    fn a_value_that_occurred_twice_follows_the_log() {
        // Stepped back by 50 ms at 200 ms: realtime E+[150, 200] ms occurred twice.
        let mut samples = Vec::new();
        for i in 0..=10u64 {
            let m = i * 20 * MS;
            samples.push(sample(m, E + m as i64));
        }
        for i in 11..=30u64 {
            let m = i * 20 * MS;
            samples.push(sample(m, E + m as i64 - 50 * MS as i64));
        }
        let c = RealtimeClock::from_samples(&samples).unwrap();
        let mut cur = RealtimeCursor::default();
        let at = |ms: i64| E + ms * MS as i64;
        // In order: 170 ms (before the step), 195 ms (still before), then 175 ms: the log went
        // back, so it is after the step (225 ms of monotonic time).
        let (m1, n1) = c.to_monotonic(at(170), &mut cur);
        let (m2, _) = c.to_monotonic(at(195), &mut cur);
        let (m3, n3) = c.to_monotonic(at(175), &mut cur);
        assert!(n1.ambiguous && n3.ambiguous);
        assert_eq!(m1, 170 * MS as i64 + 20);
        assert_eq!(m2, 195 * MS as i64 + 20);
        assert!((m3 - (225 * MS as i64 + 20)).abs() <= 1, "{m3}");
        // And back from monotonic: each side of the step by its own run.
        let mut cur = RealtimeCursor::default();
        assert_eq!(c.to_realtime(100 * MS as i64 + 20, &mut cur), at(100));
        assert_eq!(c.to_realtime(400 * MS as i64 + 20, &mut cur), at(350));
    }
}
