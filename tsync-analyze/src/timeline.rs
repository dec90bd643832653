//! The common timeline: every event of every trace on its group's reference clock.
//!
//! `sync` gives one affine map per trace. The commands that use the maps — `correct`, `eval`,
//! `export` and the plots — all need the same glue, which lives here:
//!
//! 1. [`Timeline::build`]: one pass over the messages that feeds the hulls (as `sync` does) and,
//!    on the side, gathers what the later steps need: the messages as references to their send
//!    and receive events (for the controlled logical clock and the exported peer events), the
//!    smallest round trip per pair (for `l_min`), and a bounded envelope of message points per
//!    pair for the plots ([`crate::figures::PairSamples`]);
//! 2. [`Timeline::linear_times`]: per trace, every event's linearly corrected time, in event
//!    order (only the times are held: 8 bytes per event);
//! 3. [`Timeline::run_clc`]: the controlled logical clock over those times;
//! 4. [`Timeline::evaluate`]: the per-pair evaluation, streamed again over the inputs for the
//!    linear correction or taken from the corrected tables after the CLC;
//! 5. [`Timeline::export`]: every event streamed from its file, merged by corrected time.
//!
//! **Text message inputs** have no events of their own, only messages. As the LTTV tool did,
//! each message is turned into two events of a TCP segment: a send on the sender's trace and a
//! receive on the receiver's, with addresses `10.0.0.(trace + 1)`, port 5000 on both sides, the
//! SYN flag and a per-sender sequence number (the sender's message count, in file order). These
//! synthesized events are numbered in each trace's time order (a send before a receive at the
//! same instant) and behave like recorded ones everywhere: CLC, evaluation and every export
//! format. They are held in memory (text inputs are small test cases); trace files are streamed.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use tsync_common::format::TraceReader;
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, direction, kind, tcp_flag};

use crate::clc::{self, ClcInput, ClcOutcome, ClcParams, EventRef, PairLatency};
use crate::error::InputError;
use crate::eval::{self, EvalReport, Evaluator, MinRtt, TimedMessage};
use crate::export::{EventSink, ExportError, ExportEvent, PeerRef, merge_by_time};
use crate::figures::PairSamples;
use crate::input::InputSet;
use crate::matching::MatchOptions;
use crate::message::{Exchange, MatchedMessage, Message, MessageSink, Origin};
use crate::sync::{self, Algorithm, PairAccumulator, SyncError, SyncOptions, SyncResult};

/// Why a timeline step failed; every variant says what to do or which file is at fault.
#[derive(thiserror::Error, Debug)]
pub enum TimelineError {
    #[error(transparent)]
    Sync(#[from] SyncError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{path}: cannot read the events again: {what}")]
    Reread { path: PathBuf, what: String },
    #[error(
        "{path}: the file changed while it was being analyzed (event {index} was not there in the \
         first pass); run again on files that are no longer being written"
    )]
    Changed { path: PathBuf, index: u64 },
    #[error("controlled logical clock: {0}")]
    Clc(#[from] clc::ClcError),
    #[error(transparent)]
    Export(#[from] ExportError),
}

/// What [`Timeline::build`] should gather besides the synchronization.
#[derive(Clone, Debug)]
pub struct TimelineOptions {
    pub sync: SyncOptions,
    /// Keep every message as a pair of event references (needed by the CLC and by exports).
    pub keep_messages: bool,
    /// Keep a bounded envelope of message points per pair for the plots.
    pub plot_samples: bool,
}

/// One synthesized event of a text-input trace.
#[derive(Clone, Copy, Debug)]
pub struct SyntheticEvent {
    /// The event, `ts_ns` = its local time.
    pub event: PacketEvent,
}

/// The synchronized inputs and what was gathered along the way.
pub struct Timeline {
    pub inputs: InputSet,
    pub sync: SyncResult,
    /// Smallest round trip per unordered pair, from the exchanges.
    pub min_rtt: MinRtt,
    /// The messages as event references (empty unless `keep_messages`).
    pub messages: Vec<clc::Message>,
    /// Per trace: the synthesized events of a text-input trace (time order), None for a trace file.
    pub synthetic: Vec<Option<Vec<SyntheticEvent>>>,
    /// Message envelopes for the plots (when asked for).
    pub samples: Option<PairSamples>,
    /// What the steps noticed that users should know (damaged files, unsorted events, …).
    pub warnings: Vec<String>,
    /// The matching options of the first pass (a later pass must pair the same messages).
    pub matching: MatchOptions,
}

/// The sink of the first pass: the hulls plus the side gatherings.
struct Gatherer {
    acc: PairAccumulator,
    linreg: bool,
    keep_messages: bool,
    text_messages: Vec<Message>,
    file_messages: Vec<clc::Message>,
    min_rtt: MinRtt,
    samples: Option<PairSamples>,
}

impl MessageSink for Gatherer {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.acc.add(&m.message);
        if let Some(s) = self.samples.as_mut() {
            s.add(&m.message);
        }
        if !self.keep_messages {
            return;
        }
        match m.origin {
            Origin::TextLine(_) => self.text_messages.push(m.message),
            Origin::Events {
                send_index,
                recv_index,
            } => self.file_messages.push(clc::Message {
                send: event_ref(m.message.send_trace, send_index),
                recv: event_ref(m.message.recv_trace, recv_index),
            }),
        }
    }

    fn exchange(&mut self, e: &Exchange) {
        if self.linreg {
            self.acc.add_exchange(e);
        }
        self.min_rtt.add(&eval_exchange(e));
    }

    fn wants_events(&self) -> bool {
        false
    }
}

fn event_ref(trace: u32, index: u64) -> EventRef {
    EventRef {
        trace: trace as usize,
        index: index as usize,
    }
}

/// The evaluation's view of an exchange (the four times, initiator first).
fn eval_exchange(e: &Exchange) -> eval::Exchange {
    eval::Exchange {
        a: e.request.send_trace as usize,
        b: e.request.recv_trace as usize,
        t1_ns: e.request.send_ns,
        t2_ns: e.request.recv_ns,
        t3_ns: e.reply.send_ns,
        t4_ns: e.reply.recv_ns,
    }
}

impl Timeline {
    /// Opens nothing itself: reads `inputs` once, synchronizes them, and gathers what
    /// `options` asks for. `progress(bytes)` reports input consumption.
    pub fn build(
        inputs: InputSet,
        options: &TimelineOptions,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Timeline, TimelineError> {
        let sync_options = &options.sync;
        let reference = match &sync_options.reference {
            Some(r) => Some(
                inputs
                    .find_trace(r)
                    .ok_or_else(|| SyncError::UnknownReference(r.clone()))?,
            ),
            None => None,
        };
        let n = inputs.traces.len();
        let mut gatherer = Gatherer {
            acc: PairAccumulator::new(),
            linreg: sync_options.algorithm == Algorithm::Linreg,
            keep_messages: options.keep_messages,
            text_messages: Vec::new(),
            file_messages: Vec::new(),
            min_rtt: MinRtt::new(n),
            samples: options.plot_samples.then(PairSamples::new),
        };
        let matching = MatchOptions {
            exchanges: true,
            ..sync_options.matching.clone()
        };
        let mut stats = inputs.for_each_message(&matching, &mut gatherer, progress)?;
        if sync_options.algorithm != Algorithm::Linreg {
            // The exchanges were looked for only for `l_min`: report what `sync` alone would,
            // so that `sync --plot` prints the same document as `sync`.
            stats.exchanges = 0;
        }
        let names: Vec<String> = inputs.traces.iter().map(|t| t.name.clone()).collect();
        let Gatherer {
            acc,
            text_messages,
            mut file_messages,
            min_rtt,
            samples,
            ..
        } = gatherer;
        let sync = sync::finish(acc, &names, stats, sync_options, reference);
        let (synthetic, mut text_refs) = synthesize_text_events(n, &text_messages);
        file_messages.append(&mut text_refs);
        Ok(Timeline {
            inputs,
            sync,
            min_rtt,
            messages: file_messages,
            synthetic,
            samples,
            warnings: Vec::new(),
            matching: sync_options.matching.clone(),
        })
    }

    /// Number of traces.
    pub fn traces(&self) -> usize {
        self.inputs.traces.len()
    }

    /// A local time of `trace` on its group's reference clock (the linear correction), in ns.
    pub fn linear(&self, trace: usize, local_ns: i64) -> i64 {
        self.sync.traces[trace]
            .map
            .apply(local_ns as f64)
            .round()
            .clamp(i64::MIN as f64, i64::MAX as f64) as i64
    }

    /// `l_min` per ordered pair: `given` for all pairs, else half the smallest round trip of
    /// each pair's exchanges (unknown pairs: 0, which only forbids inversions).
    pub fn l_min(&self, given: Option<i64>) -> PairLatency {
        match given {
            Some(ns) => PairLatency::uniform(self.traces(), ns),
            None => PairLatency::from_min_rtt(self.traces(), 0, self.min_rtt.iter()),
        }
    }

    /// Every event's linearly corrected time, per trace in event order (file order for trace
    /// files). A time earlier than its predecessor's (an out-of-order event in the file, or an
    /// unusable timestamp) is raised to it, so that each trace is in order as the CLC needs;
    /// such events are counted in a warning.
    pub fn linear_times(&mut self) -> Result<Vec<Vec<i64>>, TimelineError> {
        let mut out = Vec::with_capacity(self.traces());
        for trace in 0..self.traces() {
            let times = match &self.synthetic[trace] {
                Some(events) => events
                    .iter()
                    .map(|e| self.linear(trace, e.event.ts_ns as i64))
                    .collect(),
                None => self.file_times(trace)?,
            };
            out.push(times);
        }
        Ok(out)
    }

    fn file_times(&mut self, trace: usize) -> Result<Vec<i64>, TimelineError> {
        let path = self.source_path(trace).to_path_buf();
        let mut reader = open_trace(&path)?;
        let mut times = Vec::new();
        let mut raised = 0u64;
        let mut last = i64::MIN;
        while let Some(chunk) = next_chunk(&mut reader, &path)? {
            for e in chunk {
                let t = if usable(e) {
                    self.linear(trace, e.ts_ns as i64)
                } else {
                    last
                };
                if t < last {
                    raised += 1;
                }
                last = last.max(t);
                times.push(last);
            }
        }
        if raised > 0 {
            self.warnings.push(format!(
                "{}: {raised} events were out of time order; for the CLC they take the time of \
                 the event before them",
                path.display()
            ));
        }
        Ok(times)
    }

    fn source_path(&self, trace: usize) -> &Path {
        &self.inputs.sources[self.inputs.traces[trace].source].path
    }

    /// Runs the controlled logical clock on `times` (from [`Timeline::linear_times`]).
    pub fn run_clc(
        &mut self,
        times: Vec<Vec<i64>>,
        l_min: &PairLatency,
        params: &ClcParams,
    ) -> Result<ClcOutcome, TimelineError> {
        let input = ClcInput {
            traces: times,
            messages: std::mem::take(&mut self.messages),
        };
        let outcome = clc::correct(&input, l_min, params);
        self.messages = input.messages;
        Ok(outcome?)
    }

    /// The evaluation. With `corrected` (the CLC's tables) the kept messages are looked up
    /// there; without, the inputs are read again and every message is corrected linearly (in
    /// constant memory). Accuracy curves come from the synchronization.
    pub fn evaluate(
        &self,
        l_min: PairLatency,
        corrected: Option<&[Vec<i64>]>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<EvalReport, TimelineError> {
        let mut evaluator = Evaluator::new(l_min, self.min_rtt.clone(), corrected.is_some());
        match corrected {
            Some(table) => {
                for m in &self.messages {
                    evaluator.add_message(&TimedMessage {
                        from: m.send.trace,
                        to: m.recv.trace,
                        send_ns: table[m.send.trace][m.send.index],
                        recv_ns: table[m.recv.trace][m.recv.index],
                    });
                }
            }
            None => {
                let mut sink = LinearEvaluation {
                    timeline: self,
                    evaluator: &mut evaluator,
                };
                let matching = MatchOptions {
                    exchanges: false,
                    ..self.matching.clone()
                };
                self.inputs
                    .for_each_message(&matching, &mut sink, progress)?;
            }
        }
        for p in &self.sync.pairs {
            if let Some(curve) = &p.accuracy {
                let points = curve
                    .points
                    .iter()
                    .map(|q| eval::AccuracyPoint {
                        t_ns: q.t_a,
                        lo_ns: q.lo,
                        hi_ns: q.hi,
                    })
                    .collect();
                evaluator.add_accuracy(p.a as usize, p.b as usize, points);
            }
        }
        Ok(evaluator.finish())
    }
}

/// The second pass of a linear evaluation: each message corrected by its traces' maps.
struct LinearEvaluation<'a> {
    timeline: &'a Timeline,
    evaluator: &'a mut Evaluator,
}

impl MessageSink for LinearEvaluation<'_> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        let m = &m.message;
        let (from, to) = (m.send_trace as usize, m.recv_trace as usize);
        self.evaluator.add_message(&TimedMessage {
            from,
            to,
            send_ns: self.timeline.linear(from, m.send_ns),
            recv_ns: self.timeline.linear(to, m.recv_ns),
        });
    }

    fn wants_events(&self) -> bool {
        false
    }
}

/// Port of both ends of a synthesized segment.
const SYNTHETIC_PORT: u16 = 5000;

/// The IPv4 address of a text-input trace: 10.0.0.0 + trace + 1 (10.0.0.1 for trace 0).
fn synthetic_addr(trace: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&(0x0a00_0000u32 + trace + 1).to_be_bytes());
    a
}

/// The synthesized segment of a text message (see the module doc), with the send direction.
fn synthetic_segment(m: &Message, seq: u32) -> PacketEvent {
    PacketEvent {
        ts_ns: m.send_ns.max(0) as u64,
        ifindex: 0,
        cpu: 0,
        direction: direction::SEND,
        kind: kind::TCP4,
        saddr: synthetic_addr(m.send_trace),
        daddr: synthetic_addr(m.recv_trace),
        network_protocol: ETH_P_IP,
        tot_len: 40,
        source: SYNTHETIC_PORT,
        dest: SYNTHETIC_PORT,
        seq,
        ack_seq: 0,
        transport_protocol: IPPROTO_TCP,
        ihl: 5,
        doff: 5,
        tcp_flags: tcp_flag::SYN,
        ..PacketEvent::default()
    }
}

/// Turns the text messages into per-trace events (time order, sends first at equal times) and
/// the messages into references to them.
fn synthesize_text_events(
    traces: usize,
    messages: &[Message],
) -> (Vec<Option<Vec<SyntheticEvent>>>, Vec<clc::Message>) {
    let mut synthetic: Vec<Option<Vec<SyntheticEvent>>> = vec![None; traces];
    // (local time, receive?, message) per trace, sorted below.
    let mut slots: Vec<Vec<(i64, bool, u32)>> = vec![Vec::new(); traces];
    for (k, m) in messages.iter().enumerate() {
        slots[m.send_trace as usize].push((m.send_ns, false, k as u32));
        slots[m.recv_trace as usize].push((m.recv_ns, true, k as u32));
    }
    let mut seq_of = vec![0u32; messages.len()];
    let mut next_seq = vec![0u32; traces];
    for (k, m) in messages.iter().enumerate() {
        let s = &mut next_seq[m.send_trace as usize];
        seq_of[k] = *s;
        *s = s.wrapping_add(1);
    }
    let mut send_ref = vec![0usize; messages.len()];
    let mut recv_ref = vec![0usize; messages.len()];
    for (trace, list) in slots.iter_mut().enumerate() {
        if list.is_empty() {
            continue;
        }
        list.sort_unstable();
        let mut events = Vec::with_capacity(list.len());
        for (index, &(t, is_recv, k)) in list.iter().enumerate() {
            let k = k as usize;
            let mut event = synthetic_segment(&messages[k], seq_of[k]);
            event.ts_ns = t.max(0) as u64;
            if is_recv {
                event.direction = direction::RECV;
                recv_ref[k] = index;
            } else {
                send_ref[k] = index;
            }
            events.push(SyntheticEvent { event });
        }
        synthetic[trace] = Some(events);
    }
    let refs = messages
        .iter()
        .enumerate()
        .map(|(k, m)| clc::Message {
            send: EventRef {
                trace: m.send_trace as usize,
                index: send_ref[k],
            },
            recv: EventRef {
                trace: m.recv_trace as usize,
                index: recv_ref[k],
            },
        })
        .collect();
    (synthetic, refs)
}

fn open_trace(path: &Path) -> Result<TraceReader<BufReader<File>>, TimelineError> {
    TraceReader::open(path).map_err(|e| TimelineError::Reread {
        path: path.to_path_buf(),
        what: e.to_string(),
    })
}

fn next_chunk<'r>(
    reader: &'r mut TraceReader<BufReader<File>>,
    path: &Path,
) -> Result<Option<&'r [PacketEvent]>, TimelineError> {
    reader.next_events().map_err(|e| TimelineError::Reread {
        path: path.to_path_buf(),
        what: e.to_string(),
    })
}

/// Whether the matcher used an event (the others have an impossible time or direction).
fn usable(e: &PacketEvent) -> bool {
    e.ts_ns <= i64::MAX as u64 && (e.direction == direction::SEND || e.direction == direction::RECV)
}

// ---------------------------------------------------------------------------------------------
// Export

/// One event on its way to an exporter (owned, so that per-trace streams can be merged).
struct OwnedEvent {
    node: usize,
    index: u64,
    event: PacketEvent,
    original_ns: i64,
    corrected_ns: i64,
    peer: Option<PeerRef>,
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    pub events: u64,
    pub with_peer: u64,
    /// Events skipped because the matcher could not use them (impossible time or direction).
    pub skipped: u64,
}

type EventStream<'a> = Box<dyn Iterator<Item = Result<OwnedEvent, TimelineError>> + 'a>;

impl Timeline {
    /// The matched peer of every event, per trace sorted by event index.
    fn peer_tables(&self) -> Vec<Vec<(u64, PeerRef)>> {
        let mut tables: Vec<Vec<(u64, PeerRef)>> = vec![Vec::new(); self.traces()];
        for m in &self.messages {
            tables[m.send.trace].push((
                m.send.index as u64,
                PeerRef {
                    node: m.recv.trace,
                    index: m.recv.index as u64,
                },
            ));
            tables[m.recv.trace].push((
                m.recv.index as u64,
                PeerRef {
                    node: m.send.trace,
                    index: m.send.index as u64,
                },
            ));
        }
        for t in &mut tables {
            t.sort_unstable_by_key(|&(i, _)| i);
        }
        tables
    }

    /// A time base that makes corrected times absolute for pcapng: the realtime − monotonic
    /// offset of the first trace's reference (trace files). Where there is none (text inputs),
    /// or where it would still put an event before 1970 (a header without a usable realtime
    /// start), whole seconds enough to keep the earliest event at or after 1970 — pcapng cannot
    /// store earlier times.
    pub fn pcap_time_base_ns(&self) -> Result<i64, TimelineError> {
        let earliest = self.earliest_linear_ns()?;
        let from_header = self.sync.traces.first().and_then(|first| {
            let h = self.inputs.traces[first.reference as usize]
                .header
                .as_ref()?;
            Some(
                h.start_realtime_ns
                    .wrapping_sub(h.start_monotonic_ns as i64),
            )
        });
        let base = from_header.unwrap_or(0);
        if earliest.saturating_add(base) >= 0 {
            return Ok(base);
        }
        Ok((earliest.unsigned_abs().div_ceil(1_000_000_000) * 1_000_000_000) as i64)
    }

    /// The earliest linearly corrected event time: each trace's first event (traces are in
    /// time order, the maps increasing, and the CLC only moves times forward).
    fn earliest_linear_ns(&self) -> Result<i64, TimelineError> {
        let mut earliest = i64::MAX;
        for trace in 0..self.traces() {
            let first = match &self.synthetic[trace] {
                Some(events) => events.first().map(|e| e.event.ts_ns),
                None => {
                    let path = self.source_path(trace);
                    let mut reader = open_trace(path)?;
                    next_chunk(&mut reader, path)?
                        .and_then(|c| c.iter().find(|e| usable(e)).map(|e| e.ts_ns))
                }
            };
            if let Some(t) = first {
                earliest = earliest.min(self.linear(trace, t as i64));
            }
        }
        Ok(if earliest == i64::MAX { 0 } else { earliest })
    }

    /// Streams every event, merged by corrected time, to `sink`. `corrected` are the CLC's
    /// tables (else the linear correction is used). Peers are the kept messages' other ends,
    /// so build the timeline with `keep_messages`.
    pub fn export(
        &self,
        corrected: Option<&[Vec<i64>]>,
        sink: &mut dyn EventSink,
    ) -> Result<ExportSummary, TimelineError> {
        let peers = self.peer_tables();
        let mut skipped = 0u64;
        let mut streams: Vec<EventStream<'_>> = Vec::with_capacity(self.traces());
        for (trace, peers) in peers.iter().enumerate() {
            let table = corrected.map(|c| c[trace].as_slice());
            streams.push(match &self.synthetic[trace] {
                Some(events) => Box::new(self.synthetic_stream(trace, events, table, peers)),
                None => Box::new(FileStream::open(self, trace, table, peers)?),
            });
        }
        let mut summary = ExportSummary::default();
        let merged = merge_by_time(streams, |r| match r {
            Ok(e) => e.corrected_ns,
            Err(_) => i64::MIN,
        });
        for item in merged {
            let e = item?;
            if !usable(&e.event) {
                skipped += 1;
                continue;
            }
            sink.write_event(&ExportEvent {
                node: e.node,
                index: e.index,
                event: &e.event,
                original_ns: e.original_ns,
                corrected_ns: e.corrected_ns,
                peer: e.peer,
            })?;
            summary.events += 1;
            summary.with_peer += u64::from(e.peer.is_some());
        }
        sink.finish()?;
        summary.skipped = skipped;
        Ok(summary)
    }

    fn synthetic_stream<'a>(
        &'a self,
        trace: usize,
        events: &'a [SyntheticEvent],
        table: Option<&'a [i64]>,
        peers: &'a [(u64, PeerRef)],
    ) -> impl Iterator<Item = Result<OwnedEvent, TimelineError>> + 'a {
        let mut cursor = PeerCursor { peers, pos: 0 };
        events.iter().enumerate().map(move |(index, e)| {
            let original = e.event.ts_ns as i64;
            Ok(OwnedEvent {
                node: trace,
                index: index as u64,
                event: e.event,
                original_ns: original,
                corrected_ns: table.map_or_else(|| self.linear(trace, original), |t| t[index]),
                peer: cursor.find(index as u64),
            })
        })
    }
}

/// Walks a trace's sorted peer table alongside its events.
struct PeerCursor<'a> {
    peers: &'a [(u64, PeerRef)],
    pos: usize,
}

impl PeerCursor<'_> {
    /// The peer of event `index`; indices must come in increasing order.
    fn find(&mut self, index: u64) -> Option<PeerRef> {
        while self.pos < self.peers.len() && self.peers[self.pos].0 < index {
            self.pos += 1;
        }
        let hit = self.peers.get(self.pos).filter(|p| p.0 == index)?;
        Some(hit.1)
    }
}

/// A trace file's events, read chunk by chunk (constant memory).
struct FileStream<'a> {
    timeline: &'a Timeline,
    trace: usize,
    path: PathBuf,
    reader: TraceReader<BufReader<File>>,
    chunk: Vec<PacketEvent>,
    pos: usize,
    index: u64,
    table: Option<&'a [i64]>,
    peers: PeerCursor<'a>,
    done: bool,
}

impl<'a> FileStream<'a> {
    fn open(
        timeline: &'a Timeline,
        trace: usize,
        table: Option<&'a [i64]>,
        peers: &'a [(u64, PeerRef)],
    ) -> Result<Self, TimelineError> {
        let path = timeline.source_path(trace).to_path_buf();
        let reader = open_trace(&path)?;
        Ok(FileStream {
            timeline,
            trace,
            path,
            reader,
            chunk: Vec::new(),
            pos: 0,
            index: 0,
            table,
            peers: PeerCursor { peers, pos: 0 },
            done: false,
        })
    }

    fn next_event(&mut self) -> Result<Option<OwnedEvent>, TimelineError> {
        if self.pos == self.chunk.len() {
            match next_chunk(&mut self.reader, &self.path)? {
                Some(c) => {
                    self.chunk.clear();
                    self.chunk.extend_from_slice(c);
                    self.pos = 0;
                }
                None => return Ok(None),
            }
        }
        let event = self.chunk[self.pos];
        self.pos += 1;
        let index = self.index;
        self.index += 1;
        let original = event.ts_ns.min(i64::MAX as u64) as i64;
        let corrected = match self.table {
            Some(t) => *t
                .get(index as usize)
                .ok_or_else(|| TimelineError::Changed {
                    path: self.path.clone(),
                    index,
                })?,
            None => self.timeline.linear(self.trace, original),
        };
        Ok(Some(OwnedEvent {
            node: self.trace,
            index,
            event,
            original_ns: original,
            corrected_ns: corrected,
            peer: self.peers.find(index),
        }))
    }
}

impl Iterator for FileStream<'_> {
    type Item = Result<OwnedEvent, TimelineError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_event().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(send_trace: u32, recv_trace: u32, send_ns: i64, recv_ns: i64) -> Message {
        Message {
            send_trace,
            recv_trace,
            send_ns,
            recv_ns,
        }
    }

    #[test]
    fn text_messages_become_time_ordered_tcp_events() {
        let messages = [msg(0, 1, 100, 150), msg(1, 0, 120, 90), msg(0, 1, 90, 200)];
        let (synthetic, refs) = synthesize_text_events(3, &messages);
        assert!(
            synthetic[2].is_none(),
            "a trace without messages has no events"
        );
        let t0 = synthetic[0].as_ref().unwrap();
        // Trace 0: send 90 (msg 2), receive 90 (msg 1), send 100 (msg 0): sends first at a tie.
        let seen: Vec<(u64, u8)> = t0
            .iter()
            .map(|e| (e.event.ts_ns, e.event.direction))
            .collect();
        assert_eq!(
            seen,
            vec![
                (90, direction::SEND),
                (90, direction::RECV),
                (100, direction::SEND)
            ]
        );
        // Per-sender sequence numbers in file order, SYN, addresses by trace.
        assert_eq!(t0[0].event.seq, 1, "trace 0's second message");
        assert_eq!(t0[2].event.seq, 0, "trace 0's first message");
        assert_eq!(t0[1].event.seq, 0, "trace 1's first message");
        assert!(t0.iter().all(|e| e.event.tcp_flags == tcp_flag::SYN));
        assert_eq!(&t0[1].event.saddr[..4], &[10, 0, 0, 2]);
        // The references point at the right events.
        for (m, r) in messages.iter().zip(&refs) {
            let send = &synthetic[r.send.trace].as_ref().unwrap()[r.send.index].event;
            let recv = &synthetic[r.recv.trace].as_ref().unwrap()[r.recv.index].event;
            assert_eq!(
                (send.ts_ns as i64, send.direction),
                (m.send_ns, direction::SEND)
            );
            assert_eq!(
                (recv.ts_ns as i64, recv.direction),
                (m.recv_ns, direction::RECV)
            );
            assert_eq!(send.seq, recv.seq);
        }
    }

    #[test]
    fn peer_cursor_finds_peers_of_increasing_indices() {
        let p = |node, index| PeerRef { node, index };
        let table = [(1, p(1, 7)), (4, p(2, 0)), (5, p(1, 9))];
        let mut c = PeerCursor {
            peers: &table,
            pos: 0,
        };
        let found: Vec<Option<PeerRef>> = (0..7).map(|i| c.find(i)).collect();
        assert_eq!(
            found,
            vec![
                None,
                Some(p(1, 7)),
                None,
                None,
                Some(p(2, 0)),
                Some(p(1, 9)),
                None
            ]
        );
    }
}
