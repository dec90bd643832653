//! Reading a span file: OTLP/JSON lines (`jsonl.rs`) or OTLP protobuf frames (`proto.rs`),
//! told apart by the file's first bytes. Both end here in one form: a span's ids as integers,
//! its kind, times, status, message events and links as [`SpanData`], handed to one
//! [`SpanVisitor`] by the same rules ([`node_of`], [`message_event`], [`SpanData::new`]).
//!
//! Only what pairing needs is taken from a span: its ids, parent, kind, times, status, the
//! `message` events of OpenTelemetry's RPC conventions, and its links.

use std::io::BufRead;
use std::path::Path;

use serde_json::value::RawValue;

use super::json::{AnyValue, KeyValue};
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
    pub(super) fn parse(raw: &RawValue) -> Result<Kind, String> {
        Kind::parse_text(raw.get())
    }

    /// [`Kind::parse`] of a value's raw text.
    pub(super) fn parse_text(text: &str) -> Result<Kind, String> {
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
    /// The spans about to come (a line's or frame's): a chance to bring what they will touch
    /// into the cache together.
    fn ahead(&mut self, _spans: &[Option<SpanData>]) {}
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
    super::jsonl::read_lines(path, reader, attribution, visitor, progress)
}

/// What the first pass over a span file finds: the nodes in order of first appearance, with
/// the attribute that named each, and the earliest start or end of any span.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) nodes: Vec<(String, String)>,
    pub(crate) earliest: Option<i64>,
}

impl Found {
    /// A node named by a resource.
    pub(crate) fn node(&mut self, node: Option<(String, &str)>) {
        if let Some((name, attribute)) = node
            && !self.nodes.iter().any(|(n, _)| *n == name)
        {
            self.nodes.push((name, attribute.to_string()));
        }
    }

    /// A span's start or end (None: unset).
    pub(crate) fn time(&mut self, t: Option<i64>) {
        if let Some(t) = t {
            self.earliest = Some(self.earliest.map_or(t, |e| e.min(t)));
        }
    }
}

/// The first pass over the span file `path`: its nodes and earliest time, without reading its
/// spans (a search for keys in OTLP/JSON, the frames decoded in protobuf). A file that is not
/// spans is the second pass's to report.
pub(crate) fn scan_spans(path: &Path, attribution: &NodeAttribution) -> Result<Found, InputError> {
    let file = std::fs::File::open(path).map_err(|e| InputError::io(path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let prefix = reader.fill_buf().map_err(|e| InputError::io(path, e))?;
    if super::proto::looks_like_proto(prefix) {
        return super::proto::scan_frames(path, reader, attribution);
    }
    super::jsonl::scan_lines(reader, attribution).map_err(|e| InputError::io(path, e))
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
