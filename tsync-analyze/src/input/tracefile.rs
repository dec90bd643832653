//! Agent trace files as inputs: the one layer every command reads them through. It opens a
//! file, hands out its event chunks in place, keeps the clock samples, lost counts and damage
//! the format reader found, knows each recording's realtime shift, and names the file in every
//! error ([`InputError`]).
//!
//! An LTTng (CTF) trace directory is read through the same layer: its network events come as
//! the same chunks of [`PacketEvent`]s ([`crate::ctf::CtfTrace`]), its header is made up from
//! its metadata, and it has no clock samples (LTTng records none).

use std::fs::File;
use std::path::{Path, PathBuf};

use tsync_common::format::{
    ClockSample, Damage, Footer, FormatError, KernelClock, LostCounts, TraceReader,
};
use tsync_common::{PacketEvent, direction};

use crate::ctf::CtfTrace;
use crate::input::ahead::{Ahead, Decoders, Demand};
use crate::input::error::InputError;

/// The trace file header.
pub type TraceHeader = tsync_common::format::Header;

/// True when the start of a file is a trace file's magic.
pub fn is_trace_file(prefix: &[u8]) -> bool {
    tsync_common::format::is_trace_file(prefix)
}

fn trace_error(path: &Path, e: FormatError) -> InputError {
    match e {
        FormatError::Io {
            context,
            error: source,
        } => InputError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(source.kind(), format!("{context}: {source}")),
        },
        other => InputError::Trace {
            path: path.to_path_buf(),
            what: other.to_string(),
        },
    }
}

/// Reads the header of a trace file.
pub fn read_header(path: &Path) -> Result<TraceHeader, InputError> {
    TraceFile::open(path).map(|f| f.header().clone())
}

/// Whether the analyzer can use an event: a time that fits i64 nanoseconds and a known direction.
/// The others (a corrupt record that passed the checksum) are counted and skipped everywhere.
#[inline]
pub fn usable(e: &PacketEvent) -> bool {
    e.ts_ns <= i64::MAX as u64 && (e.direction == direction::SEND || e.direction == direction::RECV)
}

/// What a trace file recorded of its node's clocks.
#[derive(Clone, Debug, Default)]
pub struct ClockRecord {
    /// The clock samples, in file order.
    pub samples: Vec<ClockSample>,
    /// Whether each sample brackets its raw reading (format version 2 on).
    pub bracketed: bool,
    /// The kernel's clock-discipline states (format version 2 on).
    pub kernel_clock: Vec<KernelClock>,
}

/// Reads a trace file's clock samples and kernel clock states in a quick pass that seeks over
/// the events (a few bytes read per chunk of up to 4096 events, without decompressing them), so
/// that event times can be converted while the events are streamed afterwards. Stops where the
/// file is damaged, as every reader. A CTF trace has none.
pub fn read_clock_record(path: &Path) -> Result<ClockRecord, InputError> {
    if path.is_dir() {
        return Ok(ClockRecord::default());
    }
    let file = File::open(path).map_err(|e| InputError::io(path, e))?;
    let mut reader = TraceReader::new(file).map_err(|e| trace_error(path, e))?;
    reader.skip_events();
    while reader
        .next_events()
        .map_err(|e| trace_error(path, e))?
        .is_some()
    {}
    Ok(ClockRecord {
        samples: reader.clock_samples().to_vec(),
        bracketed: reader.samples_bracketed(),
        kernel_clock: reader.kernel_clock().to_vec(),
    })
}

/// An open trace: an agent trace file, or an LTTng trace directory.
///
/// An agent file is read unbuffered: the reader asks for whole chunks (hundreds of KiB in versions 1 and 2), which the
/// kernel copies straight into the reader's event buffer; a `BufReader` would only add a copy.
/// Version 3's compressed chunks (tens of KiB) are read whole too, then decoded into that buffer.
/// The events are used in place ([`TraceFile::events`]).
pub struct TraceFile {
    path: PathBuf,
    source: Backend,
}

// The agent reader stays in place: the merge asks for its events once per event.
#[allow(clippy::large_enum_variant)]
enum Backend {
    Agent(TraceReader<File>),
    /// An agent file decoded on a pool of threads ([`Decoders`]), until its end: then the pool
    /// hands the reader back and it is `Agent` again.
    Ahead(Box<Ahead>),
    Ctf(Box<CtfTrace>),
}

/// What a CTF trace reports where an agent file has lost counts: none (its losses are the
/// tracer's discarded events, [`TraceFile::discarded`]).
static NO_LOSS: LostCounts = LostCounts {
    send: 0,
    recv: 0,
    per_cpu: Vec::new(),
    disk: 0,
};

impl TraceFile {
    /// Opens `path` and reads its header (a directory: the CTF trace there, metadata compiled).
    pub fn open(path: &Path) -> Result<Self, InputError> {
        let source = if path.is_dir() {
            Backend::Ctf(Box::new(CtfTrace::open(path).map_err(InputError::from)?))
        } else {
            Backend::Agent(agent_reader(path)?)
        };
        Ok(TraceFile {
            path: path.to_path_buf(),
            source,
        })
    }

    /// [`open`](Self::open), with an agent file's chunks decoded on `pool`, ahead or on request
    /// as `demand` says (a CTF trace is read as by `open`). What every method returns is the
    /// same either way.
    pub fn open_ahead(path: &Path, pool: &Decoders, demand: Demand) -> Result<Self, InputError> {
        if path.is_dir() {
            return Self::open(path);
        }
        Ok(TraceFile {
            path: path.to_path_buf(),
            source: Backend::Ahead(Box::new(pool.start(agent_reader(path)?, demand))),
        })
    }

    /// Asks the pool to decode the next chunk now, if the file is decoded on request
    /// ([`Demand::Requested`]) and none was asked for; true if it was asked.
    pub fn request_ahead(&mut self) -> bool {
        match &mut self.source {
            Backend::Ahead(a) => a.request(),
            Backend::Agent(_) | Backend::Ctf(_) => false,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header: node, host, boot, interfaces, agent options (made up from the metadata for
    /// a CTF trace: [`CtfTrace::header`]).
    pub fn header(&self) -> &TraceHeader {
        match &self.source {
            Backend::Agent(r) => r.header(),
            Backend::Ahead(a) => &a.header,
            Backend::Ctf(t) => t.header(),
        }
    }

    /// The CTF trace behind this input, if it is one.
    pub fn ctf(&self) -> Option<&CtfTrace> {
        match &self.source {
            Backend::Ctf(t) => Some(t),
            Backend::Agent(_) | Backend::Ahead(_) => None,
        }
    }

    /// Reads the next event chunk (None at the end; a chunk may be empty). Metadata chunks met
    /// on the way (clock samples, lost counts, footer) are kept.
    pub fn next_chunk(&mut self) -> Result<Option<&[PacketEvent]>, InputError> {
        if let Backend::Ahead(a) = &mut self.source
            && let Some(reader) = a.next().map_err(|e| trace_error(&self.path, e))?
        {
            // The end: the reader holds the footer, the damage and every count.
            self.source = Backend::Agent(reader);
            return Ok(None);
        }
        match &mut self.source {
            Backend::Agent(r) => r.next_events().map_err(|e| trace_error(&self.path, e)),
            Backend::Ahead(a) => Ok(Some(&a.events)),
            Backend::Ctf(t) => Ok(t.next_chunk()),
        }
    }

    /// The events of the chunk read last.
    pub fn events(&self) -> &[PacketEvent] {
        match &self.source {
            Backend::Agent(r) => r.current_events(),
            Backend::Ahead(a) => &a.events,
            Backend::Ctf(t) => t.events(),
        }
    }

    /// The hashes of the events of the chunk read last, if a decoding pool computed them: what
    /// [`Decoders::new`]'s function wrote (the merge's pads them with a few more).
    pub fn hashes(&self) -> Option<&[u64]> {
        match &self.source {
            Backend::Ahead(a) => Some(&a.hashes),
            Backend::Agent(_) | Backend::Ctf(_) => None,
        }
    }

    /// Bytes of input behind the chunk read last (progress): its events' for a trace file, the
    /// stream bytes read for it for a CTF trace.
    pub fn chunk_bytes(&mut self) -> u64 {
        match &mut self.source {
            Backend::Agent(r) => r.current_events().len() as u64 * tsync_common::EVENT_SIZE as u64,
            Backend::Ahead(a) => a.events.len() as u64 * tsync_common::EVENT_SIZE as u64,
            Backend::Ctf(t) => t.take_consumed(),
        }
    }

    /// The clock samples read so far (none in a CTF trace).
    pub fn clock_samples(&self) -> &[ClockSample] {
        match &self.source {
            Backend::Agent(r) => r.clock_samples(),
            Backend::Ahead(a) => &a.samples,
            Backend::Ctf(_) => &[],
        }
    }

    /// Format version of the file (1 to 6; 0 for an LTTng trace).
    pub fn version(&self) -> u32 {
        match &self.source {
            Backend::Agent(r) => r.version(),
            Backend::Ahead(a) => a.version,
            Backend::Ctf(_) => 0,
        }
    }

    /// Whether the clock samples bracket their raw reading (version 2 on): only then can the
    /// slewing be undone with a bound ([`SlewCorrection`](crate::SlewCorrection)).
    pub fn samples_bracketed(&self) -> bool {
        match &self.source {
            Backend::Agent(r) => r.samples_bracketed(),
            Backend::Ahead(a) => a.bracketed,
            Backend::Ctf(_) => false,
        }
    }

    /// The kernel's clock-discipline states read so far (version 2 on).
    pub fn kernel_clock(&self) -> &[KernelClock] {
        match &self.source {
            Backend::Agent(r) => r.kernel_clock(),
            Backend::Ahead(a) => &a.kernel_clock,
            Backend::Ctf(_) => &[],
        }
    }

    /// The kernel's lost-event counts read so far (none for a CTF trace: see
    /// [`discarded`](Self::discarded)).
    pub fn lost(&self) -> &LostCounts {
        match &self.source {
            Backend::Agent(r) => r.lost(),
            Backend::Ahead(a) => &a.lost,
            Backend::Ctf(_) => &NO_LOSS,
        }
    }

    /// Events of every kind the tracer discarded, for a CTF trace (LTTng's packet contexts'
    /// `events_discarded`); 0 for an agent file.
    pub fn discarded(&self) -> u64 {
        self.ctf().map_or(0, CtfTrace::discarded)
    }

    /// The footer, once read (a file cut short has none; a CTF trace has none).
    pub fn footer(&self) -> Option<&Footer> {
        match &self.source {
            Backend::Agent(r) => r.footer(),
            // Read at the end, when the reader comes back.
            Backend::Ahead(_) | Backend::Ctf(_) => None,
        }
    }

    /// Where and why the file stopped being readable, if it did (the events before are good).
    /// For a CTF trace: its first damaged stream (each stream stops on its own).
    pub fn damage(&self) -> Option<&Damage> {
        match &self.source {
            Backend::Agent(r) => r.damage(),
            // Found at the end, when the reader comes back.
            Backend::Ahead(_) => None,
            Backend::Ctf(t) => t.damages().next(),
        }
    }

    /// realtime − monotonic at the start of the recording (before its first clock sample), ns;
    /// for a CTF trace its clock's offset from the epoch.
    pub fn start_shift(&self) -> i64 {
        let h = self.header();
        h.start_realtime_ns
            .wrapping_sub(h.start_monotonic_ns as i64)
    }

    /// realtime − monotonic from the latest clock sample read so far, else `previous`, ns.
    pub fn latest_shift(&self, previous: i64) -> i64 {
        self.clock_samples().last().map_or(previous, |s| {
            s.realtime_ns.wrapping_sub(s.monotonic_ns as i64)
        })
    }

    /// The node's name for messages: the header's node name, else the file's path.
    pub fn node_name(&self) -> String {
        let node = &self.header().node;
        if node.is_empty() {
            self.path.display().to_string()
        } else {
            node.clone()
        }
    }
}

/// Opens an agent trace file and reads its header.
fn agent_reader(path: &Path) -> Result<TraceReader<File>, InputError> {
    let file = File::open(path).map_err(|e| InputError::io(path, e))?;
    TraceReader::new(file).map_err(|e| trace_error(path, e))
}
