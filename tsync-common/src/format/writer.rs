//! The writer: buffers events and clock records, and writes them as chunks.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;

use super::chunk::{CHUNK_HEADER_LEN, chunk_kind, encode, padding};
use super::compress::DEFAULT_LEVEL;
use super::header::encode_header;
use super::lost::{FooterV2, LostCountsV2};
use super::packed::PackedWriter;
use super::{
    AddressTable, ClockSample, EVENTS_PER_CHUNK, Footer, FormatError, Header, KernelClock,
    LITTLE_ENDIAN, LostCounts, MAGIC, MAX_CHUNK_PAYLOAD, OLDEST_WRITTEN_VERSION, PREAMBLE_LEN,
    VERSION,
};
use crate::PacketEvent;

/// Writes a trace file chunk by chunk. Events and clock samples are buffered and go out as one
/// chunk when [`EVENTS_PER_CHUNK`] events are pending or on [`TraceWriter::flush`]; in version 3
/// each such chunk is encoded as columns and compressed (docs/format.md).
pub struct TraceWriter<W: Write> {
    out: W,
    events: Vec<PacketEvent>,
    samples: Vec<ClockSample>,
    kernel_clock: Vec<KernelClock>,
    events_written: u64,
    /// Format version being written.
    version: u32,
    /// Version 3's encoder and compressor; None for the raw records of version 2.
    packed: Option<PackedWriter>,
}

impl TraceWriter<BufWriter<File>> {
    /// Creates (or truncates) `path` with mode 0600, since a trace describes the node's traffic.
    pub fn create(path: &Path, header: &Header) -> Result<Self, FormatError> {
        let context = || format!("cannot create trace file {}", path.display());
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            options.mode(0o600);
            let file = options
                .open(path)
                .map_err(|e| FormatError::io(context(), e))?;
            // An existing file keeps its old mode through open(); narrow it too.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| FormatError::io(context(), e))?;
            Self::new(BufWriter::with_capacity(1 << 20, file), header)
        }
        #[cfg(not(unix))]
        {
            let file = options
                .open(path)
                .map_err(|e| FormatError::io(context(), e))?;
            Self::new(BufWriter::with_capacity(1 << 20, file), header)
        }
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the preamble and the header chunk.
    pub fn new(out: W, header: &Header) -> Result<Self, FormatError> {
        Self::with_version(out, header, VERSION)
    }

    /// Like [`new`](Self::new), but writes format `version`, from [`OLDEST_WRITTEN_VERSION`] to
    /// [`VERSION`]: for compatibility tests and benchmarks that need the files older agents
    /// wrote. What an older version cannot hold (disk losses before version 3) is refused with
    /// [`FormatError::Encode`], never dropped.
    pub fn with_version(mut out: W, header: &Header, version: u32) -> Result<Self, FormatError> {
        if !(OLDEST_WRITTEN_VERSION..=VERSION).contains(&version) {
            return Err(FormatError::Encode(format!(
                "cannot write format version {version} (only {OLDEST_WRITTEN_VERSION} to {VERSION})"
            )));
        }
        let mut preamble = [0u8; PREAMBLE_LEN];
        preamble[..8].copy_from_slice(&MAGIC);
        preamble[8..12].copy_from_slice(&version.to_le_bytes());
        preamble[12..16].copy_from_slice(&LITTLE_ENDIAN.to_le_bytes());
        out.write_all(&preamble)
            .map_err(|e| FormatError::io("cannot write trace file preamble", e))?;
        let mut writer = TraceWriter {
            out,
            events: Vec::with_capacity(EVENTS_PER_CHUNK),
            samples: Vec::new(),
            kernel_clock: Vec::new(),
            events_written: 0,
            version,
            packed: match version {
                3.. => Some(PackedWriter::new(DEFAULT_LEVEL, version)?),
                _ => None,
            },
        };
        write_chunk(
            &mut writer.out,
            chunk_kind::HEADER,
            &encode_header(header, version)?,
            1,
        )?;
        Ok(writer)
    }

    /// Sets the zstd level of the chunks written from now on (version 3; default
    /// [`DEFAULT_COMPRESSION_LEVEL`](super::DEFAULT_COMPRESSION_LEVEL)): higher levels make
    /// smaller files and cost more CPU per event (docs/format.md has the figures). Ignored by a
    /// writer of version 2, whose records are not compressed.
    pub fn set_compression_level(&mut self, level: i32) -> Result<(), FormatError> {
        match &mut self.packed {
            Some(p) => p.set_level(level),
            None => Ok(()),
        }
    }

    /// Buffers one event.
    pub fn write_event(&mut self, event: &PacketEvent) -> Result<(), FormatError> {
        self.events.push(*event);
        if self.events.len() >= EVENTS_PER_CHUNK {
            self.write_pending_events()?;
        }
        Ok(())
    }

    /// Buffers events. Whole chunks of them are written straight from `events` when nothing is
    /// pending (the agent hands over full chunks at high rates: no copy of 80 bytes per event).
    pub fn write_events(&mut self, events: &[PacketEvent]) -> Result<(), FormatError> {
        let mut rest = events;
        while self.events.is_empty() && rest.len() >= EVENTS_PER_CHUNK {
            let (chunk, later) = rest.split_at(EVENTS_PER_CHUNK);
            self.write_event_chunk(chunk)?;
            rest = later;
        }
        while !rest.is_empty() {
            let room = EVENTS_PER_CHUNK - self.events.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.events.extend_from_slice(now);
            if self.events.len() >= EVENTS_PER_CHUNK {
                self.write_pending_events()?;
            }
            rest = later;
        }
        Ok(())
    }

    /// Buffers one clock sample; it goes out at the next [`flush`](Self::flush).
    pub fn write_clock_sample(&mut self, sample: ClockSample) -> Result<(), FormatError> {
        self.samples.push(sample);
        Ok(())
    }

    /// Buffers one kernel clock-discipline state; it goes out at the next [`flush`](Self::flush).
    pub fn write_kernel_clock(&mut self, state: KernelClock) -> Result<(), FormatError> {
        self.kernel_clock.push(state);
        Ok(())
    }

    /// Writes the cumulative lost-event counters as a chunk of their own.
    pub fn write_lost(&mut self, lost: &LostCounts) -> Result<(), FormatError> {
        let payload = if self.version >= 3 {
            encode(lost)?
        } else {
            encode(&LostCountsV2::try_from(lost)?)?
        };
        write_chunk(&mut self.out, chunk_kind::LOST, &payload, 1)
    }

    /// Writes the node's addresses as a chunk of their own (version 5 on: an older version has no
    /// place for them, and refuses them with [`FormatError::Encode`]).
    pub fn write_addresses(&mut self, table: &AddressTable) -> Result<(), FormatError> {
        if self.version < 5 {
            return Err(FormatError::Encode(format!(
                "a version {} file cannot hold the node's addresses (version 5 on)",
                self.version
            )));
        }
        let count = u32::try_from(table.namespaces.len())
            .map_err(|_| FormatError::Encode("too many namespaces".into()))?;
        write_chunk(&mut self.out, chunk_kind::ADDRESSES, &encode(table)?, count)
    }

    /// Writes pending events and clock samples as chunks and flushes the output, so that what was
    /// recorded so far survives a crash.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.write_pending_events()?;
        if !self.samples.is_empty() {
            let count = self.samples.len() as u32;
            match &mut self.packed {
                Some(p) => write_chunk(
                    &mut self.out,
                    chunk_kind::CLOCK_SAMPLES_PACKED,
                    p.samples(&self.samples)?,
                    count,
                )?,
                None => write_chunk(
                    &mut self.out,
                    chunk_kind::CLOCK_SAMPLES,
                    bytemuck::cast_slice(&self.samples),
                    count,
                )?,
            }
            self.samples.clear();
        }
        if !self.kernel_clock.is_empty() {
            let states = std::mem::take(&mut self.kernel_clock);
            write_chunk(
                &mut self.out,
                chunk_kind::KERNEL_CLOCK,
                &encode(&states)?,
                states.len() as u32,
            )?;
        }
        self.out
            .flush()
            .map_err(|e| FormatError::io("cannot flush trace file", e))
    }

    /// Writes what is pending and the end chunk, and returns the output.
    pub fn finish(mut self, footer: &Footer) -> Result<W, FormatError> {
        self.flush()?;
        let payload = if self.version >= 3 {
            encode(footer)?
        } else {
            encode(&FooterV2::try_from(footer)?)?
        };
        write_chunk(&mut self.out, chunk_kind::END, &payload, 1)?;
        self.out
            .flush()
            .map_err(|e| FormatError::io("cannot flush trace file", e))?;
        Ok(self.out)
    }

    /// Events handed to the writer so far (written or pending).
    pub fn events_written(&self) -> u64 {
        self.events_written + self.events.len() as u64
    }

    fn write_pending_events(&mut self) -> Result<(), FormatError> {
        if self.events.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.events);
        let written = self.write_event_chunk(&events);
        self.events = events;
        self.events.clear();
        written
    }

    /// Writes `events` (at most a chunk's worth) as one event chunk.
    fn write_event_chunk(&mut self, events: &[PacketEvent]) -> Result<(), FormatError> {
        let count = events.len() as u32;
        match &mut self.packed {
            Some(p) => write_chunk(
                &mut self.out,
                chunk_kind::EVENTS_PACKED,
                p.events(events)?,
                count,
            )?,
            None => write_chunk(
                &mut self.out,
                chunk_kind::EVENTS,
                bytemuck::cast_slice(events),
                count,
            )?,
        }
        self.events_written += u64::from(count);
        Ok(())
    }
}

/// Writes one chunk: header, payload, padding.
fn write_chunk(
    out: &mut impl Write,
    kind: u32,
    payload: &[u8],
    count: u32,
) -> Result<(), FormatError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= MAX_CHUNK_PAYLOAD)
        .ok_or_else(|| FormatError::Encode(format!("chunk of {} bytes", payload.len())))?;
    let mut head = [0u8; CHUNK_HEADER_LEN];
    head[0..4].copy_from_slice(&kind.to_le_bytes());
    head[4..8].copy_from_slice(&len.to_le_bytes());
    head[8..12].copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    head[12..16].copy_from_slice(&count.to_le_bytes());
    let pad = [0u8; 8];
    let context = "cannot write to trace file (is the disk full?)";
    out.write_all(&head)
        .and_then(|_| out.write_all(payload))
        .and_then(|_| out.write_all(&pad[..padding(payload.len())]))
        .map_err(|e| FormatError::io(context, e))
}
