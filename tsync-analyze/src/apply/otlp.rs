//! OpenTelemetry traces as the Collector's file exporter writes them: OTLP/JSON, one
//! `TracesData` object per line (`resourceSpans` → `scopeSpans` → `spans`), or OTLP protobuf,
//! length-prefixed `TracesData` messages (`otlp/proto.rs`), spans of many nodes in one file; the
//! output is in the encoding of the input. Each resource's node comes from one of its attributes (`host.name`, else
//! `k8s.node.name`, else `service.instance.id` by default: `crate::spans::node`);
//! each span's `startTimeUnixNano` and `endTimeUnixNano` and each span event's `timeUnixNano` are
//! mapped through that node's map (the only timestamps a trace has: links, status, resource and
//! scope carry none), and the span and its events gain `tsync.*` attributes with the original
//! times and the guaranteed interval ([`ATTRIBUTES`], documented in docs/json.md).
//!
//! **Nothing else changes.** A line is parsed with serde_json into borrowed raw values, and only
//! the path down to the times is taken apart: every other member is copied as the text it was
//! (unknown fields, attribute order, ids, number spellings), and a mapped time keeps the form it
//! had (the canonical decimal string of OTLP/JSON, or a number). Memory is that of one line.
//! The OTLP/JSON pieces (members as raw text, attributes, times) are those `sync` reads span
//! files with (`crate::spans::json`): both accept the same files. Protobuf is walked on the wire
//! the same way (`otlp/proto.rs`: every field but the times copied as its bytes). What a span
//! and an event become, their mapped times and their attributes, is computed once for both
//! encodings ([`Rewriter::span_rewrite`]).
//!
//! **Unknown nodes.** A resource whose node attribute names no trace of the inputs, or has no such
//! attribute, is copied unchanged and its spans counted, so the summary can name it.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use super::{ApplyError, CommonTimebase, Mapped, NodeClock, NodeMapper};
use crate::spans::NodeAttribution;

mod json;
mod proto;

/// Every attribute `apply --format otlp` adds (span attributes, then span-event attributes).
pub const ATTRIBUTES: [&str; 14] = [
    "tsync.node",
    "tsync.reference",
    "tsync.clock",
    "tsync.local.start_time_unix_nano",
    "tsync.local.end_time_unix_nano",
    "tsync.start.lo_unix_nano",
    "tsync.start.hi_unix_nano",
    "tsync.end.lo_unix_nano",
    "tsync.end.hi_unix_nano",
    "tsync.uncertainty_ns",
    "tsync.outside_span",
    "tsync.local.time_unix_nano",
    "tsync.time.lo_unix_nano",
    "tsync.time.hi_unix_nano",
];

/// How the spans' nodes are found and which clock stamped them.
pub struct OtlpOptions {
    /// The resource attributes naming the node (a trace name of the inputs).
    pub attribution: NodeAttribution,
    /// Every resource is this node, whatever its attributes say.
    pub node: Option<u32>,
    /// The clock the times were taken with (OTLP's are Unix epoch times: realtime).
    pub clock: NodeClock,
}

/// What applying the maps to an OTLP file did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtlpSummary {
    /// `TracesData` lines (protobuf: frames) read (blank lines not counted).
    pub batches: u64,
    /// Spans mapped, per node name.
    pub spans: BTreeMap<String, u64>,
    /// Span events mapped.
    pub span_events: u64,
    /// Times mapped (starts, ends, event times).
    pub times: u64,
    /// Of those, times without a guaranteed interval (outside the node's recorded span, or no
    /// accurate pair on its path): no bounds attributes.
    pub without_interval: u64,
    /// Of those, times outside the node's recorded span (mapped with the nearest segment).
    pub outside_span: u64,
    /// Realtime values that occurred twice on their node (a step back).
    pub ambiguous: u64,
    /// Times that are unset (0 or absent): kept as they were.
    pub unset: u64,
    /// Spans left unchanged because their resource's node attribute names no trace, per name.
    pub unknown_nodes: BTreeMap<String, u64>,
    /// Spans left unchanged because their resource has no node attribute.
    pub without_node: u64,
    /// Blank lines passed through.
    pub blank: u64,
}

/// A mapped time as OTLP's unsigned `fixed64` holds it: an error for one before 1970.
fn unsigned(t: i64) -> Result<u64, String> {
    u64::try_from(t).map_err(|_| {
        format!("maps to {t} ns, before 1970, which OTLP's unsigned times cannot hold")
    })
}

/// The value of an attribute `apply` adds: a string, an int64 or a bool (an OTLP `AnyValue`'s
/// `stringValue`, `intValue`, `boolValue`; protobuf's fields 1, 3 and 2 of `AnyValue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AttrValue<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

/// The `tsync.*` attributes a span or span event gains, in the order they are appended: what
/// both encodings write, computed once ([`Rewriter::span_rewrite`], [`Rewriter::event_rewrite`]).
type NewAttributes<'a> = Vec<(&'static str, AttrValue<'a>)>;

/// The keys of a time's interval bounds: `tsync.<which>.lo_unix_nano` and `…hi_unix_nano`.
fn bound_keys(which: Which) -> (&'static str, &'static str) {
    match which {
        Which::Start => ("tsync.start.lo_unix_nano", "tsync.start.hi_unix_nano"),
        Which::End => ("tsync.end.lo_unix_nano", "tsync.end.hi_unix_nano"),
        Which::Event => ("tsync.time.lo_unix_nano", "tsync.time.hi_unix_nano"),
    }
}

/// Which time a `tsync.*` attribute speaks of.
#[derive(Clone, Copy)]
enum Which {
    Start,
    End,
    Event,
}

/// Appends one mapped time's attributes: its original under `local`, its bounds (where it has
/// an interval).
fn push_time(attrs: &mut NewAttributes<'_>, local: &'static str, which: Which, t: &MappedTime) {
    attrs.push((local, AttrValue::Int(t.original)));
    if let Some((lo, hi)) = t.mapped.interval {
        let (lo_key, hi_key) = bound_keys(which);
        attrs.push((lo_key, AttrValue::Int(lo)));
        attrs.push((hi_key, AttrValue::Int(hi)));
    }
}

/// A time as the file had it, and mapped.
#[derive(Clone, Copy, Debug)]
struct MappedTime {
    original: i64,
    mapped: Mapped,
}

/// What a span becomes: its start and end mapped (None where unset: kept as they were), and
/// the attributes it gains.
struct SpanRewrite<'a> {
    start: Option<MappedTime>,
    end: Option<MappedTime>,
    attributes: NewAttributes<'a>,
}

/// What a span event becomes: its time mapped (None where unset: then it gains no attribute).
struct EventRewrite {
    time: Option<MappedTime>,
    attributes: NewAttributes<'static>,
}

/// Refuses an attribute key of `apply`'s own: the file was applied already.
fn check_key(key: &str) -> Result<(), String> {
    if ATTRIBUTES.contains(&key) {
        return Err(format!(
            "already has the attribute `{key}`: was the file applied already?"
        ));
    }
    Ok(())
}

/// The rewriting of one file: the maps, one mapper per node met, and the counts. What is the
/// same in both encodings is here (a resource's node, a span's and an event's mapped times and
/// attributes, the counts); the OTLP/JSON walk below and the protobuf one (`otlp/proto.rs`)
/// only find the times and write the results.
struct Rewriter<'tb> {
    timebase: &'tb CommonTimebase,
    options: &'tb OtlpOptions,
    mappers: Vec<Option<NodeMapper<'tb>>>,
    summary: OtlpSummary,
}

/// The node of a resource's spans.
enum NodeOf {
    Known(u32),
    Unknown(String),
    Missing,
}

impl<'tb> Rewriter<'tb> {
    fn new(timebase: &'tb CommonTimebase, options: &'tb OtlpOptions) -> Self {
        Rewriter {
            timebase,
            options,
            mappers: (0..timebase.names().len()).map(|_| None).collect(),
            summary: OtlpSummary::default(),
        }
    }

    /// The node of a resource: `--node`'s, else the trace `name` names (`name` is only asked
    /// for without `--node`: the node attribute the resource has, by the attribution rule).
    fn node_named<E>(&self, name: impl FnOnce() -> Result<Option<String>, E>) -> Result<NodeOf, E> {
        if let Some(k) = self.options.node {
            return Ok(NodeOf::Known(k));
        }
        Ok(match name()? {
            None => NodeOf::Missing,
            Some(name) => match self.timebase.trace_of_span_node(&name) {
                Some(k) => NodeOf::Known(k),
                None => NodeOf::Unknown(name),
            },
        })
    }

    /// Counts `spans` spans of a resource whose node is not known: they are copied unchanged.
    fn skip(&mut self, node: &NodeOf, spans: u64) {
        match node {
            NodeOf::Known(_) => {}
            NodeOf::Unknown(name) => {
                *self.summary.unknown_nodes.entry(name.clone()).or_default() += spans;
            }
            NodeOf::Missing => self.summary.without_node += spans,
        }
    }

    fn mapper(&mut self, node: u32) -> Result<&mut NodeMapper<'tb>, ApplyError> {
        let slot = &mut self.mappers[node as usize];
        if slot.is_none() {
            *slot = Some(self.timebase.mapper(node, self.options.clock)?);
        }
        Ok(slot.as_mut().expect("set above"))
    }

    /// Maps one time if it is set; counts it.
    fn map_time(&mut self, node: u32, t: Option<i64>) -> Result<Option<MappedTime>, ApplyError> {
        let Some(original) = t else {
            self.summary.unset += 1;
            return Ok(None);
        };
        let mapped = self.mapper(node)?.map_with_interval(original);
        self.summary.times += 1;
        self.summary.without_interval += u64::from(mapped.interval.is_none());
        Ok(Some(MappedTime { original, mapped }))
    }

    /// A span of `node` whose start and end are these (None: unset): the times mapped, in this
    /// order (a realtime map's stepped stretches are taken in file order), and the attributes
    /// it gains (docs/json.md). Both encodings' rewriters call it, and so write the same; a
    /// span's events are mapped after it, in their order ([`Rewriter::event_rewrite`]).
    fn span_rewrite(
        &mut self,
        node: u32,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<SpanRewrite<'tb>, ApplyError> {
        let start = self.map_time(node, start)?;
        let end = self.map_time(node, end)?;
        let tb = self.timebase;
        let mut attrs = vec![
            ("tsync.node", AttrValue::Str(&tb.names()[node as usize])),
            (
                "tsync.reference",
                AttrValue::Str(&tb.names()[tb.reference(node) as usize]),
            ),
            ("tsync.clock", AttrValue::Str(self.options.clock.as_str())),
        ];
        let times = [
            (&start, "tsync.local.start_time_unix_nano", Which::Start),
            (&end, "tsync.local.end_time_unix_nano", Which::End),
        ];
        for (t, local, which) in times {
            if let Some(t) = t {
                push_time(&mut attrs, local, which, t);
            }
        }
        let mapped = [&start, &end].into_iter().flatten().map(|t| &t.mapped);
        push_uncertainty(&mut attrs, mapped);
        *self
            .summary
            .spans
            .entry(tb.names()[node as usize].clone())
            .or_default() += 1;
        Ok(SpanRewrite {
            start,
            end,
            attributes: attrs,
        })
    }

    /// A span event of `node` whose time is this (None: unset): the time mapped, and the
    /// attributes it gains (none where the time is unset).
    fn event_rewrite(&mut self, node: u32, time: Option<i64>) -> Result<EventRewrite, ApplyError> {
        let time = self.map_time(node, time)?;
        let mut attrs = Vec::new();
        if let Some(t) = &time {
            push_time(&mut attrs, "tsync.local.time_unix_nano", Which::Event, t);
            push_uncertainty(&mut attrs, std::iter::once(&t.mapped));
        }
        self.summary.span_events += 1;
        Ok(EventRewrite {
            time,
            attributes: attrs,
        })
    }

    /// The summary, once every batch was written.
    fn finish(mut self) -> OtlpSummary {
        for m in self.mappers.iter().flatten() {
            self.summary.outside_span += m.outside;
            self.summary.ambiguous += m.ambiguous;
        }
        self.summary
    }
}

/// Appends `tsync.uncertainty_ns` where every time has an interval, and `tsync.outside_span`
/// where one lies outside its node's recorded span.
fn push_uncertainty<'m>(
    attrs: &mut NewAttributes<'_>,
    mapped: impl Iterator<Item = &'m Mapped> + Clone,
) {
    if let Some(u) = uncertainty(mapped.clone()) {
        attrs.push(("tsync.uncertainty_ns", AttrValue::Int(u)));
    }
    if mapped.into_iter().any(|m| m.outside_span) {
        attrs.push(("tsync.outside_span", AttrValue::Bool(true)));
    }
}

/// The largest distance from a mapped time to either end of its interval: the truth lies within
/// ± this of every time shown. None unless every time has an interval.
fn uncertainty<'m>(times: impl Iterator<Item = &'m Mapped>) -> Option<i64> {
    let mut worst = None;
    for m in times {
        let (lo, hi) = m.interval?;
        let u = (m.t_ns - lo).max(hi - m.t_ns).max(0);
        worst = Some(worst.map_or(u, |w: i64| w.max(u)));
    }
    worst
}

/// Why a line (protobuf: a frame) failed: its own fault (text), or the maps'.
#[derive(Debug)]
enum LineFailure {
    Text(String),
    Apply(ApplyError),
}

impl From<String> for LineFailure {
    fn from(s: String) -> Self {
        LineFailure::Text(s)
    }
}

impl From<&str> for LineFailure {
    fn from(s: &str) -> Self {
        LineFailure::Text(s.to_string())
    }
}

impl From<ApplyError> for LineFailure {
    fn from(e: ApplyError) -> Self {
        LineFailure::Apply(e)
    }
}

/// Rewrites an OTLP traces stream: OTLP/JSON (one `TracesData` per line; blank lines passed
/// through) or OTLP protobuf (length-prefixed `TracesData` frames: `otlp/proto.rs`), told apart
/// by its first bytes as `sync` tells them apart, and written in the encoding it came in;
/// zstd-compressed spans are refused. `name` names the input in errors (`name:line: …`,
/// `name: frame N at byte OFFSET: …`).
pub fn apply_otlp<R: BufRead, W: Write>(
    mut input: R,
    name: &str,
    mut out: W,
    timebase: &CommonTimebase,
    options: &OtlpOptions,
) -> Result<OtlpSummary, ApplyError> {
    let mut rw = Rewriter::new(timebase, options);
    let head = input
        .fill_buf()
        .map_err(|e| ApplyError::io(format!("cannot read {name}"), e))?;
    if let Some(why) = crate::spans::compressed_spans(head) {
        return Err(ApplyError::Events(format!("{name}: {why}")));
    }
    if crate::spans::is_proto(head) {
        rw.frames(input, name, &mut out)?;
    } else {
        rw.lines(input, name, &mut out)?;
    }
    out.flush()
        .map_err(|e| ApplyError::io("cannot write the output", e))?;
    Ok(rw.finish())
}

#[cfg(test)]
mod tests;
