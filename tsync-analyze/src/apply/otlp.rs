//! OpenTelemetry traces in OTLP/JSON, as the Collector's file exporter writes them: one
//! `TracesData` object per line (`resourceSpans` → `scopeSpans` → `spans`), spans of many nodes
//! in one file. Each resource's node comes from one of its attributes (`host.name`, else
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
//! files with (`crate::spans::json`): both accept the same files.
//!
//! **Unknown nodes.** A resource whose node attribute names no trace of the inputs, or has no such
//! attribute, is copied unchanged and its spans counted, so the summary can name it.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde_json::value::RawValue;

use super::{ApplyError, CommonTimebase, Mapped, NodeClock, NodeMapper};
use crate::spans::NodeAttribution;
use crate::spans::json::{KeyValue, Members, Spelling, array, attributes, parse_time};

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
    /// `TracesData` lines read (blank lines not counted).
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

fn write_time(out: &mut Vec<u8>, t: i64, spelling: Spelling) -> Result<(), String> {
    if t < 0 {
        return Err(format!(
            "maps to {t} ns, before 1970, which OTLP's unsigned times cannot hold"
        ));
    }
    let mut n = itoa::Buffer::new();
    match spelling {
        Spelling::String => {
            out.push(b'"');
            out.extend_from_slice(n.format(t).as_bytes());
            out.push(b'"');
        }
        Spelling::Number => out.extend_from_slice(n.format(t).as_bytes()),
    }
    Ok(())
}

fn write_key(out: &mut Vec<u8>, key: &str) {
    serde_json::to_writer(&mut *out, key).expect("writing to a Vec");
    out.push(b':');
}

/// Attributes to append, as OTLP/JSON `KeyValue` objects.
#[derive(Default)]
struct NewAttributes(Vec<u8>);

impl NewAttributes {
    fn open(&mut self, key: &str) {
        if !self.0.is_empty() {
            self.0.push(b',');
        }
        self.0.extend_from_slice(b"{\"key\":");
        serde_json::to_writer(&mut self.0, key).expect("writing to a Vec");
        self.0.extend_from_slice(b",\"value\":{");
    }

    fn string(&mut self, key: &str, v: &str) {
        self.open(key);
        self.0.extend_from_slice(b"\"stringValue\":");
        serde_json::to_writer(&mut self.0, v).expect("writing to a Vec");
        self.0.extend_from_slice(b"}}");
    }

    /// An int64 attribute: a decimal string, as OTLP/JSON writes 64-bit integers.
    fn int(&mut self, key: &str, v: i64) {
        self.open(key);
        self.0.extend_from_slice(b"\"intValue\":\"");
        self.0
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
        self.0.extend_from_slice(b"\"}}");
    }

    fn bool(&mut self, key: &str, v: bool) {
        self.open(key);
        self.0.extend_from_slice(if v {
            b"\"boolValue\":true}}"
        } else {
            b"\"boolValue\":false}}"
        });
    }

    /// One mapped time: its original under `local`, its bounds under `<which>.lo_unix_nano` and
    /// `<which>.hi_unix_nano`.
    fn time(&mut self, local: &str, which: &str, original: i64, m: &Mapped) {
        self.int(local, original);
        if let Some((lo, hi)) = m.interval {
            self.int(&format!("tsync.{which}.lo_unix_nano"), lo);
            self.int(&format!("tsync.{which}.hi_unix_nano"), hi);
        }
    }

    /// `attributes` with these appended (the raw array's text kept as it was).
    fn append_to(&self, out: &mut Vec<u8>, raw: Option<&RawValue>) -> Result<(), String> {
        let Some(raw) = raw else {
            out.push(b'[');
            out.extend_from_slice(&self.0);
            out.push(b']');
            return Ok(());
        };
        let text = raw.get().trim_end();
        let inner = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .ok_or("`attributes` is not an array")?;
        out.push(b'[');
        out.extend_from_slice(inner.as_bytes());
        if !inner.trim().is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(&self.0);
        out.push(b']');
        Ok(())
    }
}

/// Refuses attributes that already hold `tsync.*` keys: the file was applied already.
fn check_not_applied(attributes: Option<&RawValue>) -> Result<(), String> {
    let Some(raw) = attributes else {
        return Ok(());
    };
    let kvs: Vec<KeyValue> = serde_json::from_str(raw.get())
        .map_err(|e| format!("`attributes` is not an array of key/value objects ({e})"))?;
    match kvs.iter().find(|kv| ATTRIBUTES.contains(&kv.key.as_str())) {
        Some(kv) => Err(format!(
            "already has the attribute `{}`: was the file applied already?",
            kv.key
        )),
        None => Ok(()),
    }
}

/// The rewriting of one file: the maps, one mapper per node met, and the counts.
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
    fn node_of(&self, resource: Option<&RawValue>) -> Result<NodeOf, String> {
        if let Some(k) = self.options.node {
            return Ok(NodeOf::Known(k));
        }
        let Some(resource) = resource else {
            return Ok(NodeOf::Missing);
        };
        let members = Members::parse(resource.get(), "`resource`")?;
        let Some(raw) = members.get("attributes") else {
            return Ok(NodeOf::Missing);
        };
        let kvs: Vec<KeyValue> = attributes(raw, "the resource's")?;
        let name = self.options.attribution.node_of(&kvs).map(|(name, _)| name);
        Ok(match name {
            None => NodeOf::Missing,
            Some(name) => match self.timebase.trace_of_span_node(&name) {
                Some(k) => NodeOf::Known(k),
                None => NodeOf::Unknown(name),
            },
        })
    }

    fn mapper(&mut self, node: u32) -> Result<&mut NodeMapper<'tb>, ApplyError> {
        let slot = &mut self.mappers[node as usize];
        if slot.is_none() {
            *slot = Some(self.timebase.mapper(node, self.options.clock)?);
        }
        Ok(slot.as_mut().expect("set above"))
    }

    /// One `TracesData` line into `out`.
    fn line(&mut self, line: &str, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let top = Members::parse(line, "the line")?;
        for other in ["resourceLogs", "resourceMetrics", "resourceProfiles"] {
            if top.get(other).is_some() {
                return Err(LineFailure::Text(format!(
                    "`{other}`: this is not OTLP traces (--format otlp reads `TracesData`, \
                     one object with `resourceSpans` per line)"
                )));
            }
        }
        write_object(out, &top, |key, value, out| {
            if key != "resourceSpans" {
                return Ok(false);
            }
            write_array(out, array(value, "`resourceSpans`")?, |rs, out| {
                self.resource_spans(rs, out)
            })?;
            Ok(true)
        })
    }

    fn resource_spans(&mut self, raw: &RawValue, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let members = Members::parse(raw.get(), "a `resourceSpans` element")?;
        let node = self.node_of(members.get("resource"))?;
        write_object(out, &members, |key, value, out| {
            if key != "scopeSpans" {
                return Ok(false);
            }
            write_array(out, array(value, "`scopeSpans`")?, |ss, out| {
                self.scope_spans(ss, &node, out)
            })?;
            Ok(true)
        })
    }

    fn scope_spans(
        &mut self,
        raw: &RawValue,
        node: &NodeOf,
        out: &mut Vec<u8>,
    ) -> Result<(), LineFailure> {
        let members = Members::parse(raw.get(), "a `scopeSpans` element")?;
        write_object(out, &members, |key, value, out| {
            if key != "spans" {
                return Ok(false);
            }
            let spans = array(value, "`spans`")?;
            // Spans of a node the traces do not know are counted and copied as they are.
            match node {
                NodeOf::Known(k) => write_array(out, spans, |span, out| self.span(span, *k, out))?,
                NodeOf::Unknown(name) => {
                    *self.summary.unknown_nodes.entry(name.clone()).or_default() +=
                        spans.len() as u64;
                    return Ok(false);
                }
                NodeOf::Missing => {
                    self.summary.without_node += spans.len() as u64;
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// Maps one time if it is set; counts it.
    fn map_time(
        &mut self,
        node: u32,
        raw: Option<&RawValue>,
    ) -> Result<Option<(i64, Spelling, Mapped)>, LineFailure> {
        let Some(t) = raw.map(parse_time).transpose()?.flatten() else {
            self.summary.unset += 1;
            return Ok(None);
        };
        let m = self.mapper(node)?.map_with_interval(t.0);
        self.summary.times += 1;
        self.summary.without_interval += u64::from(m.interval.is_none());
        Ok(Some((t.0, t.1, m)))
    }

    fn span(&mut self, raw: &RawValue, node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let members = Members::parse(raw.get(), "a span")?;
        check_not_applied(members.get("attributes"))?;
        let start = self.map_time(node, members.get("startTimeUnixNano"))?;
        let end = self.map_time(node, members.get("endTimeUnixNano"))?;
        let tb = self.timebase;
        let mut attrs = NewAttributes::default();
        attrs.string("tsync.node", &tb.names()[node as usize]);
        attrs.string("tsync.reference", &tb.names()[tb.reference(node) as usize]);
        attrs.string("tsync.clock", self.options.clock.as_str());
        let mut outside = false;
        for (t, local, which) in [
            (&start, "tsync.local.start_time_unix_nano", "start"),
            (&end, "tsync.local.end_time_unix_nano", "end"),
        ] {
            if let Some((original, _, m)) = t {
                attrs.time(local, which, *original, m);
                outside |= m.outside_span;
            }
        }
        if let Some(u) = uncertainty([&start, &end].into_iter().flatten().map(|t| &t.2)) {
            attrs.int("tsync.uncertainty_ns", u);
        }
        if outside {
            attrs.bool("tsync.outside_span", true);
        }
        let mut body = Vec::new();
        write_members(&mut body, &members, |key, value, out| {
            match key {
                "startTimeUnixNano" | "endTimeUnixNano" => {
                    let t = if key == "startTimeUnixNano" {
                        &start
                    } else {
                        &end
                    };
                    let Some((_, spelling, m)) = t else {
                        return Ok(false);
                    };
                    write_time(out, m.t_ns, *spelling)?;
                }
                "attributes" => attrs.append_to(out, Some(value))?,
                "events" => write_array(out, array(value, "`events`")?, |e, out| {
                    self.event(e, node, out)
                })?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        close_with_attributes(out, &body, &members, &attrs)?;
        *self
            .summary
            .spans
            .entry(tb.names()[node as usize].clone())
            .or_default() += 1;
        Ok(())
    }

    fn event(&mut self, raw: &RawValue, node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let members = Members::parse(raw.get(), "a span event")?;
        check_not_applied(members.get("attributes"))?;
        let time = self.map_time(node, members.get("timeUnixNano"))?;
        let mut attrs = NewAttributes::default();
        if let Some((original, _, m)) = &time {
            attrs.time("tsync.local.time_unix_nano", "time", *original, m);
            if let Some(u) = uncertainty(std::iter::once(m)) {
                attrs.int("tsync.uncertainty_ns", u);
            }
            if m.outside_span {
                attrs.bool("tsync.outside_span", true);
            }
        }
        let mut body = Vec::new();
        write_members(&mut body, &members, |key, value, out| {
            match (key, &time) {
                ("timeUnixNano", Some((_, spelling, m))) => write_time(out, m.t_ns, *spelling)?,
                ("attributes", _) if !attrs.0.is_empty() => attrs.append_to(out, Some(value))?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        close_with_attributes(out, &body, &members, &attrs)?;
        self.summary.span_events += 1;
        Ok(())
    }
}

/// Writes `members` as an object's body, `"key":value` with commas; `f` writes a value itself
/// (true) or leaves it to be copied as the text it was (false).
fn write_members<'a>(
    out: &mut Vec<u8>,
    members: &Members<'a>,
    mut f: impl FnMut(&str, &'a RawValue, &mut Vec<u8>) -> Result<bool, LineFailure>,
) -> Result<(), LineFailure> {
    for (i, (key, value)) in members.0.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_key(out, key);
        if !f(key, value, out)? {
            out.extend_from_slice(value.get().as_bytes());
        }
    }
    Ok(())
}

/// [`write_members`] in braces.
fn write_object<'a>(
    out: &mut Vec<u8>,
    members: &Members<'a>,
    f: impl FnMut(&str, &'a RawValue, &mut Vec<u8>) -> Result<bool, LineFailure>,
) -> Result<(), LineFailure> {
    out.push(b'{');
    write_members(out, members, f)?;
    out.push(b'}');
    Ok(())
}

/// Writes an array, each element through `f`.
fn write_array<'a>(
    out: &mut Vec<u8>,
    elements: Vec<&'a RawValue>,
    mut f: impl FnMut(&'a RawValue, &mut Vec<u8>) -> Result<(), LineFailure>,
) -> Result<(), LineFailure> {
    out.push(b'[');
    for (j, e) in elements.into_iter().enumerate() {
        if j > 0 {
            out.push(b',');
        }
        f(e, out)?;
    }
    out.push(b']');
    Ok(())
}

/// A span's or event's rewritten `body` in braces, with an `attributes` member of the new
/// attributes where the object had none.
fn close_with_attributes(
    out: &mut Vec<u8>,
    body: &[u8],
    members: &Members<'_>,
    attrs: &NewAttributes,
) -> Result<(), LineFailure> {
    out.push(b'{');
    out.extend_from_slice(body);
    if members.get("attributes").is_none() && !attrs.0.is_empty() {
        if !members.0.is_empty() {
            out.push(b',');
        }
        write_key(out, "attributes");
        attrs.append_to(out, None)?;
    }
    out.push(b'}');
    Ok(())
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

/// Why a line failed: the line's own fault (text), or the maps'.
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

/// Rewrites an OTLP/JSON traces stream (one `TracesData` per line; blank lines passed through).
/// `name` names the input in errors (`name:line: …`).
pub fn apply_otlp<R: BufRead, W: Write>(
    mut input: R,
    name: &str,
    mut out: W,
    timebase: &CommonTimebase,
    options: &OtlpOptions,
) -> Result<OtlpSummary, ApplyError> {
    let mut rw = Rewriter {
        timebase,
        options,
        mappers: (0..timebase.names().len()).map(|_| None).collect(),
        summary: OtlpSummary::default(),
    };
    let write_err = |e| ApplyError::io("cannot write the output", e);
    let head = input
        .fill_buf()
        .map_err(|e| ApplyError::io(format!("cannot read {name}"), e))?;
    if crate::spans::is_proto(head) {
        return Err(ApplyError::Events(format!(
            "{name}: OTLP protobuf spans; `apply --format otlp` rewrites OTLP/JSON only (the \
             Collector's file exporter writes it with `format: json`); `sync` reads both"
        )));
    }
    let mut line = Vec::new();
    let mut rewritten = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| ApplyError::io(format!("cannot read {name}"), e))?;
        if n == 0 {
            break;
        }
        number += 1;
        let fail = |what: String| ApplyError::Events(format!("{name}:{number}: {what}"));
        let text = std::str::from_utf8(&line)
            .map_err(|e| fail(format!("not UTF-8 text ({e}); is it OTLP/JSON?")))?;
        if text.trim().is_empty() {
            out.write_all(&line).map_err(write_err)?;
            rw.summary.blank += 1;
            continue;
        }
        rewritten.clear();
        match rw.line(text.trim_end_matches(['\n', '\r']), &mut rewritten) {
            Ok(()) => {}
            Err(LineFailure::Text(what)) => return Err(fail(what)),
            Err(LineFailure::Apply(e)) => return Err(e),
        }
        rewritten.push(b'\n');
        out.write_all(&rewritten).map_err(write_err)?;
        rw.summary.batches += 1;
    }
    out.flush().map_err(write_err)?;
    for m in rw.mappers.iter().flatten() {
        rw.summary.outside_span += m.outside;
        rw.summary.ambiguous += m.ambiguous;
    }
    Ok(rw.summary)
}

#[cfg(test)]
mod tests;
