//! The first pass over an OTLP/JSON span file: its nodes (the resources' node attributes) and
//! its earliest time, found by searching each line for two keys instead of parsing it.
//!
//! In a line that is JSON, the bytes `"resource"` followed by a colon can only be a key: a
//! quote inside a string is escaped, and a string's closing quote cannot be followed by a
//! letter; OTLP/JSON has that key in a `ResourceSpans` only. Likewise `"startTimeUnixNano"` and
//! `"endTimeUnixNano"` are a span's. So a search (memchr's, many bytes at a time) finds every
//! resource and every span time of a line, in order, at a fraction of a parse's cost; the
//! resource itself is parsed, with serde, as the second pass parses it. A line that is not JSON
//! is the second pass's to report, with its line number: this one only looks.
//!
//! The earliest time is taken over every span with a time, whatever its resource or ids.

use memchr::memmem::Finder;

use super::Lines;
use super::skim::{resource_node, time_value};
use super::skip::value_end;
use crate::spans::node::NodeAttribution;
use crate::spans::read::Found;

/// Scans the lines of `reader`, many at a time: the keys are searched for in everything up to
/// the last newline read (no line is split: a JSON line holds no raw newline). A last line
/// without its newline is looked at only if it parses (else the file was cut short there, and
/// the second pass does not read it either).
pub(crate) fn scan_lines(
    reader: impl std::io::Read,
    attribution: &NodeAttribution,
) -> std::io::Result<Found> {
    let keys = Keys {
        resource: Finder::new(b"\"resource\""),
        time: Finder::new(b"TimeUnixNano\""),
    };
    let mut found = Found::default();
    let mut lines = Lines::new(reader);
    while let Some(block) = lines.next_lines()? {
        if block.last() != Some(&b'\n') && !super::strict::is_traces_data(block) {
            continue;
        }
        keys.scan(block, attribution, &mut found);
    }
    Ok(found)
}

struct Keys {
    resource: Finder<'static>,
    time: Finder<'static>,
}

impl Keys {
    fn scan(&self, line: &[u8], attribution: &NodeAttribution, found: &mut Found) {
        for at in self.resource.find_iter(line) {
            let Some(raw) = value_after(line, at, b"\"resource\"".len()) else {
                continue;
            };
            if let Some(node) = resource_node(raw, attribution) {
                found.node(node);
            }
        }
        for at in self.time.find_iter(line) {
            // `"start` or `"end` before it.
            let Some(key) = [6, 4]
                .into_iter()
                .filter_map(|n| at.checked_sub(n))
                .find(|&k| matches!(&line[k..at], b"\"start" | b"\"end"))
            else {
                continue;
            };
            let Some(raw) = value_after(line, key, at + b"TimeUnixNano\"".len() - key) else {
                continue;
            };
            found.time(time_value(raw).flatten());
        }
    }
}

/// The raw value of the key of `len` bytes at `line[at..]` (its opening quote), None if that
/// quote is escaped (inside a string) or no colon and value follow.
fn value_after(line: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    if at > 0 && line[at - 1] == b'\\' {
        return None;
    }
    let ws = |i: usize| {
        i + line[i..]
            .iter()
            .take_while(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
            .count()
    };
    let colon = ws(at + len);
    if line.get(colon) != Some(&b':') {
        return None;
    }
    let start = ws(colon + 1);
    let end = value_end(line, start)?;
    Some(&line[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str) -> Found {
        scan_lines(text.as_bytes(), &NodeAttribution::default()).unwrap()
    }

    #[test]
    fn nodes_and_the_earliest_time_are_found_by_their_keys() {
        let line = |host: &str, t: &str| {
            format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"name":"\"resource\":{{}}","startTimeUnixNano":{t},"endTimeUnixNano":"1700000000900000000","events":[{{"timeUnixNano":"5"}}]}}]}}],"resource" : {{"attributes":[{{"key":"host.name","value":{{"stringValue":"{host}"}}}}]}}}}]}}"#
            )
        };
        let text = format!(
            "{}\n{}\n\n{}\n{}",
            line("b", "\"1700000000500000000\""),
            line("a", "1700000000200000000"),
            line("b", "\"0\""),
            // Cut short: not looked at.
            &line("c", "\"1600000000000000000\"")[..150],
        );
        let found = scan(&text);
        assert_eq!(
            found.nodes,
            vec![
                ("b".to_string(), "host.name".to_string()),
                ("a".to_string(), "host.name".to_string())
            ]
        );
        assert_eq!(found.earliest, Some(1_700_000_000_200_000_000));
        // Whole, the last line counts.
        let whole = format!(
            "{}\n{}",
            line("b", "\"1\""),
            line("c", "\"1600000000000000000\"")
        );
        let found = scan(&whole);
        assert_eq!(found.nodes.len(), 2);
        assert_eq!(found.earliest, Some(1));
    }
}
