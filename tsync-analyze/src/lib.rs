//! # tsync-analyze
//!
//! Offline synchronization of distributed traces: the library behind the `tsync-analyze`
//! command. It reads the trace files the `tsync-agent` wrote on each node (or text message
//! files), matches every packet's send event with its receive event, estimates each pair of
//! clocks with the convex-hull method (guaranteed accuracy intervals) or linear regression,
//! composes the pair maps onto one reference clock per group, and carries that correction on to
//! every event: the controlled logical clock, the evaluation, exports and plots.
//!
//! The crate reads like the pipeline:
//!
//! | stage | module | what it holds |
//! |---|---|---|
//! | the vocabulary | `model` | [`Message`], [`Exchange`], [`EventRef`], [`Affine`], [`PairLatency`] |
//! | reading | `input`, [`text`], [`spans`] | [`InputSet`], [`TraceFile`], the text message format, OpenTelemetry spans as messages |
//! | matching | `matching` | [`MatchOptions`], [`MatchStats`], the merge of trace files |
//! | estimation | `estimate` | hulls, corridor, [`AccuracyCurve`], regression, reduction: [`sync()`] |
//! | one timebase | `timeline` | [`Timeline`]: linear times, the event stream |
//! | correction | [`clc`] | Becker et al.'s controlled logical clock |
//! | evaluation | [`eval`] | inversions, too-fast messages, transfer times |
//! | output | [`output`] | safe result files, the report, plots, exports |
//! | the user's events | [`apply`] | [`CommonTimebase`]: any node's timestamps on the common timebase; logs, Chrome traces and LTTng's CTF rewritten |
//!
//! ```
//! use tsync_analyze::{InputSet, Quality, SyncOptions, sync};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two traces: messages 0→1 and 1→0, times in seconds on each node's own clock.
//! let dir = std::env::temp_dir().join(format!("tsync-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("messages.txt");
//! std::fs::write(&path, "2\n0 1 1.000000 1.000150\n1 0 1.000300 1.000360\n\
//!                         0 1 2.000000 2.000140\n1 0 2.000400 2.000470\n")?;
//! let inputs = InputSet::open(&[&path])?;
//! let result = sync(&inputs, &SyncOptions::default(), &mut |_bytes| {})?;
//! let pair = &result.pairs[0];
//! assert_eq!(pair.quality, Quality::Accurate);
//! // Trace 1's local time 1.5 s on trace 0's clock, and the guaranteed interval there.
//! let t = result.to_reference(1, 1_500_000_000);
//! let (lo, hi) = pair.accuracy.as_ref().unwrap().at(1_500_000_000).unwrap();
//! assert!(lo <= hi);
//! # let _ = t;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub mod apply;
pub mod clc;
pub mod ctf;
mod estimate;
pub mod eval;
mod huge_pages;
mod input;
mod matching;
pub mod merge;
mod model;
pub mod output;
mod prefetch;
pub mod spans;
mod timeline;

pub use apply::{ApplyError, ApplySummary, CommonTimebase, Mapped, NodeClock, NodeMapper};
pub use estimate::accuracy::{AccuracyCurve, AccuracyPoint, AccuracyStats};
pub use estimate::corridor::Quality;
pub use estimate::hull::Point;
pub use estimate::joint::ReductionChoice;
pub use estimate::linreg::LinRegFit;
pub use estimate::network::{EXACT_PAIRS as NETWORK_EXACT_PAIRS, NetworkInterval};
pub use estimate::timebase::{RawClock, TimebaseChoice, Timebases};
pub use estimate::{
    Algorithm, LimitLine, PairResult, PairSegment, SyncError, SyncOptions, SyncResult, TraceResult,
    run as sync, run_messages as sync_messages,
};
pub use input::info::{
    ClockSummary, DamageInfo, EventCounts, KernelClockSummary, NamespaceSummary, SizeSummary,
    TraceSummary, inspect,
};
pub use input::slew::{RateHistory, SlewCorrection, SlewSummary, SlewUnavailable};
pub use input::text;
pub use input::tracefile::{ClockRecord, TraceFile, TraceHeader, read_clock_record};
pub use input::{
    InputError, InputSet, SNIFF_LEN, Source, SourceKind, TraceInfo, read_prefix, sniff,
    sniff_prefix,
};
pub use matching::{DEFAULT_WINDOW_NS, MatchOptions, MatchStats};
pub use model::{
    Affine, EventRef, Exchange, MatchedMessage, Message, MessageRef, MessageSink, Origin,
    PairLatency, Piece, PiecewiseMap,
};
pub use timeline::{
    Envelope, EventSink, ExportEvent, ExportSummary, PairSamples, PeerRef, SinkError, Timeline,
    TimelineError, TimelineOptions,
};
