//! The merge of several trace files: their events taken in (approximately) common time order
//! and fed to the [`Matcher`], plus the warnings only the whole set can give (the same
//! recording twice, recordings that never overlap, damaged files, lost events).
//!
//! Each node's monotonic clock starts at its own boot, so raw times of different nodes can be
//! hours apart. For the merge (and the matching window) every trace is shifted onto an
//! approximate common axis, CLOCK_REALTIME, using the latest clock sample read so far (realtime −
//! monotonic, both read back to back by the agent), or the header's start times before the first
//! sample. That alignment is only as good as the nodes' NTP (milliseconds); the window absorbs it,
//! and a coarse alignment from the packets themselves ([`super::alignment`]) corrects clocks that
//! are further off. The estimate itself never uses it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use tsync_common::PacketEvent;
use tsync_common::format::read_address_tables;

use crate::input::ahead::{Decoders, Demand};
use crate::input::error::InputError;
use crate::input::tracefile::{TraceFile, TraceHeader, usable};
use crate::input::{InputSet, Source, SourceKind, text};
use crate::matching::alignment::{self, SampleInput};
use crate::matching::exchange::ReplyPairing;
use crate::matching::key_hash;
use crate::matching::keys::{self, Recordings};
use crate::matching::parallel::{self, Dispatch, Plan};
use crate::matching::{MatchOptions, MatchStats, offload_warning, unmatched_warning};
use crate::model::{MatchedMessage, MessageSink, Origin};

/// Reading the messages of an input set is the matching stage's work: the inputs only know their
/// files.
impl InputSet {
    /// Streams every matched message (and, if `options.exchanges`, every exchange) to `sink`:
    /// text files first, line by line, then the trace files matched together in time order.
    /// `progress(bytes)` is called as input is consumed.
    pub fn for_each_message(
        &self,
        options: &MatchOptions,
        sink: &mut dyn MessageSink,
        progress: &mut dyn FnMut(u64),
    ) -> Result<MatchStats, InputError> {
        self.for_each_message_in(options, sink, progress)
    }

    /// [`for_each_message`](Self::for_each_message) for a sink of a known type: the per-message
    /// calls are static and inline into the matching and parsing loops (the hot path of `sync`).
    pub fn for_each_message_in<S: MessageSink + ?Sized>(
        &self,
        options: &MatchOptions,
        sink: &mut S,
        progress: &mut dyn FnMut(u64),
    ) -> Result<MatchStats, InputError> {
        let mut stats = MatchStats::default();
        let mut pairing = options.exchanges.then(ReplyPairing::new);
        for src in &self.sources {
            if let SourceKind::Text { .. } = src.kind {
                let t = text::for_each_message_in(
                    &src.path,
                    src.first_trace,
                    &mut |m, line| {
                        sink.message(&MatchedMessage {
                            message: m,
                            origin: Origin::TextLine(line),
                            send_event: None,
                            recv_event: None,
                        });
                        if let Some(p) = pairing.as_mut()
                            && let Some(x) = p.push(m)
                        {
                            sink.exchange(&x);
                        }
                    },
                    progress,
                )?;
                stats.events += 2 * (t.messages + t.same_trace);
                stats.matched += t.messages;
                stats.same_trace += t.same_trace;
            }
            if let SourceKind::Spans { file } = &src.kind {
                let s = crate::spans::for_each_message_in(
                    self,
                    src,
                    file,
                    options.exchanges,
                    sink,
                    progress,
                )?;
                stats.add(&s);
            }
        }
        let trace_sources: Vec<&Source> =
            self.sources.iter().filter(|s| s.kind.is_trace()).collect();
        if !trace_sources.is_empty() {
            let s = match_files(&trace_sources, options, sink, progress)?;
            stats.add(&s);
        }
        Ok(stats)
    }
}

/// One file being streamed.
struct Stream {
    trace: u32,
    /// The events are used in place (`file.events()[pos..]`).
    file: TraceFile,
    pos: usize,
    /// The packet-key hash of each event of the chunk in hand (see [`Stream::refill`]), then
    /// [`HASH_PADDING`] zeros ([`hash_keys`]), unless the file comes with them.
    hashes: Vec<u64>,
    /// Events consumed (index of the next one in file order).
    index: u64,
    /// realtime − monotonic, ns.
    shift: i64,
    /// Added to `shift` on the merge axis: the coarse alignment of this node's realtime clock.
    coarse: i64,
    /// `shift + coarse` (saturating), what [`Stream::aligned`] adds: computed once per chunk.
    offset: i64,
    last_ts: i64,
    out_of_order: u64,
    invalid: u64,
    /// First and last event on the merge axis (None for a trace without events).
    span: Option<(i64, i64)>,
    /// Whether its next chunk was asked for ([`Requests`]).
    requested: bool,
    /// The merge-axis time of the last event of the chunk in hand (`i64::MIN` for an empty
    /// one), as [`Requests`] last noted it.
    chunk_end: i64,
}

/// Where the merged stream is: what every file's events carry on from.
struct Merged {
    /// The merge axis's high-water mark.
    hw: i64,
    /// Position in the merged input of the next usable event.
    seq: u64,
    /// `seq` at which the next tick is due.
    next_tick: u64,
    /// Input consumed since the last tick.
    bytes: u64,
}

impl Stream {
    /// Trace number `trace`, read from `file`, before its first chunk.
    fn new(trace: u32, file: TraceFile) -> Self {
        let shift = file.start_shift();
        Stream {
            trace,
            file,
            pos: 0,
            hashes: Vec::new(),
            index: 0,
            shift,
            coarse: 0,
            offset: shift,
            last_ts: i64::MIN,
            out_of_order: 0,
            invalid: 0,
            span: None,
            requested: false,
            chunk_end: i64::MIN,
        }
    }

    /// What the coarse alignment samples this stream's file as.
    fn sample_input(&self) -> SampleInput<'_> {
        SampleInput {
            path: self.file.path(),
            name: self.file.node_name(),
        }
    }

    /// Loads the next chunk; false at the end.
    ///
    /// Hashes every event's packet key once, here: the merge loop asks for an event's index
    /// cell a few events ahead and then looks the event up, and the threads route by the same
    /// hash, so each of them reads it instead of hashing the key again (a tight loop over the
    /// chunk also hashes faster than the merge loop would, event by event). A file decoded on
    /// the pool comes with its hashes, computed there, off this thread.
    fn refill(&mut self) -> Result<bool, InputError> {
        self.pos = 0;
        let more = self.file.next_chunk()?.is_some();
        if self.file.hashes().is_none() {
            self.hashes.clear();
            hash_keys(self.file.events(), &mut self.hashes);
        }
        self.shift = self.file.latest_shift(self.shift);
        self.offset = self.shift.saturating_add(self.coarse);
        Ok(more)
    }

    /// The events of the chunk in hand and their hashes (padded).
    #[inline(always)]
    fn chunk(&self) -> (&[PacketEvent], &[u64]) {
        (
            self.file.events(),
            self.file.hashes().unwrap_or(&self.hashes),
        )
    }

    #[inline]
    fn aligned(&self, e: &PacketEvent) -> i64 {
        (e.ts_ns as i64).saturating_add(self.offset)
    }

    /// Passes the events of the chunk in hand to `d`, from `pos` on, until one lies past `limit`
    /// on the merge axis (returns its aligned time; the stream stays at it) or the chunk is used
    /// up (None).
    ///
    /// The hot loop of the merge. The events, their hashes and the hashes to prefetch are
    /// walked together as slices whose lengths are checked once per call, not per event: the
    /// hash to prefetch is read from the same hashes shifted by [`HASH_PADDING`], which
    /// [`hash_keys`] appended for the last events of the chunk. The per-file counters are kept
    /// in locals and stored once per call: fields of `self`, they would be stored and loaded
    /// again around every call into `d`.
    #[inline(always)]
    fn feed<D: Dispatch>(&mut self, limit: i64, m: &mut Merged, d: &mut D) -> Option<i64> {
        let (events, hashes) = self.chunk();
        let events = &events[self.pos..];
        let hashes = &hashes[self.pos..self.pos + events.len() + HASH_PADDING];
        let ahead = &hashes[HASH_PADDING..];
        let (trace, offset) = (self.trace, self.offset);
        let (mut index, mut last_ts) = (self.index, self.last_ts);
        let (mut out_of_order, mut invalid) = (self.out_of_order, self.invalid);
        let mut stopped = None;
        for ((e, &hash), &ahead) in events.iter().zip(hashes).zip(ahead) {
            let aligned = (e.ts_ns as i64).saturating_add(offset);
            if aligned > limit {
                stopped = Some(aligned);
                break;
            }
            d.prefetch(ahead);
            let this = index;
            index += 1;
            if !usable(e) {
                invalid += 1;
                continue;
            }
            let t = e.ts_ns as i64;
            if t < last_ts {
                out_of_order += 1;
            }
            last_ts = last_ts.max(t);
            m.hw = m.hw.max(aligned);
            d.event(trace, e, hash, this, m.hw, m.seq);
            m.seq += 1;
            if m.seq == m.next_tick {
                m.next_tick += TICK_EVENTS;
                d.tick(m.hw, std::mem::take(&mut m.bytes));
            }
        }
        self.pos += (index - self.index) as usize;
        (self.index, self.last_ts) = (index, last_ts);
        (self.out_of_order, self.invalid) = (out_of_order, invalid);
        stopped
    }
}

/// Appends the packet-key hash of each of `events` to `out`, then [`HASH_PADDING`] zeros: the
/// merge loop ([`Stream::feed`]) reads the hash `HASH_PADDING` events ahead of each event to
/// prefetch its index cell, and for the last events of a chunk reads a zero (a prefetch of one
/// cell, a hint) instead of checking, event by event, whether the chunk has that event.
pub(super) fn hash_keys(events: &[PacketEvent], out: &mut Vec<u64>) {
    out.reserve(events.len() + HASH_PADDING);
    out.extend(events.iter().map(key_hash));
    out.extend([0; HASH_PADDING]);
}

/// True when every trace comes from one boot of one host (namespaces of one machine): their
/// realtime clocks are one clock, so there is nothing to align.
fn same_host(streams: &[Stream]) -> bool {
    let id = |st: &Stream| st.file.header().boot_id.clone();
    streams.first().is_some_and(|first| {
        let b = id(first);
        !b.is_empty() && streams.iter().all(|st| id(st) == b)
    })
}

/// The addresses of the traced nodes (the headers' interfaces, and from format version 5 on the
/// address tables: every namespace of the node, its pods' too), in the events' layout: network
/// byte order, IPv4 in the first 4 bytes, each with its trace ([`keys::CONTESTED`] for an
/// address several traces hold: Docker's bridge address on every host, a load balancer's).
/// Loopback and unspecified addresses are left out: every node has them. A file whose tables
/// cannot be read gives the addresses read before the damage (its events say the rest).
fn node_addresses(streams: &[Stream]) -> HashMap<[u8; 16], u32> {
    let mut set = HashMap::new();
    let mut hold = |trace: u32, ip: std::net::IpAddr| {
        if ip.is_loopback() || ip.is_unspecified() {
            return;
        }
        let mut bytes = [0u8; 16];
        match ip {
            std::net::IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
            std::net::IpAddr::V6(v6) => bytes = v6.octets(),
        }
        set.entry(bytes)
            .and_modify(|t| {
                if *t != trace {
                    *t = keys::CONTESTED;
                }
            })
            .or_insert(trace);
    };
    for st in streams {
        let header = st.file.header();
        for addr in header.interfaces.iter().flat_map(|i| &i.addresses) {
            if let Ok(ip) = addr.split('/').next().unwrap_or_default().parse() {
                hold(st.trace, ip);
            }
        }
        if st.file.ctf().is_some() || st.file.version() < 5 {
            continue;
        }
        let tables = read_address_tables(st.file.path())
            .map(|t| t.tables)
            .unwrap_or_default();
        for ns in tables.iter().flat_map(|t| &t.namespaces) {
            for a in &ns.addresses {
                hold(st.trace, a.ip);
            }
        }
    }
    set
}

/// The same recording given twice (a copy, a link under another name): same boot, node and start
/// instant. Every packet of it would be seen twice on one side, so none could match.
fn duplicate_warnings(streams: &[Stream]) -> Vec<String> {
    let id = |h: &TraceHeader| {
        (
            h.boot_id.clone(),
            h.node.clone(),
            h.start_monotonic_ns,
            h.start_realtime_ns,
        )
    };
    let mut warnings = Vec::new();
    for (j, b) in streams.iter().enumerate() {
        if let Some(a) = streams[..j]
            .iter()
            .find(|a| id(a.file.header()) == id(b.file.header()))
        {
            warnings.push(format!(
                "{} and {} are the same recording (node {}, same boot and start): give each \
                 node's trace once; its packets cannot match while it is given twice",
                a.file.path().display(),
                b.file.path().display(),
                b.file.node_name()
            ));
        }
    }
    warnings
}

/// The warning for trace files of format 5 given with files of a later format, whose hashed UDP
/// digests differ (version 6 hashes the first 32 payload bytes with another function): a
/// datagram recorded by one agent of each never matches. Never a false pair, but the UDP
/// between those nodes is lost; the user sees why.
fn udp_hash_versions_warning(streams: &[Stream]) -> Option<String> {
    let version = |v: u32| {
        let files: Vec<String> = streams
            .iter()
            .filter(|st| st.file.ctf().is_none() && st.file.version() == v)
            .map(|st| st.file.path().display().to_string())
            .collect();
        (!files.is_empty()).then(|| files.join(", "))
    };
    let v5 = version(5)?;
    let later = (6..=tsync_common::format::VERSION)
        .filter_map(version)
        .collect::<Vec<_>>()
        .join(", ");
    (!later.is_empty()).then(|| {
        format!(
            "{v5}: format 5, recorded by an agent that hashes UDP payloads otherwise than the \
             agent of {later} (format {}): no UDP datagram between those traces can match; \
             record every node with the same agent",
            tsync_common::format::VERSION
        )
    })
}

/// Pairs of recordings that share no instant (checked on the merge axis, the nodes' realtime
/// clocks): no packet can have been seen by both, so they cannot be synchronized directly.
fn overlap_warnings(streams: &[Stream]) -> Vec<String> {
    let spans: Vec<(&Stream, (i64, i64))> = streams
        .iter()
        .filter_map(|st| st.span.map(|s| (st, s)))
        .collect();
    let Some(t0) = spans.iter().map(|(_, (first, _))| *first).min() else {
        return Vec::new();
    };
    // In i128: the ends of a corrupt recording's span can be i64::MIN and i64::MAX apart.
    let secs = |t: i64| (i128::from(t) - i128::from(t0)) as f64 / 1e9;
    let mut warnings = Vec::new();
    for (j, (b, (b0, b1))) in spans.iter().enumerate() {
        for (a, (a0, a1)) in &spans[..j] {
            if a1 < b0 || b1 < a0 {
                warnings.push(format!(
                    "the recordings {} ({:.3} s to {:.3} s) and {} ({:.3} s to {:.3} s) do not \
                     overlap in time (seconds after the earliest recording's start, on the nodes' \
                     realtime clocks): no packet can be in both",
                    a.file.node_name(),
                    secs(*a0),
                    secs(*a1),
                    b.file.node_name(),
                    secs(*b0),
                    secs(*b1)
                ));
            }
        }
    }
    warnings
}

/// How many events go to the matching threads at a time (see [`parallel`]): enough that handing
/// them over costs little per event, few enough that the threads stay in step.
const TICK_EVENTS: u64 = 8192;

/// The trace files being read and merged into one stream of events on the merge axis.
pub(super) struct Reader {
    streams: Vec<Stream>,
    /// The merge's slack (see [`Reader::run`]).
    slack: i64,
    /// Warnings found before matching (alignment, the same recording twice).
    warnings: Vec<String>,
    recordings: Recordings,
    /// Which chunks to ask for, when the files are decoded on request.
    requests: Option<requests::Requests>,
    /// The threads decoding the files ahead, if any. Last, so that it is dropped after the
    /// streams: its threads end once every file is closed.
    _decoders: Option<Decoders>,
}

impl Reader {
    /// Opens the files, aligns their clocks coarsely and finds each one's first event.
    fn open(sources: &[&Source], options: &MatchOptions, plan: Plan) -> Result<Reader, InputError> {
        let mut streams = Vec::with_capacity(sources.len());
        // With several threads, the files may be decoded ahead (see `input::ahead`).
        let threads = options.thread_count();
        let decoders = (plan.decoders > 0).then(|| Decoders::new(plan.decoders, hash_keys));
        let demand = Demand::for_files(sources.len());
        for s in sources {
            let file = match &decoders {
                Some(pool) => TraceFile::open_ahead(&s.path, pool, demand)?,
                None => TraceFile::open(&s.path)?,
            };
            streams.push(Stream::new(s.first_trace, file));
        }
        let mut warnings = Vec::new();
        if !same_host(&streams) {
            let files: Vec<SampleInput<'_>> = streams.iter().map(Stream::sample_input).collect();
            let alignment = alignment::estimate(&files, threads);
            for (st, c) in streams.iter_mut().zip(alignment.corrections_ns) {
                st.coarse = c;
                st.offset = st.shift.saturating_add(c);
            }
            warnings = alignment.warnings;
        }
        warnings.extend(duplicate_warnings(&streams));
        let mut recordings = Recordings::default();
        recordings.set_addresses(node_addresses(&streams));
        for st in streams.iter_mut() {
            // (An event chunk may be empty: look for the first event.)
            while st.refill()? {
                if let Some(first) = st.chunk().0.first() {
                    let first = st.aligned(first);
                    recordings.starts(st.trace, first);
                    st.span = Some((first, first));
                    break;
                }
            }
        }
        Ok(Reader {
            streams,
            // The merge need not be exact: a key waits a whole window, so a stream may run ahead
            // of the others by a small fraction of it.
            slack: (options.window_ns / 16).max(0),
            warnings,
            recordings,
            requests: (decoders.is_some() && demand == Demand::Requested)
                .then(|| requests::Requests::new(plan.decoders, sources.len())),
            _decoders: decoders,
        })
    }

    /// What the matching stages must know of the recordings before the first event.
    pub(super) fn recordings(&self) -> &Recordings {
        &self.recordings
    }

    /// Streams every usable event to `d` in merged order, each with its position in the merged
    /// input and the merge axis's high-water mark (the largest aligned time so far, which every
    /// stage takes as the time: it never goes back, so every partition agrees on when a key is
    /// due).
    pub(super) fn run<D: Dispatch>(&mut self, d: &mut D) -> Result<(), InputError> {
        let Reader {
            streams,
            slack,
            requests,
            ..
        } = self;
        let slack = *slack;
        let mut heap = BinaryHeap::with_capacity(streams.len());
        for (i, st) in streams.iter().enumerate() {
            if let Some((first, _)) = st.span {
                heap.push(Reverse((first, i)));
            }
        }
        if let Some(r) = requests.as_mut() {
            for (i, st) in streams.iter_mut().enumerate() {
                if st.span.is_some() {
                    r.holds(i, st);
                }
            }
            r.top_up(streams);
        }
        let mut m = Merged {
            hw: i64::MIN,
            seq: 0,
            next_tick: TICK_EVENTS,
            bytes: 0,
        };
        // Taking events in slices instead of one by one keeps the heap off the per-event path.
        while let Some(Reverse((_, i))) = heap.pop() {
            let limit = heap
                .peek()
                .map_or(i64::MAX, |r| r.0.0.saturating_add(slack));
            loop {
                let st = &mut streams[i];
                if let Some(next) = st.feed(limit, &mut m, d) {
                    heap.push(Reverse((next, i)));
                    break;
                }
                m.bytes += st.file.chunk_bytes();
                let events = st.chunk().0;
                // The span ends with the last event of the last chunk (per chunk, not per
                // event: this loop is the hot path).
                if let Some(last) = events.last().map(|e| st.aligned(e))
                    && let Some(span) = st.span.as_mut()
                {
                    span.1 = span.1.max(last);
                }
                let more = st.refill()?;
                if !more && let Some((_, last)) = st.span {
                    d.trace_ends(st.trace, last, m.hw);
                }
                if let Some(r) = requests.as_mut() {
                    r.refilled(i, more, streams);
                }
                if !more {
                    break;
                }
            }
        }
        d.tick(m.hw, m.bytes);
        Ok(())
    }
}

/// How many events ahead the matcher is asked to load the index cells an event will probe,
/// counted from the next event.
const PREFETCH_DISTANCE: usize = 4;

/// The hashes after a chunk's last event's (see [`hash_keys`]): an event's prefetch reads the
/// hash at its own position plus this.
const HASH_PADDING: usize = PREFETCH_DISTANCE + 1;

/// Matches the events of several trace files and streams the messages to `sink`, on
/// `options.thread_count()` threads (see [`parallel`]).
///
/// Generic over the sink so that the per-message call inlines (`&mut dyn MessageSink` works too).
pub fn match_files<S: MessageSink + ?Sized>(
    sources: &[&Source],
    options: &MatchOptions,
    sink: &mut S,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    let plan = Plan::new(options.thread_count(), sources.len());
    let mut reader = Reader::open(sources, options, plan)?;
    let mut stats = parallel::run(&mut reader, plan, options, sink, progress)?;
    let streams = &reader.streams;
    let mut warnings = std::mem::take(&mut reader.warnings);
    stats.out_of_order += streams.iter().map(|st| st.out_of_order).sum::<u64>();
    warnings.extend(overlap_warnings(streams));
    warnings.extend(udp_hash_versions_warning(streams));
    stats.warnings.extend(warnings);
    stats.warnings.extend(offload_warning(&stats));
    stats.warnings.extend(unmatched_warning(&stats));
    for st in streams {
        let name = st.file.path().display();
        if let Some(d) = st.file.damage() {
            stats.warnings.push(format!(
                "{name}: damaged or cut short: {d}; the events before were used"
            ));
        }
        let lost_packets = st.file.ctf().map_or(0, |t| t.lost_packets());
        if lost_packets > 0 {
            stats.warnings.push(format!(
                "{name}: {lost_packets} packets of the trace are missing (gaps in LTTng's \
                 packet_seq_num): their events were never read, and their packets are unmatched"
            ));
        }
        let discarded = st.file.discarded();
        if discarded > 0 {
            stats.warnings.push(format!(
                "{name}: the tracer discarded {discarded} events of all kinds while recording \
                 (ring buffer full; LTTng's packet contexts count them): packets whose events \
                 were among them are unmatched"
            ));
        }
        let lost = st.file.lost().kernel();
        if lost > 0 {
            stats.warnings.push(format!(
                "{name}: the kernel lost {lost} events while recording (ring buffer full); \
                 their packets are unmatched"
            ));
        }
        let dropped = st.file.lost().disk;
        if dropped > 0 {
            stats.warnings.push(format!(
                "{name}: the agent dropped {dropped} events while recording (the disk did not \
                 keep up); their packets are unmatched"
            ));
        }
        if st.out_of_order > 0 {
            stats.warnings.push(format!(
                "{name}: {} events were out of time order in the file (used anyway)",
                st.out_of_order
            ));
        }
        if st.invalid > 0 {
            stats.warnings.push(format!(
                "{name}: {} events with an impossible timestamp or direction were skipped",
                st.invalid
            ));
        }
    }
    Ok(stats)
}

#[path = "merge_requests.rs"]
mod requests;

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
