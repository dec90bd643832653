//! Agent trace files as inputs: one trace per file, events streamed chunk by chunk and merged
//! across files in time order for matching.
//!
//! Each node's monotonic clock starts at its own boot, so raw times of different nodes can be
//! hours apart. For the merge (and the matching window) every trace is shifted onto an
//! approximate common axis, CLOCK_REALTIME, using the latest clock sample read so far (realtime −
//! monotonic, both read back to back by the agent), or the header's start times before the first
//! sample. That alignment is only as good as the nodes' NTP (milliseconds); the window absorbs it.
//! The estimate itself never uses it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use tsync_common::format::{FormatError, Header, TraceReader};
use tsync_common::{PacketEvent, direction};

use crate::alignment::SampleInput;
use crate::error::InputError;
use crate::input::Source;
use crate::matching::{MatchOptions, MatchStats, Matcher, offload_warning};
use crate::message::MessageSink;

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
    TraceReader::open(path)
        .map(|r| r.header().clone())
        .map_err(|e| trace_error(path, e))
}

/// One file being streamed.
struct Stream {
    path: PathBuf,
    trace: u32,
    /// Unbuffered: the reader asks for whole chunks (hundreds of KiB), which the kernel copies
    /// straight into the reader's event buffer; a `BufReader` would only add a copy. The events
    /// are used in place there (`reader.current_events()[pos..]`).
    reader: TraceReader<File>,
    pos: usize,
    /// Events consumed (index of the next one in file order).
    index: u64,
    /// realtime − monotonic, ns.
    shift: i64,
    /// Added to `shift` on the merge axis: the coarse alignment of this node's realtime clock.
    coarse: i64,
    last_ts: i64,
    out_of_order: u64,
    invalid: u64,
    /// First and last event on the merge axis (None for a trace without events).
    span: Option<(i64, i64)>,
}

impl Stream {
    /// Loads the next chunk; false at the end.
    fn refill(&mut self) -> Result<bool, InputError> {
        let more = self
            .reader
            .next_events()
            .map_err(|e| trace_error(&self.path, e))?
            .is_some();
        self.pos = 0;
        self.shift = latest_shift(&self.reader, self.shift);
        Ok(more)
    }

    #[inline]
    fn aligned(&self, e: &PacketEvent) -> i64 {
        (e.ts_ns as i64).saturating_add(self.shift + self.coarse)
    }
}

/// realtime − monotonic at the start of a recording (before its first clock sample).
pub(crate) fn start_shift(h: &TraceHeader) -> i64 {
    h.start_realtime_ns
        .wrapping_sub(h.start_monotonic_ns as i64)
}

/// realtime − monotonic from the latest clock sample `reader` has read, else `previous`.
pub(crate) fn latest_shift<R: std::io::Read>(reader: &TraceReader<R>, previous: i64) -> i64 {
    reader.clock_samples().last().map_or(previous, |s| {
        s.realtime_ns.wrapping_sub(s.monotonic_ns as i64)
    })
}

/// True when every trace comes from one boot of one host (namespaces of one machine): their
/// realtime clocks are one clock, so there is nothing to align.
fn same_host(streams: &[Stream]) -> bool {
    let id = |st: &Stream| st.reader.header().boot_id.clone();
    streams.first().is_some_and(|first| {
        let b = id(first);
        !b.is_empty() && streams.iter().all(|st| id(st) == b)
    })
}

fn node_name(st: &Stream) -> String {
    let node = &st.reader.header().node;
    if node.is_empty() {
        st.path.display().to_string()
    } else {
        node.clone()
    }
}

/// The addresses of the traced nodes' interfaces (from the headers), in the events' layout:
/// network byte order, IPv4 in the first 4 bytes, each with its trace. Loopback and unspecified
/// addresses are left out: every node has them.
fn node_addresses<'a>(headers: impl Iterator<Item = (u32, &'a Header)>) -> HashMap<[u8; 16], u32> {
    let mut set = HashMap::new();
    for (trace, addr) in headers.flat_map(|(trace, h)| {
        h.interfaces
            .iter()
            .flat_map(|i| &i.addresses)
            .map(move |a| (trace, a))
    }) {
        let ip = addr.split('/').next().unwrap_or_default();
        let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
            continue;
        };
        if ip.is_loopback() || ip.is_unspecified() {
            continue;
        }
        let mut bytes = [0u8; 16];
        match ip {
            std::net::IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
            std::net::IpAddr::V6(v6) => bytes = v6.octets(),
        }
        set.entry(bytes).or_insert(trace);
    }
    set
}

/// The same recording given twice (a copy, a link under another name): same boot, node and start
/// instant. Every packet of it would be seen twice on one side, so none could match.
fn duplicate_warnings(streams: &[Stream]) -> Vec<String> {
    let id = |h: &Header| {
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
            .find(|a| id(a.reader.header()) == id(b.reader.header()))
        {
            warnings.push(format!(
                "{} and {} are the same recording (node {}, same boot and start): give each \
                 node's trace once; its packets cannot match while it is given twice",
                a.path.display(),
                b.path.display(),
                node_name(b)
            ));
        }
    }
    warnings
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
    let secs = |t: i64| (t - t0) as f64 / 1e9;
    let mut warnings = Vec::new();
    for (j, (b, (b0, b1))) in spans.iter().enumerate() {
        for (a, (a0, a1)) in &spans[..j] {
            if a1 < b0 || b1 < a0 {
                warnings.push(format!(
                    "the recordings {} ({:.3} s to {:.3} s) and {} ({:.3} s to {:.3} s) do not \
                     overlap in time (seconds after the earliest recording's start, on the nodes' \
                     realtime clocks): no packet can be in both",
                    node_name(a),
                    secs(*a0),
                    secs(*a1),
                    node_name(b),
                    secs(*b0),
                    secs(*b1)
                ));
            }
        }
    }
    warnings
}

/// How many events ahead the matcher is asked to load the index cells an event will probe.
const PREFETCH_DISTANCE: usize = 4;

/// Matches the events of several trace files and streams the messages to `sink`.
///
/// Generic over the sink so that the per-message call inlines (`&mut dyn MessageSink` works too).
pub fn match_files<S: MessageSink + ?Sized>(
    sources: &[&Source],
    options: &MatchOptions,
    sink: &mut S,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    let mut streams = Vec::with_capacity(sources.len());
    for s in sources {
        let file = File::open(&s.path).map_err(|e| InputError::io(&s.path, e))?;
        let reader = TraceReader::new(file).map_err(|e| trace_error(&s.path, e))?;
        let shift = start_shift(reader.header());
        streams.push(Stream {
            path: s.path.clone(),
            trace: s.first_trace,
            reader,
            pos: 0,
            index: 0,
            shift,
            coarse: 0,
            last_ts: i64::MIN,
            out_of_order: 0,
            invalid: 0,
            span: None,
        });
    }
    let mut warnings = Vec::new();
    if !same_host(&streams) {
        let files: Vec<SampleInput<'_>> = streams
            .iter()
            .map(|st| SampleInput {
                path: &st.path,
                name: node_name(st),
            })
            .collect();
        let alignment = crate::alignment::estimate(&files);
        for (st, c) in streams.iter_mut().zip(alignment.corrections_ns) {
            st.coarse = c;
        }
        warnings = alignment.warnings;
    }
    warnings.extend(duplicate_warnings(&streams));
    let mut matcher = Matcher::new(options);
    let mut heap = BinaryHeap::with_capacity(streams.len());
    for (i, st) in streams.iter_mut().enumerate() {
        // (An event chunk may be empty: look for the first event.)
        while st.refill()? {
            if let Some(first) = st.reader.current_events().first() {
                let first = st.aligned(first);
                heap.push(Reverse((first, i)));
                matcher.trace_starts(st.trace, first);
                st.span = Some((first, first));
                break;
            }
        }
    }
    // The merge need not be exact: a key waits a whole window, so a stream may run ahead of the
    // others by a small fraction of it. Taking events in slices instead of one by one keeps the
    // heap off the per-event path.
    let slack = (options.window_ns / 16).max(0);
    matcher.set_events_wanted(sink.wants_events());
    matcher.set_node_addresses(node_addresses(
        streams.iter().map(|st| (st.trace, st.reader.header())),
    ));
    while let Some(Reverse((_, i))) = heap.pop() {
        let limit = heap
            .peek()
            .map_or(i64::MAX, |r| r.0.0.saturating_add(slack));
        let st = &mut streams[i];
        loop {
            let events = st.reader.current_events();
            if st.pos == events.len() {
                progress(events.len() as u64 * tsync_common::EVENT_SIZE as u64);
                // The span ends with the last event of the last chunk (per chunk, not per event:
                // this loop is the hot path).
                if let Some(last) = events.last().map(|e| st.aligned(e))
                    && let Some(span) = st.span.as_mut()
                {
                    span.1 = span.1.max(last);
                }
                if !st.refill()? {
                    if let Some((_, last)) = st.span {
                        matcher.trace_ends(st.trace, last);
                    }
                    break;
                }
                continue;
            }
            let e = &events[st.pos];
            let aligned = st.aligned(e);
            if aligned > limit {
                heap.push(Reverse((aligned, i)));
                break;
            }
            st.pos += 1;
            if let Some(ahead) = events.get(st.pos + PREFETCH_DISTANCE) {
                matcher.prefetch(ahead);
            }
            let index = st.index;
            st.index += 1;
            if e.ts_ns > i64::MAX as u64
                || (e.direction != direction::SEND && e.direction != direction::RECV)
            {
                st.invalid += 1;
                continue;
            }
            let t = e.ts_ns as i64;
            if t < st.last_ts {
                st.out_of_order += 1;
                matcher.out_of_order();
            }
            st.last_ts = st.last_ts.max(t);
            matcher.event(st.trace, e, t, aligned, index, sink);
        }
    }
    let mut stats = matcher.finish(sink);
    warnings.extend(overlap_warnings(&streams));
    stats.warnings.extend(warnings);
    stats.warnings.extend(offload_warning(&stats));
    for st in &streams {
        let name = st.path.display();
        if let Some(d) = st.reader.damage() {
            stats.warnings.push(format!(
                "{name}: damaged or cut short: {d}; the events before were used"
            ));
        }
        let lost = st.reader.lost().total();
        if lost > 0 {
            stats.warnings.push(format!(
                "{name}: the kernel lost {lost} events while recording (ring buffer full); \
                 their packets are unmatched"
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
