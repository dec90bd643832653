//! Which clock the estimation works on: each node's raw clock (CLOCK_MONOTONIC_RAW, free of NTP's
//! slewing) when the trace's clock samples allow it, else the recorded clock.
//!
//! Events carry CLOCK_MONOTONIC, which NTP and chrony slew: its rate changes by up to 500 ppm for
//! seconds at a time, which no line between two nodes can follow. The raw clock only has the
//! crystal's drift. So by default every message time is converted to its node's raw clock before
//! it reaches the hulls, each pair is estimated raw to raw, and the final map of trace k is
//!
//! ```text
//! recorded_k ──to_raw_k──▶ raw_k ──pairs along the path──▶ raw_ref ──to_raw_ref⁻¹──▶ recorded_ref
//! ```
//!
//! so it still goes from the recorded clock (what the user's other traces carry) to the
//! reference's recorded clock, and the reference's own map stays the identity. The conversions'
//! error bounds are added to the pairs' guaranteed intervals (hull points moved outward by them)
//! and to the traces' intervals at both ends.

use std::sync::Arc;

use crate::input::error::InputError;
use crate::input::slew::SlewCorrection;
use crate::input::tracefile::{ClockRecord, read_clock_record};
use crate::input::{InputSet, SourceKind};
use crate::model::PiecewiseMap;

/// The timebase `sync` estimates on (`--timebase`: the variants' first lines are its help).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TimebaseChoice {
    /// Each node's CLOCK_MONOTONIC_RAW, from the trace's clock samples: NTP's slewing undone.
    ///
    /// The default; traces whose samples do not allow it stay on their recorded clock.
    #[default]
    Raw,
    /// The clocks as recorded (CLOCK_MONOTONIC).
    ///
    /// As before clock samples were used.
    Recorded,
}

impl TimebaseChoice {
    /// The name used on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            TimebaseChoice::Raw => "raw",
            TimebaseChoice::Recorded => "recorded",
        }
    }
}

/// How one trace's recorded times become raw ones.
#[derive(Clone, Debug)]
pub struct RawClock {
    /// Recorded clock → raw clock.
    pub to_raw: PiecewiseMap,
    /// Recorded clock ← raw clock.
    pub from_raw: PiecewiseMap,
    /// Largest error of `to_raw` over the trace's messages (ns); over all its samples until
    /// the messages are known.
    pub bound_ns: f64,
    /// The fit, for bounds at given times.
    correction: Arc<SlewCorrection>,
}

impl RawClock {
    /// The conversion a slew correction gives.
    pub fn new(correction: SlewCorrection) -> Self {
        RawClock {
            to_raw: correction.to_raw.clone(),
            from_raw: correction.from_raw.clone(),
            bound_ns: correction.bound_ns,
            correction: Arc::new(correction),
        }
    }

    /// The conversion's bound at recorded time `t_ns`.
    pub fn bound_at(&self, t_ns: f64) -> f64 {
        self.correction.bound_at(t_ns)
    }
}

/// Per trace, its conversion to the raw clock, or None where it stays on the recorded clock.
#[derive(Clone, Debug, Default)]
pub struct Timebases {
    /// Indexed by trace.
    pub raw: Vec<Option<RawClock>>,
    /// Per trace, the piece its last converted time fell in (times mostly follow each other).
    hints: Vec<usize>,
    /// Per trace, the earliest and latest recorded time converted.
    spans: Vec<(i64, i64)>,
}

impl Timebases {
    /// Every trace on its recorded clock.
    pub fn recorded(traces: usize) -> Self {
        Timebases {
            raw: vec![None; traces],
            hints: vec![0; traces],
            spans: vec![(i64::MAX, i64::MIN); traces],
        }
    }

    /// The conversion of `trace`, if it has one.
    #[inline]
    pub fn of(&self, trace: u32) -> Option<&RawClock> {
        self.raw.get(trace as usize).and_then(Option::as_ref)
    }

    /// Converts a recorded time of `trace` (rounded to whole ns, as the hulls need integers).
    #[inline]
    pub fn convert(&mut self, trace: u32, t_ns: i64) -> i64 {
        match self.raw.get(trace as usize) {
            Some(Some(c)) => {
                let span = &mut self.spans[trace as usize];
                *span = (span.0.min(t_ns), span.1.max(t_ns));
                c.to_raw
                    .apply_near(t_ns as f64, &mut self.hints[trace as usize])
                    .round() as i64
            }
            _ => t_ns,
        }
    }

    /// Narrows each conversion's bound to the span of the times it converted (once every
    /// message went through [`convert`](Self::convert)).
    pub fn settle_bounds(&mut self) {
        for (c, &(first, last)) in self.raw.iter_mut().zip(&self.spans) {
            if let Some(c) = c
                && first <= last
            {
                c.bound_ns = c.correction.bound_between(first as f64, last as f64);
            }
        }
    }

    /// The conversion's error bound of `trace` (0 on the recorded clock), plus the rounding.
    pub fn bound_ns(&self, trace: u32) -> f64 {
        self.of(trace).map_or(0.0, |c| c.bound_ns + 0.5)
    }

    /// True when no trace is converted.
    pub fn all_recorded(&self) -> bool {
        self.raw.iter().all(Option::is_none)
    }

    /// The map of `trace` from its recorded clock, given `raw_map` from its estimation clock to
    /// the estimation clock of `reference`.
    pub fn recorded_map(&self, trace: u32, reference: u32, raw_map: &PiecewiseMap) -> PiecewiseMap {
        if trace == reference {
            return PiecewiseMap::identity();
        }
        let mut map = match self.of(trace) {
            Some(c) => raw_map.compose(&c.to_raw),
            None => raw_map.clone(),
        };
        if let Some(r) = self.of(reference) {
            map = r.from_raw.compose(&map);
        }
        map
    }
}

/// The timebase of every input trace for `choice`, and a note per trace file that stays on its
/// recorded clock although `raw` was asked (why: no usable samples). Trace files are read once
/// more here, quickly (their events are skipped); text inputs have no samples and stay recorded.
pub fn resolve(
    inputs: &InputSet,
    choice: TimebaseChoice,
) -> Result<(Timebases, Vec<String>), InputError> {
    let mut timebases = Timebases::recorded(inputs.traces.len());
    let mut notes = Vec::new();
    if choice == TimebaseChoice::Recorded {
        return Ok((timebases, notes));
    }
    let mut ctf = Vec::new();
    for trace in &inputs.traces {
        let source = &inputs.sources[trace.source];
        if source.kind == SourceKind::Ctf {
            ctf.push(trace.name.as_str());
            continue;
        }
        if !matches!(source.kind, SourceKind::Trace) {
            continue;
        }
        let record = read_clock_record(&source.path)?;
        match raw_clock(&record) {
            Ok(c) => timebases.raw[trace.index as usize] = Some(c),
            Err(why) => notes.push(format!(
                "trace {}: NTP slewing cannot be undone: {why}",
                trace.name
            )),
        }
    }
    if !ctf.is_empty() {
        notes.push(format!(
            "LTTng trace(s) {}: LTTng records no clock samples, so NTP slewing cannot be undone; \
             they are estimated on their recorded clock (LTTng's `monotonic`, CLOCK_MONOTONIC), \
             as with --timebase recorded",
            ctf.join(", ")
        ));
    }
    Ok((timebases, notes))
}

/// The raw clock of a recording, from its samples.
fn raw_clock(record: &ClockRecord) -> Result<RawClock, String> {
    let c = SlewCorrection::from_samples(&record.samples, record.bracketed)
        .map_err(|e| e.to_string())?;
    Ok(RawClock::new(c))
}
