//! Arbitrary bytes as a text message file through the analyzer's parser: the header, then every
//! message. Errors (with file and line) are fine; a panic, an abort, an allocation past the memory
//! limit or a hang is a bug.
//!
//! Also checked, for a file whose header is valid: every message's indices are below the declared
//! number of traces and shifted by the base, sender and receiver differ, times are not negative,
//! line numbers grow, and the counts add up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tsync_analyze::text;

fuzz_target!(|data: &[u8]| {
    let _ = text::looks_like_text(&data[..data.len().min(512)]);
    let path = tsync_fuzz::scratch_file("messages.txt", data);
    let header = text::read_header(&path);
    if let Err(e) = &header {
        let _ = e.to_string();
    }
    // The analyzer reads the header first and shifts the file's indices by the traces of the
    // inputs before it; a file with a bad header is refused, but its lines still go through the
    // parser here (unshifted: the header's range check is what keeps `base + index` in `u32`).
    let (base, traces) = match &header {
        Ok(h) => (3, h.traces),
        Err(_) => (0, u32::MAX),
    };
    let mut messages = 0u64;
    let mut last_line = 0u64;
    let result = text::for_each_message(&path, base, &mut |m, line| {
        messages += 1;
        assert!(
            line > last_line,
            "line numbers go forward: {line} after {last_line}"
        );
        last_line = line;
        assert_ne!(
            m.send_trace, m.recv_trace,
            "same-trace lines are not passed on"
        );
        assert!(m.send_ns >= 0 && m.recv_ns >= 0, "negative time {m:?}");
        if header.is_ok() {
            for t in [m.send_trace, m.recv_trace] {
                assert!(
                    t >= base && t - base < traces,
                    "trace index {t} outside {base}..{base}+{traces}"
                );
            }
        }
    });
    match result {
        Ok(stats) => {
            assert_eq!(stats.messages, messages);
            assert!(stats.messages + stats.same_trace <= stats.lines);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
