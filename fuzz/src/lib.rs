//! What the fuzz targets share: scratch files for the APIs that take a path, and the layout of
//! `sync_pipeline`'s input (which `cargo xtask fuzz` also writes when it seeds the corpus).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A directory of this process's own for scratch files, in `/dev/shm` when there is one (no disk
/// write per input), else in the temporary directory. Created once per process; directories left
/// behind by fuzzing processes that no longer exist are removed then.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        remove_stale(&base);
        let dir = base.join(format!("tsync-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create scratch directory {}: {e}", dir.display()));
        dir
    })
}

/// Removes the scratch directories of processes that have exited.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tsync-fuzz-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Writes `data` to the scratch file `name` (created on first use, rewritten for every input)
/// and returns its path.
pub fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let path = scratch_dir().join(name);
    std::fs::write(&path, data)
        .unwrap_or_else(|e| panic!("cannot write scratch file {}: {e}", path.display()));
    path
}

/// A copy of `data` with every chunk checksum of a trace file made right, or None if `data` does
/// not start like one or nothing needed repair. Chunks are walked as the reader walks them (length
/// field, payload, padding to 8 bytes) up to the first one cut short or of an implausible length.
///
/// Without it, nearly every mutation of a chunk's payload is stopped by the checksum, and the
/// decoding of what passes it (header, lost counts, footer, record counts, events) is reached only
/// through the seeds.
pub fn repair_checksums(data: &[u8]) -> Option<Vec<u8>> {
    const PREAMBLE: usize = 16;
    const CHUNK_HEADER: usize = 16;
    if !tsync_common::format::is_trace_file(data) {
        return None;
    }
    let mut out = data.to_vec();
    let mut offset = PREAMBLE;
    while offset + CHUNK_HEADER <= out.len() {
        let word = |i: usize| u32::from_le_bytes(out[i..i + 4].try_into().expect("4 bytes"));
        let len = word(offset + 4);
        if len > tsync_common::format::MAX_CHUNK_PAYLOAD {
            break;
        }
        let start = offset + CHUNK_HEADER;
        let Some(end) = start.checked_add(len as usize).filter(|&e| e <= out.len()) else {
            break;
        };
        let crc = crc32fast::hash(&out[start..end]);
        out[offset + 8..offset + 12].copy_from_slice(&crc.to_le_bytes());
        offset = end + (8 - len as usize % 8) % 8;
    }
    (out != data).then_some(out)
}

/// Start of an input that describes a trace file as a list of chunks (see [`build_trace`]).
pub const CHUNK_LIST: &[u8] = b"CHUNKS";
/// Start of a chunk list that describes a version 1 trace file (the reader still reads them).
pub const CHUNK_LIST_V1: &[u8] = b"CHUNKSv1";
/// Start of a chunk list that describes a version 2 trace file.
pub const CHUNK_LIST_V2: &[u8] = b"CHUNKSv2";
/// Start of a chunk list that describes a version 3 trace file (time differences as varints).
pub const CHUNK_LIST_V3: &[u8] = b"CHUNKSv3";
/// Chunk kinds of format versions 3 and 4 whose payload is zstd over columns.
pub const PACKED_KINDS: [u8; 2] = [8, 9];
/// What comes before every chunk of such a list.
pub const CHUNK_SEPARATOR: &[u8] = b"\xc4\xc4\xc4\xc4";

/// The trace file described by a chunk list, or None if `data` does not start with
/// [`CHUNK_LIST`]:
///
/// ```text
/// "CHUNKS", "CHUNKSv3", "CHUNKSv2" or "CHUNKSv1" then, per chunk: separator 0xC4C4C4C4 | kind (1 byte)
/// | payload
/// ```
///
/// The file gets the current version's preamble ([`CHUNK_LIST_V1`]: version 1's,
/// [`CHUNK_LIST_V2`]: version 2's, [`CHUNK_LIST_V3`]: version 3's), and every chunk its length, checksum, record count (the
/// whole records in the payload for raw events and clock samples, 1 otherwise) and padding. The
/// compressed chunks of version 3 ([`PACKED_KINDS`]) are listed uncompressed, as `record count
/// u32 | columns`, and compressed here: the fuzzer then mutates the columns, which a mutation of
/// zstd's output would hardly ever reach. A mutation
/// that inserts or removes bytes in a payload (a longer string or number in the bincode of the
/// header, the lost counts or the footer; one event more) still gives a chunk that passes the
/// checksum, which a mutation of the file itself almost never does.
pub fn build_trace(data: &[u8]) -> Option<Vec<u8>> {
    let (version, rest) = if let Some(rest) = data.strip_prefix(CHUNK_LIST_V1) {
        (1u32, rest)
    } else if let Some(rest) = data.strip_prefix(CHUNK_LIST_V2) {
        (2, rest)
    } else if let Some(rest) = data.strip_prefix(CHUNK_LIST_V3) {
        (3, rest)
    } else {
        (tsync_common::format::VERSION, data.strip_prefix(CHUNK_LIST)?)
    };
    let mut out = Vec::with_capacity(16 + rest.len() + 24 * 8);
    out.extend_from_slice(&tsync_common::format::MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for piece in split(rest, CHUNK_SEPARATOR) {
        let Some((&kind, payload)) = piece.split_first() else {
            continue;
        };
        let packed;
        let (payload, packed_count) = if PACKED_KINDS.contains(&kind) {
            let (count, columns) = payload.split_at(4.min(payload.len()));
            let mut word = [0u8; 4];
            word[..count.len()].copy_from_slice(count);
            packed = zstd::bulk::compress(columns, 1).expect("zstd compresses anything");
            (packed.as_slice(), Some(u32::from_le_bytes(word)))
        } else {
            (payload, None)
        };
        let record = match kind {
            2 => std::mem::size_of::<tsync_common::PacketEvent>(),
            // Version 1 samples (refused in a version 2 file, which the reader must say; and
            // version 2's kinds 6 and 7 in a version 1 file).
            3 => 32,
            6 => std::mem::size_of::<tsync_common::format::ClockSample>(),
            _ => 0,
        };
        let count = packed_count.unwrap_or(payload.len().checked_div(record).unwrap_or(1) as u32);
        out.extend_from_slice(&u32::from(kind).to_le_bytes());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(payload);
        out.resize(out.len() + (8 - payload.len() % 8) % 8, 0);
    }
    Some(out)
}

/// The pieces of `data` between occurrences of `separator`.
fn split<'a>(data: &'a [u8], separator: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(separator.len()).position(|w| w == separator) {
            Some(i) => {
                rest = Some(&r[i + separator.len()..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// `sync_pipeline`'s input, decoded:
///
/// ```text
/// byte 0     options: bit 0 linreg (else chull), bit 1 one input file only (A),
///            bit 2 `--reference 0`, bit 3 `--filter 1.64` (linreg), bit 4 make the chunk
///            checksums of trace files right ([`repair_checksums`])
/// bytes 1..5 u32 little-endian: the length of file A is this modulo (remaining bytes + 1)
/// rest       file A, then file B
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SyncInput<'a> {
    pub linreg: bool,
    pub reference: bool,
    pub filter: bool,
    pub repair: bool,
    pub a: &'a [u8],
    /// None with the one-file option.
    pub b: Option<&'a [u8]>,
}

/// Option bits of byte 0.
pub const OPT_LINREG: u8 = 1;
pub const OPT_ONE_FILE: u8 = 2;
pub const OPT_REFERENCE: u8 = 4;
pub const OPT_FILTER: u8 = 8;
pub const OPT_REPAIR: u8 = 16;

impl<'a> SyncInput<'a> {
    /// Splits a fuzz input; None if it is shorter than the 5 bytes of options and split point.
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (&options, rest) = data.split_first()?;
        let (split, files) = rest.split_first_chunk::<4>()?;
        let split = u32::from_le_bytes(*split) as usize % (files.len() + 1);
        let (a, b) = files.split_at(split);
        Some(SyncInput {
            linreg: options & OPT_LINREG != 0,
            reference: options & OPT_REFERENCE != 0,
            filter: options & OPT_FILTER != 0,
            repair: options & OPT_REPAIR != 0,
            a,
            b: (options & OPT_ONE_FILE == 0).then_some(b),
        })
    }

    /// The inverse of [`parse`](Self::parse): one fuzz input from options and files.
    pub fn encode(options: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(5 + a.len() + b.len());
        out.push(options);
        out.extend_from_slice(&(a.len() as u32).to_le_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b);
        out
    }
}
