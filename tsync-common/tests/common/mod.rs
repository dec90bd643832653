//! Helpers shared by the format tests (format.rs: versions 1 and 2; format_v3.rs): reading a
//! file back, and finding its chunks to take them apart.
#![allow(dead_code)]

use std::io::Cursor;

use tsync_common::PacketEvent;
use tsync_common::format::{FormatError, TraceReader};

/// Everything a reader yields from a file, and the reader for its final state.
pub type ReadBack<'a> = (Vec<PacketEvent>, TraceReader<Cursor<&'a [u8]>>);

/// Reads every event of `bytes`.
pub fn read_all(bytes: &[u8]) -> Result<ReadBack<'_>, FormatError> {
    let mut r = TraceReader::new(Cursor::new(bytes))?;
    let mut events = Vec::new();
    while let Some(chunk) = r.next_events()? {
        events.extend_from_slice(chunk);
    }
    Ok((events, r))
}

/// The file's chunks after its 16-byte preamble, in order: (offset, kind).
pub fn chunks(bytes: &[u8]) -> Vec<(usize, u32)> {
    let mut at = 16;
    let mut found = Vec::new();
    while at + 16 <= bytes.len() {
        let kind = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        found.push((at, kind));
        at += 16 + len + (8 - len % 8) % 8;
    }
    found
}

/// Offsets of the chunks of `kind`.
pub fn chunks_of(bytes: &[u8], kind: u32) -> Vec<usize> {
    chunks(bytes)
        .into_iter()
        .filter(|c| c.1 == kind)
        .map(|c| c.0)
        .collect()
}
