//! OpenTelemetry spans as an input of `sync`: the messages a distributed trace already holds.
//!
//! A client's span opens before its request leaves, the server's span opens after the request
//! arrived: that is a send on one node and a receive on another, with an unknown positive
//! latency, exactly what the convex hull takes. A span file (OTLP/JSON, one `TracesData` per
//! line, as the Collector's file exporter writes it; told apart from the other inputs by
//! content: a JSON object with `resourceSpans`) becomes one trace per node (its name the node's,
//! from a resource attribute: [`node`]), and its cross-node parent/child pairs become messages
//! by the rules of `rules.rs`, whose module documentation says why each is sound. Times are each
//! node's CLOCK_REALTIME in ns, counted from the file's epoch ([`SpanFile::epoch_ns`]: f64 maps
//! would lose 256 ns at today's realtime), so the maps and intervals are in realtime ns since it.
//!
//! **Spans with agent traces.** A span node named like an agent trace given in the same run (see
//! [`join_agent_traces`]) is no trace of its own: its span messages' times, its CLOCK_REALTIME,
//! go onto that trace's recorded CLOCK_MONOTONIC through the agent's clock samples
//! ([`RealtimeClock::monotonic_bounds`]), widened by the conversion's bound (a send earlier, a
//! receive later: still causal), and join the trace's packet messages; a time the samples do not
//! place for certain (outside them, around a realtime step) drops its message, counted.
//!
//! The file is read twice, like a text message file: once when the inputs are opened, for its
//! nodes (the traces) and epoch (`read::scan_spans`: OTLP/JSON searched for two keys, protobuf
//! frames decoded), then for its messages (`read.rs`, `jsonl/`, `proto.rs`; `window.rs`: the
//! join of parents and children within a window of spans). Bad spans are counted and warned about
//! (`problems.rs`), never paired.

pub(crate) mod json;
mod jsonl;
pub mod node;
mod problems;
pub(crate) mod proto;
mod read;
mod rules;
mod window;

use std::path::Path;

use crate::apply::realtime::{RealtimeClock, RealtimeCursor};
use crate::input::error::InputError;
use crate::input::tracefile::read_clock_record;
use crate::input::{InputSet, Source, SourceKind};
use crate::matching::MatchStats;
use crate::model::{Exchange, MatchedMessage, Message, MessageSink, Origin};

#[cfg(feature = "fuzzing")]
pub use jsonl::readings_agree;
pub use node::{DEFAULT_NODE_ATTRIBUTES, NodeAttribution, SpanNode};
pub use window::JoinCounts;

use read::{ReadCounts, SpanData, SpanVisitor};
use rules::Rule;

/// How many spans the join keeps by default: parents and children farther apart in the file
/// are counted, not joined. About 0.33 KB each with the join's table (measured: `sync` of a
/// million protobuf spans peaks at 51 MB with a window of 100,000, 346 MB with one of
/// 1,000,000; 10⁷ spans of OTLP/JSON at 156 MiB with this default).
pub const DEFAULT_WINDOW: usize = 200_000;

/// How span files are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpanOptions {
    /// The resource attributes that name a span's node.
    pub attribution: NodeAttribution,
    /// Spans kept for the join of parents and children.
    pub window: usize,
}

impl Default for SpanOptions {
    fn default() -> Self {
        SpanOptions {
            attribution: NodeAttribution::default(),
            window: DEFAULT_WINDOW,
        }
    }
}

/// True if `prefix` (a file's first bytes) is OpenTelemetry traces as the Collector's file
/// exporter writes them: OTLP/JSON, a JSON object whose start names `resourceSpans` (it is
/// written first), or OTLP protobuf, a length-prefixed `TracesData` (`proto.rs`).
pub fn looks_like_spans(prefix: &[u8]) -> bool {
    let text = String::from_utf8_lossy(prefix);
    let text = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
    (text.starts_with('{') && text.contains("\"resourceSpans\"")) || proto::looks_like_proto(prefix)
}

/// Why `prefix` (a file's first bytes) is refused as compressed spans: zstd, as the Collector's
/// file exporter writes with `compression: zstd` (not read); None otherwise.
pub fn compressed_spans(prefix: &[u8]) -> Option<&'static str> {
    proto::compressed(prefix)
}

/// True if `prefix` (a file's first bytes) starts like an OTLP protobuf span file.
pub(crate) fn is_proto(prefix: &[u8]) -> bool {
    proto::looks_like_proto(prefix)
}

/// The name of the span format whose file starts with `prefix`, for `info`.
pub fn format_name(prefix: &[u8]) -> &'static str {
    if proto::looks_like_proto(prefix) {
        "OTLP protobuf spans"
    } else {
        "OTLP/JSON spans"
    }
}

/// True if `prefix` starts like a JSON object (and so is no text message file).
pub fn looks_like_json_object(prefix: &[u8]) -> bool {
    prefix
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{')
}

/// What the first reading of a span file finds: its traces and its epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpanFile {
    /// The nodes, in order of first appearance: the file's traces.
    pub nodes: Vec<SpanNode>,
    /// The realtime (ns) the file's times are counted from: the earliest start (or end) of any
    /// of its spans, down to a whole second. The maps work in f64, whose step at today's realtime (1.7·10¹⁸
    /// ns) is 256 ns; counted from the epoch, times keep every nanosecond.
    pub epoch_ns: i64,
    /// Per node (in the order of `nodes`), the trace its messages go to (empty until the
    /// inputs are opened: [`InputSet::open_with`](crate::InputSet::open_with) sets it).
    pub traces: Vec<SpanTrace>,
}

/// The trace a span node's messages go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanTrace {
    /// A trace of its own, whose clock is the node's CLOCK_REALTIME since the file's epoch.
    Own(u32),
    /// The agent trace of the same node: its times go onto the trace's recorded
    /// CLOCK_MONOTONIC through the agent's clock samples.
    Agent(u32),
}

impl SpanTrace {
    /// The trace's index.
    pub fn index(self) -> u32 {
        match self {
            SpanTrace::Own(k) | SpanTrace::Agent(k) => k,
        }
    }
}

/// The agent trace (index into `traces`) a span node named `name` belongs to: the one agent
/// trace file whose node name (the header's `node`, `tsync-agent record --node`, by default the
/// hostname: what `sync` names the trace) is `name`, else the one whose header hostname is
/// `name`; exact, case-sensitive. None when no agent trace file, or several, match (two
/// recordings of one name cannot tell which clock the spans read).
fn agent_trace_named(
    name: &str,
    traces: &[crate::input::TraceInfo],
    sources: &[Source],
) -> Option<usize> {
    let agents = || {
        traces
            .iter()
            .enumerate()
            .filter(|(_, t)| sources[t.source].kind == SourceKind::Trace)
    };
    let by_node: Vec<usize> = agents()
        .filter(|(_, t)| t.name == name)
        .map(|(i, _)| i)
        .collect();
    if !by_node.is_empty() {
        return (by_node.len() == 1).then(|| by_node[0]);
    }
    let by_host: Vec<usize> = agents()
        .filter(|(_, t)| t.header.as_ref().is_some_and(|h| h.hostname == name))
        .map(|(i, _)| i)
        .collect();
    (by_host.len() == 1).then(|| by_host[0])
}

/// Joins the span nodes that have an agent trace of their own name ([`agent_trace_named`]) to
/// it: their traces are removed, every later trace renumbered (`traces`' indices, the sources'
/// `first_trace`, every span file's [`SpanFile::traces`]). Called once every input is open, so
/// that the order of the arguments does not matter.
pub(crate) fn join_agent_traces(sources: &mut [Source], traces: &mut Vec<crate::input::TraceInfo>) {
    let mut joined: Vec<(usize, SpanTrace)> = Vec::new();
    for source in sources.iter() {
        let SourceKind::Spans { file } = &source.kind else {
            continue;
        };
        for (i, node) in file.nodes.iter().enumerate() {
            let own = file.traces[i].index() as usize;
            if let Some(agent) = agent_trace_named(&node.name, traces, sources) {
                joined.push((own, SpanTrace::Agent(agent as u32)));
            }
        }
    }
    if joined.is_empty() {
        return;
    }
    let mut new_index = vec![None; traces.len()];
    let mut next = 0u32;
    for (k, slot) in new_index.iter_mut().enumerate() {
        if !joined.iter().any(|(own, _)| *own == k) {
            *slot = Some(next);
            next += 1;
        }
    }
    let renumber = |t: SpanTrace| match t {
        SpanTrace::Own(k) => joined
            .iter()
            .find(|(own, _)| *own == k as usize)
            .map_or(t, |(_, agent)| *agent),
        agent => agent,
    };
    let renumbered = |t: SpanTrace| match renumber(t) {
        SpanTrace::Own(k) => SpanTrace::Own(new_index[k as usize].expect("kept")),
        SpanTrace::Agent(k) => SpanTrace::Agent(new_index[k as usize].expect("agent traces stay")),
    };
    for source in sources.iter_mut() {
        source.first_trace = new_index[source.first_trace as usize..]
            .iter()
            .flatten()
            .next()
            .copied()
            .unwrap_or(next);
        if let SourceKind::Spans { file } = &mut source.kind {
            file.traces = file.traces.iter().map(|&t| renumbered(t)).collect();
        }
    }
    let mut k = 0;
    traces.retain(|_| {
        k += 1;
        new_index[k - 1].is_some()
    });
    for t in traces.iter_mut() {
        t.index = new_index[t.index as usize].expect("kept");
    }
}

/// Reads a span file once for its nodes and epoch ([`read::scan_spans`]). An error when no
/// resource names a node.
pub fn scan(path: &Path, options: &SpanOptions) -> Result<SpanFile, InputError> {
    let found = read::scan_spans(path, &options.attribution)?;
    if found.nodes.is_empty() {
        return Err(InputError::Invalid(format!(
            "{}: no resource of the span file has {}, so no span has a node; \
             --node-attribute KEY names the resource attribute that does",
            path.display(),
            options.attribution.describe()
        )));
    }
    Ok(SpanFile {
        traces: (0..found.nodes.len() as u32).map(SpanTrace::Own).collect(),
        nodes: found
            .nodes
            .into_iter()
            .map(|(name, attribute)| SpanNode { name, attribute })
            .collect(),
        epoch_ns: found
            .earliest
            .map_or(0, |t| t - t.rem_euclid(1_000_000_000)),
    })
}

/// What one span file gave.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpanStats {
    /// The file, as given.
    #[serde(rename = "path")]
    pub file: String,
    /// The attributes tried, as a sentence.
    pub attribution: String,
    /// Spans kept for the join.
    pub window: usize,
    /// The realtime its times are counted from, ns.
    pub epoch_ns: i64,
    /// The nodes (traces), with the attribute that named each.
    #[serde(serialize_with = "serialize_nodes")]
    pub nodes: Vec<SpanNode>,
    /// `TracesData` lines read.
    pub lines: u64,
    /// The last line was cut short and not read.
    pub cut_short: bool,
    /// Spans of resources without a node attribute, left out.
    pub without_node: u64,
    /// Spans without a trace id or span id, left out.
    pub without_id: u64,
    /// What the join of parents and children counted.
    pub join: JoinCounts,
    /// Messages by rule: CLIENT start → SERVER start.
    pub requests: u64,
    /// SERVER start → CLIENT end.
    pub responses: u64,
    /// PRODUCER start → CONSUMER end.
    pub queued: u64,
    /// RPC message events, SENT → RECEIVED.
    pub message_events: u64,
    /// Exchanges (a request and its response) formed.
    pub exchanges: u64,
    /// The nodes whose messages went to the agent trace of the same name, with its name.
    pub joined: Vec<JoinedNode>,
    /// Messages dropped because a time of a joined node could not be put on its agent trace's
    /// clock for certain (outside the agent's clock samples, or around a realtime step).
    pub off_samples: u64,
    /// Messages between two nodes joined to one agent trace (one clock), dropped.
    pub joined_same_trace: u64,
}

/// A span node whose messages went to an agent trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct JoinedNode {
    /// The span node's name.
    pub node: String,
    /// The agent trace's name.
    pub trace: String,
    /// Why its times could not be converted at all (the agent trace holds no clock sample).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unusable: Option<String>,
}

fn serialize_nodes<S: serde::Serializer>(nodes: &[SpanNode], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    let mut seq = s.serialize_seq(Some(nodes.len()))?;
    for n in nodes {
        seq.serialize_element(&serde_json::json!({"name": n.name, "attribute": n.attribute}))?;
    }
    seq.end()
}

impl SpanStats {
    /// Messages given, every rule together.
    pub fn messages(&self) -> u64 {
        self.requests + self.responses + self.queued + self.message_events
    }

    /// The summary line and the warnings about this file.
    pub fn warnings(&self) -> Vec<String> {
        problems::warnings(self)
    }
}

/// Where one node's messages go, and how its times get there.
struct Target {
    trace: u32,
    convert: Convert,
}

/// How a node's realtime becomes its trace's clock.
enum Convert {
    /// Its own trace: the file's epoch taken off.
    Epoch,
    /// An agent trace: through its clock samples.
    Samples(Box<RealtimeClock>, RealtimeCursor),
    /// An agent trace without clock samples: nothing can be converted.
    Unusable,
}

impl Target {
    /// A send (`send`) or receive time on the target's clock, moved outward by the
    /// conversion's bound (a send earlier, a receive later: the message stays causal); None
    /// where the samples do not place it for certain.
    fn time(&mut self, t: i64, epoch: i64, send: bool) -> Option<i64> {
        match &mut self.convert {
            Convert::Epoch => Some(t - epoch),
            Convert::Samples(clock, cursor) => {
                let (lo, hi) = clock.monotonic_bounds(t, cursor)?;
                Some(if send { lo } else { hi })
            }
            Convert::Unusable => None,
        }
    }
}

/// The targets of a file read alone (`info`, the order check): every node its own trace.
fn own_targets(file: &SpanFile) -> Vec<Target> {
    (0..file.nodes.len() as u32)
        .map(|trace| Target {
            trace,
            convert: Convert::Epoch,
        })
        .collect()
}

/// The targets of a span file among `inputs`: for each node joined to an agent trace, that
/// trace's clock samples (read here), and what the statistics say of it.
fn targets_in(
    inputs: &InputSet,
    file: &SpanFile,
) -> Result<(Vec<Target>, Vec<JoinedNode>), InputError> {
    let mut targets = Vec::new();
    let mut joined = Vec::new();
    for (i, node) in file.nodes.iter().enumerate() {
        let target = file
            .traces
            .get(i)
            .copied()
            .unwrap_or(SpanTrace::Own(i as u32));
        let convert = match target {
            SpanTrace::Own(_) => Convert::Epoch,
            SpanTrace::Agent(k) => {
                let trace = &inputs.traces[k as usize];
                let path = &inputs.sources[trace.source].path;
                let record = read_clock_record(path)?;
                let (convert, unusable) = match RealtimeClock::from_samples(&record.samples) {
                    Some(c) => (
                        Convert::Samples(Box::new(c), RealtimeCursor::default()),
                        None,
                    ),
                    None => (
                        Convert::Unusable,
                        Some(format!(
                            "the trace file {} holds no clock sample",
                            path.display()
                        )),
                    ),
                };
                joined.push(JoinedNode {
                    node: node.name.clone(),
                    trace: trace.name.clone(),
                    unusable,
                });
                convert
            }
        };
        targets.push(Target {
            trace: target.index(),
            convert,
        });
    }
    Ok((targets, joined))
}

/// Reads a span file's messages into `emit` (each node's to its target's trace, times on its
/// target's clock: counted from `file.epoch_ns`, or converted through an agent trace's
/// samples); `exchange` gets each request with its response.
#[allow(
    clippy::too_many_arguments,
    reason = "the pass's callbacks and its targets"
)]
fn read_messages(
    path: &Path,
    targets: Vec<Target>,
    joined: Vec<JoinedNode>,
    file: &SpanFile,
    options: &SpanOptions,
    message: &mut dyn FnMut(Message, u64),
    exchange: &mut dyn FnMut(Exchange),
    progress: &mut dyn FnMut(u64),
) -> Result<SpanStats, InputError> {
    /// The node handles of the file's resources, and the join.
    struct Pass<'a> {
        index: rustc_hash::FxHashMap<&'a str, u32>,
        joiner: window::Joiner,
        out: Out<'a>,
    }
    /// Where judged pairs go: messages and exchanges, counted.
    struct Out<'a> {
        stats: SpanStats,
        message: &'a mut dyn FnMut(Message, u64),
        exchange: &'a mut dyn FnMut(Exchange),
        targets: Vec<Target>,
        epoch: i64,
    }
    impl Out<'_> {
        fn emit(&mut self, p: &window::PairOut) {
            let mut request = None;
            let mut response = None;
            for m in p.messages {
                let (sender, receiver) = if m.parent_sends {
                    (p.parent_node, p.child_node)
                } else {
                    (p.child_node, p.parent_node)
                };
                let (send_trace, recv_trace) = (
                    self.targets[sender as usize].trace,
                    self.targets[receiver as usize].trace,
                );
                if send_trace == recv_trace {
                    self.stats.joined_same_trace += 1;
                    continue;
                }
                let send = self.targets[sender as usize].time(m.send_ns, self.epoch, true);
                let recv = self.targets[receiver as usize].time(m.recv_ns, self.epoch, false);
                let (Some(send_ns), Some(recv_ns)) = (send, recv) else {
                    self.stats.off_samples += 1;
                    continue;
                };
                let msg = Message {
                    send_trace,
                    recv_trace,
                    send_ns,
                    recv_ns,
                };
                match m.rule {
                    Rule::Request => {
                        self.stats.requests += 1;
                        request = Some(msg);
                    }
                    Rule::Response => {
                        self.stats.responses += 1;
                        response = Some(msg);
                    }
                    Rule::Queue => self.stats.queued += 1,
                    Rule::MessageEvent => self.stats.message_events += 1,
                }
                (self.message)(msg, p.line);
            }
            if let (Some(request), Some(reply)) = (request, response) {
                self.stats.exchanges += 1;
                (self.exchange)(Exchange { request, reply });
            }
        }
    }
    impl SpanVisitor for Pass<'_> {
        fn resource(&mut self, node: Option<(String, &str)>, spans: u64) -> Option<u32> {
            let handle = node.and_then(|(name, _)| self.index.get(name.as_str()).copied());
            if handle.is_none() {
                self.out.stats.without_node += spans;
            }
            handle
        }
        fn span(&mut self, node: u32, span: SpanData, line: u64) {
            let out = &mut self.out;
            self.joiner.push(node, span, line, &mut |p| out.emit(p));
        }
        fn without_id(&mut self) {
            self.out.stats.without_id += 1;
        }
        fn ahead(&mut self, spans: &[Option<SpanData>]) {
            self.joiner.ahead(spans);
        }
    }
    let mut pass = Pass {
        index: file
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i as u32))
            .collect(),
        joiner: window::Joiner::new(options.window),
        out: Out {
            stats: SpanStats {
                file: path.display().to_string(),
                attribution: options.attribution.describe(),
                window: options.window,
                epoch_ns: file.epoch_ns,
                nodes: file.nodes.clone(),
                joined,
                ..SpanStats::default()
            },
            message,
            exchange,
            targets,
            epoch: file.epoch_ns,
        },
    };
    let counts: ReadCounts = read::read_spans(path, &options.attribution, &mut pass, progress)?;
    let Pass {
        mut joiner,
        mut out,
        ..
    } = pass;
    joiner.finish(&mut |p| out.emit(p));
    out.stats.join = joiner.counts;
    out.stats.lines = counts.lines;
    out.stats.cut_short = counts.cut_short;
    Ok(out.stats)
}

/// What a span file holds, for `info`: its nodes and every count of the pairing.
pub fn inspect(path: &Path, options: &SpanOptions) -> Result<SpanStats, InputError> {
    let file = scan(path, options)?;
    read_messages(
        path,
        own_targets(&file),
        Vec::new(),
        &file,
        options,
        &mut |_, _| {},
        &mut |_| {},
        &mut |_| {},
    )
}

/// The order a corrected span file keeps (what `apply --format otlp` wrote, every time on its
/// reference's clock): of its cross-node messages, how many, and how many still run backwards
/// (a child starting before its parent, a client ending before its server started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inversions {
    /// Messages the file's span pairs give.
    pub messages: u64,
    /// Of those, received before they were sent.
    pub inverted: u64,
}

/// Reads a corrected span file as `sync` would read spans, and counts its messages that run
/// backwards: after a correction whose maps lie inside every pair's corridor there are none.
pub fn inversions(path: &Path, options: &SpanOptions) -> Result<Inversions, InputError> {
    let file = scan(path, options)?;
    let mut found = Inversions::default();
    read_messages(
        path,
        own_targets(&file),
        Vec::new(),
        &file,
        options,
        &mut |m, _| {
            found.messages += 1;
            found.inverted += u64::from(m.recv_ns < m.send_ns);
        },
        &mut |_| {},
        &mut |_| {},
    )?;
    Ok(found)
}

/// Streams the messages of the span file `source` (one of `inputs`; what [`scan`] found in it:
/// `file`) to `sink`, as the matching stage does for every input; each message's origin is the
/// line of its child span, its times ns since `file.epoch_ns` (a node of its own) or on its
/// agent trace's recorded clock (a joined node). The statistics count, per pair of traces, the
/// messages that came from spans.
pub fn for_each_message_in<S: MessageSink + ?Sized>(
    inputs: &InputSet,
    source: &Source,
    file: &SpanFile,
    exchanges: bool,
    sink: &mut S,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    let (targets, joined) = targets_in(inputs, file)?;
    let sink = std::cell::RefCell::new(sink);
    let mut from_spans = std::collections::BTreeMap::new();
    let stats = read_messages(
        &source.path,
        targets,
        joined,
        file,
        &inputs.spans,
        &mut |message, line| {
            let (a, b) = (message.send_trace, message.recv_trace);
            let counts: &mut [u64; 2] = from_spans.entry((a.min(b), a.max(b))).or_default();
            counts[usize::from(a > b)] += 1;
            sink.borrow_mut().message(&MatchedMessage {
                message,
                origin: Origin::TextLine(line),
                send_event: None,
                recv_event: None,
            })
        },
        &mut |x| {
            if exchanges {
                sink.borrow_mut().exchange(&x);
            }
        },
        progress,
    )?;
    Ok(MatchStats {
        events: stats.join.spans,
        matched: stats.messages(),
        same_trace: stats.join.same_node_pairs + stats.joined_same_trace,
        exchanges: if exchanges { stats.exchanges } else { 0 },
        warnings: stats.warnings(),
        from_spans,
        ..MatchStats::default()
    })
}
