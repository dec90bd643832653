//! OTLP/JSON as both readers of spans take it apart: `sync`'s reader of span messages
//! ([`super::read`]) and `apply --format otlp`'s rewriter (`apply/otlp.rs`). One definition of
//! an object's members kept as raw text, of attributes, and of a `…UnixNano` time, so that both
//! accept exactly the same files and say the same thing about a bad one.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON object's members in their order, values as the raw text they were.
pub(crate) struct Members<'a>(pub(crate) Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut v = Vec::new();
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    v.push(entry);
                }
                Ok(Members(v))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> Members<'a> {
    /// The members of the object `raw`; the error names it as `what`.
    pub(crate) fn parse(raw: &'a str, what: &str) -> Result<Self, String> {
        serde_json::from_str(raw).map_err(|e| format!("{what} is not a JSON object ({e})"))
    }

    /// The raw value of member `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

/// The elements of the array `raw`, as raw text; the error names it as `what`.
pub(crate) fn array<'a>(raw: &'a RawValue, what: &str) -> Result<Vec<&'a RawValue>, String> {
    serde_json::from_str(raw.get()).map_err(|e| format!("{what} is not a JSON array ({e})"))
}

/// An attribute (`KeyValue`): its key, and its value where it is a string or an integer (the
/// only kinds a node name or a message id come as).
#[derive(serde::Deserialize)]
pub(crate) struct KeyValue {
    pub(crate) key: String,
    #[serde(default)]
    pub(crate) value: Option<AnyValue>,
}

/// The string or integer of an `AnyValue` (OTLP/JSON writes 64-bit integers as decimal
/// strings, some encoders as numbers).
#[derive(serde::Deserialize)]
pub(crate) struct AnyValue {
    #[serde(rename = "stringValue")]
    pub(crate) string_value: Option<String>,
    /// Checked as it is parsed (a number within i64 or a string: `apply --format otlp`'s
    /// rewriter refuses anything else, as `sync`'s reader does); `sync` reads message ids with
    /// `read.rs`'s borrowed attributes.
    #[serde(rename = "intValue", default)]
    #[allow(dead_code)]
    pub(crate) int_value: Option<IntValue>,
}

/// An `intValue`, as a decimal string or a number.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
#[serde(untagged)]
pub(crate) enum IntValue {
    Number(i64),
    Text(String),
}

#[allow(dead_code)]
impl IntValue {
    /// The integer, if it is one.
    pub(crate) fn get(&self) -> Option<i64> {
        match self {
            IntValue::Number(n) => Some(*n),
            IntValue::Text(t) => t.parse().ok(),
        }
    }
}

/// Parses an `attributes` array.
pub(crate) fn attributes(raw: &RawValue, what: &str) -> Result<Vec<KeyValue>, String> {
    serde_json::from_str(raw.get())
        .map_err(|e| format!("{what} `attributes` are not key/value objects ({e})"))
}

/// How a `…UnixNano` value was written: OTLP/JSON's decimal string, or a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spelling {
    String,
    Number,
}

/// A `fixed64` time: None when unset (0). Errors say what is wrong with the text.
pub(crate) fn parse_time(raw: &RawValue) -> Result<Option<(i64, Spelling)>, String> {
    parse_time_text(raw.get())
}

/// [`parse_time`] of a value's raw text.
pub(crate) fn parse_time_text(text: &str) -> Result<Option<(i64, Spelling)>, String> {
    let (digits, spelling) = match text.strip_prefix('"') {
        Some(rest) => (rest.strip_suffix('"').unwrap_or(rest), Spelling::String),
        None => (text, Spelling::Number),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{} is not a time in ns (a decimal integer, as a string or a number)",
            text.chars().take(40).collect::<String>()
        ));
    }
    let v: u64 = digits
        .parse()
        .map_err(|_| format!("{text} is beyond 64 bits"))?;
    if v == 0 {
        return Ok(None);
    }
    let v = i64::try_from(v)
        .map_err(|_| format!("{text} is beyond 2262-04-11 (the largest signed 64-bit ns)"))?;
    Ok(Some((v, spelling)))
}
