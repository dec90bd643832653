//! OTLP protobuf span files rewritten: the Collector file exporter's `format: proto`, each
//! `TracesData` message after its length in 4 bytes big-endian (`crate::spans::proto`, whose
//! [`Frames`] read them here too). The output is protobuf, framed the same way.
//!
//! **Walked by hand, on the wire.** Decoding into prost structs and encoding them again would
//! drop every field they do not declare (prost keeps no unknown fields) and could change the
//! encoding of the rest (field order, packed or not, a non-minimal length). Instead each message
//! on the path to the times is taken apart field by field with prost's own wire functions
//! (`prost::encoding`, which its derived code calls: `decode_key`, `decode_varint`, and
//! `skip_field`, which also skips groups; no varint code here): `TracesData.resource_spans` (1)
//! → `ResourceSpans.scope_spans` (2) → `ScopeSpans.spans` (2) → `Span`, whose
//! `start_time_unix_nano` (7) and `end_time_unix_nano` (8), both `fixed64`, and whose events'
//! (11) `Event.time_unix_nano` (1, `fixed64`) are overwritten in place (8 bytes for 8 bytes).
//! Every other field is copied as the bytes it was, in its order. A span gains its `tsync.*`
//! attributes as `Span.attributes` (9) fields appended at its end, an event as `Event.attributes`
//! (3): a repeated field may come in pieces anywhere in its message, and readers concatenate
//! them in order, so the new attributes follow the span's own. Each `KeyValue` is `key` (1) and
//! `value` (2): an `AnyValue` with `string_value` (1), `bool_value` (2) or `int_value` (3), the
//! values and types the OTLP/JSON rewriter writes ([`Rewriter::span_rewrite`] computes both).
//! Only the messages that grew get a new length (the frame, and the `ResourceSpans`,
//! `ScopeSpans`, `Span` and `Event` holding new attributes); a message whose length did not
//! change keeps its length's bytes. The field numbers are opentelemetry-proto's
//! (`trace/v1/trace.proto`, `common/v1/common.proto`; stable since OTLP 1.0).
//!
//! The resource is only read, to find its node: decoded with `crate::spans::proto`'s prost
//! `Resource`, by the attribution rule `sync` uses, and copied as it was.
//!
//! **Bad input**, as a bad OTLP/JSON line: a frame that does not decode (or whose times are not
//! `fixed64`s) is an error `name: frame N at byte OFFSET: …`, in `sync`'s words
//! ([`frame_message`]), and nothing is written. A last frame cut short is an error too, as a
//! cut last line is for the OTLP/JSON rewriter (its text does not parse): `sync` reads the
//! frames before it, but `apply` writes whole files only. zstd-compressed frames are refused by
//! name ([`Frames`]), as `sync` refuses them. Memory is that of one frame.

use std::borrow::Cow;
use std::io::{BufRead, Write};

use prost::encoding::{
    DecodeContext, WireType, decode_key, decode_varint, encode_key, encode_varint, skip_field,
};

use super::{ApplyError, AttrValue, LineFailure, NodeOf, Rewriter, check_key, unsigned};
use crate::spans::proto::{Frame, FrameError, Frames, frame_message, resource_node, time};

/// `TracesData.resource_spans`.
const RESOURCE_SPANS: u32 = 1;
/// `ResourceSpans.resource`.
const RESOURCE: u32 = 1;
/// `ResourceSpans.scope_spans`.
const SCOPE_SPANS: u32 = 2;
/// `ScopeSpans.spans`.
const SPANS: u32 = 2;
/// `Span.start_time_unix_nano`, `end_time_unix_nano`, `attributes`, `events`.
const SPAN_START: u32 = 7;
const SPAN_END: u32 = 8;
const SPAN_ATTRIBUTES: u32 = 9;
const SPAN_EVENTS: u32 = 11;
/// `Event.time_unix_nano`, `attributes`.
const EVENT_TIME: u32 = 1;
const EVENT_ATTRIBUTES: u32 = 3;
/// `KeyValue.key`, `value`.
const KEY: u32 = 1;
const VALUE: u32 = 2;
/// `AnyValue.string_value`, `bool_value`, `int_value`.
const STRING_VALUE: u32 = 1;
const BOOL_VALUE: u32 = 2;
const INT_VALUE: u32 = 3;

/// One field of a message, as it is on the wire.
#[derive(Clone, Copy, Debug)]
struct Field<'a> {
    tag: u32,
    wire_type: WireType,
    /// The whole field: its key, its length (length-delimited fields) and its value.
    bytes: &'a [u8],
    /// The key's length in bytes.
    key_len: usize,
    /// Its value: a length-delimited field's payload, a `fixed64`'s 8 bytes, a varint's bytes.
    value: &'a [u8],
}

impl<'a> Field<'a> {
    /// The field at the start of `b`.
    fn parse(b: &'a [u8]) -> Result<Field<'a>, String> {
        let mut rest = b;
        let (tag, wire_type) = decode_key(&mut rest).map_err(not_traces)?;
        let key_len = b.len() - rest.len();
        let mut value_at = key_len;
        if wire_type == WireType::LengthDelimited {
            let len = decode_varint(&mut rest).map_err(not_traces)?;
            value_at = b.len() - rest.len();
            if len > rest.len() as u64 {
                return Err(format!(
                    "not an OTLP `TracesData` message (field {tag}'s length, {len} bytes, runs \
                     past the end of its message)"
                ));
            }
            rest = &rest[len as usize..];
        } else {
            skip_field(wire_type, tag, &mut rest, DecodeContext::default()).map_err(not_traces)?;
        }
        let end = b.len() - rest.len();
        Ok(Field {
            tag,
            wire_type,
            bytes: &b[..end],
            key_len,
            value: &b[value_at..end],
        })
    }

    /// Its payload, where it is length-delimited (a message, a string); else an error naming it
    /// as `what`.
    fn payload(&self, what: &str) -> Result<&'a [u8], String> {
        self.expect(WireType::LengthDelimited, what)?;
        Ok(self.value)
    }

    /// Its value as a `fixed64`; else an error naming it as `what`.
    fn fixed64(&self, what: &str) -> Result<u64, String> {
        self.expect(WireType::SixtyFourBit, what)?;
        let bytes: [u8; 8] = self.value.try_into().expect("skip_field took 8 bytes");
        Ok(u64::from_le_bytes(bytes))
    }

    fn expect(&self, want: WireType, what: &str) -> Result<(), String> {
        if self.wire_type == want {
            return Ok(());
        }
        Err(format!(
            "not an OTLP `TracesData` message ({what}, field {}, has wire type {:?}, not {want:?})",
            self.tag, self.wire_type
        ))
    }
}

fn not_traces(e: prost::DecodeError) -> String {
    format!("not an OTLP `TracesData` message ({e})")
}

/// A message's fields, in their order.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = Field::parse(self.0);
        // After an error, nothing more: the rest cannot be told apart.
        self.0 = field.as_ref().map_or(&[], |f| &self.0[f.bytes.len()..]);
        Some(field)
    }
}

/// Writes the length-delimited field `f` with its payload rewritten by `rewrite` (which writes
/// the new payload to the end of `out`): its key as it was, and its length as it was unless the
/// payload's changed (then re-encoded, and the payload moved where the length takes more or
/// fewer bytes).
fn rewrite_field(
    out: &mut Vec<u8>,
    f: &Field<'_>,
    what: &str,
    rewrite: impl FnOnce(&[u8], &mut Vec<u8>) -> Result<(), LineFailure>,
) -> Result<(), LineFailure> {
    let payload = f.payload(what)?;
    let head = &f.bytes[..f.bytes.len() - payload.len()];
    let start = out.len();
    out.extend_from_slice(head);
    let body = out.len();
    rewrite(payload, out)?;
    let len = out.len() - body;
    if len != payload.len() {
        let mut new_head = head[..f.key_len].to_vec();
        encode_varint(len as u64, &mut new_head);
        out.splice(start..body, new_head);
    }
    Ok(())
}

/// Writes a length-delimited field: key, length, `payload`.
fn write_delimited(out: &mut Vec<u8>, tag: u32, payload: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

/// Appends `attrs` as `KeyValue` fields number `tag` (`Span.attributes` or `Event.attributes`).
fn append_attributes(out: &mut Vec<u8>, tag: u32, attrs: &[(&str, AttrValue<'_>)]) {
    let (mut value, mut kv) = (Vec::new(), Vec::new());
    for (key, v) in attrs {
        value.clear();
        match *v {
            AttrValue::Str(s) => write_delimited(&mut value, STRING_VALUE, s.as_bytes()),
            AttrValue::Bool(b) => prost::encoding::bool::encode(BOOL_VALUE, &b, &mut value),
            AttrValue::Int(i) => prost::encoding::int64::encode(INT_VALUE, &i, &mut value),
        }
        kv.clear();
        write_delimited(&mut kv, KEY, key.as_bytes());
        write_delimited(&mut kv, VALUE, &value);
        write_delimited(out, tag, &kv);
    }
}

/// Refuses a `KeyValue` (the message `kv`) whose key is one of `apply`'s own.
fn check_attribute(kv: &[u8]) -> Result<(), String> {
    for f in Fields(kv) {
        let f = f?;
        if f.tag == KEY {
            check_key(&String::from_utf8_lossy(f.payload("an attribute's `key`")?))?;
        }
    }
    Ok(())
}

/// The time in the `fixed64` field `f` (None where unset: 0).
fn time_of(f: &Field<'_>, what: &str) -> Result<Option<i64>, String> {
    time(f.fixed64(what)?)
}

/// Writes the `fixed64` field `f` (its key as it was) with the value `t`.
fn write_time(out: &mut Vec<u8>, f: &Field<'_>, t: i64) -> Result<(), String> {
    out.extend_from_slice(&f.bytes[..f.key_len]);
    out.extend_from_slice(&unsigned(t)?.to_le_bytes());
    Ok(())
}

/// The number of `ScopeSpans.spans` in the `ResourceSpans` message `rs`.
fn count_spans(rs: &[u8]) -> Result<u64, String> {
    let mut n = 0;
    for f in Fields(rs) {
        let f = f?;
        if f.tag == SCOPE_SPANS {
            for s in Fields(f.payload("`scope_spans`")?) {
                n += u64::from(s?.tag == SPANS);
            }
        }
    }
    Ok(n)
}

impl Rewriter<'_> {
    /// Rewrites OTLP protobuf frames.
    pub(super) fn frames<R: BufRead, W: Write>(
        &mut self,
        input: R,
        name: &str,
        mut out: W,
    ) -> Result<(), ApplyError> {
        let mut frames = Frames::new(input);
        let (mut body, mut rewritten) = (Vec::new(), Vec::new());
        let fail = |frames: &Frames<R>, what: &dyn std::fmt::Display| {
            ApplyError::Events(frame_message(name, frames.number, frames.offset, what))
        };
        loop {
            match frames.next(&mut body) {
                Ok(Frame::Whole) => {}
                Ok(Frame::End) => return Ok(()),
                Ok(Frame::CutShort) => {
                    return Err(fail(
                        &frames,
                        &"cut short: its length or its message runs past the end of the file \
                          (was it still being written?); `apply` rewrites whole files only \
                          (`sync` reads the frames before it)",
                    ));
                }
                Err(FrameError::Io(e)) => {
                    return Err(ApplyError::io(format!("cannot read {name}"), e));
                }
                Err(FrameError::Invalid(what)) => return Err(fail(&frames, &what)),
            }
            rewritten.clear();
            rewritten.extend_from_slice(&[0; 4]);
            match Wire(self).traces_data(&body, &mut rewritten) {
                Ok(()) => {}
                Err(LineFailure::Text(what)) => return Err(fail(&frames, &what)),
                Err(LineFailure::Apply(e)) => return Err(e),
            }
            let len = u32::try_from(rewritten.len() - 4).map_err(|_| {
                fail(
                    &frames,
                    &"rewritten, longer than a frame's 4-byte length holds",
                )
            })?;
            rewritten[..4].copy_from_slice(&len.to_be_bytes());
            out.write_all(&rewritten)
                .map_err(|e| ApplyError::io("cannot write the output", e))?;
            self.summary.batches += 1;
        }
    }
}

/// The walk of one frame's messages, the rewriter's protobuf side (its OTLP/JSON side has
/// methods of the same names).
struct Wire<'r, 'tb>(&'r mut Rewriter<'tb>);

impl Wire<'_, '_> {
    /// One `TracesData` message into `out`.
    fn traces_data(&mut self, msg: &[u8], out: &mut Vec<u8>) -> Result<(), LineFailure> {
        for f in Fields(msg) {
            let f = f?;
            if f.tag == RESOURCE_SPANS {
                rewrite_field(out, &f, "`resource_spans`", |rs, out| {
                    self.resource_spans(rs, out)
                })?;
            } else {
                out.extend_from_slice(f.bytes);
            }
        }
        Ok(())
    }

    /// The node of the `ResourceSpans` message `rs`, from its `resource` (every piece of it:
    /// protobuf merges a message field that comes more than once).
    fn node(&self, rs: &[u8]) -> Result<NodeOf, String> {
        self.0.node_named(|| {
            let mut resource: Option<Cow<[u8]>> = None;
            for f in Fields(rs) {
                let f = f?;
                if f.tag == RESOURCE {
                    let piece = f.payload("`resource`")?;
                    resource = Some(match resource {
                        None => Cow::Borrowed(piece),
                        Some(r) => Cow::Owned([&r[..], piece].concat()),
                    });
                }
            }
            let Some(resource) = resource else {
                return Ok(None);
            };
            resource_node(&self.0.options.attribution, &resource)
                .map_err(|e| format!("the `resource` is not an OTLP `Resource` ({e})"))
        })
    }

    fn resource_spans(&mut self, rs: &[u8], out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let node = self.node(rs)?;
        let NodeOf::Known(k) = node else {
            // Spans of a node the traces do not know are counted and copied as they are.
            self.0.skip(&node, count_spans(rs)?);
            out.extend_from_slice(rs);
            return Ok(());
        };
        for f in Fields(rs) {
            let f = f?;
            if f.tag == SCOPE_SPANS {
                rewrite_field(out, &f, "`scope_spans`", |ss, out| {
                    self.scope_spans(ss, k, out)
                })?;
            } else {
                out.extend_from_slice(f.bytes);
            }
        }
        Ok(())
    }

    fn scope_spans(&mut self, ss: &[u8], node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        for f in Fields(ss) {
            let f = f?;
            if f.tag == SPANS {
                rewrite_field(out, &f, "`spans`", |span, out| self.span(span, node, out))?;
            } else {
                out.extend_from_slice(f.bytes);
            }
        }
        Ok(())
    }

    /// One `Span`: first its times found (the last of a field that comes twice, as protobuf
    /// reads it) and its attributes checked, then its fields written, events rewritten as they
    /// come, and its new attributes appended.
    fn span(&mut self, span: &[u8], node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let (mut start, mut end) = (None, None);
        for f in Fields(span) {
            let f = f?;
            match f.tag {
                SPAN_START => start = time_of(&f, "`start_time_unix_nano`")?,
                SPAN_END => end = time_of(&f, "`end_time_unix_nano`")?,
                SPAN_ATTRIBUTES => check_attribute(f.payload("a span's `attributes`")?)?,
                _ => {}
            }
        }
        let rw = self.0.span_rewrite(node, start, end)?;
        for f in Fields(span) {
            let f = f?;
            match (f.tag, rw.start, rw.end) {
                (SPAN_START, Some(t), _) | (SPAN_END, _, Some(t)) => {
                    write_time(out, &f, t.mapped.t_ns)?
                }
                (SPAN_EVENTS, _, _) => {
                    rewrite_field(out, &f, "a span's `events`", |e, out| {
                        self.event(e, node, out)
                    })?;
                }
                _ => out.extend_from_slice(f.bytes),
            }
        }
        append_attributes(out, SPAN_ATTRIBUTES, &rw.attributes);
        Ok(())
    }

    fn event(&mut self, event: &[u8], node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let mut t = None;
        for f in Fields(event) {
            let f = f?;
            match f.tag {
                EVENT_TIME => t = time_of(&f, "an event's `time_unix_nano`")?,
                EVENT_ATTRIBUTES => check_attribute(f.payload("an event's `attributes`")?)?,
                _ => {}
            }
        }
        let rw = self.0.event_rewrite(node, t)?;
        for f in Fields(event) {
            let f = f?;
            match (f.tag, rw.time) {
                (EVENT_TIME, Some(t)) => write_time(out, &f, t.mapped.t_ns)?,
                _ => out.extend_from_slice(f.bytes),
            }
        }
        append_attributes(out, EVENT_ATTRIBUTES, &rw.attributes);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
