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
//! The file is read twice, like a text message file: once when the inputs are opened, for its
//! nodes (the traces), then for its messages (`read.rs` line by line, `window.rs`: the join of
//! parents and children within a window of spans). Bad spans are counted and warned about
//! (`problems.rs`), never paired.

pub(crate) mod json;
pub mod node;
mod problems;
mod read;
mod rules;
mod window;

use std::path::Path;

use crate::input::Source;
use crate::input::error::InputError;
use crate::matching::MatchStats;
use crate::model::{Exchange, MatchedMessage, Message, MessageSink, Origin};

pub use node::{DEFAULT_NODE_ATTRIBUTES, NodeAttribution, SpanNode};
pub use window::JoinCounts;

use read::{ReadCounts, SpanData, SpanVisitor};
use rules::Rule;

/// How many spans the join keeps by default: parents and children farther apart in the file
/// are counted, not joined. About 1 KB each with the join's tables (measured: `sync` of a
/// million spans peaks at 109 MB with a window of 100,000, 827 MB with one of 1,000,000).
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

/// True if `prefix` (a file's first bytes) is OTLP/JSON traces: a JSON object whose start
/// names `resourceSpans` (the Collector's file exporter writes it first).
pub fn looks_like_spans(prefix: &[u8]) -> bool {
    let text = String::from_utf8_lossy(prefix);
    let text = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
    text.starts_with('{') && text.contains("\"resourceSpans\"")
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
    /// The realtime (ns) the file's times are counted from: its earliest span start (or end),
    /// down to a whole second. The maps work in f64, whose step at today's realtime (1.7·10¹⁸
    /// ns) is 256 ns; counted from the epoch, times keep every nanosecond.
    pub epoch_ns: i64,
}

/// Reads a span file once for its nodes and epoch. An error when no resource names a node.
pub fn scan(path: &Path, options: &SpanOptions) -> Result<SpanFile, InputError> {
    struct Scan(Vec<SpanNode>, Option<i64>);
    impl SpanVisitor for Scan {
        fn resource(&mut self, node: Option<(String, &str)>, _spans: u64) -> Option<u32> {
            let (name, attribute) = node?;
            if !self.0.iter().any(|n| n.name == name) {
                self.0.push(SpanNode {
                    name,
                    attribute: attribute.to_string(),
                });
            }
            Some(0)
        }
        fn span(&mut self, _node: u32, span: SpanData, _line: u64) {
            for t in [span.start, span.end].into_iter().flatten() {
                self.1 = Some(self.1.map_or(t, |e: i64| e.min(t)));
            }
        }
        fn without_id(&mut self) {}
    }
    let mut found = Scan(Vec::new(), None);
    read::read_spans(path, &options.attribution, &mut found, &mut |_| {})?;
    if found.0.is_empty() {
        return Err(InputError::Invalid(format!(
            "{}: no resource of the span file has {}, so no span has a node; \
             --node-attribute KEY names the resource attribute that does",
            path.display(),
            options.attribution.describe()
        )));
    }
    Ok(SpanFile {
        nodes: found.0,
        epoch_ns: found.1.map_or(0, |t| t - t.rem_euclid(1_000_000_000)),
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

/// Reads a span file's messages into `emit` (trace indices from `first_trace`, in the order of
/// `file.nodes`, times counted from `file.epoch_ns`); `exchange` gets each request with its
/// response.
fn read_messages(
    path: &Path,
    first_trace: u32,
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
        first_trace: u32,
        epoch: i64,
    }
    impl Out<'_> {
        fn emit(&mut self, p: &window::PairOut) {
            let (parent, child) = (
                self.first_trace + p.parent_node,
                self.first_trace + p.child_node,
            );
            let mut request = None;
            let mut response = None;
            for m in p.messages {
                let (send_trace, recv_trace) = if m.parent_sends {
                    (parent, child)
                } else {
                    (child, parent)
                };
                let msg = Message {
                    send_trace,
                    recv_trace,
                    send_ns: m.send_ns - self.epoch,
                    recv_ns: m.recv_ns - self.epoch,
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
                ..SpanStats::default()
            },
            message,
            exchange,
            first_trace,
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
        0,
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
        0,
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

/// Streams the messages of the span file `source` (what [`scan`] found in it: `file`) to
/// `sink`, as the matching stage does for every input; each message's origin is the line of
/// its child span, its times ns since `file.epoch_ns`.
pub fn for_each_message_in<S: MessageSink + ?Sized>(
    source: &Source,
    file: &SpanFile,
    options: &SpanOptions,
    exchanges: bool,
    sink: &mut S,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    let sink = std::cell::RefCell::new(sink);
    let stats = read_messages(
        &source.path,
        source.first_trace,
        file,
        options,
        &mut |message, line| {
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
        same_trace: stats.join.same_node_pairs,
        exchanges: if exchanges { stats.exchanges } else { 0 },
        warnings: stats.warnings(),
        ..MatchStats::default()
    })
}
