//! The chunks of format version 3 that hold records: columns ([`columnar`]), then zstd
//! ([`compress`]). One type per side, each keeping its buffers and zstd context from chunk to
//! chunk.

use super::columnar::{
    self, EventDecoder,
    events::{EventEncoder, Layout},
};
use super::compress::{Packer, Unpacker};
use super::{ClockSample, FormatError, MAX_CHUNK_PAYLOAD};
use crate::PacketEvent;

/// Encodes and compresses event and clock-sample chunks.
pub(crate) struct PackedWriter {
    packer: Packer,
    encoder: EventEncoder,
    columns: Vec<u8>,
}

impl PackedWriter {
    /// A writer of format `version` (3 or later) at zstd `level`.
    pub(crate) fn new(level: i32, version: u32) -> Result<Self, FormatError> {
        Ok(PackedWriter {
            packer: Packer::new(level)?,
            encoder: EventEncoder::new(Layout::of_version(version)),
            columns: Vec::new(),
        })
    }

    pub(crate) fn set_level(&mut self, level: i32) -> Result<(), FormatError> {
        self.packer.set_level(level)
    }

    /// The payload of an event chunk holding `events`.
    pub(crate) fn events(&mut self, events: &[PacketEvent]) -> Result<&[u8], FormatError> {
        self.columns.clear();
        self.encoder.encode(events, &mut self.columns);
        self.packer.pack(&self.columns)
    }

    /// The payload of a clock-sample chunk holding `samples`.
    pub(crate) fn samples(&mut self, samples: &[ClockSample]) -> Result<&[u8], FormatError> {
        self.columns.clear();
        columnar::samples::encode(samples, &mut self.columns);
        self.packer.pack(&self.columns)
    }
}

/// Decompresses and decodes event and clock-sample chunks.
pub(crate) struct PackedReader {
    unpacker: Unpacker,
    decoder: EventDecoder,
}

impl PackedReader {
    /// A reader of format `version` (3 or later).
    pub(crate) fn new(version: u32) -> Result<Self, FormatError> {
        Ok(PackedReader {
            unpacker: Unpacker::new()?,
            decoder: EventDecoder::new(Layout::of_version(version)),
        })
    }

    /// Decodes an event chunk of `count` events into `out` (replacing its contents); on an error
    /// `out` holds nothing meaningful.
    pub(crate) fn events(
        &mut self,
        payload: &[u8],
        count: u32,
        out: &mut Vec<PacketEvent>,
    ) -> Result<(), String> {
        let limit = limit(
            "event",
            count,
            std::mem::size_of::<PacketEvent>(),
            columnar::events::MAX_BYTES_PER_EVENT,
            columnar::events::MAX_FIXED_BYTES,
        )?;
        let columns = self.unpacker.unpack(payload, limit)?;
        self.decoder
            .decode(columns, count as usize, out)
            .map_err(|e| format!("event chunk is unreadable: {e}"))
    }

    /// Decodes a clock-sample chunk of `count` samples and appends them to `out` (nothing, on an
    /// error).
    pub(crate) fn samples(
        &mut self,
        payload: &[u8],
        count: u32,
        out: &mut Vec<ClockSample>,
    ) -> Result<(), String> {
        let limit = limit(
            "clock-sample",
            count,
            std::mem::size_of::<ClockSample>(),
            columnar::samples::MAX_BYTES_PER_SAMPLE,
            columnar::samples::MAX_FIXED_BYTES,
        )?;
        let columns = self.unpacker.unpack(payload, limit)?;
        columnar::samples::decode(columns, count as usize, out)
            .map_err(|e| format!("clock-sample chunk is unreadable: {e}"))
    }
}

/// The most bytes a chunk of `count` records may decompress to. A count whose decoded records
/// would exceed [`MAX_CHUNK_PAYLOAD`] is refused: it can only be a corrupt count field.
fn limit(
    what: &str,
    count: u32,
    record: usize,
    per_record: usize,
    fixed: usize,
) -> Result<usize, String> {
    let count = count as usize;
    if count.saturating_mul(record) > MAX_CHUNK_PAYLOAD as usize {
        return Err(format!(
            "{what} chunk claims {count} records, more than a chunk can hold (corrupt chunk header)"
        ));
    }
    Ok((count * per_record + fixed).min(MAX_CHUNK_PAYLOAD as usize))
}
