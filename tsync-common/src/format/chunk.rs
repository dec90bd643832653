//! Chunks: the framing every part of a trace file shares, and the bincode of metadata chunks.
//!
//! ```text
//! chunk: kind u32 | payload length u32 | CRC-32 of the payload u32 | record count u32
//!        | payload | zero padding to a multiple of 8 bytes
//! ```

use serde::Serialize;

use super::{FormatError, MAX_CHUNK_PAYLOAD};

/// Bytes of a chunk header.
pub(super) const CHUNK_HEADER_LEN: usize = 16;

/// Kinds of chunk. A new kind needs a new [`VERSION`] (which older readers refuse with a request to
/// upgrade), so a reader treats a kind it does not know as a corrupt chunk header: the checksum
/// covers the payload only, and skipping the chunk could drop events silently.
pub(super) mod chunk_kind {
    pub const HEADER: u32 = 1;
    pub const EVENTS: u32 = 2;
    /// Version 1 clock samples (32 bytes each); only in version 1 files.
    pub const CLOCK_SAMPLES_V1: u32 = 3;
    pub const LOST: u32 = 4;
    pub const END: u32 = 5;
    /// Version 2 clock samples (40 bytes each).
    pub const CLOCK_SAMPLES: u32 = 6;
    /// Kernel clock-discipline states (bincode), version 2 on.
    pub const KERNEL_CLOCK: u32 = 7;
    /// Version 3 and 4 events: columns, compressed (`columnar::events`, `compress`); the
    /// version tells the time section's layout.
    pub const EVENTS_PACKED: u32 = 8;
    /// Version 3 and 4 clock samples: columns, compressed (`columnar::samples`, `compress`).
    pub const CLOCK_SAMPLES_PACKED: u32 = 9;
    /// The node's addresses per network namespace (`AddressTable`, bincode), version 5 on.
    pub const ADDRESSES: u32 = 10;

    /// Whether a file of format `version` may hold chunks of `kind`.
    pub fn in_version(kind: u32, version: u32) -> bool {
        match kind {
            HEADER | LOST | END => true,
            EVENTS => version <= 2,
            CLOCK_SAMPLES_V1 => version == 1,
            CLOCK_SAMPLES => version == 2,
            KERNEL_CLOCK => version >= 2,
            EVENTS_PACKED | CLOCK_SAMPLES_PACKED => version >= 3,
            ADDRESSES => version >= 5,
            _ => false,
        }
    }
}

pub(super) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, FormatError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|e| FormatError::Encode(e.to_string()))
}

/// Decodes a metadata chunk, which must be exactly one value: trailing bytes mean the chunk is
/// not what its kind says (a corrupt kind field), and are refused rather than ignored.
pub(super) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    // The limit makes a corrupt length prefix an error instead of an allocation of its size.
    let config = bincode::config::standard().with_limit::<{ MAX_CHUNK_PAYLOAD as usize }>();
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, config).map_err(|e| e.to_string())?;
    match bytes.len() - used {
        0 => Ok(value),
        extra => Err(format!("{extra} bytes after the value")),
    }
}

pub(super) fn padding(len: usize) -> usize {
    (8 - len % 8) % 8
}
