//! The common timeline: every event of every trace on its group's reference clock.
//!
//! `sync` gives one affine map per trace. The commands that use the maps — `correct`, `eval`,
//! `export` and the plots — all need the same glue, which lives here:
//!
//! 1. [`Timeline::build`]: one pass over the messages that feeds the hulls (as `sync` does) and,
//!    on the side, gathers what the later steps need: the messages as references to their send
//!    and receive events (for the controlled logical clock and the exported peer events), the
//!    smallest round trip per pair (for `l_min`), and a bounded envelope of message points per
//!    pair for the plots ([`PairSamples`]);
//! 2. [`Timeline::mapped_times`]: per trace, every event's time through its map, in event
//!    order (only the times are held: 8 bytes per event);
//! 3. [`Timeline::run_clc`]: the controlled logical clock over those times;
//! 4. [`Timeline::evaluate`]: the per-pair evaluation, streamed again over the inputs for the
//!    map (one line or piecewise) or taken from the corrected tables after the CLC;
//! 5. [`Timeline::export`]: every event streamed from its file, merged by corrected time.
//!
//! Text message inputs get synthesized events ([`synthetic`]) so that every step treats them
//! like trace files.

mod samples;
mod stream;
mod synthetic;

use std::path::{Path, PathBuf};

use crate::clc::{self, ClcInput, ClcOutcome, ClcParams};
use crate::estimate::{Algorithm, PairAccumulator, Pass, SyncError, SyncOptions, SyncResult};
use crate::eval::{EvalReport, Evaluator, MinRtt};
use crate::input::InputSet;
use crate::input::error::InputError;
use crate::input::tracefile::{TraceFile, usable};
use crate::matching::MatchOptions;
use crate::model::{EventRef, MessageRef, PairLatency};
use crate::model::{Exchange, MatchedMessage, Message, MessageSink, Origin};
pub use samples::{Envelope, PairSamples};
pub use stream::{EventSink, ExportEvent, ExportSummary, PeerRef, SinkError};
use synthetic::{SyntheticEvent, synthesize_text_events};

/// Why a timeline step failed; every variant says what to do or which file is at fault.
#[derive(thiserror::Error, Debug)]
pub enum TimelineError {
    /// The synchronization failed.
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// An input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A trace file holds more events in a later pass than in the first: it is still being written.
    #[error(
        "{path}: the file changed while it was being analyzed (event {index} was not there in the \
         first pass); run again on files that are no longer being written"
    )]
    Changed {
        /// The trace file that changed.
        path: PathBuf,
        /// Index (from 0, in file order) of the first event the first pass did not see.
        index: u64,
    },
    /// The controlled logical clock could not run.
    #[error("controlled logical clock: {0}")]
    Clc(#[from] clc::ClcError),
    /// The export's writer failed.
    #[error(transparent)]
    Export(SinkError),
}

/// What [`Timeline::build`] should gather besides the synchronization.
#[derive(Clone, Debug)]
pub struct TimelineOptions {
    /// How to synchronize (estimator, reference, matching).
    pub sync: SyncOptions,
    /// Keep every message as a pair of event references (needed by the CLC and by exports).
    pub keep_messages: bool,
    /// Keep a bounded envelope of message points per pair for the plots.
    pub plot_samples: bool,
}

/// The synchronized inputs and what was gathered along the way.
pub struct Timeline {
    /// The inputs the timeline was built from.
    pub inputs: InputSet,
    /// The synchronization: one map per trace onto its group's reference clock.
    pub sync: SyncResult,
    /// Smallest round trip per unordered pair, from the exchanges.
    pub min_rtt: MinRtt,
    /// The messages as event references (empty unless `keep_messages`).
    pub messages: Vec<MessageRef>,
    /// Per trace: the synthesized events of a text-input trace (time order), None for a trace file.
    pub synthetic: Vec<Option<Vec<SyntheticEvent>>>,
    /// Message envelopes for the plots (when asked for).
    pub samples: Option<PairSamples>,
    /// What the steps noticed that users should know (damaged files, unsorted events, …).
    pub warnings: Vec<String>,
    /// The matching options of the first pass (a later pass must pair the same messages).
    pub matching: MatchOptions,
}

/// The sink of the first pass: the hulls plus the side gatherings.
struct Gatherer {
    acc: PairAccumulator,
    linreg: bool,
    keep_messages: bool,
    text_messages: Vec<Message>,
    file_messages: Vec<MessageRef>,
    min_rtt: MinRtt,
    samples: Option<PairSamples>,
}

impl MessageSink for Gatherer {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.acc.add(&m.message);
        if let Some(s) = self.samples.as_mut() {
            // On the clocks the pairs are estimated on, like the hulls they are drawn with.
            s.add(&self.acc.converted(&m.message));
        }
        if !self.keep_messages {
            return;
        }
        match m.origin {
            Origin::TextLine(_) => self.text_messages.push(m.message),
            Origin::Events {
                send_index,
                recv_index,
            } => self.file_messages.push(MessageRef {
                send: EventRef::new(m.message.send_trace, send_index),
                recv: EventRef::new(m.message.recv_trace, recv_index),
            }),
        }
    }

    fn exchange(&mut self, e: &Exchange) {
        if self.linreg {
            self.acc.add_exchange(e);
        }
        self.min_rtt.add(e);
    }

    fn wants_events(&self) -> bool {
        false
    }
}

impl Timeline {
    /// Opens nothing itself: reads `inputs` once, synchronizes them, and gathers what
    /// `options` asks for. `progress(bytes)` reports input consumption.
    pub fn build(
        inputs: InputSet,
        options: &TimelineOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Timeline, TimelineError> {
        let sync_options = &options.sync;
        let n = inputs.traces.len();
        let (pass, acc) = Pass::start(&inputs, sync_options)?;
        let mut gatherer = Gatherer {
            acc,
            linreg: sync_options.algorithm == Algorithm::Linreg,
            keep_messages: options.keep_messages,
            text_messages: Vec::new(),
            file_messages: Vec::new(),
            min_rtt: MinRtt::new(n),
            samples: options.plot_samples.then(PairSamples::new),
        };
        let matching = MatchOptions {
            exchanges: true,
            ..sync_options.matching.clone()
        };
        let mut stats = inputs.for_each_message(&matching, &mut gatherer, progress)?;
        if sync_options.algorithm != Algorithm::Linreg {
            // The exchanges were looked for only for `l_min`: report what `sync` alone would,
            // so that `sync --plot` prints the same document as `sync`.
            stats.exchanges = 0;
        }
        let Gatherer {
            acc,
            text_messages,
            mut file_messages,
            min_rtt,
            samples,
            ..
        } = gatherer;
        let sync = pass.finish(acc, &inputs, stats, sync_options);
        let (synthetic, mut text_refs) = synthesize_text_events(n, &text_messages);
        file_messages.append(&mut text_refs);
        Ok(Timeline {
            inputs,
            sync,
            min_rtt,
            messages: file_messages,
            synthetic,
            samples,
            warnings: Vec::new(),
            matching: sync_options.matching.clone(),
        })
    }

    /// Number of traces.
    pub fn traces(&self) -> usize {
        self.inputs.traces.len()
    }

    /// A local time of `trace` on its group's reference clock (its map: one line or piecewise), in ns.
    pub fn mapped(&self, trace: usize, local_ns: i64) -> i64 {
        self.sync.traces[trace]
            .map
            .apply(local_ns as f64)
            .round()
            .clamp(i64::MIN as f64, i64::MAX as f64) as i64
    }

    /// `l_min` per ordered pair: `given` for all pairs, else half the smallest round trip of
    /// each pair's exchanges (unknown pairs: 0, which only forbids inversions).
    pub fn l_min(&self, given: Option<i64>) -> PairLatency {
        match given {
            Some(ns) => PairLatency::uniform(self.traces(), ns),
            None => PairLatency::from_min_rtt(self.traces(), 0, self.min_rtt.iter()),
        }
    }

    /// Every event's time through its map, per trace in event order (file order for trace
    /// files). A time earlier than its predecessor's (an out-of-order event in the file, or an
    /// unusable timestamp) is raised to it, so that each trace is in order as the CLC needs;
    /// such events are counted in a warning.
    pub fn mapped_times(&mut self) -> Result<Vec<Vec<i64>>, TimelineError> {
        let mut out = Vec::with_capacity(self.traces());
        for trace in 0..self.traces() {
            let times = match &self.synthetic[trace] {
                Some(events) => events
                    .iter()
                    .map(|e| self.mapped(trace, e.event.ts_ns as i64))
                    .collect(),
                None => self.file_times(trace)?,
            };
            out.push(times);
        }
        Ok(out)
    }

    fn file_times(&mut self, trace: usize) -> Result<Vec<i64>, TimelineError> {
        let mut file = TraceFile::open(self.source_path(trace))?;
        let mut times = Vec::new();
        let mut raised = 0u64;
        let mut last = i64::MIN;
        while let Some(chunk) = file.next_chunk()? {
            for e in chunk {
                let t = if usable(e) {
                    self.mapped(trace, e.ts_ns as i64)
                } else {
                    last
                };
                if t < last {
                    raised += 1;
                }
                last = last.max(t);
                times.push(last);
            }
        }
        if raised > 0 {
            self.warnings.push(format!(
                "{}: {raised} events were out of time order; for the CLC they take the time of \
                 the event before them",
                file.path().display()
            ));
        }
        Ok(times)
    }

    fn source_path(&self, trace: usize) -> &Path {
        &self.inputs.sources[self.inputs.traces[trace].source].path
    }

    /// Runs the controlled logical clock on `times` (from [`Timeline::mapped_times`]).
    pub fn run_clc(
        &mut self,
        times: Vec<Vec<i64>>,
        l_min: &PairLatency,
        params: &ClcParams,
    ) -> Result<ClcOutcome, TimelineError> {
        let input = ClcInput {
            traces: times,
            messages: std::mem::take(&mut self.messages),
        };
        let outcome = clc::correct(&input, l_min, params);
        self.messages = input.messages;
        Ok(outcome?)
    }

    /// The evaluation. With `corrected` (the CLC's tables) the kept messages are looked up
    /// there; without, the inputs are read again and every message is corrected by the maps (in
    /// constant memory). Accuracy curves come from the synchronization.
    pub fn evaluate(
        &self,
        l_min: PairLatency,
        corrected: Option<&[Vec<i64>]>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<EvalReport, TimelineError> {
        let mut evaluator = Evaluator::new(l_min, self.min_rtt.clone(), corrected.is_some());
        match corrected {
            Some(table) => {
                for m in &self.messages {
                    evaluator.add_message(&Message {
                        send_trace: m.send.trace as u32,
                        recv_trace: m.recv.trace as u32,
                        send_ns: table[m.send.trace][m.send.index],
                        recv_ns: table[m.recv.trace][m.recv.index],
                    });
                }
            }
            None => {
                let mut sink = LinearEvaluation {
                    timeline: self,
                    evaluator: &mut evaluator,
                };
                let matching = MatchOptions {
                    exchanges: false,
                    ..self.matching.clone()
                };
                self.inputs
                    .for_each_message(&matching, &mut sink, progress)?;
            }
        }
        for p in &self.sync.pairs {
            if let Some(curve) = &p.accuracy {
                evaluator.add_accuracy(p.a as usize, p.b as usize, curve.clone());
            }
        }
        Ok(evaluator.finish())
    }
}

/// The second pass of an evaluation without the CLC: each message corrected by its traces' maps.
struct LinearEvaluation<'a> {
    timeline: &'a Timeline,
    evaluator: &'a mut Evaluator,
}

impl MessageSink for LinearEvaluation<'_> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        let m = &m.message;
        self.evaluator.add_message(&Message {
            send_ns: self.timeline.mapped(m.send_trace as usize, m.send_ns),
            recv_ns: self.timeline.mapped(m.recv_trace as usize, m.recv_ns),
            ..*m
        });
    }

    fn wants_events(&self) -> bool {
        false
    }
}
