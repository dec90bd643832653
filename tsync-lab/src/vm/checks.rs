//! The lab's verdict: the guests' traces synchronized by the analyzer's library (guest-0 the
//! reference, raw timebase), every figure compared with the ground truth of the shared TSC page,
//! and one line per check.
use std::path::{Path, PathBuf};

use tsync_analyze::{InputSet, SyncOptions, SyncResult, TimebaseChoice};

use super::cache::GuestArch;
use super::report::GuestReport;
use super::truth::{GuestClock, Truth};

/// Points per guest at which the truth is compared with the guaranteed interval.
pub const POINTS: usize = 21;
/// The minimum of points with an interval per guest.
const MIN_POINTS: usize = 11;
/// How closely `info` must report the slew (ppm).
const SLEW_TOLERANCE_PPM: f64 = 1.0;
/// The widest an arm64 guest's counter → host TSC map may be for its truth to count (µs): far
/// below the lab's millisecond-wide intervals.
const MAX_MAP_ERROR_US: f64 = 100.0;

/// One check: what, whether it passed, and what was measured.
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

impl Check {
    pub fn new(name: impl Into<String>, passed: bool, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            passed,
            detail: detail.into(),
        }
    }
}

/// What one guest showed.
pub struct GuestRow {
    pub name: String,
    pub arch: String,
    /// An arm64 guest's counter → host TSC map: (error, largest residual) in ns, handshakes
    /// used, measured.
    pub map: Option<(f64, f64, usize, usize)>,
    pub kernel: String,
    pub clocksource: String,
    pub role: String,
    pub events: u64,
    pub lost: u64,
    pub offset_drift_ticks: f64,
    /// Widths of the start and end offset brackets (ticks).
    pub offset_widths: (i128, i128),
    pub true_raw_ppm: Option<f64>,
    pub recovered_raw_ppm: Option<f64>,
    pub slew_applied_ppm: Option<f64>,
    pub slew_seen_ppm: Option<f64>,
    /// Why `info` cannot undo the slewing, when it cannot (a gap between clock samples).
    pub slew_unavailable: Option<String>,
    pub quality: String,
    pub segments: usize,
    pub truth: Option<TruthFit>,
    pub truth_recorded: Option<TruthFit>,
}

/// The truth against the analyzer's map and intervals at [`POINTS`] points of a guest's trace.
#[derive(Clone, Copy)]
pub struct TruthFit {
    pub points: usize,
    pub with_interval: usize,
    pub inside: usize,
    pub max_error_ns: f64,
    pub widest_ns: f64,
    pub uncertainty_ns: f64,
}

/// Compares `sync`'s map and intervals of `trace` with the truth over its events' span.
fn fit(sync: &SyncResult, trace: u32, truth: &Truth<'_>, span: (u64, u64)) -> TruthFit {
    let mut f = TruthFit {
        points: 0,
        with_interval: 0,
        inside: 0,
        max_error_ns: 0.0,
        widest_ns: 0.0,
        uncertainty_ns: truth.uncertainty_ns(),
    };
    for i in 0..POINTS {
        let t = span.0 + (span.1 - span.0) * i as u64 / (POINTS as u64 - 1);
        let Some(true_ref) = truth.at(t as f64) else {
            continue;
        };
        f.points += 1;
        let err = sync.to_reference(trace, t as i64) - true_ref;
        f.max_error_ns = f.max_error_ns.max(err.abs());
        if let Some((lo, hi)) = sync.interval(trace, t as i64) {
            f.with_interval += 1;
            f.widest_ns = f.widest_ns.max(hi - lo);
            // 1 ns for the rounding of recorded times to whole nanoseconds.
            if lo - 1.0 <= true_ref && true_ref <= hi + 1.0 {
                f.inside += 1;
            }
        }
    }
    f
}

/// Everything the host knows after the guests powered off.
pub struct LabOutcome<'a> {
    pub out: &'a Path,
    /// Per guest: its report, or why there is none.
    pub reports: Vec<Result<GuestReport, String>>,
    pub kernels: Vec<String>,
    pub arches: Vec<GuestArch>,
    pub slewed: usize,
    pub slew_ppm: f64,
    /// Cleanup as checked by the host: what was left behind (empty: nothing).
    pub leftovers: Vec<String>,
}

/// Synchronizes the traces and runs every check; returns the rows, the checks and the sync
/// result (None when no trace could be read).
pub fn evaluate(o: &LabOutcome<'_>) -> (Vec<GuestRow>, Vec<Check>, Option<SyncResult>) {
    let mut checks = Vec::new();
    let n = o.reports.len();
    let files = trace_files(o.out, n);
    for (k, r) in o.reports.iter().enumerate() {
        checks.push(agent_check(k, r, &o.kernels[k], o.arches[k], &files[k]));
    }
    let ok: Vec<&GuestReport> = o.reports.iter().filter_map(|r| r.as_ref().ok()).collect();
    let sync = if ok.len() == n {
        run_sync(&files, TimebaseChoice::default()).map_err(|e| format!("{e:#}"))
    } else {
        Err("not every guest reported".into())
    };
    let recorded = sync
        .as_ref()
        .ok()
        .and_then(|_| run_sync(&files, TimebaseChoice::Recorded).ok());
    let clocks: Vec<Option<GuestClock>> = o
        .reports
        .iter()
        .map(|r| r.as_ref().ok().and_then(GuestClock::new))
        .collect();
    let mut rows = Vec::new();
    for (k, r) in o.reports.iter().enumerate() {
        let Ok(r) = r else { continue };
        rows.push(row(
            o,
            k,
            r,
            &clocks,
            sync.as_ref().ok(),
            recorded.as_ref(),
            &files[k],
        ));
    }
    match &sync {
        Ok(s) => {
            for p in &s.pairs {
                let name = |i: u32| s.traces[i as usize].name.clone();
                checks.push(Check::new(
                    format!("pair {}–{} accurate", name(p.a), name(p.b)),
                    p.quality.as_str() == "accurate",
                    format!(
                        "{} ({} + {} messages, {} segment(s))",
                        p.quality.as_str(),
                        p.messages_ab,
                        p.messages_ba,
                        p.segments.len()
                    ),
                ));
            }
            if s.pairs.len() < n * (n - 1) / 2 {
                checks.push(Check::new(
                    "every pair of guests exchanged messages",
                    false,
                    format!("{} pairs of {}", s.pairs.len(), n * (n - 1) / 2),
                ));
            }
        }
        Err(e) => checks.push(Check::new("synchronization ran", false, e.clone())),
    }
    for row in rows.iter().skip(1) {
        let t = row.truth;
        checks.push(Check::new(
            format!("{}: truth inside the guaranteed interval", row.name),
            t.is_some_and(|t| t.with_interval >= MIN_POINTS && t.inside == t.with_interval),
            t.map_or("no truth".into(), |t| {
                format!(
                    "{}/{} points with an interval (of {}), max error {:.1} µs, widest {:.1} µs",
                    t.inside,
                    t.with_interval,
                    t.points,
                    t.max_error_ns * 1e-3,
                    t.widest_ns * 1e-3
                )
            }),
        ));
    }
    for row in &rows {
        if let Some((error_ns, residual_ns, used, n)) = row.map {
            checks.push(Check::new(
                format!(
                    "{}: counter linear in the host's TSC (ground truth valid)",
                    row.name
                ),
                error_ns * 1e-3 <= MAX_MAP_ERROR_US,
                format!(
                    "a line through {used} of {n} handshakes (the narrow ones), farthest {:.2} µs \
                     from it, truth within ±{:.2} µs (at most {MAX_MAP_ERROR_US} µs)",
                    residual_ns * 1e-3,
                    error_ns * 1e-3
                ),
            ));
            continue;
        }
        let drift = row.offset_drift_ticks;
        let (ws, we) = row.offset_widths;
        checks.push(Check::new(
            format!(
                "{}: TSC offset to the host constant (ground truth valid)",
                row.name
            ),
            drift.is_finite(),
            format!(
                "start and end brackets ({ws} and {we} ticks wide) {}",
                if drift.is_finite() {
                    format!("overlap, middles {drift:.0} ticks apart")
                } else {
                    "do not overlap".into()
                }
            ),
        ));
    }
    checks.extend(slew_checks(o, &rows, sync.as_ref().ok()));
    checks.push(Check::new(
        "nothing left behind (guests, QEMU, shared page, helper)",
        o.leftovers.is_empty(),
        if o.leftovers.is_empty() {
            "none".into()
        } else {
            o.leftovers.join(", ")
        },
    ));
    (rows, checks, sync.ok())
}

/// The guests' trace files in the output folder.
pub fn trace_files(out: &Path, guests: usize) -> Vec<PathBuf> {
    (0..guests)
        .map(|k| out.join(format!("guest-{k}.tsync")))
        .collect()
}

fn run_sync(files: &[PathBuf], timebase: TimebaseChoice) -> anyhow::Result<SyncResult> {
    let inputs = InputSet::open(files)?;
    let options = SyncOptions {
        reference: Some("guest-0".into()),
        timebase,
        ..Default::default()
    };
    Ok(tsync_analyze::sync(&inputs, &options, &mut |_| {})?)
}

/// The agent loaded and recorded on the guest's kernel: a report, exit 0, events, none lost, a
/// complete file, no program left loaded.
fn agent_check(
    k: usize,
    r: &Result<GuestReport, String>,
    series: &str,
    arch: GuestArch,
    file: &Path,
) -> Check {
    let name = format!(
        "guest-{k}: agent checked the node and recorded on Linux {series} {}",
        arch.machine()
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => return Check::new(name, false, e.clone()),
    };
    let info = tsync_analyze::inspect(file);
    let complete = info
        .as_ref()
        .is_ok_and(|i| i.complete && i.damage.is_none());
    let check_status = r.agent_check.as_ref().map(|(status, _)| status.as_str());
    let passed = r.kernel.starts_with(&format!("{series}."))
        && r.arch == arch.machine()
        && check_status.is_some_and(|s| s.contains("exit status: 0"))
        && r.agent_status.contains("exit status: 0")
        && r.agent_events > 0
        && r.agent_lost == 0
        && complete
        && r.programs_left == 0;
    Check::new(
        name,
        passed,
        format!(
            "{} kernel {}, `tsync-agent check` {}, {} events, {} lost, agent {}, file {}, {} \
             program(s) left",
            r.arch,
            r.kernel,
            check_status.unwrap_or("not run"),
            r.agent_events,
            r.agent_lost,
            r.agent_status,
            if complete {
                "complete"
            } else {
                "incomplete or damaged"
            },
            r.programs_left
        ),
    )
}

#[allow(clippy::too_many_arguments)]
fn row(
    o: &LabOutcome<'_>,
    k: usize,
    r: &GuestReport,
    clocks: &[Option<GuestClock>],
    sync: Option<&SyncResult>,
    recorded: Option<&SyncResult>,
    file: &Path,
) -> GuestRow {
    let (s, e) = (r.offset_start, r.offset_end);
    // Both brackets hold the same constant when they overlap; the distance of their middles
    // is what is printed, NaN when they do not overlap.
    let offset_drift_ticks = if s.lo <= e.hi && e.lo <= s.hi {
        (s.mid() - e.mid()).abs()
    } else {
        f64::NAN
    };
    let truth = match (&clocks[k], &clocks[0]) {
        (Some(g), Some(r0)) if k > 0 => Some(Truth {
            guest: g,
            reference: r0,
        }),
        _ => None,
    };
    let info = tsync_analyze::inspect(file).ok();
    let span = info.as_ref().and_then(|i| Some((i.first_ns?, i.last_ns?)));
    let slew_seen_ppm = info
        .as_ref()
        .and_then(|i| i.clock.slew.as_ref())
        .map(|s| s.rate_max_ppm - s.rate_min_ppm);
    let pair = sync.and_then(|s| s.pair(0, k as u32)).filter(|_| k > 0);
    let fit_of = |s: Option<&SyncResult>| match (&truth, s, span) {
        (Some(t), Some(s), Some(span)) => Some(fit(s, k as u32, t, span)),
        _ => None,
    };
    let map = clocks[k]
        .as_ref()
        .filter(|_| !r.handshakes.is_empty())
        .map(|c| {
            let (error, residual) = c.map_error_ns();
            (error, residual, c.map.used, r.handshakes.len())
        });
    GuestRow {
        name: format!("guest-{k}"),
        arch: r.arch.clone(),
        map,
        kernel: r.kernel.clone(),
        clocksource: r.clocksource.clone(),
        role: if k == 0 {
            "reference".into()
        } else if k == o.slewed {
            format!("slewed {:+} ppm", o.slew_ppm)
        } else {
            "—".into()
        },
        events: r.agent_events,
        lost: r.agent_lost,
        offset_drift_ticks,
        offset_widths: (s.width(), e.width()),
        true_raw_ppm: truth.as_ref().map(Truth::raw_rate_ppm),
        recovered_raw_ppm: pair.and_then(|p| p.estimate).map(|e| (e.drift - 1.0) * 1e6),
        slew_applied_ppm: r.slew.map(|s| s.freq_after_ppm - s.freq_before_ppm),
        slew_seen_ppm,
        slew_unavailable: info.as_ref().and_then(|i| i.clock.slew_unavailable.clone()),
        quality: pair.map_or("—".into(), |p| p.quality.as_str().to_owned()),
        segments: pair.map_or(0, |p| p.segments.len()),
        truth: fit_of(sync),
        truth_recorded: fit_of(recorded),
    }
}

/// The slew undone: `info` reports the frequency change applied (±1 ppm) on the slewed guest and
/// none elsewhere; the raw-timebase pairs of the slewed guest are one line each.
fn slew_checks(o: &LabOutcome<'_>, rows: &[GuestRow], sync: Option<&SyncResult>) -> Vec<Check> {
    let mut checks = Vec::new();
    for row in rows {
        let expected = row.slew_applied_ppm.unwrap_or(0.0);
        let seen = row.slew_seen_ppm;
        let slewed = row.slew_applied_ppm.is_some();
        // A guest without a slew loses nothing when its slewing cannot be undone (its recorded
        // clock is its raw clock, but for a constant): only a rate range it reports counts.
        let passed = match seen {
            Some(s) => (s - expected.abs()).abs() <= SLEW_TOLERANCE_PPM,
            None => !slewed,
        };
        checks.push(Check::new(
            format!(
                "{}: info reports the {} (±{SLEW_TOLERANCE_PPM} ppm)",
                row.name,
                if slewed {
                    "slew applied"
                } else {
                    "absence of slewing"
                }
            ),
            passed,
            format!(
                "applied {expected:+.3} ppm, info's rate range {}",
                match (seen, &row.slew_unavailable) {
                    (Some(s), _) => format!("{s:.3} ppm"),
                    (None, Some(why)) => format!("unavailable: {why}"),
                    (None, None) => "unavailable".into(),
                }
            ),
        ));
    }
    if let Some(s) = sync {
        let k = o.slewed as u32;
        let segments: Vec<String> = s
            .pairs
            .iter()
            .filter(|p| p.a == k || p.b == k)
            .map(|p| format!("{}–{}: {}", p.a, p.b, p.segments.len()))
            .collect();
        let one_line = s
            .pairs
            .iter()
            .filter(|p| p.a == k || p.b == k)
            .all(|p| p.segments.len() == 1);
        checks.push(Check::new(
            format!("guest-{k}: no trace of the slew in the raw-timebase pair maps"),
            one_line && !segments.is_empty(),
            format!("segments per pair {}", segments.join(", ")),
        ));
    }
    checks
}

/// The per-guest table.
pub fn table(rows: &[GuestRow]) -> String {
    let mut out = String::from(
        "| guest | kernel | clocksource | role | events | lost | TSC offset brackets: widths at \
         start, end / middles apart (ticks) | true raw rate vs guest-0 (ppm) | recovered (ppm) | \
         slew applied / info's rate range (ppm) | quality | segments | max error (µs) | widest \
         interval (µs) | truth uncertainty (µs) | truth inside | recorded timebase: max error \
         (µs), inside |\n\
         |---|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|---|\n",
    );
    let opt = |v: Option<f64>, p: usize| v.map_or("—".into(), |v| format!("{v:+.p$}"));
    for r in rows {
        let t = r.truth;
        let seen = r
            .slew_seen_ppm
            .map_or("unavailable".into(), |s| format!("{s:.3}"));
        let slew = match r.slew_applied_ppm {
            None => format!("— / {seen}"),
            Some(a) => format!("{a:+.3} / {seen}"),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {}, {} / {:.0} | {} | {} | {} | {} | {} | {} | {} | {} \
             | {} | {} |\n",
            r.name,
            r.kernel,
            r.clocksource,
            r.role,
            r.events,
            r.lost,
            r.offset_widths.0,
            r.offset_widths.1,
            r.offset_drift_ticks,
            opt(r.true_raw_ppm, 3),
            opt(r.recovered_raw_ppm, 3),
            slew,
            r.quality,
            r.segments,
            t.map_or("—".into(), |t| format!("{:.1}", t.max_error_ns * 1e-3)),
            t.map_or("—".into(), |t| format!("{:.1}", t.widest_ns * 1e-3)),
            t.map_or("—".into(), |t| format!("{:.3}", t.uncertainty_ns * 1e-3)),
            t.map_or("—".into(), |t| format!("{}/{}", t.inside, t.with_interval)),
            r.truth_recorded.map_or("—".into(), |t| format!(
                "{:.1}, {}/{}",
                t.max_error_ns * 1e-3,
                t.inside,
                t.with_interval
            )),
        ));
    }
    out
}

#[cfg(test)]
mod tests;
