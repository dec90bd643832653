//! Every event of every trace on the common timebase, streamed in corrected-time order to an
//! [`EventSink`] (the exports are such sinks): trace files are read again chunk by chunk
//! (constant memory), synthesized text events come from memory, and each event carries its
//! matched peer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::Serialize;
use tsync_common::PacketEvent;

use crate::input::tracefile::{TraceFile, usable};
use crate::timeline::synthetic::SyntheticEvent;
use crate::timeline::{Timeline, TimelineError};

/// The event of the same packet on the other side: the `index`-th event of node `node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PeerRef {
    /// Index of the node (trace).
    pub node: usize,
    /// Index of the event in its trace (file order).
    pub index: u64,
}

/// One event on the common timebase, as a sink receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportEvent<'a> {
    /// Index of the node (trace).
    pub node: usize,
    /// Index of the event in its trace (file order), the target of [`PeerRef::index`].
    pub index: u64,
    /// The recorded (or synthesized) event.
    pub event: &'a PacketEvent,
    /// Time on the node's own clock (ns).
    pub original_ns: i64,
    /// Time on the common timebase (ns), after the clock maps (and the CLC, if used).
    pub corrected_ns: i64,
    /// The matched event of the same packet, if any.
    pub peer: Option<PeerRef>,
}

/// Why a sink could not take an event (its own error, boxed: the sinks are the exports').
pub type SinkError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Where [`Timeline::export`] sends the events: a streaming writer.
pub trait EventSink {
    /// Takes one event.
    fn write_event(&mut self, event: &ExportEvent<'_>) -> Result<(), SinkError>;
    /// Flushes everything; the sink must not be used afterwards.
    fn finish(&mut self) -> Result<(), SinkError>;
}

/// Merges per-trace event streams, each sorted by `key`, into one sorted stream (k-way merge:
/// one pending item per stream in memory). Ties keep the stream order.
pub fn merge_by_time<T, I, K>(streams: Vec<I>, key: K) -> impl Iterator<Item = T>
where
    I: Iterator<Item = T>,
    K: Fn(&T) -> i64,
{
    let mut streams = streams;
    let mut pending: Vec<Option<T>> = streams.iter_mut().map(Iterator::next).collect();
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = pending
        .iter()
        .enumerate()
        .filter_map(|(i, item)| item.as_ref().map(|x| Reverse((key(x), i))))
        .collect();
    std::iter::from_fn(move || {
        let Reverse((_, i)) = heap.pop()?;
        let item = pending[i].take();
        pending[i] = streams[i].next();
        if let Some(next) = &pending[i] {
            heap.push(Reverse((key(next), i)));
        }
        item
    })
}

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
    /// Events written to the sink.
    pub events: u64,
    /// Events written with a matched peer event.
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
                None => TraceFile::open(self.source_path(trace))?
                    .next_chunk()?
                    .and_then(|c| c.iter().find(|e| usable(e)).map(|e| e.ts_ns)),
            };
            if let Some(t) = first {
                earliest = earliest.min(self.mapped(trace, t as i64));
            }
        }
        Ok(if earliest == i64::MAX { 0 } else { earliest })
    }

    /// Streams every event, merged by corrected time, to `sink`. `corrected` are the CLC's
    /// tables (else the clock maps are used). Peers are the kept messages' other ends,
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
            })
            .map_err(TimelineError::Export)?;
            summary.events += 1;
            summary.with_peer += u64::from(e.peer.is_some());
        }
        sink.finish().map_err(TimelineError::Export)?;
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
                corrected_ns: table.map_or_else(|| self.mapped(trace, original), |t| t[index]),
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
    file: TraceFile,
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
        let file = TraceFile::open(timeline.source_path(trace))?;
        Ok(FileStream {
            timeline,
            trace,
            file,
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
            match self.file.next_chunk()? {
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
                    path: self.file.path().to_path_buf(),
                    index,
                })?,
            None => self.timeline.mapped(self.trace, original),
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
    use crate::model::Message;
    use crate::timeline::synthetic::synthesize_text_events;
    use tsync_common::{direction, tcp_flag};

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

    #[test]
    fn merge_by_time_interleaves_sorted_streams() {
        let merged: Vec<i64> = merge_by_time(
            vec![
                vec![1, 4, 9].into_iter(),
                vec![2, 3, 10].into_iter(),
                vec![].into_iter(),
            ],
            |x| *x,
        )
        .collect();
        assert_eq!(merged, vec![1, 2, 3, 4, 9, 10]);
    }
}
