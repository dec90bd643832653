//! `sync`: from inputs to one timebase per group of traces.
//!
//! One streaming pass over the messages feeds, per trace pair (a < b), the two half hulls (and,
//! for `linreg`, the offset samples of the exchanges). Then each pair's corridor, estimate and
//! accuracy curve are computed from its hulls, and the reduction composes the pair maps into one
//! map per trace.
//!
//! The pipeline, in order: [`accumulate`](PairAccumulator) (the message pass, per pair), `pair`
//! (one pair's corridor and guaranteed interval from its hulls), `piecewise` (a pair whose clocks
//! bent, cut into segments), [`finish`] (warnings, reduction into trace maps), `result` (what is
//! returned, with the interval queries).

mod accumulate;
pub mod accuracy;
mod buckets;
pub mod corridor;
mod finish;
pub mod hull;
pub mod joint;
pub mod linreg;
pub mod network;
mod pair;
mod pair_index;
pub(crate) mod parallel;
mod piecewise;
pub mod reduction;
mod result;
mod segments;
mod spread;
pub mod timebase;
mod warnings;

pub use accumulate::PairAccumulator;
pub use finish::finish;
pub use result::{LimitLine, PairResult, PairSegment, SyncResult, TraceResult};

use crate::estimate::joint::ReductionChoice;
use crate::estimate::timebase::TimebaseChoice;
use crate::input::InputSet;
use crate::input::error::InputError;
use crate::matching::{MatchOptions, MatchStats};
use crate::model::Message;

/// Which estimator to use (`--algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    /// Convex hull (Duda/Haddad/Poirier), with guaranteed accuracy.
    #[default]
    Chull,
    /// Linear regression on exchanges (Clément & Dagenais).
    Linreg,
}

impl Algorithm {
    /// Lowercase name, as in reports and JSON (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Chull => "chull",
            Algorithm::Linreg => "linreg",
        }
    }
}

/// Options of [`run`].
#[derive(Clone, Debug, Default)]
pub struct SyncOptions {
    /// Estimator to use (default: convex hull).
    pub algorithm: Algorithm,
    /// Reference trace, by name or index (forces the reference of its group).
    pub reference: Option<String>,
    /// How events are matched into messages; `run` turns exchange pairing on for `linreg`.
    pub matching: MatchOptions,
    /// `linreg` only: one-sided outlier filter, drop exchanges whose error margin exceeds
    /// mean + z·σ (the paper's 90 % level is z = 1.64).
    pub linreg_filter_z: Option<f64>,
    /// The clocks to estimate on (default: each node's raw clock where its samples allow).
    pub timebase: TimebaseChoice,
    /// How pair maps become trace maps (default: the joint estimate over every pair).
    pub reduction: ReductionChoice,
}

/// Why `sync` could not run.
#[derive(thiserror::Error, Debug)]
pub enum SyncError {
    /// An input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// `--reference` named no trace (the name or index given).
    #[error("--reference {0}: no trace has this name or index")]
    UnknownReference(String),
}

/// What a pass over a set of inputs starts from and ends with, besides its accumulator: the
/// one place where `options.reference` and `options.timebase` are resolved against the inputs,
/// for [`run`] and for the timeline (which gathers more during the same pass).
pub(crate) struct Pass {
    reference: Option<u32>,
    /// What resolving the timebase had to say (traces left on their recorded clock, and why).
    notes: Vec<String>,
}

impl Pass {
    /// Resolves the reference and the timebase: the pass then feeds the returned accumulator.
    pub(crate) fn start(
        inputs: &InputSet,
        options: &SyncOptions,
    ) -> Result<(Pass, PairAccumulator), SyncError> {
        let reference = options
            .reference
            .as_ref()
            .map(|r| {
                inputs
                    .find_trace(r)
                    .ok_or_else(|| SyncError::UnknownReference(r.clone()))
            })
            .transpose()?;
        let (timebases, notes) = timebase::resolve(inputs, options.timebase)?;
        let acc = PairAccumulator::with_timebases(timebases);
        Ok((Pass { reference, notes }, acc))
    }

    /// The result of the pass from what `acc` accumulated and what matching counted.
    pub(crate) fn finish(
        mut self,
        acc: PairAccumulator,
        inputs: &InputSet,
        mut stats: MatchStats,
        options: &SyncOptions,
    ) -> SyncResult {
        stats.warnings.append(&mut self.notes);
        let names: Vec<String> = inputs.traces.iter().map(|t| t.name.clone()).collect();
        finish(acc, &names, stats, options, self.reference)
    }
}

/// Runs `sync` on a set of inputs. `progress(bytes)` reports input consumption.
pub fn run(
    inputs: &InputSet,
    options: &SyncOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<SyncResult, SyncError> {
    let (pass, mut acc) = Pass::start(inputs, options)?;
    let mut matching = options.matching.clone();
    matching.exchanges |= options.algorithm == Algorithm::Linreg;
    let stats = if spread::applies(inputs, &matching) {
        spread::pass(inputs, &matching, &mut acc, progress)?
    } else {
        inputs.for_each_message_in(&matching, &mut acc, progress)?
    };
    Ok(pass.finish(acc, inputs, stats, options))
}

/// Runs `sync` on messages given in memory (tests, simulations, other tools).
pub fn run_messages(
    trace_names: &[String],
    messages: impl IntoIterator<Item = Message>,
    options: &SyncOptions,
    reference: Option<u32>,
) -> SyncResult {
    let mut acc = PairAccumulator::new();
    let mut pairing = crate::matching::exchange::ReplyPairing::new();
    let mut stats = MatchStats::default();
    for m in messages {
        stats.events += 2;
        if m.send_trace == m.recv_trace {
            stats.same_trace += 1;
            continue;
        }
        stats.matched += 1;
        acc.add(&m);
        if options.algorithm == Algorithm::Linreg
            && let Some(x) = pairing.push(m)
        {
            stats.exchanges += 1;
            acc.add_exchange(&x);
        }
    }
    finish(acc, trace_names, stats, options, reference)
}
