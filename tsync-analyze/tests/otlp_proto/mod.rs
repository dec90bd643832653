//! OTLP protobuf for the tests and the benchmark: OpenTelemetry's `TracesData` messages
//! (opentelemetry-proto's `trace/v1/trace.proto`, every field of a span) declared with prost,
//! and the conversion of an OTLP/JSON `TracesData` line into them, so that the same spans can
//! be written both ways. [`frame`] frames a message as the Collector's file exporter does with
//! `format: proto` (a 4-byte big-endian length, then the message).

#![allow(dead_code)]

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct TracesData {
    #[prost(message, repeated, tag = "1")]
    pub resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_spans: Vec<ScopeSpans>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
    #[prost(uint32, tag = "2")]
    pub dropped_attributes_count: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<Scope>,
    #[prost(message, repeated, tag = "2")]
    pub spans: Vec<Span>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Scope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Span {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
    #[prost(string, tag = "3")]
    pub trace_state: String,
    #[prost(bytes = "vec", tag = "4")]
    pub parent_span_id: Vec<u8>,
    #[prost(fixed32, tag = "16")]
    pub flags: u32,
    #[prost(string, tag = "5")]
    pub name: String,
    #[prost(int32, tag = "6")]
    pub kind: i32,
    #[prost(fixed64, tag = "7")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(message, repeated, tag = "11")]
    pub events: Vec<Event>,
    #[prost(message, repeated, tag = "13")]
    pub links: Vec<Link>,
    #[prost(message, optional, tag = "15")]
    pub status: Option<Status>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(fixed64, tag = "1")]
    pub time_unix_nano: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Link {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
    #[prost(message, repeated, tag = "4")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(int32, tag = "3")]
    pub code: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(oneof = "Value_", tags = "1, 2, 3, 4")]
    pub value: Option<Value_>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value_ {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
    #[prost(double, tag = "4")]
    Double(f64),
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn hex(v: &Value) -> Vec<u8> {
    let t = v.as_str().unwrap_or_default();
    (0..t.len() / 2)
        .map(|i| u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("hex id"))
        .collect()
}

fn number(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().expect("a decimal integer"),
        Value::Number(n) => n.as_u64().expect("an integer"),
        _ => 0,
    }
}

fn attributes(v: &Value) -> Vec<KeyValue> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|kv| {
                    let value = &kv["value"];
                    let value = if let Some(s) = value.get("stringValue") {
                        Some(Value_::String(text(s)))
                    } else if let Some(i) = value.get("intValue") {
                        Some(Value_::Int(number(i) as i64))
                    } else if let Some(b) = value.get("boolValue") {
                        Some(Value_::Bool(b.as_bool().unwrap_or_default()))
                    } else {
                        value
                            .get("doubleValue")
                            .map(|d| Value_::Double(d.as_f64().unwrap_or_default()))
                    };
                    KeyValue {
                        key: text(&kv["key"]),
                        value: Some(AnyValue { value }),
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn array(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], |a| a.as_slice())
}

/// The protobuf `TracesData` of an OTLP/JSON `TracesData` object.
pub fn from_json(line: &Value) -> TracesData {
    TracesData {
        resource_spans: array(&line["resourceSpans"])
            .iter()
            .map(|rs| ResourceSpans {
                resource: rs.get("resource").map(|r| Resource {
                    attributes: attributes(&r["attributes"]),
                    dropped_attributes_count: 0,
                }),
                scope_spans: array(&rs["scopeSpans"])
                    .iter()
                    .map(|ss| ScopeSpans {
                        scope: ss.get("scope").map(|s| Scope {
                            name: text(&s["name"]),
                            version: text(&s["version"]),
                        }),
                        spans: array(&ss["spans"]).iter().map(span).collect(),
                        schema_url: String::new(),
                    })
                    .collect(),
                schema_url: text(&rs["schemaUrl"]),
            })
            .collect(),
    }
}

fn span(s: &Value) -> Span {
    Span {
        trace_id: hex(&s["traceId"]),
        span_id: hex(&s["spanId"]),
        trace_state: String::new(),
        parent_span_id: hex(&s["parentSpanId"]),
        flags: number(&s["flags"]) as u32,
        name: text(&s["name"]),
        kind: number(&s["kind"]) as i32,
        start_time_unix_nano: number(&s["startTimeUnixNano"]),
        end_time_unix_nano: number(&s["endTimeUnixNano"]),
        attributes: attributes(&s["attributes"]),
        events: array(&s["events"])
            .iter()
            .map(|e| Event {
                time_unix_nano: number(&e["timeUnixNano"]),
                name: text(&e["name"]),
                attributes: attributes(&e["attributes"]),
            })
            .collect(),
        links: array(&s["links"])
            .iter()
            .map(|l| Link {
                trace_id: hex(&l["traceId"]),
                span_id: hex(&l["spanId"]),
                attributes: attributes(&l["attributes"]),
            })
            .collect(),
        status: s.get("status").map(|st| Status {
            message: text(&st["message"]),
            code: number(&st["code"]) as i32,
        }),
    }
}

/// One frame of the Collector's file exporter with `format: proto`: the message's length as 4
/// bytes big-endian, then the message.
pub fn frame(message: &TracesData) -> Vec<u8> {
    let body = message.encode_to_vec();
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// A whole OTLP/JSON file (one `TracesData` per line) as the protobuf file of the same spans.
pub fn file_from_json(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("an OTLP/JSON line");
        out.extend_from_slice(&frame(&from_json(&v)));
    }
    out
}

/// The messages of a protobuf span file's frames.
pub fn messages(file: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = file;
    while let Some((len, body)) = rest.split_first_chunk::<4>() {
        let (message, next) = body.split_at(u32::from_be_bytes(*len) as usize);
        out.push(message);
        rest = next;
    }
    assert!(rest.is_empty(), "a cut frame");
    out
}

/// The `TracesData` of every frame of a protobuf span file.
pub fn decode_file(file: &[u8]) -> Vec<TracesData> {
    messages(file)
        .into_iter()
        .map(|m| TracesData::decode(m).expect("a TracesData message"))
        .collect()
}

/// A field of a message as it is on the wire: its number, its bytes (key, length, value), and
/// its payload where it is length-delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireField<'a> {
    pub tag: u32,
    pub bytes: &'a [u8],
    pub payload: Option<&'a [u8]>,
}

/// The fields of `message`, in their order.
pub fn wire_fields(message: &[u8]) -> Vec<WireField<'_>> {
    use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
    let mut out = Vec::new();
    let mut rest = message;
    while !rest.is_empty() {
        let at = rest;
        let (tag, wire_type) = decode_key(&mut rest).expect("a key");
        let mut payload = None;
        if wire_type == WireType::LengthDelimited {
            let len = decode_varint(&mut rest).expect("a length") as usize;
            payload = Some(&rest[..len]);
            rest = &rest[len..];
        } else {
            skip_field(wire_type, tag, &mut rest, DecodeContext::default()).expect("a field");
        }
        out.push(WireField {
            tag,
            bytes: &at[..at.len() - rest.len()],
            payload,
        });
    }
    out
}

/// A length-delimited field: key, length, `payload`.
pub fn delimited(tag: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut out);
    prost::encoding::encode_varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}
