//! The tsync trace file format: written by `tsync-agent`, read by `tsync-analyze`.
//! docs/format.md describes every chunk kind; this is the short version.
//!
//! A file is a 16-byte preamble followed by chunks:
//!
//! ```text
//! preamble: magic "TSYNCTRC" (8) | version u32 | byte order u32 (0 = little-endian)
//! chunk:    kind u32 | payload length u32 | CRC-32 of the payload u32 | record count u32
//!           | payload | zero padding to a multiple of 8 bytes
//! ```
//!
//! The first chunk is the [`Header`] (bincode 2 over serde). Then, in any order: event chunks,
//! clock-sample chunks, kernel clock-discipline states ([`KernelClock`], bincode), lost-event
//! counters ([`LostCounts`], bincode) and, last, one end chunk ([`Footer`], bincode).
//!
//! Versions: 3 (what [`TraceWriter`] writes) stores each event chunk as columns (flows interned,
//! times and sequence numbers as differences; `columnar`) compressed by zstd (`compress`), and
//! clock samples likewise: about 5 bytes per event on disk instead of 81. It also counts the
//! events the agent dropped on the way to disk ([`LostCounts::disk`]). Version 2 files hold raw
//! [`PacketEvent`](crate::PacketEvent) arrays (chunk kind 2) and 40-byte [`ClockSample`]s (kind 6), and record the
//! kernel's NTP state (kind 7). Version 1 files (32-byte samples without the second monotonic
//! reading, chunk kind 3, every 0.5 s) are still read: their samples come back with
//! `monotonic_after_ns == monotonic_ns`, and [`TraceReader::samples_bracketed`] says that their
//! pairing has no known bound. [`TraceWriter::with_version`] still writes version 2.
//!
//! Why chunks with a checksum: a recording that is cut short (kill -9, power loss, full disk) loses
//! at most the chunk being written. The reader returns everything up to the last complete chunk and
//! then reports the [`Damage`]: where it is and how many bytes it had to discard. Nothing past a
//! damaged chunk is ever read, because a wrong length could make it read garbage as events. A
//! compressed chunk decompresses on its own (no state carried from chunk to chunk), and one that
//! claims more than its record count allows is refused before anything is allocated.

/// First 8 bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"TSYNCTRC";
/// Format version this build writes and the newest it reads. Version 4 is version 3 with the
/// event chunks' time differences as byte planes instead of varints (cheaper to encode and
/// decode, docs/format.md); version 5 adds the events' `flags` (in the flow table) and `ttl` (a
/// column of their own), which versions 3 and 4 kept in the extras as two reserved bytes; and
/// the node's addresses per network namespace (chunk kind 10, [`AddressTable`]), with each
/// interface's namespace in the header. Version 6 is version 5 with another digest for the
/// hashed UDP kinds: [`udp_payload_hash`](crate::udp_payload_hash) of the first 32 payload
/// bytes, where version 5 hashed 64 with a chained function (so datagrams of a version-5 and a
/// version-6 trace never match; the analyzer warns when both are given).
/// [`TraceWriter::with_version`] still writes versions 2 to 5.
pub const VERSION: u32 = 6;
/// The oldest version [`TraceWriter::with_version`] still writes (for compatibility tests and
/// benchmarks against files users already have).
pub const OLDEST_WRITTEN_VERSION: u32 = 2;
/// Events per event chunk: 4096 × 80 bytes = 320 KiB decoded (about 20 KiB on disk in version
/// 3), so a cut file loses at most that much and a decoded chunk stays in the CPU's cache.
pub const EVENTS_PER_CHUNK: usize = 4096;
/// Largest payload a reader accepts; a larger length field means the chunk header is corrupt.
pub const MAX_CHUNK_PAYLOAD: u32 = 64 << 20;

/// Bytes of the preamble: magic, version, byte order.
const PREAMBLE_LEN: usize = 16;
/// The byte order field of little-endian files (the only ones tsync writes).
const LITTLE_ENDIAN: u32 = 0;

mod addresses;
mod chunk;
mod clock;
mod columnar;
mod compress;
mod error;
mod header;
mod lost;
mod packed;
mod reader;
mod writer;

pub use addresses::{
    AddressTable, AddressTables, HeldAddress, IpPrefix, NamespaceAddresses, held_addresses,
    read_address_tables,
};
pub use clock::{ClockSample, KernelClock};
pub use compress::DEFAULT_LEVEL as DEFAULT_COMPRESSION_LEVEL;
pub use error::{Damage, FormatError};
pub use header::{AgentOptions, ClockSkew, Header, Interface, RecordedNetns};
pub use lost::{Footer, LostCounts};
pub use reader::TraceReader;
pub use writer::TraceWriter;
/// True when `prefix` (the first bytes of a file) starts like a trace file.
pub fn is_trace_file(prefix: &[u8]) -> bool {
    prefix.starts_with(&MAGIC)
}
