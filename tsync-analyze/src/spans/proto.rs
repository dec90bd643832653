//! OTLP protobuf span files: the OpenTelemetry Collector's file exporter with `format: proto`.
//!
//! **The framing** (opentelemetry-collector-contrib, `exporter/fileexporter/file_writer.go`):
//! with `format: proto`, `buildExportFunc` picks `exportMessageAsBuffer`, which writes each
//! marshaled `TracesData` preceded by its length as a 4-byte big-endian unsigned integer, one
//! frame after the other, nothing else (no header, no trailer). A file is told apart from the
//! other inputs by its first frame ([`looks_like_proto`]): a plausible length, then a
//! `TracesData` whose first field is `resource_spans` (field 1, wire type 2: byte 0x0a) holding
//! a `ResourceSpans` that fits in the frame.
//!
//! **Compression is not read.** With `compression: zstd` the exporter compresses each marshaled
//! message on its own (`marshaller.go`: `buf = m.compressor(buf)`, klauspost's zstd
//! `EncodeAll`) and still length-prefixes it (for JSON too: `exportMessageAsBuffer` whenever
//! `compression` is set), so every frame holds a zstd frame; behind the
//! `exporter.file.nativeCompression` feature gate, the whole file is one zstd stream instead
//! (`compression_writer.go`). Both are recognized by zstd's magic number (28 b5 2f fd) at the
//! start of the file or of the first frame and refused with an error that says so
//! ([`compressed`]).
//!
//! **Decoding: prost, with the messages declared here.** prost is the Rust ecosystem's protobuf
//! implementation. The `opentelemetry-proto` crate has prost types of these messages, but only
//! under its `gen-tonic-messages` feature, and its `trace` feature (which gates the trace
//! module) pulls the OpenTelemetry SDK in; its types also decode every field into owned
//! values (each span's name and attributes as `String`s). Declared here are only the fields
//! pairing uses, with their numbers from opentelemetry-proto's `trace/v1/trace.proto` (stable
//! since OTLP 1.0: fields are never renumbered): prost skips every other field without
//! building it, ids and strings are `Bytes` slices of the frame (no copy, no allocation per
//! span), and the only dependency is prost (no protoc, no tonic, no build script).
//!
//! After decoding, a span goes the way of an OTLP/JSON span: its ids (bytes here, hex there)
//! become the same integers, and [`super::read`]'s rules ([`node_of`], [`message_event`],
//! [`SpanData::new`]) make the one [`SpanData`] both formats give the visitor.
//!
//! **Bad input**, as OTLP/JSON's lines: a frame that does not decode, or whose spans are not
//! OTLP's (an id of the wrong length, a kind out of range), is an error naming the file, the
//! frame and its byte offset; a last frame cut short (its length or its message running past
//! the end of the file, where what is there starts like a `TracesData`) is the file cut short
//! while it was written: counted and warned about, the frames before it used. A length running
//! past the end after which comes no `TracesData` is an error (a corrupt length, not a cut).
//! `apply --format otlp` reads the frames with the same [`Frames`] and words its errors with
//! the same [`frame_message`] (`apply/otlp/proto.rs`, which rewrites them on the wire).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use bytes::Bytes;
use prost::Message;

use super::node::NodeAttribution;
use super::read::{
    Attribute, Found, Kind, ReadCounts, SpanData, SpanParts, SpanVisitor, is_message_event,
    message_event, node_of,
};
use crate::input::error::InputError;

/// zstd's frame magic number (little-endian 0xFD2FB528).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The largest first frame [`looks_like_proto`] takes for one (64 MiB: a Collector batch is far
/// smaller, and the length's first byte is then 0 to 3, which no text starts with). Later
/// frames may be of any length.
const PLAUSIBLE_FIRST_FRAME: u32 = 64 << 20;

#[derive(Clone, PartialEq, Message)]
struct TracesData {
    #[prost(message, repeated, tag = "1")]
    resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    scope_spans: Vec<ScopeSpans>,
}

#[derive(Clone, PartialEq, Message)]
struct Resource {
    #[prost(message, repeated, tag = "1")]
    attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
struct ScopeSpans {
    #[prost(message, repeated, tag = "2")]
    spans: Vec<Span>,
}

#[derive(Clone, PartialEq, Message)]
struct Span {
    #[prost(bytes = "bytes", tag = "1")]
    trace_id: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    span_id: Bytes,
    #[prost(bytes = "bytes", tag = "4")]
    parent_span_id: Bytes,
    /// `SpanKind` (an enum: a varint on the wire).
    #[prost(int32, tag = "6")]
    kind: i32,
    #[prost(fixed64, tag = "7")]
    start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "11")]
    events: Vec<Event>,
    #[prost(message, repeated, tag = "13")]
    links: Vec<Link>,
    #[prost(message, optional, tag = "15")]
    status: Option<Status>,
}

#[derive(Clone, PartialEq, Message)]
struct Event {
    #[prost(fixed64, tag = "1")]
    time_unix_nano: u64,
    /// A `string`, kept as its bytes (compared, never copied).
    #[prost(bytes = "bytes", tag = "2")]
    name: Bytes,
    #[prost(message, repeated, tag = "3")]
    attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
struct Link {
    #[prost(bytes = "bytes", tag = "1")]
    trace_id: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    span_id: Bytes,
}

#[derive(Clone, PartialEq, Message)]
struct Status {
    /// `StatusCode`: 2 is ERROR.
    #[prost(int32, tag = "3")]
    code: i32,
}

#[derive(Clone, PartialEq, Message)]
struct KeyValue {
    #[prost(bytes = "bytes", tag = "1")]
    key: Bytes,
    #[prost(message, optional, tag = "2")]
    value: Option<AnyValue>,
}

/// `AnyValue`'s `oneof`: only its string and int64 members are read (the kinds a node name or a
/// message id come as); on the wire a `oneof` member is an ordinary field.
#[derive(Clone, PartialEq, Message)]
struct AnyValue {
    #[prost(bytes = "bytes", optional, tag = "1")]
    string_value: Option<Bytes>,
    #[prost(int64, optional, tag = "3")]
    int_value: Option<i64>,
}

impl KeyValue {
    /// The attribute for the format-neutral rules (a key or string that is not UTF-8 matches
    /// nothing).
    fn attribute(&self) -> (&str, Attribute<'_>) {
        let key = std::str::from_utf8(&self.key).unwrap_or("");
        let value = match &self.value {
            Some(AnyValue {
                string_value: Some(s),
                ..
            }) => std::str::from_utf8(s).map_or(Attribute::Other, Attribute::Str),
            Some(AnyValue {
                int_value: Some(i), ..
            }) => Attribute::Int(*i),
            _ => Attribute::Other,
        };
        (key, value)
    }
}

/// A varint at the start of `b`: its value and length.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// True if `prefix` (a file's first bytes) starts like an OTLP protobuf span file: a first
/// frame length of at most 64 MiB, then `TracesData`'s field 1 (`resource_spans`, wire type 2:
/// 0x0a) whose length fits in the frame, its `ResourceSpans` starting with one of its own
/// fields (`resource`, `scope_spans`, `schema_url`: 0x0a, 0x12, 0x1a).
pub(crate) fn looks_like_proto(prefix: &[u8]) -> bool {
    let Some((header, rest)) = prefix.split_first_chunk::<4>() else {
        return false;
    };
    let len = u32::from_be_bytes(*header);
    if !(2..=PLAUSIBLE_FIRST_FRAME).contains(&len) || rest.first() != Some(&0x0a) {
        return false;
    }
    let Some((inner, used)) = varint(&rest[1..]) else {
        return false;
    };
    1 + used as u64 + inner <= u64::from(len)
        && rest
            .get(1 + used)
            .is_none_or(|b| inner == 0 || matches!(b, 0x0a | 0x12 | 0x1a))
}

/// Why a file is refused as compressed spans, when its first bytes say it is zstd: the whole
/// file (the exporter's native compression) or its first length-prefixed frame (its per-message
/// `compression: zstd`).
pub(crate) fn compressed(prefix: &[u8]) -> Option<&'static str> {
    if prefix.starts_with(&ZSTD_MAGIC) {
        Some(
            "zstd-compressed (the OpenTelemetry Collector file exporter's `compression: zstd`?): \
             compressed inputs are not read; decompress it (`zstd -d`) or export without \
             `compression`",
        )
    } else if prefix.len() >= 8 && prefix[4..8] == ZSTD_MAGIC {
        Some(
            "zstd-compressed frames (the OpenTelemetry Collector file exporter's `compression: \
             zstd`, which compresses each message on its own): not supported; export with \
             `format: proto` (or `json`) and without `compression`",
        )
    } else {
        None
    }
}

/// The error for the frame at byte `offset` (frame `number`, from 1) of `path`.
fn frame_error(path: &Path, number: u64, offset: u64, what: impl std::fmt::Display) -> InputError {
    InputError::Invalid(frame_message(path.display(), number, offset, what))
}

/// What is wrong with the frame at byte `offset` (frame `number`, from 1) of the file `name`:
/// the words of every error about a protobuf span file's frame (`sync`'s reader, `apply`'s
/// rewriter).
pub(crate) fn frame_message(
    name: impl std::fmt::Display,
    number: u64,
    offset: u64,
    what: impl std::fmt::Display,
) -> String {
    format!(
        "{name}: frame {number} at byte {offset}: {what}\n  (a protobuf span file holds OTLP \
         `TracesData` messages, each after its length in 4 bytes big-endian, as the \
         OpenTelemetry Collector's file exporter writes them with `format: proto`)"
    )
}

/// Reads up to `buf.len()` bytes: fewer only at the end of the file.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The frames of a protobuf span file, one after the other: what `sync`'s reader and `apply`'s
/// rewriter both read, so that they agree on where a frame starts, on a cut last frame and on a
/// corrupt length.
pub(crate) struct Frames<R> {
    reader: R,
    /// The frame last read: its number, from 1.
    pub(crate) number: u64,
    /// The frame last read: its byte offset in the file.
    pub(crate) offset: u64,
    /// Where the next frame starts.
    next: u64,
}

/// What [`Frames::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole frame: its message is in the buffer.
    Whole,
    /// The end of the file.
    End,
    /// The last frame cut short while the file was written: its length, or its message running
    /// past the end of the file, where what is there starts like a `TracesData`.
    CutShort,
}

/// Why [`Frames::next`] failed.
pub(crate) enum FrameError {
    /// Reading failed.
    Io(std::io::Error),
    /// The frame ([`Frames::number`], at [`Frames::offset`]) is not one: what is wrong.
    Invalid(String),
}

impl<R: Read> Frames<R> {
    /// The frames of `reader`, at the file's start.
    pub(crate) fn new(reader: R) -> Self {
        Frames {
            reader,
            number: 0,
            offset: 0,
            next: 0,
        }
    }

    /// Reads the next frame's message into `body` (cleared first).
    pub(crate) fn next(&mut self, body: &mut Vec<u8>) -> Result<Frame, FrameError> {
        body.clear();
        self.offset = self.next;
        let mut header = [0u8; 4];
        let got = read_full(&mut self.reader, &mut header).map_err(FrameError::Io)?;
        if got == 0 {
            return Ok(Frame::End);
        }
        self.number += 1;
        if got < 4 {
            // Not even the length is whole: the file was cut short while written.
            return Ok(Frame::CutShort);
        }
        let len = u32::from_be_bytes(header) as u64;
        (&mut self.reader)
            .take(len)
            .read_to_end(body)
            .map_err(FrameError::Io)?;
        if (body.len() as u64) < len {
            if body.is_empty() || body[0] == 0x0a {
                return Ok(Frame::CutShort);
            }
            return Err(FrameError::Invalid(format!(
                "its length, {len} bytes, runs past the end of the file ({} bytes left), and \
                 what follows is no `TracesData`: a corrupt length, or not a protobuf span file",
                body.len()
            )));
        }
        if body.starts_with(&ZSTD_MAGIC) {
            return Err(FrameError::Invalid(
                compressed(&[header.as_slice(), &ZSTD_MAGIC].concat())
                    .unwrap_or_default()
                    .to_string(),
            ));
        }
        self.next += 4 + len;
        Ok(Frame::Whole)
    }
}

/// Reads every frame of the protobuf span file `path` (opened as `reader`, at its start) into
/// `visitor`; a span's `line` is its frame's number, from 1.
pub(crate) fn read_frames(
    path: &Path,
    reader: BufReader<File>,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    progress: &mut dyn FnMut(u64),
) -> Result<ReadCounts, InputError> {
    each_frame(path, reader, progress, &mut |data, number| {
        visit(data, attribution, visitor, number)
    })
}

/// The first pass over the protobuf span file `path`: its nodes and the earliest time of any
/// span (the frames decoded: a protobuf frame is not searched for keys as JSON is).
pub(crate) fn scan_frames(
    path: &Path,
    reader: BufReader<File>,
    attribution: &NodeAttribution,
) -> Result<Found, InputError> {
    let mut found = Found::default();
    each_frame(path, reader, &mut |_| {}, &mut |data, _| {
        for rs in &data.resource_spans {
            found.node(
                rs.resource.as_ref().and_then(|r| {
                    node_of(attribution, r.attributes.iter().map(KeyValue::attribute))
                }),
            );
            for span in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                found.time(time(span.start_time_unix_nano)?);
                found.time(time(span.end_time_unix_nano)?);
            }
        }
        Ok(())
    })?;
    Ok(found)
}

/// Decodes every frame of `reader` (the file at `path`) and hands each to `each` with its
/// number (from 1); what `each` refuses is an error naming the frame.
fn each_frame(
    path: &Path,
    reader: BufReader<File>,
    progress: &mut dyn FnMut(u64),
    each: &mut dyn FnMut(TracesData, u64) -> Result<(), String>,
) -> Result<ReadCounts, InputError> {
    let mut counts = ReadCounts::default();
    let mut frames = Frames::new(reader);
    let mut body = Vec::new();
    loop {
        match frames.next(&mut body) {
            Ok(Frame::Whole) => {}
            Ok(Frame::End) => break,
            Ok(Frame::CutShort) => {
                counts.cut_short = true;
                break;
            }
            Err(FrameError::Io(e)) => return Err(InputError::io(path, e)),
            Err(FrameError::Invalid(what)) => {
                return Err(frame_error(path, frames.number, frames.offset, what));
            }
        }
        let (number, offset) = (frames.number, frames.offset);
        let len = body.len() as u64;
        counts.bytes += 4 + len;
        progress(4 + len);
        let data = TracesData::decode(Bytes::from(std::mem::take(&mut body))).map_err(|e| {
            frame_error(
                path,
                number,
                offset,
                format_args!("not an OTLP `TracesData` message ({e})"),
            )
        })?;
        each(data, number).map_err(|what| frame_error(path, number, offset, what))?;
        counts.lines += 1;
    }
    Ok(counts)
}

/// The node the `Resource` message `resource` names by `attribution`'s rule ([`node_of`]), for
/// `apply`'s rewriter, which copies the message and only reads it.
pub(crate) fn resource_node(
    attribution: &NodeAttribution,
    resource: &[u8],
) -> Result<Option<String>, prost::DecodeError> {
    let r = Resource::decode(resource)?;
    Ok(node_of(attribution, r.attributes.iter().map(KeyValue::attribute)).map(|(name, _)| name))
}

/// One frame's spans, to the visitor.
fn visit(
    data: TracesData,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    frame: u64,
) -> Result<(), String> {
    for rs in data.resource_spans {
        let node = rs
            .resource
            .as_ref()
            .and_then(|r| node_of(attribution, r.attributes.iter().map(KeyValue::attribute)));
        let count = rs.scope_spans.iter().map(|s| s.spans.len() as u64).sum();
        let Some(handle) = visitor.resource(node, count) else {
            continue;
        };
        for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
            match span_data(&span)? {
                Some(data) => visitor.span(handle, data, frame),
                None => visitor.without_id(),
            }
        }
    }
    Ok(())
}

/// An id of `len` bytes (big-endian, as its hex in OTLP/JSON reads); None when empty or all
/// zero (OpenTelemetry's invalid id).
fn id(bytes: &[u8], len: usize, what: &str) -> Result<Option<u128>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    if bytes.len() != len {
        return Err(format!(
            "`{what}` of {} bytes (an OTLP {what} has {len})",
            bytes.len()
        ));
    }
    let v = bytes.iter().fold(0u128, |v, &b| (v << 8) | u128::from(b));
    Ok((v != 0).then_some(v))
}

/// A `fixed64` time: None when unset (0).
pub(crate) fn time(t: u64) -> Result<Option<i64>, String> {
    if t == 0 {
        return Ok(None);
    }
    i64::try_from(t)
        .map(Some)
        .map_err(|_| format!("time {t} is beyond 2262-04-11 (the largest signed 64-bit ns)"))
}

fn span_data(span: &Span) -> Result<Option<SpanData>, String> {
    let mut messages = Vec::new();
    for e in &span.events {
        let name = std::str::from_utf8(&e.name).ok();
        if !is_message_event(name) {
            continue;
        }
        let attributes = e.attributes.iter().map(KeyValue::attribute);
        if let Some(m) = message_event(name, time(e.time_unix_nano)?, attributes) {
            messages.push(m);
        }
    }
    let mut links = Vec::new();
    for l in &span.links {
        if let (Some(t), Some(s)) = (
            id(&l.trace_id, 16, "trace_id")?,
            id(&l.span_id, 8, "span_id")?,
        ) {
            links.push((t, s as u64));
        }
    }
    Ok(SpanData::new(SpanParts {
        trace_id: id(&span.trace_id, 16, "trace_id")?,
        span_id: id(&span.span_id, 8, "span_id")?,
        parent: id(&span.parent_span_id, 8, "parent_span_id")?,
        kind: Kind::of_number(i64::from(span.kind))?,
        start: time(span.start_time_unix_nano)?,
        end: time(span.end_time_unix_nano)?,
        error: span.status.as_ref().is_some_and(|s| s.code == 2),
        messages,
        links,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_frame_tells_protobuf_spans_apart() {
        // A frame of 10 bytes: resource_spans of 8 bytes starting with its resource.
        let good = [0, 0, 0, 10, 0x0a, 8, 0x0a, 6, 0, 0, 0, 0, 0, 0];
        assert!(looks_like_proto(&good));
        assert!(looks_like_proto(&good[..6]));
        let mut long = good;
        long[5] = 20; // longer than its frame
        assert!(!looks_like_proto(&long));
        let mut other = good;
        other[4] = 0x12; // not field 1
        assert!(!looks_like_proto(&other));
        assert!(!looks_like_proto(b"#abc\n1\n\x0aabc"));
        assert!(!looks_like_proto(b"{\"resourceSpans\":[]}"));
        assert!(!looks_like_proto(&[0xff, 0, 0, 10, 0x0a, 8, 0x0a]));
        assert!(compressed(&[0x28, 0xb5, 0x2f, 0xfd, 0]).is_some());
        assert!(compressed(&[0, 0, 0, 9, 0x28, 0xb5, 0x2f, 0xfd]).is_some());
        assert!(compressed(&good).is_none());
    }

    #[test]
    fn ids_are_big_endian_like_their_hex() {
        assert_eq!(
            id(&[1, 2, 3, 4, 5, 6, 7, 8], 8, "span_id"),
            Ok(Some(0x0102030405060708))
        );
        assert_eq!(id(&[], 8, "span_id"), Ok(None));
        assert_eq!(id(&[0; 16], 16, "trace_id"), Ok(None));
        assert!(
            id(&[1, 2], 8, "span_id")
                .unwrap_err()
                .contains("of 2 bytes")
        );
    }
}
