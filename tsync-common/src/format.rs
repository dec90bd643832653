//! The tsync trace file format: written by `tsync-agent`, read by `tsync-analyze`.
//!
//! A file is a 16-byte preamble followed by chunks:
//!
//! ```text
//! preamble: magic "TSYNCTRC" (8) | version u32 | byte order u32 (0 = little-endian)
//! chunk:    kind u32 | payload length u32 | CRC-32 of the payload u32 | record count u32
//!           | payload | zero padding to a multiple of 8 bytes
//! ```
//!
//! The first chunk is the [`Header`] (bincode 2 over serde). Then, in any order: event chunks (raw
//! [`PacketEvent`] arrays, readable without per-record decoding), clock-sample chunks (raw
//! [`ClockSample`] arrays), kernel clock-discipline states ([`KernelClock`], bincode), lost-event
//! counters ([`LostCounts`], bincode) and, last, one end chunk ([`Footer`], bincode).
//!
//! Versions: 3 adds the events the agent dropped on the way to disk ([`LostCounts::disk`]) to the
//! lost-event and end chunks. 2 brackets each raw clock reading between two monotonic readings (a 40-byte
//! [`ClockSample`], chunk kind 6) and records the kernel's NTP state (chunk kind 7). Version 1
//! files (32-byte samples without the second monotonic reading, chunk kind 3, every 0.5 s) are
//! still read: their samples come back with `monotonic_after_ns == monotonic_ns`, and
//! [`TraceReader::samples_bracketed`] says that their pairing has no known bound.
//!
//! Why chunks with a checksum: a recording that is cut short (kill -9, power loss, full disk) loses
//! at most the chunk being written. The reader returns everything up to the last complete chunk and
//! then reports the [`Damage`]: where it is and how many bytes it had to discard. Nothing past a
//! damaged chunk is ever read, because a wrong length could make it read garbage as events.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::PacketEvent;

/// First 8 bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"TSYNCTRC";
/// Format version this build writes and the newest it reads.
pub const VERSION: u32 = 3;
/// The oldest version [`TraceWriter::with_version`] still writes (for compatibility tests and
/// benchmarks against files users already have).
pub const OLDEST_WRITTEN_VERSION: u32 = 2;
/// Events per event chunk: 4096 × 80 bytes = 320 KiB, so a cut file loses at most that much.
pub const EVENTS_PER_CHUNK: usize = 4096;
/// Largest payload a reader accepts; a larger length field means the chunk header is corrupt.
pub const MAX_CHUNK_PAYLOAD: u32 = 64 << 20;

const PREAMBLE_LEN: usize = 16;
const CHUNK_HEADER_LEN: usize = 16;
const LITTLE_ENDIAN: u32 = 0;

/// Kinds of chunk. A new kind needs a new [`VERSION`] (which older readers refuse with a request to
/// upgrade), so a reader treats a kind it does not know as a corrupt chunk header: the checksum
/// covers the payload only, and skipping the chunk could drop events silently.
mod chunk_kind {
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
}

/// Self-description of a trace: which node, which kernel, which clock, which options.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Header {
    /// Name the user gave the node (`--node`), the hostname by default.
    pub node: String,
    pub hostname: String,
    /// `/proc/sys/kernel/random/boot_id`: monotonic times are only comparable within one boot.
    pub boot_id: String,
    pub kernel_release: String,
    /// Current clocksource (`tsc`, `kvm-clock`, ...): tells how trustworthy the clock is.
    pub clocksource: String,
    /// Interfaces of the recorded network namespace, with their addresses.
    pub interfaces: Vec<Interface>,
    /// CLOCK_REALTIME when recording started.
    pub start_realtime_ns: i64,
    /// CLOCK_MONOTONIC when recording started (after `--clock-skew`, like the events).
    pub start_monotonic_ns: u64,
    pub options: AgentOptions,
}

/// One network interface of the recorded node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Interface {
    pub ifindex: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    /// Addresses with prefix length, e.g. `10.0.0.1/24`, `fe80::1/64`.
    pub addresses: Vec<String>,
}

/// The options the agent ran with, recorded so a trace explains itself.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct AgentOptions {
    pub agent_version: String,
    pub ring_size: u64,
    pub all_netns: bool,
    /// Inode of the network namespace the agent filtered on (None with `--all-netns`).
    pub netns_inode: Option<u64>,
    pub duration_s: Option<f64>,
    /// A known skew applied to every written timestamp, to test synchronization against the truth.
    /// The analyzer never reads it to help itself.
    pub clock_skew: Option<ClockSkew>,
    pub command_line: Vec<String>,
}

/// A linear transformation of the node's clock: `t + offset_ns + t * drift_ppm * 1e-6`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
pub struct ClockSkew {
    pub offset_ns: i64,
    pub drift_ppm: f64,
}

impl ClockSkew {
    /// Applies the skew to a monotonic time in ns. The drift term is computed in f64 with the
    /// product `t * ppm` split so that its rounding error stays below a nanosecond for any
    /// realistic uptime; the result saturates at the bounds of `u64`.
    pub fn apply(&self, t_ns: u64) -> u64 {
        let drift = (t_ns as f64) * self.drift_ppm * 1e-6;
        let skewed = t_ns as i128 + self.offset_ns as i128 + drift.round() as i128;
        skewed.clamp(0, u64::MAX as i128) as u64
    }
}

/// The node's clocks read back to back, so that event times (CLOCK_MONOTONIC, what
/// `bpf_ktime_get_ns` reads, slewed by NTP) can later be mapped to the raw, un-slewed timeline
/// (CLOCK_MONOTONIC_RAW), the TSC and wall-clock time.
///
/// The raw reading lies between the two monotonic readings: the true CLOCK_MONOTONIC at the
/// instant CLOCK_MONOTONIC_RAW read `monotonic_raw_ns` is within
/// `[monotonic_ns, monotonic_after_ns]`. The agent keeps the tightest of a few tries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClockSample {
    /// CLOCK_MONOTONIC read just before the raw clock, after `--clock-skew` like the events.
    pub monotonic_ns: u64,
    /// CLOCK_MONOTONIC_RAW: the clocksource without NTP's frequency and phase corrections.
    pub monotonic_raw_ns: u64,
    pub realtime_ns: i64,
    /// `rdtsc` (0 where the CPU has none).
    pub tsc: u64,
    /// CLOCK_MONOTONIC read just after the raw clock, skewed like `monotonic_ns` (equal to it in
    /// version 1 files, whose pairing has no known bound).
    pub monotonic_after_ns: u64,
}

impl ClockSample {
    /// Width of the monotonic bracket around the raw reading (ns).
    pub fn bracket_ns(&self) -> u64 {
        self.monotonic_after_ns.saturating_sub(self.monotonic_ns)
    }
}

/// A version 1 clock sample as stored (no second monotonic reading).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
struct ClockSampleV1 {
    monotonic_ns: u64,
    monotonic_raw_ns: u64,
    realtime_ns: i64,
    tsc: u64,
}

/// The kernel's clock discipline (`adjtimex(2)` with modes 0), recorded when the recording starts
/// and whenever it changes: what NTP or chrony did to CLOCK_MONOTONIC's rate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KernelClock {
    /// CLOCK_MONOTONIC (skewed like the events) when the state was read.
    pub monotonic_ns: u64,
    /// Frequency offset, ppm with a 16-bit fraction (`timex.freq`).
    pub freq: i64,
    /// Remaining phase offset the kernel is slewing away (`timex.offset`, ns with STA_NANO, else µs).
    pub offset: i64,
    /// Microseconds per tick (`timex.tick`; 10000 at USER_HZ 100 is nominal).
    pub tick: i64,
    /// `timex.status` flags (STA_PLL, STA_NANO, STA_UNSYNC, ...).
    pub status: i32,
    /// Maximum error estimate (µs), as the NTP daemon set it.
    pub maxerror: i64,
    /// Return value of adjtimex: TIME_OK, TIME_INS, ..., TIME_ERROR.
    pub state: i32,
}

/// Events lost while recording, cumulative since the start: those the kernel could not put into
/// the ring buffer (`send`, `recv`) and those the agent dropped because the output did not take
/// them fast enough (`disk`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LostCounts {
    /// Send events lost: ring buffer full or headers unreadable (per CPU below), plus the runs
    /// the kernel skipped because the program was already running on that CPU (no CPU known).
    pub send: u64,
    /// Receive events lost, counted like `send`.
    pub recv: u64,
    /// Per CPU: `[send, recv]` (the in-kernel counters only).
    pub per_cpu: Vec<[u64; 2]>,
    /// Events the agent took from the ring buffer but dropped because the output did not accept
    /// writes fast enough (its memory budget for pending writes was full). Version 3 on; 0 when
    /// read from older files, whose agents blocked instead.
    pub disk: u64,
}

impl LostCounts {
    /// All lost events, in the kernel and on the way to disk (saturating: the counts of a corrupt
    /// file can be anything).
    pub fn total(&self) -> u64 {
        self.send
            .saturating_add(self.recv)
            .saturating_add(self.disk)
    }

    /// Events the kernel lost (ring buffer full, unreadable headers, skipped runs).
    pub fn kernel(&self) -> u64 {
        self.send.saturating_add(self.recv)
    }
}

/// [`LostCounts`] as versions 1 and 2 store them (no `disk`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
struct LostCountsV2 {
    send: u64,
    recv: u64,
    per_cpu: Vec<[u64; 2]>,
}

impl From<LostCountsV2> for LostCounts {
    fn from(old: LostCountsV2) -> Self {
        LostCounts {
            send: old.send,
            recv: old.recv,
            per_cpu: old.per_cpu,
            disk: 0,
        }
    }
}

impl TryFrom<&LostCounts> for LostCountsV2 {
    type Error = FormatError;

    /// Refuses disk losses, which a version 2 file cannot hold: dropping them would be silent.
    fn try_from(lost: &LostCounts) -> Result<Self, FormatError> {
        if lost.disk != 0 {
            return Err(FormatError::Encode(format!(
                "a version 2 file cannot record the {} event(s) dropped on the way to disk",
                lost.disk
            )));
        }
        Ok(LostCountsV2 {
            send: lost.send,
            recv: lost.recv,
            per_cpu: lost.per_cpu.clone(),
        })
    }
}

/// Written last: the totals, so a reader can tell a complete file from one cut short.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Footer {
    pub events: u64,
    pub send_events: u64,
    pub recv_events: u64,
    pub lost: LostCounts,
    pub end_realtime_ns: i64,
    pub end_monotonic_ns: u64,
}

/// [`Footer`] as versions 1 and 2 store it (their [`LostCountsV2`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
struct FooterV2 {
    events: u64,
    send_events: u64,
    recv_events: u64,
    lost: LostCountsV2,
    end_realtime_ns: i64,
    end_monotonic_ns: u64,
}

impl From<FooterV2> for Footer {
    fn from(old: FooterV2) -> Self {
        Footer {
            events: old.events,
            send_events: old.send_events,
            recv_events: old.recv_events,
            lost: old.lost.into(),
            end_realtime_ns: old.end_realtime_ns,
            end_monotonic_ns: old.end_monotonic_ns,
        }
    }
}

impl TryFrom<&Footer> for FooterV2 {
    type Error = FormatError;

    fn try_from(footer: &Footer) -> Result<Self, FormatError> {
        Ok(FooterV2 {
            events: footer.events,
            send_events: footer.send_events,
            recv_events: footer.recv_events,
            lost: (&footer.lost).try_into()?,
            end_realtime_ns: footer.end_realtime_ns,
            end_monotonic_ns: footer.end_monotonic_ns,
        })
    }
}

/// Where a file stops being readable, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first chunk that could not be read.
    pub offset: u64,
    /// Bytes from there to the end of the file, which were not read.
    pub bytes_discarded: u64,
    pub reason: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at byte {}; {} byte(s) after it were not read",
            self.reason, self.offset, self.bytes_discarded
        )
    }
}

/// What can go wrong reading or writing a trace file.
#[derive(thiserror::Error, Debug)]
pub enum FormatError {
    /// The OS error is part of the message, and deliberately not a `source`: an error chain
    /// printed whole (`anyhow`'s `{:#}`) would say it twice.
    #[error("{context}: {error}")]
    Io { context: String, error: io::Error },
    #[error("not a tsync trace file (it does not start with \"TSYNCTRC\")")]
    NotATrace,
    #[error(
        "trace file format version {found} is newer than this build supports ({supported}); \
         upgrade tsync-analyze"
    )]
    FutureVersion { found: u32, supported: u32 },
    #[error(
        "trace file is big-endian or has an unknown byte order ({0}); tsync writes little-endian"
    )]
    ByteOrder(u32),
    #[error("trace file header is unreadable: {0}")]
    Header(String),
    #[error("cannot encode trace metadata: {0}")]
    Encode(String),
}

impl FormatError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        FormatError::Io {
            context: context.into(),
            error: source,
        }
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, FormatError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|e| FormatError::Encode(e.to_string()))
}

/// Decodes a metadata chunk, which must be exactly one value: trailing bytes mean the chunk is
/// not what its kind says (a corrupt kind field), and are refused rather than ignored.
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    // The limit makes a corrupt length prefix an error instead of an allocation of its size.
    let config = bincode::config::standard().with_limit::<{ MAX_CHUNK_PAYLOAD as usize }>();
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, config).map_err(|e| e.to_string())?;
    match bytes.len() - used {
        0 => Ok(value),
        extra => Err(format!("{extra} bytes after the value")),
    }
}

fn padding(len: usize) -> usize {
    (8 - len % 8) % 8
}

/// True when `prefix` (the first bytes of a file) starts like a trace file.
pub fn is_trace_file(prefix: &[u8]) -> bool {
    prefix.starts_with(&MAGIC)
}

/// Writes a trace file chunk by chunk. Events and clock samples are buffered and go out as one
/// chunk when [`EVENTS_PER_CHUNK`] events are pending or on [`TraceWriter::flush`].
pub struct TraceWriter<W: Write> {
    out: W,
    events: Vec<PacketEvent>,
    samples: Vec<ClockSample>,
    kernel_clock: Vec<KernelClock>,
    events_written: u64,
    /// Format version being written.
    version: u32,
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
        };
        writer.write_chunk(chunk_kind::HEADER, &encode(header)?, 1)?;
        Ok(writer)
    }

    /// Buffers one event.
    pub fn write_event(&mut self, event: &PacketEvent) -> Result<(), FormatError> {
        self.events.push(*event);
        if self.events.len() >= EVENTS_PER_CHUNK {
            self.write_pending_events()?;
        }
        Ok(())
    }

    /// Buffers events.
    pub fn write_events(&mut self, events: &[PacketEvent]) -> Result<(), FormatError> {
        let mut rest = events;
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
        self.write_chunk(chunk_kind::LOST, &payload, 1)
    }

    /// Writes pending events and clock samples as chunks and flushes the output, so that what was
    /// recorded so far survives a crash.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.write_pending_events()?;
        if !self.samples.is_empty() {
            let samples = std::mem::take(&mut self.samples);
            self.write_chunk(
                chunk_kind::CLOCK_SAMPLES,
                bytemuck::cast_slice(&samples),
                samples.len() as u32,
            )?;
        }
        if !self.kernel_clock.is_empty() {
            let states = std::mem::take(&mut self.kernel_clock);
            self.write_chunk(
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
        self.write_chunk(chunk_kind::END, &payload, 1)?;
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
        self.write_chunk(
            chunk_kind::EVENTS,
            bytemuck::cast_slice(&events),
            events.len() as u32,
        )?;
        self.events_written += events.len() as u64;
        self.events = events;
        self.events.clear();
        Ok(())
    }

    fn write_chunk(&mut self, kind: u32, payload: &[u8], count: u32) -> Result<(), FormatError> {
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
        self.out
            .write_all(&head)
            .and_then(|_| self.out.write_all(payload))
            .and_then(|_| self.out.write_all(&pad[..padding(payload.len())]))
            .map_err(|e| FormatError::io(context, e))
    }
}

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
    lost: LostCounts,
    footer: Option<Footer>,
    damage: Option<Damage>,
    /// Bytes of the current chunk read so far (counted as discarded if it turns out damaged).
    consumed_in_chunk: u64,
    done: bool,
    /// Set by [`TraceReader::skip_events`]: moves the input past an event chunk's payload.
    skip: Option<fn(&mut R, u64) -> io::Result<()>>,
}

impl<R: Read + Seek> TraceReader<R> {
    /// From now on, passes over event payloads without reading them (their checksums are not
    /// checked either): for a first pass that only wants the clock samples, the kernel clock
    /// states and the footer, at the cost of reading a few bytes per 320 KiB of events.
    /// [`next_events`](Self::next_events) then returns an empty slice per event chunk.
    pub fn skip_events(&mut self) {
        self.skip = Some(|input, n| input.seek(io::SeekFrom::Current(n as i64)).map(|_| ()));
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
            lost: LostCounts::default(),
            footer: None,
            damage: None,
            consumed_in_chunk: 0,
            done: false,
            skip: None,
        };
        reader.header = reader.read_header_chunk()?;
        Ok(reader)
    }

    /// The trace's self-description.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next chunk of events, in file order. Clock samples, lost counters and the footer met on
    /// the way are kept by the reader. `Ok(None)` at the end of the file, and also at the first
    /// damaged chunk: then [`damage`](Self::damage) says what was cut.
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
            if kind == chunk_kind::EVENTS {
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
            Ok((chunk_kind::HEADER, _)) => decode(&self.payload).map_err(FormatError::Header),
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
        match kind {
            chunk_kind::EVENTS if self.skip.is_some() => {}
            chunk_kind::EVENTS => {
                let bytes = if self.events_direct {
                    std::mem::size_of_val(self.events.as_slice())
                } else {
                    self.payload.len()
                };
                if bytes != count as usize * std::mem::size_of::<PacketEvent>() {
                    return Some(record_count_mismatch("event", bytes, count));
                }
            }
            chunk_kind::CLOCK_SAMPLES if self.version >= 2 => {
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
            chunk_kind::CLOCK_SAMPLES_V1 | chunk_kind::CLOCK_SAMPLES | chunk_kind::KERNEL_CLOCK => {
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
        if let (chunk_kind::EVENTS, Some(skip)) = (kind, self.skip) {
            skip(&mut self.input, padded as u64).map_err(ChunkProblem::Io)?;
            self.events.clear();
            self.events_direct = true;
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
