//! The user's own events on the common timebase: application logs, spans, LTTng traces.
//!
//! People do not record with tsync for its own sake. They have events from every node stamped by
//! that node's clock and want them on one timeline; `sync` computes the maps, and this module
//! carries them to any timestamp: [`CommonTimebase`] maps `(node, clock, t)` to the reference's
//! timebase with the guaranteed interval, and the submodules rewrite whole files with it —
//! JSON Lines and CSV ([`lines`], [`csv`]), Chrome trace-event JSON ([`chrome`]), OpenTelemetry
//! traces in OTLP/JSON or protobuf with many nodes per file ([`otlp`]) and LTTng's CTF traces
//! ([`ctf`]), each streamed in constant memory ([`stream`]: standard input, gzip).
//!
//! **Which clock.** `Monotonic` is the node's CLOCK_MONOTONIC as its trace file records it (with
//! the agent's `--clock-skew`, the skewed clock: the validation setups stamp their application
//! events with it too); the result is on the reference's recorded CLOCK_MONOTONIC, as every
//! corrected time of the analyzer. `Realtime` is the node's CLOCK_REALTIME: it is brought onto
//! the node's recorded monotonic clock through the node's clock samples ([`realtime`]), mapped,
//! and brought back to realtime through the *reference's* samples, so realtime stamps stay
//! wall-clock times (those of the reference's realtime clock). A node of a span file
//! (`crate::spans`) recorded its CLOCK_REALTIME itself: its realtime stamps go through its map
//! directly (its file's epoch taken off and the reference's put back), with no clock samples.
//!
//! **The recorded span.** The maps are backed by messages only where the node recorded. A time
//! outside the node's span (a trace file: its first to last clock sample; a text input: its
//! first to last message) is mapped with the nearest segment's line, continued, and counted.

pub mod chrome;
pub mod csv;
pub mod ctf;
pub mod lines;
pub mod otlp;
pub mod realtime;
pub mod stream;

use crate::estimate::SyncResult;
use crate::input::InputSet;
use crate::input::error::InputError;
use crate::input::tracefile::read_clock_record;
use crate::model::PiecewiseMap;
use realtime::{RealtimeClock, RealtimeCursor};

/// The clock a user's timestamps were taken with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeClock {
    /// CLOCK_MONOTONIC, as the node's trace records it; mapped onto the reference's.
    Monotonic,
    /// CLOCK_REALTIME; mapped onto the reference's CLOCK_REALTIME (through both nodes' clock
    /// samples).
    Realtime,
}

impl NodeClock {
    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeClock::Monotonic => "monotonic",
            NodeClock::Realtime => "realtime",
        }
    }
}

/// Why a time or a file could not be mapped.
#[derive(thiserror::Error, Debug)]
pub enum ApplyError {
    /// The node is not one of the inputs' traces.
    #[error("node `{node}`: the inputs hold no trace of that name or index; they know: {known}")]
    UnknownNode {
        /// The node asked for.
        node: String,
        /// The known trace names, comma-separated.
        known: String,
    },
    /// `--clock realtime` needs clock samples that the node or its reference does not have.
    #[error("{0}")]
    NoRealtime(String),
    /// An input could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The events file is not what its format says (the message names file:line).
    #[error("{0}")]
    Events(String),
    /// Reading the events or writing the result failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl From<crate::ctf::CtfError> for ApplyError {
    fn from(e: crate::ctf::CtfError) -> Self {
        match e {
            crate::ctf::CtfError::Io { path, source } => {
                ApplyError::io(format!("cannot read {}", path.display()), source)
            }
            other => ApplyError::Events(other.to_string()),
        }
    }
}

impl From<crate::ctf::metadata::MetadataError> for ApplyError {
    fn from(e: crate::ctf::metadata::MetadataError) -> Self {
        ApplyError::Events(e.to_string())
    }
}

impl ApplyError {
    pub(crate) fn io(what: impl std::fmt::Display, source: std::io::Error) -> Self {
        ApplyError::Io {
            what: what.to_string(),
            source,
        }
    }
}

/// One time on the common timebase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// The time on the reference's clock of the same kind (monotonic or realtime), ns.
    pub t_ns: i64,
    /// The guaranteed interval around it (floor, ceil), where the synchronization gives one:
    /// the pairs' intervals along the node's path, the raw-clock conversions, and for realtime
    /// both nodes' sample brackets. None where no guarantee holds (approximate pairs, outside
    /// the pairs' spans or the node's recorded span, an unsynchronized node).
    pub interval: Option<(i64, i64)>,
    /// True when `t` lies outside the node's recorded span (mapped with the nearest segment).
    pub outside_span: bool,
}

/// The maps of a synchronization, ready to carry any node's timestamps onto its reference's
/// timebase; `sync`'s result plus each trace file's clock samples (for realtime stamps).
///
/// ```
/// use tsync_analyze::{CommonTimebase, InputSet, NodeClock, SyncOptions, sync};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("tsync-apply-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("messages.txt");
/// # std::fs::write(&path, "2\n0 1 1.000000 1.000150\n1 0 1.000300 1.000360\n\
/// #                         0 1 2.000000 2.000140\n1 0 2.000400 2.000470\n")?;
/// let inputs = InputSet::open(&[&path])?;
/// let result = sync(&inputs, &SyncOptions::default(), &mut |_| {})?;
/// let timebase = CommonTimebase::new(result, &inputs)?;
/// let node = timebase.node("1")?;
/// let m = timebase.to_reference(node, NodeClock::Monotonic, 1_500_000_000)?;
/// let (lo, hi) = m.interval.expect("an accurate pair gives an interval");
/// assert!(lo <= m.t_ns && m.t_ns <= hi);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
pub struct CommonTimebase {
    /// The synchronization.
    pub sync: SyncResult,
    names: Vec<String>,
    /// Per trace: its realtime clock (trace files with samples).
    realtime: Vec<Option<RealtimeClock>>,
    /// Per trace: its recorded span on its own monotonic clock.
    spans: Vec<Option<(i64, i64)>>,
    /// Per trace: why it has no realtime clock.
    no_realtime: Vec<Option<String>>,
    /// Per trace: its recorded clock is CLOCK_REALTIME itself (a node of a span file) counted
    /// from this epoch (ns): its realtime stamps go through its map once the epoch is taken off.
    direct: Vec<Option<i64>>,
    /// Span nodes that joined an agent trace of another name (its header's hostname), with the
    /// trace: a span's node name finds its trace through them too.
    aliases: Vec<(String, u32)>,
}

impl CommonTimebase {
    /// Takes `sync`'s result for `inputs`, and reads each trace file's clock samples (a quick
    /// pass that seeks over the events).
    pub fn new(sync: SyncResult, inputs: &InputSet) -> Result<CommonTimebase, ApplyError> {
        let n = inputs.traces.len();
        let mut realtime = vec![None; n];
        let mut spans = vec![None; n];
        let mut no_realtime = vec![None; n];
        let mut direct = vec![None; n];
        for t in &inputs.traces {
            let k = t.index as usize;
            let source = &inputs.sources[t.source];
            if let crate::input::SourceKind::Spans { file } = &source.kind {
                direct[k] = Some(file.epoch_ns);
                continue;
            }
            if t.header.is_none() {
                no_realtime[k] = Some(format!(
                    "{} is a trace of the text message file {}, which has no clock samples",
                    t.name,
                    source.path.display()
                ));
                continue;
            }
            let record = read_clock_record(&source.path)?;
            match RealtimeClock::from_samples(&record.samples) {
                Some(c) => {
                    spans[k] = Some(c.mono_span());
                    realtime[k] = Some(c);
                }
                None => {
                    no_realtime[k] = Some(if source.kind == crate::input::SourceKind::Ctf {
                        format!(
                            "the LTTng trace {} of {} records no clock samples",
                            source.path.display(),
                            t.name
                        )
                    } else {
                        format!(
                            "the trace file {} of {} holds no clock sample",
                            source.path.display(),
                            t.name
                        )
                    })
                }
            }
        }
        let spans = message_spans(&sync, &realtime, spans);
        let names: Vec<String> = inputs.traces.iter().map(|t| t.name.clone()).collect();
        let mut aliases = Vec::new();
        for source in &inputs.sources {
            if let crate::input::SourceKind::Spans { file } = &source.kind {
                for (node, trace) in file.nodes.iter().zip(&file.traces) {
                    if let crate::spans::SpanTrace::Agent(k) = *trace
                        && names[k as usize] != node.name
                    {
                        aliases.push((node.name.clone(), k));
                    }
                }
            }
        }
        Ok(CommonTimebase {
            sync,
            names,
            realtime,
            spans,
            no_realtime,
            direct,
            aliases,
        })
    }

    /// `sync`'s result alone, for traces synchronized from messages in memory
    /// ([`sync_messages`](crate::sync_messages)): monotonic stamps only (no clock samples), spans
    /// from the pairs' messages.
    pub fn from_sync(sync: SyncResult) -> CommonTimebase {
        let n = sync.traces.len();
        let mut tb = CommonTimebase {
            names: sync.traces.iter().map(|t| t.name.clone()).collect(),
            realtime: vec![None; n],
            spans: vec![None; n],
            direct: vec![None; n],
            aliases: Vec::new(),
            no_realtime: sync
                .traces
                .iter()
                .map(|t| Some(format!("{} was synchronized from messages alone", t.name)))
                .collect(),
            sync,
        };
        tb.spans = message_spans(&tb.sync, &tb.realtime, vec![None; n]);
        tb
    }

    /// The trace of a node, by name (else by index), or an error naming the known nodes.
    pub fn node(&self, what: &str) -> Result<u32, ApplyError> {
        if let Some(k) = self.names.iter().position(|n| n == what) {
            return Ok(k as u32);
        }
        match what.parse::<u32>() {
            Ok(k) if (k as usize) < self.names.len() => Ok(k),
            _ => Err(ApplyError::UnknownNode {
                node: what.to_string(),
                known: self.names.join(", "),
            }),
        }
    }

    /// The trace names, in index order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The trace of a span's node: the trace of that name, else the agent trace the node
    /// joined by its hostname.
    pub fn trace_of_span_node(&self, name: &str) -> Option<u32> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|k| k as u32)
            .or_else(|| {
                self.aliases
                    .iter()
                    .find(|(alias, _)| alias == name)
                    .map(|&(_, k)| k)
            })
    }

    /// The node's recorded span on its own monotonic clock, if known.
    pub fn span(&self, node: u32) -> Option<(i64, i64)> {
        self.spans[node as usize]
    }

    /// The node's realtime clock (from its samples), if it has one.
    pub fn realtime_clock(&self, node: u32) -> Option<&RealtimeClock> {
        self.realtime[node as usize].as_ref()
    }

    /// The reference trace of `node`'s group.
    pub fn reference(&self, node: u32) -> u32 {
        self.sync.traces[node as usize].reference
    }

    /// The node's map: recorded monotonic clock → its reference's.
    pub fn map(&self, node: u32) -> &PiecewiseMap {
        &self.sync.traces[node as usize].map
    }

    /// A streaming mapper for many times of one node (checks that `clock` can be used).
    ///
    /// A node of a span file (its recorded clock its CLOCK_REALTIME) takes realtime stamps
    /// directly, and so does a reference of a span file give them back; the other side, an
    /// agent trace, goes through its clock samples: spans of a span-only node land on an agent
    /// reference's realtime, and the other way round.
    pub fn mapper(&self, node: u32, clock: NodeClock) -> Result<NodeMapper<'_>, ApplyError> {
        let reference = self.reference(node);
        let (node_epoch, ref_epoch) = (self.direct[node as usize], self.direct[reference as usize]);
        if clock == NodeClock::Monotonic && (node_epoch.is_some() || ref_epoch.is_some()) {
            let (which, k) = if node_epoch.is_some() {
                ("", node)
            } else {
                ("the reference of it, ", reference)
            };
            return Err(ApplyError::NoRealtime(format!(
                "{which}{} is a node of a span file, whose times are its CLOCK_REALTIME: use \
                 --clock realtime",
                self.names[k as usize]
            )));
        }
        if clock == NodeClock::Realtime {
            for (k, epoch) in [(node, node_epoch), (reference, ref_epoch)] {
                if epoch.is_some() {
                    continue;
                }
                if let Some(why) = &self.no_realtime[k as usize] {
                    let role = if k == node && k == reference {
                        "the node (its own reference)"
                    } else if k == node {
                        "the node"
                    } else {
                        "its reference"
                    };
                    return Err(ApplyError::NoRealtime(format!(
                        "--clock realtime needs the clock samples of {} and of its reference {}: \
                         {role} has none ({why}); use --clock monotonic",
                        self.names[node as usize], self.names[reference as usize]
                    )));
                }
            }
        }
        Ok(NodeMapper {
            timebase: self,
            node,
            clock,
            map: self.map(node),
            span: self.spans[node as usize],
            hint: 0,
            node_cursor: RealtimeCursor::default(),
            ref_cursor: RealtimeCursor::default(),
            outside: 0,
            ambiguous: 0,
            node_epoch,
            ref_epoch,
        })
    }

    /// Maps one time of `node`, stamped with `clock`, onto its reference's timebase, with the
    /// guaranteed interval. (For many times of one node, a [`NodeMapper`] is faster.)
    pub fn to_reference(
        &self,
        node: u32,
        clock: NodeClock,
        t_ns: i64,
    ) -> Result<Mapped, ApplyError> {
        let mut m = self.mapper(node, clock)?;
        Ok(m.map_with_interval(t_ns))
    }
}

/// Text inputs (and trace files without samples): the span of their messages, from the pairs'.
fn message_spans(
    sync: &SyncResult,
    realtime: &[Option<RealtimeClock>],
    mut spans: Vec<Option<(i64, i64)>>,
) -> Vec<Option<(i64, i64)>> {
    for p in &sync.pairs {
        let Some((x0, x1)) = p.span else { continue };
        let mut widen = |k: u32, lo: i64, hi: i64| {
            let k = k as usize;
            if realtime[k].is_some() {
                return;
            }
            let s = spans[k].get_or_insert((lo, hi));
            *s = (s.0.min(lo), s.1.max(hi));
        };
        widen(p.a, x0, x1);
        if let Some(map) = &p.map {
            let (y0, y1) = (map.apply(x0 as f64), map.apply(x1 as f64));
            widen(p.b, y0.round() as i64, y1.round() as i64);
        }
    }
    spans
}

/// Maps many times of one node (hints make times that follow each other cheap) and counts what
/// the summary reports.
pub struct NodeMapper<'a> {
    timebase: &'a CommonTimebase,
    node: u32,
    clock: NodeClock,
    map: &'a PiecewiseMap,
    span: Option<(i64, i64)>,
    hint: usize,
    node_cursor: RealtimeCursor,
    ref_cursor: RealtimeCursor,
    /// Times outside the node's recorded span so far.
    pub outside: u64,
    /// Realtime values that occurred twice on the node (its clock was stepped back) so far.
    pub ambiguous: u64,
    /// The node's recorded clock is its CLOCK_REALTIME (a span file's node) counted from this
    /// epoch: its realtime stamps need no clock samples.
    node_epoch: Option<i64>,
    /// The same of its reference.
    ref_epoch: Option<i64>,
}

impl NodeMapper<'_> {
    /// The clock this mapper reads.
    pub fn clock(&self) -> NodeClock {
        self.clock
    }

    /// The node's monotonic time of a stamp, and whether it is outside the span.
    #[inline]
    fn monotonic(&mut self, t_ns: i64) -> (i64, bool) {
        match self.clock {
            _ if let Some(epoch) = self.node_epoch => {
                let t = t_ns.saturating_sub(epoch);
                let outside = self.span.is_some_and(|(a, b)| t < a || t > b);
                (t, outside)
            }
            NodeClock::Monotonic => {
                let outside = self.span.is_some_and(|(a, b)| t_ns < a || t_ns > b);
                (t_ns, outside)
            }
            NodeClock::Realtime => {
                let c = self.timebase.realtime[self.node as usize]
                    .as_ref()
                    .expect("checked when the mapper was made");
                let (m, note) = c.to_monotonic(t_ns, &mut self.node_cursor);
                self.ambiguous += u64::from(note.ambiguous);
                (m, note.outside)
            }
        }
    }

    /// Back from the reference's monotonic clock to the clock the stamps were taken with.
    #[inline]
    fn back(&mut self, mono_ref: i64) -> i64 {
        match self.clock {
            _ if let Some(epoch) = self.ref_epoch => mono_ref.saturating_add(epoch),
            NodeClock::Monotonic => mono_ref,
            NodeClock::Realtime => self.timebase.realtime
                [self.timebase.reference(self.node) as usize]
                .as_ref()
                .expect("checked when the mapper was made")
                .to_realtime(mono_ref, &mut self.ref_cursor),
        }
    }

    /// Maps one time (ns) onto the reference's timebase, rounded to the nanosecond.
    #[inline]
    pub fn map(&mut self, t_ns: i64) -> i64 {
        let (mono, outside) = self.monotonic(t_ns);
        self.outside += u64::from(outside);
        let mapped = self.map.apply_near(mono as f64, &mut self.hint).round();
        self.back(mapped.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
    }

    /// [`map`](Self::map) with the guaranteed interval and the span flag.
    pub fn map_with_interval(&mut self, t_ns: i64) -> Mapped {
        let (mono, outside) = self.monotonic(t_ns);
        self.outside += u64::from(outside);
        let mapped = self.map.apply_near(mono as f64, &mut self.hint).round() as i64;
        // Outside the recorded span no guarantee holds: for realtime stamps the way to the
        // monotonic clock is itself extrapolated there (a step could hide before the first
        // sample or after the last).
        let interval = if outside {
            None
        } else {
            self.timebase.sync.interval(self.node, mono)
        };
        let t = self.back(mapped);
        let interval = interval.map(|(lo, hi)| {
            let (lo, hi) = (lo.floor() as i64, hi.ceil() as i64);
            match self.clock {
                NodeClock::Monotonic => (lo, hi),
                NodeClock::Realtime => {
                    let tb = self.timebase;
                    // Each side's realtime ↔ monotonic pairing where it goes through samples
                    // (not a span file's node): the bracket, and how far a sample strayed from
                    // its neighbours.
                    let pairing = |node: u32, epoch: Option<i64>| {
                        if epoch.is_some() {
                            return 0;
                        }
                        tb.realtime[node as usize]
                            .as_ref()
                            .map_or(0, |c| c.half_bracket_ns + c.pairing_error_ns)
                    };
                    let widen = pairing(self.node, self.node_epoch)
                        + pairing(tb.reference(self.node), self.ref_epoch);
                    // (+1: the rounding of an interpolation through samples.)
                    let direct = self.node_epoch.is_some() && self.ref_epoch.is_some();
                    let widen = if direct { 0 } else { widen + 1 };
                    (self.back(lo) - widen, self.back(hi) + widen)
                }
            }
        });
        Mapped {
            t_ns: t,
            interval,
            outside_span: outside,
        }
    }
}

/// What applying a map to a file did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplySummary {
    /// Events whose time was mapped.
    pub events: u64,
    /// Of those, events outside the node's recorded span (mapped with the nearest segment).
    pub outside_span: u64,
    /// Realtime values that occurred twice on the node (a step back), taken in file order.
    pub ambiguous: u64,
    /// Records passed through without a time (blank lines; Chrome metadata events).
    pub passed_through: u64,
    /// With `--interval`: events written without an interval (no guarantee holds there:
    /// outside the node's recorded span, or no accurate pair on its path).
    pub without_interval: u64,
}

/// The names `--interval` writes a time field's guaranteed interval under: `<field>_lo`,
/// `<field>_hi`.
pub fn interval_names(field: &str) -> (String, String) {
    (format!("{field}_lo"), format!("{field}_hi"))
}
