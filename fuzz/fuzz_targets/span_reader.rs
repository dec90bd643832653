//! Arbitrary bytes as an OpenTelemetry span file through `sync`'s span reader: both passes (the
//! first one's search for nodes and epoch, the second one's reading and join, with a window of a
//! few spans so that spans leave it), as `info` makes them, OTLP/JSON or protobuf told apart by
//! content. Errors (with file and line, or frame) are fine; a panic, an abort, an allocation
//! past the memory limit or a hang is a bug.
//!
//! Also checked, on every line of a JSON file: where the fast reading of the usual line takes
//! it, it reads what serde_json's reference reading does (`spans::readings_agree`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tsync_analyze::spans::{self, SpanOptions};

fuzz_target!(|data: &[u8]| {
    let _ = spans::looks_like_spans(&data[..data.len().min(512)]);
    let path = tsync_fuzz::scratch_file("spans.jsonl", data);
    let options = SpanOptions {
        window: 4,
        ..SpanOptions::default()
    };
    match spans::inspect(&path, &options) {
        Ok(stats) => {
            // Roots and children whose parent never came are spans joined, and not the same.
            assert!(
                stats.join.roots + stats.join.parent_not_found <= stats.join.spans,
                "{stats:?}"
            );
            let _ = stats.warnings();
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        for line in text.lines() {
            if let Err(e) = spans::readings_agree(line.trim()) {
                panic!("{e}\nline: {line}");
            }
        }
    }
});
