//! The streaming reader: one chunk in memory at a time, damage reported where it starts.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::path::Path;

use super::chunk::{CHUNK_HEADER_LEN, chunk_kind, decode, padding};
use super::clock::ClockSampleV1;
use super::header::decode_header;
use super::lost::{FooterV2, LostCountsV2};
use super::packed::PackedReader;
use super::{
    AddressTable, ClockSample, Damage, Footer, FormatError, Header, KernelClock, LITTLE_ENDIAN,
    LostCounts, MAX_CHUNK_PAYLOAD, PREAMBLE_LEN, VERSION, is_trace_file,
};
use crate::PacketEvent;

/// Reads a trace file chunk by chunk; memory use is one chunk whatever the file's size.
pub struct TraceReader<R: Read> {
    input: R,
    header: Header,
    /// Byte offset of the next chunk.
    offset: u64,
    /// The current event chunk, read into place.
    events: Vec<PacketEvent>,
    /// Whether the chunk just read went to `events` rather than `payload`.
    events_direct: bool,
    payload: Vec<u8>,
    /// Format version of the file.
    version: u32,
    samples: Vec<ClockSample>,
    kernel_clock: Vec<KernelClock>,
    address_tables: Vec<AddressTable>,
    lost: LostCounts,
    footer: Option<Footer>,
    damage: Option<Damage>,
    /// Bytes of the current chunk read so far (counted as discarded if it turns out damaged).
    consumed_in_chunk: u64,
    done: bool,
    /// Set by [`TraceReader::skip_events`]: moves the input past an event chunk's payload.
    skip: Option<fn(&mut R, u64) -> io::Result<()>>,
    /// Set by [`TraceReader::only_address_tables`]: every chunk but the header, the address
    /// tables and the end is passed over too.
    only_addresses: bool,
    /// Whether the chunk just met was passed over unread.
    skipped: bool,
    /// Version 3's decompressor and decoder.
    packed: Option<PackedReader>,
}

impl<R: Read + Seek> TraceReader<R> {
    /// From now on, passes over event payloads without reading them (their checksums are not
    /// checked either): for a first pass that only wants the clock samples, the kernel clock
    /// states and the footer, at the cost of reading a few bytes per 320 KiB of events.
    /// [`next_events`](Self::next_events) then returns an empty slice per event chunk.
    ///
    /// The skip is a relative seek ([`Seek::seek_relative`]): over a `BufReader`, a payload that
    /// lies in its buffer is passed over there, where a plain seek would throw the buffer away
    /// and read it again for the next chunk's header.
    pub fn skip_events(&mut self) {
        self.skip = Some(|input, n| input.seek_relative(n as i64));
    }

    /// From now on, passes over every chunk but the address tables and the end chunk, unread
    /// and unchecked (as [`skip_events`](Self::skip_events) does event chunks): a pass that
    /// reads a few bytes per chunk and decompresses nothing. Clock samples, kernel clock states
    /// and lost counts are then not read either.
    pub fn only_address_tables(&mut self) {
        self.skip_events();
        self.only_addresses = true;
    }
}

impl TraceReader<BufReader<File>> {
    /// Opens a trace file and reads its header.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        let file = File::open(path)
            .map_err(|e| FormatError::io(format!("cannot open {}", path.display()), e))?;
        Self::new(BufReader::with_capacity(1 << 20, file))
    }
}

/// How a chunk read ended, short of a good chunk.
enum ChunkProblem {
    /// Clean end of file at a chunk boundary.
    End,
    /// The chunk is cut short or corrupt.
    Damaged(String),
    Io(io::Error),
}

impl<R: Read> TraceReader<R> {
    /// Reads the preamble and the header chunk.
    pub fn new(mut input: R) -> Result<Self, FormatError> {
        let mut preamble = [0u8; PREAMBLE_LEN];
        match read_full(&mut input, &mut preamble) {
            Ok(n) if n >= 8 && !is_trace_file(&preamble) => return Err(FormatError::NotATrace),
            Ok(n) if n < 8 => return Err(FormatError::NotATrace),
            Ok(n) if n < PREAMBLE_LEN => {
                return Err(FormatError::Header("file ends inside the preamble".into()));
            }
            Ok(_) => {}
            Err(e) => return Err(FormatError::io("cannot read trace file", e)),
        }
        let version = u32::from_le_bytes(preamble[8..12].try_into().unwrap());
        if version > VERSION {
            return Err(FormatError::FutureVersion {
                found: version,
                supported: VERSION,
            });
        }
        if version == 0 {
            return Err(FormatError::Header(
                "format version 0 does not exist".into(),
            ));
        }
        let order = u32::from_le_bytes(preamble[12..16].try_into().unwrap());
        if order != LITTLE_ENDIAN {
            return Err(FormatError::ByteOrder(order));
        }
        let mut reader = TraceReader {
            input,
            header: Header::default(),
            offset: PREAMBLE_LEN as u64,
            events: Vec::new(),
            events_direct: false,
            payload: Vec::new(),
            version,
            samples: Vec::new(),
            kernel_clock: Vec::new(),
            address_tables: Vec::new(),
            lost: LostCounts::default(),
            footer: None,
            damage: None,
            consumed_in_chunk: 0,
            done: false,
            skip: None,
            only_addresses: false,
            skipped: false,
            packed: match version {
                3.. => Some(PackedReader::new(version)?),
                _ => None,
            },
        };
        reader.header = reader.read_header_chunk()?;
        Ok(reader)
    }

    /// The trace's self-description.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next chunk of events, in file order. Clock samples, address tables, lost counters and
    /// the footer met on the way are kept by the reader. `Ok(None)` at the end of the file, and
    /// also at the first damaged chunk: then [`damage`](Self::damage) says what was cut.
    pub fn next_events(&mut self) -> Result<Option<&[PacketEvent]>, FormatError> {
        while !self.done {
            let chunk_start = self.offset;
            let (kind, count) = match self.read_chunk_into_payload() {
                Ok(chunk) => chunk,
                Err(ChunkProblem::End) => {
                    if self.footer.is_none() {
                        self.damage = Some(Damage {
                            offset: self.offset,
                            bytes_discarded: 0,
                            reason: "file ends without its end chunk (the recording was cut \
                                     short; everything before is intact)"
                                .into(),
                        });
                    }
                    self.done = true;
                    break;
                }
                Err(ChunkProblem::Damaged(reason)) => {
                    self.mark_damaged(reason)?;
                    break;
                }
                Err(ChunkProblem::Io(e)) => {
                    return Err(FormatError::io("cannot read trace file", e));
                }
            };
            if let Some(problem) = self.take_chunk(kind, count) {
                // The chunk was read whole but makes no sense: it counts as discarded.
                self.consumed_in_chunk = self.offset - chunk_start;
                self.offset = chunk_start;
                self.mark_damaged(problem)?;
                break;
            }
            if kind == chunk_kind::EVENTS || kind == chunk_kind::EVENTS_PACKED {
                return Ok(Some(&self.events));
            }
        }
        self.events.clear();
        Ok(None)
    }

    /// The events [`next_events`](Self::next_events) last returned; empty before the first
    /// chunk and after the end. Lets a caller keep its place in a chunk without borrowing the
    /// reader for as long (and without copying the chunk).
    pub fn current_events(&self) -> &[PacketEvent] {
        &self.events
    }

    /// Hands the events [`next_events`](Self::next_events) last returned over to the caller, in
    /// exchange for `spare` (any buffer, which the reader fills with a later chunk): a chunk
    /// decoded on one thread can be used on another without a copy.
    pub fn swap_events(&mut self, spare: &mut Vec<PacketEvent>) {
        std::mem::swap(&mut self.events, spare);
        self.events.clear();
    }

    /// Clock samples read so far (all of them once [`next_events`](Self::next_events) returned
    /// `None`).
    pub fn clock_samples(&self) -> &[ClockSample] {
        &self.samples
    }

    /// Format version of the file (1 to [`VERSION`]).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether each clock sample brackets its raw reading between two monotonic readings
    /// (version 2 on); version 1 samples were read back to back without a known bound.
    pub fn samples_bracketed(&self) -> bool {
        self.version >= 2
    }

    /// Kernel clock-discipline states read so far (version 2 on).
    pub fn kernel_clock(&self) -> &[KernelClock] {
        &self.kernel_clock
    }

    /// The node's address tables read so far, in file order (version 5 on; all of them once
    /// [`next_events`](Self::next_events) returned `None`). `format::held_addresses` turns
    /// them into the addresses the node held and when.
    pub fn address_tables(&self) -> &[AddressTable] {
        &self.address_tables
    }

    /// The latest cumulative lost-event counters read so far.
    pub fn lost(&self) -> &LostCounts {
        &self.lost
    }

    /// The end chunk; `None` while not reached, or if the file was cut short before it.
    pub fn footer(&self) -> Option<&Footer> {
        self.footer.as_ref()
    }

    /// What could not be read, once the reader reached it.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    fn read_header_chunk(&mut self) -> Result<Header, FormatError> {
        match self.read_chunk_into_payload() {
            Ok((chunk_kind::HEADER, _)) => {
                decode_header(&self.payload, self.version).map_err(FormatError::Header)
            }
            Ok((kind, _)) => Err(FormatError::Header(format!(
                "first chunk is of kind {kind}, not a header"
            ))),
            Err(ChunkProblem::End) => {
                Err(FormatError::Header("file ends after the preamble".into()))
            }
            Err(ChunkProblem::Damaged(reason)) => Err(FormatError::Header(reason)),
            Err(ChunkProblem::Io(e)) => Err(FormatError::io("cannot read trace file", e)),
        }
    }

    /// Decodes the chunk in `self.payload`; returns a reason if it does not make sense.
    fn take_chunk(&mut self, kind: u32, count: u32) -> Option<String> {
        if std::mem::take(&mut self.skipped) {
            // Only kinds the version holds are passed over (`skips`).
            return None;
        }
        let v3 = self.version >= 3;
        match kind {
            chunk_kind::EVENTS_PACKED if v3 => {
                let packed = self.packed.as_mut().expect("a version 3 reader");
                if let Err(e) = packed.events(&self.payload, count, &mut self.events) {
                    self.events.clear();
                    return Some(e);
                }
            }
            chunk_kind::CLOCK_SAMPLES_PACKED if v3 => {
                let packed = self.packed.as_mut().expect("a version 3 reader");
                return packed
                    .samples(&self.payload, count, &mut self.samples)
                    .err();
            }
            chunk_kind::EVENTS if !v3 => {
                let bytes = if self.events_direct {
                    std::mem::size_of_val(self.events.as_slice())
                } else {
                    self.payload.len()
                };
                if bytes != count as usize * std::mem::size_of::<PacketEvent>() {
                    return Some(record_count_mismatch("event", bytes, count));
                }
            }
            chunk_kind::CLOCK_SAMPLES if self.version == 2 => {
                return append_records(&self.payload, count, &mut self.samples, "clock-sample");
            }
            chunk_kind::CLOCK_SAMPLES_V1 if self.version == 1 => {
                let mut old = Vec::<ClockSampleV1>::new();
                let problem = append_records(&self.payload, count, &mut old, "clock-sample");
                self.samples.extend(old.iter().map(|s| ClockSample {
                    monotonic_ns: s.monotonic_ns,
                    monotonic_raw_ns: s.monotonic_raw_ns,
                    realtime_ns: s.realtime_ns,
                    tsc: s.tsc,
                    monotonic_after_ns: s.monotonic_ns,
                }));
                return problem;
            }
            chunk_kind::KERNEL_CLOCK if self.version >= 2 => {
                match decode::<Vec<KernelClock>>(&self.payload) {
                    Ok(states) if states.len() == count as usize => {
                        self.kernel_clock.extend(states)
                    }
                    Ok(states) => {
                        return Some(format!(
                            "kernel-clock chunk holds {} states, its header says {count}",
                            states.len()
                        ));
                    }
                    Err(e) => return Some(format!("kernel-clock chunk is unreadable: {e}")),
                }
            }
            chunk_kind::ADDRESSES if self.version >= 5 => {
                match decode::<AddressTable>(&self.payload) {
                    Ok(table) if table.namespaces.len() == count as usize => {
                        self.address_tables.push(table)
                    }
                    Ok(table) => {
                        return Some(format!(
                            "address chunk holds {} namespace(s), its header says {count}",
                            table.namespaces.len()
                        ));
                    }
                    Err(e) => return Some(format!("address chunk is unreadable: {e}")),
                }
            }
            chunk_kind::LOST => match self.decode_lost() {
                Ok(lost) => self.lost = lost,
                Err(e) => return Some(format!("lost-event chunk is unreadable: {e}")),
            },
            chunk_kind::END => match self.decode_footer() {
                Ok(footer) => {
                    self.lost = footer.lost.clone();
                    self.footer = Some(footer);
                }
                Err(e) => return Some(format!("end chunk is unreadable: {e}")),
            },
            chunk_kind::HEADER => return Some("a second header chunk".into()),
            // A kind of the other version: as unknown as any other (a corrupt kind field), but
            // named, since it is the likeliest corruption to be puzzled by.
            chunk_kind::EVENTS
            | chunk_kind::CLOCK_SAMPLES_V1
            | chunk_kind::CLOCK_SAMPLES
            | chunk_kind::KERNEL_CLOCK
            | chunk_kind::EVENTS_PACKED
            | chunk_kind::CLOCK_SAMPLES_PACKED
            | chunk_kind::ADDRESSES => {
                return Some(format!(
                    "chunk of kind {kind}, which a version {} file cannot hold (corrupt chunk \
                     header)",
                    self.version
                ));
            }
            // Files of a later format version are refused when opened, so a kind this version
            // does not know can only be a corrupt kind field (which the checksum does not
            // cover): skipping the chunk would silently drop what it holds.
            other => {
                return Some(format!(
                    "chunk of unknown kind {other} (corrupt chunk header)"
                ));
            }
        }
        None
    }

    /// Decodes a lost-event chunk in the layout of the file's version.
    fn decode_lost(&self) -> Result<LostCounts, String> {
        if self.version >= 3 {
            decode(&self.payload)
        } else {
            decode::<LostCountsV2>(&self.payload).map(Into::into)
        }
    }

    /// Decodes the end chunk in the layout of the file's version.
    fn decode_footer(&self) -> Result<Footer, String> {
        if self.version >= 3 {
            decode(&self.payload)
        } else {
            decode::<FooterV2>(&self.payload).map(Into::into)
        }
    }

    /// Whether a chunk of `kind` is passed over unread: event chunks after
    /// [`skip_events`](TraceReader::skip_events), and all but the header, address tables and
    /// end after [`only_address_tables`](TraceReader::only_address_tables). Never a kind the
    /// file's version does not hold: that chunk is read, and reported as damage.
    fn skips(&self, kind: u32) -> bool {
        self.skip.is_some()
            && chunk_kind::in_version(kind, self.version)
            && match kind {
                chunk_kind::EVENTS | chunk_kind::EVENTS_PACKED => true,
                chunk_kind::HEADER | chunk_kind::ADDRESSES | chunk_kind::END => false,
                _ => self.only_addresses,
            }
    }

    /// Records the damage at the current offset, counting the bytes left unread.
    fn mark_damaged(&mut self, reason: String) -> Result<(), FormatError> {
        let rest = io::copy(&mut self.input, &mut io::sink())
            .map_err(|e| FormatError::io("cannot read trace file", e))?;
        self.damage = Some(Damage {
            offset: self.offset,
            bytes_discarded: self.consumed_in_chunk + rest,
            reason,
        });
        self.done = true;
        Ok(())
    }

    /// Reads the next chunk's payload after checking its length and checksum; returns its kind
    /// and record count. An event chunk whose length is a whole number of records is read
    /// straight into `self.events` (the kernel copies it there; no copy of ours follows, which
    /// matters at tens of millions of events per second); any other chunk goes to `self.payload`.
    fn read_chunk_into_payload(&mut self) -> Result<(u32, u32), ChunkProblem> {
        self.consumed_in_chunk = 0;
        self.events_direct = false;
        self.skipped = false;
        let mut head = [0u8; CHUNK_HEADER_LEN];
        let n = read_full(&mut self.input, &mut head).map_err(ChunkProblem::Io)?;
        self.consumed_in_chunk = n as u64;
        if n == 0 {
            return Err(ChunkProblem::End);
        }
        if n < CHUNK_HEADER_LEN {
            return Err(ChunkProblem::Damaged(
                "file ends inside a chunk header (cut short)".into(),
            ));
        }
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().unwrap());
        let (kind, len, crc, count) = (word(0), word(4), word(8), word(12));
        if len > MAX_CHUNK_PAYLOAD {
            return Err(ChunkProblem::Damaged(format!(
                "corrupt chunk header (length {len} is implausible)"
            )));
        }
        let len = len as usize;
        let padded = len + padding(len);
        let record = std::mem::size_of::<PacketEvent>();
        if let (true, Some(skip)) = (self.skips(kind), self.skip) {
            skip(&mut self.input, padded as u64).map_err(ChunkProblem::Io)?;
            self.events.clear();
            self.events_direct = true;
            self.skipped = true;
            self.offset += (CHUNK_HEADER_LEN + padded) as u64;
            self.consumed_in_chunk = 0;
            return Ok((kind, count));
        }
        let body: &mut [u8] = if kind == chunk_kind::EVENTS && len.is_multiple_of(record) {
            self.events_direct = true;
            // Same length as the previous chunk (the usual case): no zero-fill either.
            self.events
                .resize(len / record, bytemuck::Zeroable::zeroed());
            bytemuck::cast_slice_mut(&mut self.events)
        } else {
            self.payload.resize(len, 0);
            &mut self.payload
        };
        let mut pad = [0u8; 8];
        let pad = &mut pad[..padded - len];
        let mut n = read_full(&mut self.input, body).map_err(ChunkProblem::Io)?;
        if n == len {
            n += read_full(&mut self.input, pad).map_err(ChunkProblem::Io)?;
        }
        self.consumed_in_chunk += n as u64;
        if n < padded {
            return Err(ChunkProblem::Damaged(format!(
                "file ends inside a chunk ({n} of {padded} payload bytes present; cut short)"
            )));
        }
        if crc32fast::hash(body) != crc {
            return Err(ChunkProblem::Damaged(
                "corrupt chunk (checksum mismatch)".into(),
            ));
        }
        self.offset += (CHUNK_HEADER_LEN + padded) as u64;
        self.consumed_in_chunk = 0;
        Ok((kind, count))
    }
}

/// Appends the `count` fixed-size records in `payload` to `records`; returns a reason if the
/// payload does not hold exactly that many.
fn append_records<T: bytemuck::Pod>(
    payload: &[u8],
    count: u32,
    records: &mut Vec<T>,
    what: &str,
) -> Option<String> {
    if payload.len() != count as usize * std::mem::size_of::<T>() {
        return Some(record_count_mismatch(what, payload.len(), count));
    }
    let start = records.len();
    records.resize(start + count as usize, T::zeroed());
    bytemuck::cast_slice_mut::<T, u8>(&mut records[start..]).copy_from_slice(payload);
    None
}

fn record_count_mismatch(what: &str, bytes: usize, count: u32) -> String {
    format!("{what} chunk of {bytes} bytes does not hold {count} records")
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
