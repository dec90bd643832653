//! Reading a span file: OTLP/JSON as the OpenTelemetry Collector's file exporter writes it, one
//! `TracesData` object per line (`resourceSpans` → `scopeSpans` → `spans`), line by line, so
//! that memory is one line's whatever the file's length; or OTLP protobuf, its `format: proto`
//! (`proto.rs`), frame by frame. Both end here in one form: a span's ids as integers (hex text
//! in JSON, bytes in protobuf, normalized once), its kind, times, status, message events and
//! links as [`SpanData`], handed to one [`SpanVisitor`] by the same rules ([`node_of`],
//! [`message_event`], [`SpanData::new`]).
//!
//! Only what pairing needs is taken from a span: its ids, parent, kind, times, status, the
//! `message` events of OpenTelemetry's RPC conventions, and its links; serde skips the rest
//! without building it. A line is parsed once, into pieces borrowed from it (no string is
//! copied unless it holds escapes), ids are decoded from hex straight into integers.
//!
//! A line that is not OTLP/JSON traces is an error naming `file:line`, except a last line
//! without its newline that does not parse: the file was cut short while it was written (a
//! Collector still running, a copy taken too early), which is counted and warned about, like a
//! trace file cut short.

use std::borrow::Cow;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::json::{AnyValue, KeyValue, Members, parse_time};
use super::node::NodeAttribution;
use crate::input::error::InputError;

/// OpenTelemetry's span kinds (`SpanKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Unspecified,
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl Kind {
    /// A kind as protobuf has it (`SpanKind`'s number).
    pub(crate) fn of_number(n: i64) -> Result<Kind, String> {
        Ok(match n {
            0 => Kind::Unspecified,
            1 => Kind::Internal,
            2 => Kind::Server,
            3 => Kind::Client,
            4 => Kind::Producer,
            5 => Kind::Consumer,
            _ => return Err(format!("`kind` {n} is not a span kind (0 to 5)")),
        })
    }

    /// A kind as OTLP/JSON writes it (an integer), or as some encoders do (the enum's name,
    /// with or without `SPAN_KIND_`).
    fn parse(raw: &RawValue) -> Result<Kind, String> {
        let text = raw.get();
        let name = text.trim_matches('"');
        let name = name.strip_prefix("SPAN_KIND_").unwrap_or(name);
        Ok(match name {
            "0" | "UNSPECIFIED" => Kind::Unspecified,
            "1" | "INTERNAL" => Kind::Internal,
            "2" | "SERVER" => Kind::Server,
            "3" | "CLIENT" => Kind::Client,
            "4" | "PRODUCER" => Kind::Producer,
            "5" | "CONSUMER" => Kind::Consumer,
            _ => {
                return Err(format!(
                    "`kind` {} is not a span kind (0 to 5)",
                    text.chars().take(40).collect::<String>()
                ));
            }
        })
    }
}

/// A `message` event of the RPC conventions: a message sent or received by the span, with its
/// id where the instrumentation numbered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MessageEvent {
    /// SENT (true) or RECEIVED (false).
    pub(crate) sent: bool,
    /// `message.id` (`rpc.message.id`), where set.
    pub(crate) id: Option<i64>,
    /// The event's time, ns on the node's CLOCK_REALTIME.
    pub(crate) time: i64,
}

/// A span's identity: its trace id and span id.
pub(crate) type SpanKey = (u128, u64);

/// What pairing takes from one span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpanData {
    pub(crate) key: SpanKey,
    /// The parent's span id (same trace), None for a root span.
    pub(crate) parent: Option<u64>,
    pub(crate) kind: Kind,
    /// Start and end, ns on the node's CLOCK_REALTIME; None when unset.
    pub(crate) start: Option<i64>,
    pub(crate) end: Option<i64>,
    /// The span's status is ERROR.
    pub(crate) error: bool,
    pub(crate) messages: Vec<MessageEvent>,
    /// The spans this one links to.
    pub(crate) links: Vec<SpanKey>,
}

/// One `TracesData` line, parsed in one pass into borrowed pieces: ids, names and attribute
/// keys point into the line (a `Cow` owns only a string with escapes), times and kinds stay raw
/// text until used, and serde skips every member not declared (span names and attributes,
/// scopes, flags) without building it.
#[derive(Deserialize)]
struct TracesData<'a> {
    #[serde(rename = "resourceSpans", default, borrow)]
    resource_spans: Option<Vec<ResourceSpans<'a>>>,
    #[serde(rename = "resourceLogs", default)]
    resource_logs: Option<IgnoredAny>,
    #[serde(rename = "resourceMetrics", default)]
    resource_metrics: Option<IgnoredAny>,
    #[serde(rename = "resourceProfiles", default)]
    resource_profiles: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ResourceSpans<'a> {
    #[serde(default, borrow)]
    resource: Option<Resource<'a>>,
    #[serde(rename = "scopeSpans", default, borrow)]
    scope_spans: Vec<ScopeSpans<'a>>,
}

#[derive(Deserialize)]
struct Resource<'a> {
    #[serde(default, borrow)]
    attributes: Vec<KeyValueRef<'a>>,
}

#[derive(Deserialize)]
struct ScopeSpans<'a> {
    #[serde(default, borrow)]
    spans: Vec<Span<'a>>,
}

#[derive(Deserialize)]
struct Span<'a> {
    #[serde(rename = "traceId", default, borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(rename = "spanId", default, borrow)]
    span_id: Option<Cow<'a, str>>,
    #[serde(rename = "parentSpanId", default, borrow)]
    parent_span_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    kind: Option<&'a RawValue>,
    #[serde(rename = "startTimeUnixNano", default, borrow)]
    start: Option<&'a RawValue>,
    #[serde(rename = "endTimeUnixNano", default, borrow)]
    end: Option<&'a RawValue>,
    #[serde(default, borrow)]
    events: Vec<Event<'a>>,
    #[serde(default, borrow)]
    links: Vec<Link<'a>>,
    #[serde(default, borrow)]
    status: Option<Status<'a>>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "timeUnixNano", default, borrow)]
    time: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    attributes: Vec<KeyValueRef<'a>>,
}

#[derive(Deserialize)]
struct Link<'a> {
    #[serde(rename = "traceId", default, borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(rename = "spanId", default, borrow)]
    span_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Status<'a> {
    #[serde(default, borrow)]
    code: Option<&'a RawValue>,
}

/// An attribute borrowed from the line: [`KeyValue`]'s reading without its allocations.
#[derive(Deserialize)]
struct KeyValueRef<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default, borrow)]
    value: Option<AnyValueRef<'a>>,
}

#[derive(Deserialize)]
struct AnyValueRef<'a> {
    #[serde(rename = "stringValue", default, borrow)]
    string_value: Option<Cow<'a, str>>,
    #[serde(rename = "intValue", default)]
    int_value: Option<IntRef>,
}

/// An `intValue` as [`super::json::IntValue`] takes it (a number within i64, or a string: its
/// value if it is a decimal integer), decoded on the spot.
struct IntRef(Option<i64>);

impl<'de> Deserialize<'de> for IntRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = IntRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer, or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IntRef, E> {
                Ok(IntRef(Some(v)))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IntRef, E> {
                i64::try_from(v)
                    .map(|v| IntRef(Some(v)))
                    .map_err(|_| E::custom(format!("intValue {v} is beyond 64 signed bits")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IntRef, E> {
                Ok(IntRef(v.parse().ok()))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'a> KeyValueRef<'a> {
    /// The attribute as an [`Attribute`] of the format-neutral rules.
    fn attribute(&self) -> (&str, Attribute<'_>) {
        let value = match &self.value {
            Some(AnyValueRef {
                string_value: Some(s),
                ..
            }) => Attribute::Str(s),
            Some(AnyValueRef {
                int_value: Some(IntRef(Some(i))),
                ..
            }) => Attribute::Int(*i),
            _ => Attribute::Other,
        };
        (&self.key, value)
    }
}

/// What the reader hands on.
pub(crate) trait SpanVisitor {
    /// A resource and its node (name, attribute), None when it has no node attribute; returns
    /// the handle its spans are given to [`span`](Self::span) with, or None to skip them.
    fn resource(&mut self, node: Option<(String, &str)>, spans: u64) -> Option<u32>;
    /// A span of the resource handled as `node`, from line `line` (a protobuf file's frame
    /// number, from 1).
    fn span(&mut self, node: u32, span: SpanData, line: u64);
    /// A span without a trace id or span id (it cannot be paired).
    fn without_id(&mut self);
}

/// What reading found that is not a span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadCounts {
    /// `TracesData` lines (protobuf: frames) read.
    pub(crate) lines: u64,
    /// The last line (frame), cut short while the file was written (counted, not read).
    pub(crate) cut_short: bool,
    /// Bytes read.
    pub(crate) bytes: u64,
}

/// Reads every span of `path` into `visitor`; `progress(bytes)` as the file is read. OTLP/JSON
/// or OTLP protobuf, told apart by the file's first bytes ([`super::proto::looks_like_proto`]).
pub(crate) fn read_spans(
    path: &Path,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    progress: &mut dyn FnMut(u64),
) -> Result<ReadCounts, InputError> {
    let file = std::fs::File::open(path).map_err(|e| InputError::io(path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let prefix = reader.fill_buf().map_err(|e| InputError::io(path, e))?;
    if super::proto::looks_like_proto(prefix) {
        return super::proto::read_frames(path, reader, attribution, visitor, progress);
    }
    let mut counts = ReadCounts::default();
    let mut lines = Lines::new(reader);
    let mut number = 0u64;
    while let Some(line) = lines.next().map_err(|e| InputError::io(path, e))? {
        let n = line.len();
        counts.bytes += n as u64;
        progress(n as u64);
        number += 1;
        let complete = line.last() == Some(&b'\n');
        let text = match std::str::from_utf8(line) {
            Ok(t) => t.trim(),
            Err(e) if complete => {
                return Err(InputError::spans(
                    path,
                    number,
                    format!("not UTF-8 text ({e}); is it OTLP/JSON?"),
                ));
            }
            Err(_) => {
                counts.cut_short = true;
                break;
            }
        };
        if text.is_empty() {
            continue;
        }
        match read_line(text, attribution, visitor, number) {
            Ok(()) => counts.lines += 1,
            // A last line without its newline that does not parse: the file was cut short.
            Err(_) if !complete => counts.cut_short = true,
            Err(what) => return Err(InputError::spans(path, number, what)),
        }
    }
    Ok(counts)
}

/// The lines of a file, each one handed out in place, in a buffer that holds at least the
/// longest (no copy of each line, as `read_until` makes).
struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    /// The next line's start, the end of what was read, and how far a newline was looked for.
    start: usize,
    end: usize,
    scanned: usize,
    eof: bool,
}

impl<R: std::io::Read> Lines<R> {
    fn new(reader: R) -> Self {
        Self::with_capacity(reader, 4 << 20)
    }

    fn with_capacity(reader: R, capacity: usize) -> Self {
        Lines {
            reader,
            buf: vec![0; capacity.max(1)],
            start: 0,
            end: 0,
            scanned: 0,
            eof: false,
        }
    }

    /// The next line with its newline (the last one may have none); None at the end.
    fn next(&mut self) -> std::io::Result<Option<&[u8]>> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.scanned..self.end]) {
                let line = self.start..self.scanned + i + 1;
                self.start = line.end;
                self.scanned = line.end;
                return Ok(Some(&self.buf[line]));
            }
            self.scanned = self.end;
            if self.eof {
                let line = self.start..self.end;
                self.start = self.end;
                return Ok((!line.is_empty()).then(|| &self.buf[line]));
            }
            // The start of a line: moved to the front, with room after it to read into.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.scanned = self.end;
            self.start = 0;
            if self.end == self.buf.len() {
                self.buf.resize(2 * self.buf.len(), 0);
            }
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// One `TracesData` line.
fn read_line(
    text: &str,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    line: u64,
) -> Result<(), String> {
    let top: TracesData = match serde_json::from_str(text) {
        Ok(top) => top,
        Err(e) => return Err(diagnose(text).unwrap_or_else(|| format!("not OTLP/JSON ({e})"))),
    };
    let other = [
        ("resourceLogs", top.resource_logs.is_some()),
        ("resourceMetrics", top.resource_metrics.is_some()),
        ("resourceProfiles", top.resource_profiles.is_some()),
    ];
    if let Some((other, _)) = other.iter().find(|(_, present)| *present) {
        return Err(format!(
            "`{other}`: this is not OTLP traces (a span file holds `TracesData`, one object \
             with `resourceSpans` per line)"
        ));
    }
    let Some(resources) = top.resource_spans else {
        return Err("no `resourceSpans`: not OTLP/JSON traces (`TracesData`)".into());
    };
    for rs in resources {
        let node = rs.resource.as_ref().and_then(|r| {
            node_of(
                attribution,
                r.attributes
                    .iter()
                    .map(|kv| (kv.key.as_ref(), kv.attribute().1)),
            )
        });
        let count = rs.scope_spans.iter().map(|s| s.spans.len() as u64).sum();
        let Some(handle) = visitor.resource(node, count) else {
            continue;
        };
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            match span_data(span)? {
                Some(data) => visitor.span(handle, data, line),
                None => visitor.without_id(),
            }
        }
    }
    Ok(())
}

/// What is wrong with a line the one-pass parse refused, said as precisely as the members
/// allow (which part is not what OTLP/JSON has there); None when no part can be named.
fn diagnose(text: &str) -> Option<String> {
    let top = match Members::parse(text, "the line") {
        Ok(top) => top,
        Err(e) => return Some(e),
    };
    let resource_spans = top.get("resourceSpans")?;
    Some(
        match serde_json::from_str::<Vec<ResourceSpans>>(resource_spans.get()) {
            Err(e) => format!("`resourceSpans` is not OTLP/JSON ({e})"),
            Ok(_) => return None,
        },
    )
}

/// An attribute's value, as the rules read it, whatever the format said it in.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Attribute<'a> {
    Str(&'a str),
    Int(i64),
    Other,
}

/// The node a resource's attributes name (the rule of [`NodeAttribution::node_of`], for
/// attributes of either format).
pub(crate) fn node_of<'k, 'v>(
    attribution: &'k NodeAttribution,
    attributes: impl Iterator<Item = (&'v str, Attribute<'v>)> + Clone,
) -> Option<(String, &'k str)> {
    let wanted: Vec<KeyValue> = attributes
        .filter(|(k, _)| attribution.keys().iter().any(|w| w == k))
        .map(|(key, value)| KeyValue {
            key: key.to_string(),
            value: Some(AnyValue {
                string_value: match value {
                    Attribute::Str(s) => Some(s.to_string()),
                    _ => None,
                },
                int_value: None,
            }),
        })
        .collect();
    attribution.node_of(&wanted)
}

/// The value of each hex digit, 0xff for any other byte.
const HEX: [u8; 256] = {
    let mut t = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// Hex digits (at most 32) as an integer, 16 digits at a time; None if one is not hex.
fn hex(digits: &[u8]) -> Option<u128> {
    let mut v = 0u128;
    for chunk in digits.chunks(16) {
        let mut w = 0u64;
        let mut bad = 0u8;
        for &b in chunk {
            let d = HEX[b as usize];
            bad |= d;
            w = (w << 4) | u64::from(d & 0x0f);
        }
        if bad & 0xf0 != 0 {
            return None;
        }
        v = (v << (4 * chunk.len())) | u128::from(w);
    }
    Some(v)
}

/// A hex id of `bytes` bytes; None when absent or empty (OTLP/JSON's way to say "none").
fn hex_id(text: Option<&Cow<str>>, bytes: usize, what: &str) -> Result<Option<u128>, String> {
    let Some(text) = text.map(|t| t.as_ref()).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let value = (text.len() == 2 * bytes)
        .then(|| hex(text.as_bytes()))
        .flatten();
    let Some(v) = value else {
        return Err(format!(
            "`{what}` `{}` is not {} hex digits (OTLP/JSON writes ids in hex)",
            text.chars().take(40).collect::<String>(),
            2 * bytes
        ));
    };
    // The all-zero id is OpenTelemetry's invalid id.
    Ok((v != 0).then_some(v))
}

/// The pieces of a span, normalized: what both formats' readers hand to [`SpanData::new`].
pub(crate) struct SpanParts {
    pub(crate) trace_id: Option<u128>,
    pub(crate) span_id: Option<u128>,
    pub(crate) parent: Option<u128>,
    pub(crate) kind: Kind,
    pub(crate) start: Option<i64>,
    pub(crate) end: Option<i64>,
    pub(crate) error: bool,
    pub(crate) messages: Vec<MessageEvent>,
    pub(crate) links: Vec<SpanKey>,
}

impl SpanData {
    /// The span of normalized parts; None without a trace id or span id.
    pub(crate) fn new(p: SpanParts) -> Option<SpanData> {
        let (Some(trace_id), Some(span_id)) = (p.trace_id, p.span_id) else {
            return None;
        };
        Some(SpanData {
            key: (trace_id, span_id as u64),
            parent: p.parent.map(|p| p as u64),
            kind: p.kind,
            start: p.start,
            end: p.end,
            error: p.error,
            messages: p.messages,
            links: p.links,
        })
    }
}

fn span_data(span: Span) -> Result<Option<SpanData>, String> {
    let time = |raw: Option<&RawValue>| -> Result<Option<i64>, String> {
        Ok(raw.map(parse_time).transpose()?.flatten().map(|t| t.0))
    };
    let mut messages = Vec::new();
    for e in &span.events {
        // Only a message event's time is read (and so can be wrong).
        if !is_message_event(e.name.as_deref()) {
            continue;
        }
        let attributes = e.attributes.iter().map(KeyValueRef::attribute);
        if let Some(m) = message_event(e.name.as_deref(), time(e.time)?, attributes) {
            messages.push(m);
        }
    }
    let mut links = Vec::new();
    for l in &span.links {
        if let (Some(t), Some(s)) = (
            hex_id(l.trace_id.as_ref(), 16, "traceId")?,
            hex_id(l.span_id.as_ref(), 8, "spanId")?,
        ) {
            links.push((t, s as u64));
        }
    }
    // STATUS_CODE_ERROR is 2 (some encoders write its name).
    let error = span.status.and_then(|s| s.code).is_some_and(|c| {
        let c = c.get();
        c == "2" || (c.starts_with('"') && c.trim_matches('"').ends_with("ERROR"))
    });
    Ok(SpanData::new(SpanParts {
        trace_id: hex_id(span.trace_id.as_ref(), 16, "traceId")?,
        span_id: hex_id(span.span_id.as_ref(), 8, "spanId")?,
        parent: hex_id(span.parent_span_id.as_ref(), 8, "parentSpanId")?,
        kind: span
            .kind
            .map(Kind::parse)
            .transpose()?
            .unwrap_or(Kind::Unspecified),
        start: time(span.start)?,
        end: time(span.end)?,
        error,
        messages,
        links,
    }))
}

/// Whether an event of this name is a `message` event of the RPC conventions.
pub(crate) fn is_message_event(name: Option<&str>) -> bool {
    matches!(name, Some("message" | "rpc.message"))
}

/// A `message` event of the RPC conventions (`message.type` SENT or RECEIVED, `message.id`;
/// the newer `rpc.message` event with `rpc.message.type` and `rpc.message.id` alike), or None
/// for any other event or one without a time. Both formats' events go through here.
pub(crate) fn message_event<'v>(
    name: Option<&str>,
    time: Option<i64>,
    attributes: impl Iterator<Item = (&'v str, Attribute<'v>)> + Clone,
) -> Option<MessageEvent> {
    if !is_message_event(name) {
        return None;
    }
    let attr = |keys: [&str; 2]| attributes.clone().find(|(k, _)| keys.contains(k));
    let sent = match attr(["message.type", "rpc.message.type"]) {
        Some((_, Attribute::Str("SENT"))) => true,
        Some((_, Attribute::Str("RECEIVED"))) => false,
        _ => return None,
    };
    let id = match attr(["message.id", "rpc.message.id"]) {
        Some((_, Attribute::Int(i))) => Some(i),
        _ => None,
    };
    Some(MessageEvent {
        sent,
        id,
        time: time?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        nodes: Vec<Option<String>>,
        spans: Vec<(u32, SpanData, u64)>,
        without_id: u64,
    }

    impl SpanVisitor for Collect {
        fn resource(&mut self, node: Option<(String, &str)>, _spans: u64) -> Option<u32> {
            self.nodes.push(node.as_ref().map(|n| n.0.clone()));
            node.map(|_| self.nodes.len() as u32 - 1)
        }
        fn span(&mut self, node: u32, span: SpanData, line: u64) {
            self.spans.push((node, span, line));
        }
        fn without_id(&mut self) {
            self.without_id += 1;
        }
    }

    fn read(text: &str) -> Result<(Collect, ReadCounts), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spans.jsonl");
        std::fs::write(&path, text).unwrap();
        let mut c = Collect::default();
        let counts = read_spans(&path, &NodeAttribution::default(), &mut c, &mut |_| {})
            .map_err(|e| e.to_string())?;
        Ok((c, counts))
    }

    const LINE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"a"}}]},"scopeSpans":[{"spans":[{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"1112131415161718","parentSpanId":"","kind":3,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":1700000000000500000,"status":{"code":2},"events":[{"name":"message","timeUnixNano":"1700000000000000100","attributes":[{"key":"message.type","value":{"stringValue":"SENT"}},{"key":"message.id","value":{"intValue":"1"}}]},{"name":"exception","timeUnixNano":"1700000000000000200"}],"links":[{"traceId":"0102030405060708090a0b0c0d0e0f11","spanId":"0000000000000009"}]},{"traceId":"","spanId":"1112131415161719"}]}]}]}"#;

    #[test]
    fn a_span_gives_what_pairing_needs() {
        let (c, counts) = read(&format!("{LINE}\n\n")).unwrap();
        assert_eq!(counts.lines, 1);
        assert!(!counts.cut_short);
        assert_eq!(c.nodes, vec![Some("a".to_string())]);
        assert_eq!(c.without_id, 1);
        let (node, s, line) = &c.spans[0];
        assert_eq!((*node, *line), (0, 1));
        assert_eq!(
            s.key,
            (0x0102030405060708090a0b0c0d0e0f10, 0x1112131415161718)
        );
        assert_eq!(s.parent, None);
        assert_eq!(s.kind, Kind::Client);
        assert_eq!(s.start, Some(1_700_000_000_000_000_000));
        assert_eq!(s.end, Some(1_700_000_000_000_500_000));
        assert!(s.error);
        assert_eq!(
            s.messages,
            vec![MessageEvent {
                sent: true,
                id: Some(1),
                time: 1_700_000_000_000_000_100
            }]
        );
        assert_eq!(s.links, vec![(0x0102030405060708090a0b0c0d0e0f11, 9)]);
    }

    #[test]
    fn lines_come_whole_whatever_the_buffer() {
        for text in ["", "a\n", "a\nbb\n\nccccccc", "long line of text\nx\n"] {
            for capacity in [1, 2, 3, 5, 64] {
                let mut lines = Lines::with_capacity(text.as_bytes(), capacity);
                let mut got = Vec::new();
                while let Some(line) = lines.next().unwrap() {
                    got.push(String::from_utf8(line.to_vec()).unwrap());
                }
                assert_eq!(
                    got,
                    text.split_inclusive('\n').collect::<Vec<_>>(),
                    "{capacity}"
                );
            }
        }
    }

    #[test]
    fn bad_lines_name_file_and_line_and_a_cut_last_line_is_counted() {
        let e = read(&format!("{LINE}\nnot json\n")).err().unwrap();
        assert!(e.contains(":2: the line is not a JSON object"), "{e}");
        let e = read("{\"resourceLogs\":[]}\n").err().unwrap();
        assert!(
            e.contains(":1: `resourceLogs`: this is not OTLP traces"),
            "{e}"
        );
        let bad_id = LINE.replace("1112131415161718", "11121314151617");
        let e = read(&format!("{bad_id}\n")).err().unwrap();
        assert!(
            e.contains("`spanId` `11121314151617` is not 16 hex digits"),
            "{e}"
        );
        let bad_kind = LINE.replace("\"kind\":3", "\"kind\":9");
        let e = read(&format!("{bad_kind}\n")).err().unwrap();
        assert!(e.contains("`kind` 9 is not a span kind"), "{e}");
        let (c, counts) = read(&format!("{LINE}\n{}", &LINE[..100])).unwrap();
        assert!(counts.cut_short);
        assert_eq!((counts.lines, c.spans.len()), (1, 1));
    }
}
