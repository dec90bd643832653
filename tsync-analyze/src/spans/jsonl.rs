//! OTLP/JSON span files, one `TracesData` object per line, as the Collector's file exporter
//! writes them: the lines handed out in place ([`Lines`]), each parsed once into pieces
//! borrowed from it (serde structs of `&str`, `Cow` and raw values; the members not needed
//! skipped unbuilt), hex ids decoded straight into integers, and every span handed to the
//! [`SpanVisitor`] as [`SpanData`], as protobuf's frames are (`proto.rs`).
//!
//! A line that is not OTLP/JSON traces is an error naming `file:line`, except a last line
//! without its newline that does not parse: the file was cut short while it was written (a
//! Collector still running, a copy taken too early), which is counted and warned about.

use std::borrow::Cow;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::json::{Members, parse_time};
use super::node::NodeAttribution;
use super::read::{
    Attribute, Kind, ReadCounts, SpanData, SpanParts, SpanVisitor, is_message_event, message_event,
    node_of,
};
use crate::input::error::InputError;

/// Reads the OTLP/JSON lines of `reader` (the file at `path`) into `visitor`.
pub(super) fn read_lines(
    path: &Path,
    reader: impl BufRead,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    progress: &mut dyn FnMut(u64),
) -> Result<ReadCounts, InputError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
