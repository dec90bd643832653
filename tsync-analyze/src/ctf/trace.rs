//! A CTF trace directory read as a stream of network events: its metadata compiled once, its
//! stream files read side by side (one packet each in memory) and merged in time order, each
//! network event turned into the analyzer's [`PacketEvent`] — handed out in chunks, as agent
//! trace files are.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tsync_common::format::{AgentOptions, Damage, Header};
use tsync_common::{PacketEvent, direction, kind};

use super::CtfError;
use super::metadata::{Metadata, TraceClass};
use super::network::Unusable;
use super::program::Program;
use super::stream::{NetHit, StreamReader, StreamStats};

/// Events handed out per chunk.
const CHUNK_EVENTS: usize = 4096;

/// The network events of a trace, by what became of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NetCounts {
    /// Send events (`net_dev_queue`, `inet_sock_local_out`) that gave a digest.
    pub send: u64,
    /// Receive events (`net_if_receive_skb`, `inet_sock_local_in`) that gave a digest.
    pub recv: u64,
    /// Digests of IPv4 + TCP.
    pub tcp4: u64,
    /// Digests of IPv6 + TCP.
    pub tcp6: u64,
    /// Digests of IPv4 + UDP.
    pub udp4: u64,
    /// Digests of the add-on events (`seq`, `ack_seq`, flags).
    pub tcp_addon: u64,
    /// Network events of packets neither IPv4 nor IPv6 (ARP, …): no digest.
    pub not_ip: u64,
    /// IP packets neither TCP nor UDP (ICMP, …; UDP over IPv6): no digest.
    pub other_protocol: u64,
    /// Network events without a network header (LTTng before 2.9): no digest.
    pub no_header: u64,
}

/// A CTF trace being read.
pub struct CtfTrace<R = File> {
    dir: PathBuf,
    class: TraceClass,
    program: Program,
    streams: Vec<StreamReader<R>>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    pending: Vec<Option<NetHit>>,
    started: bool,
    devices: HashMap<Vec<u8>, u32>,
    events: Vec<PacketEvent>,
    header: Header,
    net: NetCounts,
    consumed: u64,
}

/// The stream files of a trace directory: every regular file but `metadata` and hidden ones,
/// in name order.
fn stream_files(dir: &Path) -> Result<Vec<PathBuf>, CtfError> {
    let list = |e| CtfError::io(dir, e);
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(list)? {
        let e = e.map_err(list)?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == "metadata" || name.starts_with('.') {
            continue;
        }
        if e.file_type().map_err(list)?.is_file() {
            files.push(e.path());
        }
    }
    files.sort();
    Ok(files)
}

impl CtfTrace<File> {
    /// Opens the trace in `dir`: reads and compiles its metadata, opens its stream files.
    pub fn open(dir: &Path) -> Result<Self, CtfError> {
        let meta = Metadata::read(&dir.join("metadata")).map_err(|e| CtfError::trace(dir, e))?;
        let mut streams = Vec::new();
        let files = stream_files(dir)?;
        let class = TraceClass::parse(&meta.text, meta.little_endian)
            .map_err(|e| CtfError::trace(dir, e))?;
        let program = Program::compile(&class).map_err(|e| CtfError::trace(dir, e))?;
        for f in files {
            let file = File::open(&f).map_err(|e| CtfError::io(&f, e))?;
            let len = file.metadata().map_err(|e| CtfError::io(&f, e))?.len();
            let name = f
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into());
            streams.push(StreamReader::new(name, file, len, &program));
        }
        Ok(Self::assemble(dir, meta, class, program, streams))
    }
}

impl<R: Read> CtfTrace<R> {
    /// A trace from its metadata file's bytes and its streams (name, reader, length): for
    /// readers that are not files (the fuzzer's).
    pub fn from_parts(
        dir: &Path,
        metadata: &[u8],
        inputs: Vec<(String, R, u64)>,
    ) -> Result<Self, CtfError> {
        let meta = Metadata::parse(metadata).map_err(|e| CtfError::trace(dir, e))?;
        let class = TraceClass::parse(&meta.text, meta.little_endian)
            .map_err(|e| CtfError::trace(dir, e))?;
        let program = Program::compile(&class).map_err(|e| CtfError::trace(dir, e))?;
        let streams = inputs
            .into_iter()
            .map(|(name, r, len)| StreamReader::new(name, r, len, &program))
            .collect();
        Ok(Self::assemble(dir, meta, class, program, streams))
    }

    fn assemble(
        dir: &Path,
        meta: Metadata,
        class: TraceClass,
        program: Program,
        streams: Vec<StreamReader<R>>,
    ) -> Self {
        let uuid = class.uuid.or(meta.uuid());
        let host = class.env("hostname").unwrap_or_default();
        let tracer = match (class.env("tracer_name"), class.env("tracer_major")) {
            (Some(n), Some(major)) => format!(
                "{n} {major}.{}.{}",
                class.env("tracer_minor").unwrap_or_else(|| "0".into()),
                class.env("tracer_patchlevel").unwrap_or_else(|| "0".into())
            ),
            (Some(n), None) => n,
            _ => String::new(),
        };
        let clock = program.clock.as_ref();
        let header = Header {
            node: if host.is_empty() {
                dir.file_name()
                    .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into())
            } else {
                host.clone()
            },
            hostname: host,
            // One recording is one trace UUID: the same trace given twice is recognized.
            boot_id: uuid.map_or_else(String::new, |u| format!("ctf-trace-{}", hex(&u))),
            kernel_release: class.env("kernel_release").unwrap_or_default(),
            clocksource: clock.map_or_else(|| "none".into(), |c| format!("lttng {}", c.name)),
            interfaces: Vec::new(),
            start_realtime_ns: clock.map_or(0, |c| c.offset_ns()),
            start_monotonic_ns: 0,
            options: AgentOptions {
                agent_version: tracer,
                ..AgentOptions::default()
            },
        };
        let n = streams.len();
        CtfTrace {
            dir: dir.to_path_buf(),
            class,
            program,
            streams,
            heap: BinaryHeap::with_capacity(n),
            pending: vec![None; n],
            started: false,
            devices: HashMap::new(),
            events: Vec::with_capacity(CHUNK_EVENTS),
            header,
            net: NetCounts::default(),
            consumed: 0,
        }
    }

    /// The trace's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the metadata declares.
    pub fn class(&self) -> &TraceClass {
        &self.class
    }

    /// The compiled metadata (its clock).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// A trace file header standing for the trace: node and host from `env.hostname`, the
    /// trace UUID as its recording's identity, the clock's offset as the realtime start of a
    /// monotonic clock that starts at 0.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The network events read so far, by fate.
    pub fn net_counts(&self) -> &NetCounts {
        &self.net
    }

    /// Per stream file: its name and what was read of it.
    pub fn stream_stats(&self) -> impl Iterator<Item = (&str, &StreamStats)> {
        self.streams.iter().map(|s| (s.name(), s.stats()))
    }

    /// Per stream file: where and why it stopped being readable, if it did.
    pub fn stream_damages(&self) -> impl Iterator<Item = Option<&Damage>> {
        self.streams.iter().map(|s| s.damage())
    }

    /// Every stream's damage, in file order.
    pub fn damages(&self) -> impl Iterator<Item = &Damage> {
        self.streams.iter().filter_map(|s| s.damage())
    }

    /// The tracer's discarded events (all kinds; the sum of every stream's running count).
    pub fn discarded(&self) -> u64 {
        self.streams.iter().map(|s| s.stats().discarded).sum()
    }

    /// Packets missing from the streams' sequence numbers.
    pub fn lost_packets(&self) -> u64 {
        self.streams.iter().map(|s| s.stats().lost_packets).sum()
    }

    /// The events of the chunk read last.
    pub fn events(&self) -> &[PacketEvent] {
        &self.events
    }

    /// Bytes of stream files consumed since the last call (progress).
    pub fn take_consumed(&mut self) -> u64 {
        let total: u64 = self.streams.iter().map(|s| s.stats().bytes).sum();
        let delta = total.saturating_sub(self.consumed);
        self.consumed = total;
        delta
    }

    fn refill(&mut self, k: usize) {
        let hit = self.streams[k].next_net(&self.program);
        if let Some(h) = &hit {
            self.heap.push(Reverse((h.cycles, k)));
        }
        self.pending[k] = hit;
    }

    /// Reads the next chunk of network events in time order (None at the end of every stream;
    /// a chunk is never empty).
    pub fn next_chunk(&mut self) -> Option<&[PacketEvent]> {
        if !self.started {
            self.started = true;
            for k in 0..self.streams.len() {
                self.refill(k);
            }
        }
        self.events.clear();
        while self.events.len() < CHUNK_EVENTS {
            let Some(Reverse((_, k))) = self.heap.pop() else {
                break;
            };
            let hit = self.pending[k]
                .take()
                .expect("a pending event per heap entry");
            self.refill(k);
            if let Some(e) = self.packet_event(&hit) {
                self.events.push(e);
            }
        }
        (!self.events.is_empty()).then_some(self.events.as_slice())
    }

    fn packet_event(&mut self, hit: &NetHit) -> Option<PacketEvent> {
        let counts = &mut self.net;
        match hit.fields.packet_event(hit.event) {
            Ok(mut e) => {
                match e.direction {
                    direction::SEND => counts.send += 1,
                    _ => counts.recv += 1,
                }
                match e.kind {
                    kind::TCP4 => counts.tcp4 += 1,
                    kind::TCP6 => counts.tcp6 += 1,
                    kind::UDP4 => counts.udp4 += 1,
                    _ => counts.tcp_addon += 1,
                }
                let ns = self
                    .program
                    .clock
                    .as_ref()
                    .map_or(hit.cycles, |c| c.ns(hit.cycles));
                e.ts_ns = ns.min(i64::MAX as u64);
                e.cpu = hit.cpu;
                let device = hit.fields.device();
                if !device.is_empty() {
                    e.ifindex = match self.devices.get(device) {
                        Some(&i) => i,
                        None => {
                            let next = self.devices.len() as u32 + 1;
                            self.devices.insert(device.to_vec(), next);
                            next
                        }
                    };
                }
                Some(e)
            }
            Err(Unusable::NotIp) => {
                counts.not_ip += 1;
                None
            }
            Err(Unusable::OtherProtocol) => {
                counts.other_protocol += 1;
                None
            }
            Err(Unusable::NoHeader) => {
                counts.no_header += 1;
                None
            }
        }
    }

    /// The devices seen, by the interface number their events carry.
    pub fn devices(&self) -> Vec<(u32, String)> {
        let mut d: Vec<(u32, String)> = self
            .devices
            .iter()
            .map(|(n, &i)| (i, String::from_utf8_lossy(n).into_owned()))
            .collect();
        d.sort();
        d
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
