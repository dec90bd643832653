//! Reading a span file: OTLP/JSON as the OpenTelemetry Collector's file exporter writes it, one
//! `TracesData` object per line (`resourceSpans` → `scopeSpans` → `spans`), line by line, so
//! that memory is one line's whatever the file's length.
//!
//! Only what pairing needs is taken from a span: its ids, parent, kind, times, status, the
//! `message` events of OpenTelemetry's RPC conventions, and its links; serde skips the rest
//! without building it. A line that is not OTLP/JSON traces is an error naming `file:line`,
//! except a last line without its newline that does not parse: the file was cut short while it
//! was written (a Collector still running, a copy taken too early), which is counted and warned
//! about, like a trace file cut short.

use std::borrow::Cow;
use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::{KeyValue, Members, parse_time};
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

#[derive(Deserialize)]
struct ResourceSpans<'a> {
    #[serde(default)]
    resource: Option<Resource>,
    #[serde(rename = "scopeSpans", default, borrow)]
    scope_spans: Vec<ScopeSpans<'a>>,
}

#[derive(Deserialize)]
struct Resource {
    #[serde(default)]
    attributes: Vec<KeyValue>,
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
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "timeUnixNano", default, borrow)]
    time: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    attributes: Vec<KeyValue>,
}

#[derive(Deserialize)]
struct Link<'a> {
    #[serde(rename = "traceId", default, borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(rename = "spanId", default, borrow)]
    span_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// What the reader hands on.
pub(crate) trait SpanVisitor {
    /// A resource and its node (name, attribute), None when it has no node attribute; returns
    /// the handle its spans are given to [`span`](Self::span) with, or None to skip them.
    fn resource(&mut self, node: Option<(String, &str)>, spans: u64) -> Option<u32>;
    /// A span of the resource handled as `node`, from line `line`.
    fn span(&mut self, node: u32, span: SpanData, line: u64);
    /// A span without a trace id or span id (it cannot be paired).
    fn without_id(&mut self);
}

/// What reading found that is not a span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadCounts {
    /// `TracesData` lines read.
    pub(crate) lines: u64,
    /// The last line, cut short while the file was written (counted, not read).
    pub(crate) cut_short: bool,
    /// Bytes read.
    pub(crate) bytes: u64,
}

/// Reads every span of `path` into `visitor`; `progress(bytes)` as the file is read.
pub(crate) fn read_spans(
    path: &Path,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    progress: &mut dyn FnMut(u64),
) -> Result<ReadCounts, InputError> {
    let file = std::fs::File::open(path).map_err(|e| InputError::io(path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut counts = ReadCounts::default();
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| InputError::io(path, e))?;
        if n == 0 {
            break;
        }
        counts.bytes += n as u64;
        progress(n as u64);
        number += 1;
        let complete = line.last() == Some(&b'\n');
        let text = match std::str::from_utf8(&line) {
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

/// One `TracesData` line.
fn read_line(
    text: &str,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    line: u64,
) -> Result<(), String> {
    let top = Members::parse(text, "the line")?;
    for other in ["resourceLogs", "resourceMetrics", "resourceProfiles"] {
        if top.get(other).is_some() {
            return Err(format!(
                "`{other}`: this is not OTLP traces (a span file holds `TracesData`, one object \
                 with `resourceSpans` per line)"
            ));
        }
    }
    let Some(resource_spans) = top.get("resourceSpans") else {
        return Err("no `resourceSpans`: not OTLP/JSON traces (`TracesData`)".into());
    };
    let resources: Vec<ResourceSpans> = serde_json::from_str(resource_spans.get())
        .map_err(|e| format!("`resourceSpans` is not OTLP/JSON ({e})"))?;
    for rs in resources {
        let node = rs
            .resource
            .as_ref()
            .and_then(|r| attribution.node_of(&r.attributes));
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

/// A hex id of `bytes` bytes; None when absent or empty (OTLP/JSON's way to say "none").
fn hex_id(text: Option<&Cow<str>>, bytes: usize, what: &str) -> Result<Option<u128>, String> {
    let Some(text) = text.map(|t| t.as_ref()).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if text.len() != 2 * bytes || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "`{what}` `{}` is not {} hex digits (OTLP/JSON writes ids in hex)",
            text.chars().take(40).collect::<String>(),
            2 * bytes
        ));
    }
    let v = u128::from_str_radix(text, 16).map_err(|e| format!("`{what}`: {e}"))?;
    // The all-zero id is OpenTelemetry's invalid id.
    Ok((v != 0).then_some(v))
}

fn span_data(span: Span) -> Result<Option<SpanData>, String> {
    let trace_id = hex_id(span.trace_id.as_ref(), 16, "traceId")?;
    let span_id = hex_id(span.span_id.as_ref(), 8, "spanId")?;
    let parent = hex_id(span.parent_span_id.as_ref(), 8, "parentSpanId")?;
    let (Some(trace_id), Some(span_id)) = (trace_id, span_id) else {
        return Ok(None);
    };
    let kind = span.kind.map(Kind::parse).transpose()?;
    let time = |raw: Option<&RawValue>| -> Result<Option<i64>, String> {
        Ok(raw.map(parse_time).transpose()?.flatten().map(|t| t.0))
    };
    let mut messages = Vec::new();
    for e in &span.events {
        if let Some(m) = message_event(e)? {
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
    let error = span
        .status
        .and_then(|s| s.code)
        .is_some_and(|c| c.as_u64() == Some(2) || c.as_str().is_some_and(|n| n.ends_with("ERROR")));
    Ok(Some(SpanData {
        key: (trace_id, span_id as u64),
        parent: parent.map(|p| p as u64),
        kind: kind.unwrap_or(Kind::Unspecified),
        start: time(span.start)?,
        end: time(span.end)?,
        error,
        messages,
        links,
    }))
}

/// A `message` event of the RPC conventions (`message.type` SENT or RECEIVED, `message.id`;
/// the newer `rpc.message` event with `rpc.message.type` and `rpc.message.id` alike), or None
/// for any other event.
fn message_event(e: &Event) -> Result<Option<MessageEvent>, String> {
    if !matches!(e.name.as_deref(), Some("message" | "rpc.message")) {
        return Ok(None);
    }
    let attr = |keys: [&str; 2]| {
        e.attributes
            .iter()
            .find(|kv| keys.contains(&kv.key.as_str()))
    };
    let sent = match attr(["message.type", "rpc.message.type"])
        .and_then(|kv| kv.value.as_ref()?.string_value.as_deref())
    {
        Some("SENT") => true,
        Some("RECEIVED") => false,
        _ => return Ok(None),
    };
    let id = attr(["message.id", "rpc.message.id"])
        .and_then(|kv| kv.value.as_ref()?.int_value.as_ref()?.get());
    let Some(time) = e.time.map(parse_time).transpose()?.flatten() else {
        return Ok(None);
    };
    Ok(Some(MessageEvent {
        sent,
        id,
        time: time.0,
    }))
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
