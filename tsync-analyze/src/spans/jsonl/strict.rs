//! The reference reading of an OTLP/JSON line: serde_json parses it once into pieces borrowed
//! from it (structs of `&str`, `Cow` and raw values; the members not needed skipped unbuilt),
//! hex ids decoded straight into integers. Every line the fast reading (`skim.rs`) does not take
//! comes here, and every error about a line is said here: what serde_json accepts is what a span
//! file may hold.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::spans::json::{Members, parse_time};
use crate::spans::node::NodeAttribution;
use crate::spans::read::{
    Attribute, Kind, SpanData, SpanParts, SpanVisitor, is_message_event, message_event, node_of,
};

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
pub(super) struct Resource<'a> {
    #[serde(default, borrow)]
    pub(super) attributes: Vec<KeyValueRef<'a>>,
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
pub(super) struct KeyValueRef<'a> {
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
    pub(super) fn attribute(&self) -> (&str, Attribute<'_>) {
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

/// One `TracesData` line.
pub(super) fn read_line(
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
pub(super) const HEX: [u8; 256] = {
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
pub(super) fn hex(digits: &[u8]) -> Option<u128> {
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
    let error = span
        .status
        .and_then(|s| s.code)
        .is_some_and(|c| is_error_code(c.get()));
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

/// Whether a status `code` (its raw text) is STATUS_CODE_ERROR: 2, or its name as some encoders
/// write it.
pub(super) fn is_error_code(text: &str) -> bool {
    text == "2" || (text.starts_with('"') && text.trim_matches('"').ends_with("ERROR"))
}

/// Whether `line` parses as a `TracesData` line (whatever its spans hold).
pub(super) fn is_traces_data(line: &[u8]) -> bool {
    serde_json::from_slice::<TracesData>(line).is_ok_and(|t| t.resource_spans.is_some())
}
