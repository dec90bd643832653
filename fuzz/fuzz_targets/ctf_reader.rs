//! Arbitrary bytes as a CTF trace through the analyzer's CTF reader: the metadata (packetized
//! or TSDL text) parsed, its types compiled, two stream files decoded packet by packet, their
//! network events merged into digests — what `tsync-analyze sync` and `info` do with an LTTng
//! trace directory — and the metadata's clock blocks found as `apply --format ctf` finds them.
//! Errors are fine; a panic, an abort, an allocation past the memory limit (hostile metadata:
//! deep nesting, huge arrays, sequences of huge lengths) or a hang is a bug.
//!
//! Input: a little-endian `u32` giving the metadata's length (modulo what is left), the
//! metadata, then the streams: the first half of the rest and the second (so that one stream
//! can be damaged while the other reads on).
//!
//! Also checked: chunks are never empty, there are no more digests than events read and they
//! add up by direction, damage lies inside its stream, and every clock block's range starts
//! with `clock` and ends with its `;` (or `}`). (Digests need not come in time order: a
//! corrupt stream's timestamps can go back; the merge counts such events.)
#![no_main]

use std::io::Cursor;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tsync_analyze::ctf::CtfTrace;
use tsync_analyze::ctf::metadata::{Metadata, clock_classes};

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let len = u32::from_le_bytes(*len) as usize % (rest.len() + 1);
    let (metadata, streams) = rest.split_at(len);
    if let Ok(m) = Metadata::parse(metadata)
        && let Ok(clocks) = clock_classes(&m.text)
    {
        for c in clocks {
            let block = &m.text[c.range.0..c.range.1];
            // (A block the text ends without its `;` ends at its `}`.)
            assert!(
                block.starts_with("clock") && (block.ends_with(';') || block.ends_with('}')),
                "{block:?}"
            );
        }
    }
    let half = streams.len() / 2;
    let inputs: Vec<(String, Cursor<&[u8]>, u64)> = [&streams[..half], &streams[half..]]
        .into_iter()
        .enumerate()
        .map(|(k, s)| (format!("channel0_{k}"), Cursor::new(s), s.len() as u64))
        .collect();
    let Ok(mut trace) = CtfTrace::from_parts(Path::new("fuzz"), metadata, inputs) else {
        return;
    };
    let mut digests = 0u64;
    while let Some(chunk) = trace.next_chunk() {
        assert!(!chunk.is_empty());
        digests += chunk.len() as u64;
    }
    let events: u64 = trace.stream_stats().map(|(_, s)| s.events).sum();
    assert!(digests <= events, "{digests} digests from {events} events");
    let n = trace.net_counts();
    assert_eq!(n.send + n.recv, digests);
    for d in trace.damages() {
        assert!(d.offset <= streams.len() as u64);
        let _ = d.to_string();
    }
    let _ = (trace.discarded(), trace.lost_packets(), trace.devices());
});
