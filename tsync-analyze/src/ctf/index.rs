//! LTTng's packet index files (`index/CHANNEL_CPU.idx`): per packet its offset, sizes and first
//! and last timestamps, which give a trace's span without reading its streams.

use std::fs;
use std::path::Path;

use super::CtfError;

/// The index files' magic (big-endian).
const INDEX_MAGIC: u32 = 0xC1F1_DCC1;

/// A trace's packets as its index lists them: `(timestamp_begin, timestamp_end)` in clock cycles.
pub type PacketSpans = Vec<(u64, u64)>;

/// The timestamps' span of a trace, in clock cycles, from its index files (min
/// `timestamp_begin`, max `timestamp_end`, packets), or None without an index.
pub fn index_span(trace_dir: &Path) -> Result<Option<(u64, u64, PacketSpans)>, CtfError> {
    let dir = trace_dir.join("index");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(None);
    };
    let mut packets = Vec::new();
    for e in entries {
        let e = e.map_err(|e| CtfError::io(&dir, e))?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != "idx") {
            continue;
        }
        let b = fs::read(&path).map_err(|e| CtfError::io(&path, e))?;
        let be32 = |at: usize| {
            b.get(at..at + 4)
                .map(|s| u32::from_be_bytes(s.try_into().expect("4 bytes")))
        };
        if be32(0) != Some(INDEX_MAGIC) {
            return Err(CtfError::trace(
                &path,
                "not a CTF index file (magic 0xC1F1DCC1)",
            ));
        }
        let entry = be32(12).unwrap_or(0) as usize;
        if entry < 56 {
            return Err(CtfError::trace(
                &path,
                format!("index entries of {entry} bytes"),
            ));
        }
        let be64 = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let mut at = 16;
        while at + entry <= b.len() {
            packets.push((be64(at + 24), be64(at + 32)));
            at += entry;
        }
    }
    let begin = packets.iter().map(|p| p.0).min();
    let end = packets.iter().map(|p| p.1).max();
    Ok(begin.zip(end).map(|(b, e)| (b, e, packets)))
}
