//! The OTLP/JSON side of `apply --format otlp`: each line parsed with serde_json into borrowed
//! raw values, only the path down to the times taken apart, every other member copied as the
//! text it was; a mapped time keeps the form it had, and the `tsync.*` attributes the shared
//! [`Rewriter`] computed are appended as `KeyValue` objects. The OTLP/JSON pieces (members as
//! raw text, attributes, times) are those `sync` reads span files with (`crate::spans::json`):
//! both accept the same files.

use std::io::{BufRead, Write};

use serde_json::value::RawValue;

use super::{ApplyError, AttrValue, LineFailure, NodeOf, Rewriter, check_key, unsigned};
use crate::spans::json::{KeyValue, Members, Spelling, array, attributes, parse_time};

impl Rewriter<'_> {
    /// Rewrites OTLP/JSON lines.
    pub(super) fn lines<R: BufRead, W: Write>(
        &mut self,
        mut input: R,
        name: &str,
        mut out: W,
    ) -> Result<(), ApplyError> {
        let write_err = |e| ApplyError::io("cannot write the output", e);
        let mut line = Vec::new();
        let mut rewritten = Vec::new();
        let mut number = 0u64;
        loop {
            line.clear();
            let n = input
                .read_until(b'\n', &mut line)
                .map_err(|e| ApplyError::io(format!("cannot read {name}"), e))?;
            if n == 0 {
                return Ok(());
            }
            number += 1;
            let fail = |what: String| ApplyError::Events(format!("{name}:{number}: {what}"));
            let text = std::str::from_utf8(&line)
                .map_err(|e| fail(format!("not UTF-8 text ({e}); is it OTLP/JSON?")))?;
            if text.trim().is_empty() {
                out.write_all(&line).map_err(write_err)?;
                self.summary.blank += 1;
                continue;
            }
            rewritten.clear();
            match self.line(text.trim_end_matches(['\n', '\r']), &mut rewritten) {
                Ok(()) => {}
                Err(LineFailure::Text(what)) => return Err(fail(what)),
                Err(LineFailure::Apply(e)) => return Err(e),
            }
            rewritten.push(b'\n');
            out.write_all(&rewritten).map_err(write_err)?;
            self.summary.batches += 1;
        }
    }

    fn node_of(&self, resource: Option<&RawValue>) -> Result<NodeOf, String> {
        self.node_named(|| {
            let Some(resource) = resource else {
                return Ok(None);
            };
            let members = Members::parse(resource.get(), "`resource`")?;
            let Some(raw) = members.get("attributes") else {
                return Ok(None);
            };
            let kvs: Vec<KeyValue> = attributes(raw, "the resource's")?;
            Ok(self.options.attribution.node_of(&kvs).map(|(name, _)| name))
        })
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
            let NodeOf::Known(k) = node else {
                self.skip(node, spans.len() as u64);
                return Ok(false);
            };
            write_array(out, spans, |span, out| self.span(span, *k, out))?;
            Ok(true)
        })
    }

    fn span(&mut self, raw: &RawValue, node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let members = Members::parse(raw.get(), "a span")?;
        check_not_applied(members.get("attributes"))?;
        let start = json_time(members.get("startTimeUnixNano"))?;
        let end = json_time(members.get("endTimeUnixNano"))?;
        let rw = self.span_rewrite(node, start.map(|t| t.0), end.map(|t| t.0))?;
        let attrs = JsonAttributes::of(&rw.attributes);
        let mut body = Vec::new();
        write_members(&mut body, &members, |key, value, out| {
            match key {
                "startTimeUnixNano" | "endTimeUnixNano" => {
                    let (t, m) = if key == "startTimeUnixNano" {
                        (start, rw.start)
                    } else {
                        (end, rw.end)
                    };
                    let (Some((_, spelling)), Some(m)) = (t, m) else {
                        return Ok(false);
                    };
                    write_time(out, m.mapped.t_ns, spelling)?;
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
        Ok(())
    }

    fn event(&mut self, raw: &RawValue, node: u32, out: &mut Vec<u8>) -> Result<(), LineFailure> {
        let members = Members::parse(raw.get(), "a span event")?;
        check_not_applied(members.get("attributes"))?;
        let time = json_time(members.get("timeUnixNano"))?;
        let rw = self.event_rewrite(node, time.map(|t| t.0))?;
        let attrs = JsonAttributes::of(&rw.attributes);
        let mut body = Vec::new();
        write_members(&mut body, &members, |key, value, out| {
            match (key, time, rw.time) {
                ("timeUnixNano", Some((_, spelling)), Some(m)) => {
                    write_time(out, m.mapped.t_ns, spelling)?
                }
                ("attributes", _, _) if !attrs.0.is_empty() => attrs.append_to(out, Some(value))?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        close_with_attributes(out, &body, &members, &attrs)?;
        Ok(())
    }
}

/// A mapped time in the spelling the file had it in (a decimal string or a number).
fn write_time(out: &mut Vec<u8>, t: i64, spelling: Spelling) -> Result<(), String> {
    let t = unsigned(t)?;
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
struct JsonAttributes(Vec<u8>);

impl JsonAttributes {
    /// The OTLP/JSON text of `attrs`: 64-bit integers as decimal strings, as OTLP/JSON writes
    /// them.
    fn of(attrs: &[(&str, AttrValue<'_>)]) -> Self {
        let mut a = JsonAttributes::default();
        for (key, value) in attrs {
            a.push(key, *value);
        }
        a
    }

    fn push(&mut self, key: &str, value: AttrValue<'_>) {
        if !self.0.is_empty() {
            self.0.push(b',');
        }
        self.0.extend_from_slice(b"{\"key\":");
        serde_json::to_writer(&mut self.0, key).expect("writing to a Vec");
        self.0.extend_from_slice(b",\"value\":{");
        match value {
            AttrValue::Str(v) => {
                self.0.extend_from_slice(b"\"stringValue\":");
                serde_json::to_writer(&mut self.0, v).expect("writing to a Vec");
            }
            AttrValue::Int(v) => {
                self.0.extend_from_slice(b"\"intValue\":\"");
                self.0
                    .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
                self.0.push(b'"');
            }
            AttrValue::Bool(v) => {
                self.0.extend_from_slice(b"\"boolValue\":");
                self.0.extend_from_slice(if v { b"true" } else { b"false" });
            }
        }
        self.0.extend_from_slice(b"}}");
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
    kvs.iter().try_for_each(|kv| check_key(&kv.key))
}

/// An OTLP/JSON time member: its value and spelling, None where absent or unset (0).
fn json_time(raw: Option<&RawValue>) -> Result<Option<(i64, Spelling)>, String> {
    Ok(raw.map(parse_time).transpose()?.flatten())
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
    attrs: &JsonAttributes,
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

#[cfg(test)]
mod tests;
