//! zstd around the columnar chunks of format version 3.
//!
//! Each compressed chunk is one zstd frame that declares its decompressed size, without zstd's
//! own checksum (the chunk's CRC-32 covers the compressed bytes) and without a dictionary, so
//! every chunk decompresses on its own. The reader refuses a frame whose declared size exceeds
//! what the chunk's record count allows, before allocating anything, and decompresses into a
//! buffer of exactly the declared size, so hostile input cannot make it allocate more.

use super::FormatError;

/// zstd level of the chunks [`TraceWriter`](super::TraceWriter) writes unless told otherwise.
/// The columns already hold little but information, so zstd's stronger levels gain little on
/// them: on the demo's traffic (docs/format.md) level −1 writes 5.3 bytes per event, level 3
/// 4.6 and level 19 4.4, while level −1 costs the agent about half of level 3's instructions
/// per event and the analyzer a third less to decompress.
pub const DEFAULT_LEVEL: i32 = -1;

/// Compresses chunks, keeping zstd's context and the output buffer from chunk to chunk (a
/// context costs more to set up than a small chunk costs to compress).
pub(crate) struct Packer {
    compressor: zstd::bulk::Compressor<'static>,
    packed: Vec<u8>,
}

impl Packer {
    pub(crate) fn new(level: i32) -> Result<Self, FormatError> {
        let failed = |e| FormatError::Encode(format!("cannot set up zstd: {e}"));
        let mut compressor = zstd::bulk::Compressor::new(level).map_err(failed)?;
        compressor.include_checksum(false).map_err(failed)?;
        compressor.include_contentsize(true).map_err(failed)?;
        compressor.include_dictid(false).map_err(failed)?;
        Ok(Packer {
            compressor,
            packed: Vec::new(),
        })
    }

    /// Sets the zstd level of the chunks compressed from now on.
    pub(crate) fn set_level(&mut self, level: i32) -> Result<(), FormatError> {
        self.compressor
            .set_compression_level(level)
            .map_err(|e| FormatError::Encode(format!("zstd level {level}: {e}")))
    }

    /// Compresses `bytes` into one frame.
    pub(crate) fn pack(&mut self, bytes: &[u8]) -> Result<&[u8], FormatError> {
        self.packed.clear();
        self.packed
            .reserve(zstd::zstd_safe::compress_bound(bytes.len()));
        self.compressor
            .compress_to_buffer(bytes, &mut self.packed)
            .map_err(|e| FormatError::Encode(format!("zstd: {e}")))?;
        Ok(&self.packed)
    }
}

/// Decompresses chunks, keeping zstd's context and the output buffer from chunk to chunk.
pub(crate) struct Unpacker {
    decompressor: zstd::bulk::Decompressor<'static>,
    unpacked: Vec<u8>,
}

impl Unpacker {
    pub(crate) fn new() -> Result<Self, FormatError> {
        let decompressor = zstd::bulk::Decompressor::new()
            .map_err(|e| FormatError::Encode(format!("cannot set up zstd: {e}")))?;
        Ok(Unpacker {
            decompressor,
            unpacked: Vec::new(),
        })
    }

    /// Decompresses the frame `packed`, which must declare a size of at most `limit` bytes and
    /// hold exactly that much.
    pub(crate) fn unpack(&mut self, packed: &[u8], limit: usize) -> Result<&[u8], String> {
        let size = match zstd::zstd_safe::get_frame_content_size(packed) {
            Ok(Some(size)) => size,
            Ok(None) => return Err("compressed chunk does not declare its size".into()),
            Err(_) => return Err("compressed chunk is not a zstd frame".into()),
        };
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s <= limit)
            .ok_or_else(|| {
                format!("compressed chunk claims {size} bytes, more than its records can take")
            })?;
        self.unpacked.clear();
        self.unpacked.reserve_exact(size);
        // zstd writes into the buffer's capacity only (never grows it), so a frame that holds
        // more than it declares (or a second frame after it) fails or is caught below.
        let written = self
            .decompressor
            .decompress_to_buffer(packed, &mut self.unpacked)
            .map_err(|e| format!("compressed chunk is corrupt: {e}"))?;
        if written != size {
            return Err(format!(
                "compressed chunk holds {written} bytes, it declares {size}"
            ));
        }
        Ok(&self.unpacked)
    }
}
