//! Matching on every core: the digest space cut into hash partitions, one [`KeyMatcher`] per
//! partition, each on its own thread.
//!
//! One thread reads and merges the files ([`Reader`]) and hands each event to the partition of
//! its key, in batches ("ticks" of [`TICK_EVENTS`](super::merge) events, each ending with the
//! merge axis's high-water mark, so that every partition decides what is due even if it got no
//! event). Each partition sends back, per tick, its decisions in canonical order; the calling
//! thread merges them by tag ([`order::merge`]) and passes them through the [`Sequencer`] (range
//! matching, exchanges) to the sink. The sink stays on the calling thread: it need not be `Send`.
//!
//! Why the results do not depend on the number of partitions: a key's fate depends only on the
//! events of that key and on the merge axis's high-water mark when they come (never on other
//! keys), every event of a key goes to the same partition, and everything that relates keys
//! runs after the merge, in the canonical order. Every tick's decisions are due before the tick's
//! high-water mark and every later decision after it, so merging tick by tick gives the same
//! sequence as one partition would.
//!
//! With one thread the same stages run inline, event by event, without copies, buffers or
//! channels: one partition decides its keys in tag order already. With two, the same inline
//! stages run on the calling thread while a pool decodes the files ahead ([`Plan`]): on two
//! cores that pipeline keeps both busy without the partitions' copies and extra threads.

use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

use tsync_common::PacketEvent;

use super::keys::KeyMatcher;
use super::merge::Reader;
use super::order::{self, Outbox};
use super::sequencer::{Direct, Sequencer};
use super::{MatchOptions, MatchStats};
use crate::input::ahead;
use crate::input::error::InputError;
use crate::model::MessageSink;

/// Where the reader sends the merged events.
pub(super) trait Dispatch {
    /// Hints that an event whose key hashes to `hash` comes soon.
    fn prefetch(&mut self, _hash: u64) {}
    /// One usable event: trace, record, the hash of its key, position in its file, high-water
    /// mark, position in the merged input.
    fn event(&mut self, trace: u32, e: &PacketEvent, hash: u64, index: u64, hw: i64, seq: u64);
    /// `trace`'s last event was at `last` (merge axis); the high-water mark was `hw`.
    fn trace_ends(&mut self, trace: u32, last: i64, hw: i64);
    /// The end of a tick: every event so far had a high-water mark ≤ `hw`; `bytes` of input
    /// were consumed since the last tick.
    fn tick(&mut self, hw: i64, bytes: u64);
}

/// How the work of matching trace files is laid out on `threads` threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// Threads decoding (and hashing) the files ahead of the merge (`input::ahead`), if any.
    pub decoders: usize,
    /// Hash partitions, each on a thread of its own; one means the matching runs inline on the
    /// calling thread, with the merge.
    pub partitions: usize,
}

impl Plan {
    /// The layout for `threads` threads and `files` trace files.
    ///
    /// Two threads run a pipeline: the pool decodes and hashes, the calling thread merges,
    /// matches and estimates inline. Both cores are busy (decoding and hashing are about 45 %
    /// of the work), nothing is copied and no work is added. The pool has two threads, not one:
    /// a file's next chunks are decoded only on demand, so during the pass the second decoder
    /// mostly waits (measured: as fast or faster than one decoder on 2 and 16 traces). Partitions instead run a reader, every partition and the sequencer on
    /// threads of their own besides the decoders (six threads for two cores), and add the
    /// copies to the partitions and the merge of their decisions (+12 to +25 % of the
    /// instructions): they pay only where more cores can take them. Beyond
    /// [`MAX_FILES`](crate::input::ahead::MAX_FILES) files the pool decodes the chunks the merge
    /// asks for, not a few per file ([`Demand`](crate::input::ahead::Demand)), for three threads
    /// and more: the reader then only merges and routes, as with fewer files. Two threads keep
    /// two partitions and the reader decoding, as before: on the 100-file simulation (4,950
    /// pairs) neither the pipeline nor partitions with decoders were faster on two cores (the
    /// calling thread's per-pair work grows with the pairs), while partitions with decoders at
    /// three threads took 12.5–13.8 s against 13.5–14.5 s (five alternating runs each).
    pub fn new(threads: usize, files: usize) -> Plan {
        let ahead = ahead::Demand::for_files(files) == ahead::Demand::Ahead;
        match threads.max(1) {
            1 => Plan {
                decoders: 0,
                partitions: 1,
            },
            2 if ahead => Plan {
                decoders: 2,
                partitions: 1,
            },
            2 => Plan {
                decoders: 0,
                partitions: 2,
            },
            n => Plan {
                decoders: n,
                partitions: n,
            },
        }
    }
}

/// Runs the matching of `reader`'s events as `plan` says, passing messages to `sink`; returns
/// the counts of every stage (not yet those of the reader).
pub(super) fn run<S: MessageSink + ?Sized>(
    reader: &mut Reader,
    plan: Plan,
    options: &MatchOptions,
    sink: &mut S,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    let mut sequencer = Sequencer::new(options, sink.wants_events());
    sequencer.recordings = reader.recordings().clone();
    let events_wanted = sequencer.needs_events(sink.wants_events());
    let new_keys = || {
        let mut k = KeyMatcher::new(options.window_ns, options.by_range);
        k.set_events_wanted(events_wanted);
        k.recordings = reader.recordings().clone();
        k
    };
    let mut stats = if plan.partitions == 1 {
        let mut inline = Inline {
            keys: new_keys(),
            sequencer: &mut sequencer,
            sink: &mut *sink,
            progress,
        };
        reader.run(&mut inline)?;
        let Inline {
            keys,
            sequencer,
            sink,
            ..
        } = inline;
        let (stats, _) = keys.finish(&mut Direct { sequencer, sink });
        stats
    } else {
        let keys: Vec<KeyMatcher> = (0..plan.partitions).map(|_| new_keys()).collect();
        threaded(reader, keys, &mut sequencer, sink, progress)?
    };
    stats.add(&sequencer.finish(sink));
    Ok(stats)
}

/// Passes the decisions in `boxes` (each sorted) to the sequencer in tag order.
fn pass<S: MessageSink + ?Sized>(boxes: &mut [Outbox], sequencer: &mut Sequencer, sink: &mut S) {
    for b in boxes.iter_mut() {
        b.sort();
    }
    order::merge(boxes, |o, from| sequencer.item(o, from, sink));
}

/// One thread: the reader calls the partition, and the partition the sequencer, directly.
struct Inline<'a, S: MessageSink + ?Sized> {
    keys: KeyMatcher,
    sequencer: &'a mut Sequencer,
    sink: &'a mut S,
    progress: &'a mut dyn FnMut(u64),
}

impl<S: MessageSink + ?Sized> Dispatch for Inline<'_, S> {
    #[inline]
    fn prefetch(&mut self, hash: u64) {
        self.keys.prefetch(hash);
    }

    #[inline]
    fn event(&mut self, trace: u32, e: &PacketEvent, hash: u64, index: u64, hw: i64, seq: u64) {
        let mut direct = Direct {
            sequencer: self.sequencer,
            sink: self.sink,
        };
        self.keys
            .event_hashed(trace, e, hash, e.ts_ns as i64, hw, index, seq, &mut direct);
    }

    fn trace_ends(&mut self, trace: u32, last: i64, hw: i64) {
        self.keys.recordings.ends(trace, last, hw);
        self.sequencer.recordings.ends(trace, last, hw);
    }

    fn tick(&mut self, hw: i64, bytes: u64) {
        let mut direct = Direct {
            sequencer: self.sequencer,
            sink: self.sink,
        };
        self.keys.expire(hw, &mut direct);
        if bytes > 0 {
            (self.progress)(bytes);
        }
    }
}

/// An event on its way to a partition.
#[derive(Clone, Copy)]
struct In {
    e: PacketEvent,
    /// The hash of its key (computed once, by the reader).
    hash: u64,
    trace: u32,
    index: u64,
    hw: i64,
    seq: u64,
}

/// A tick's events for one partition, and what every partition must know at its end.
struct Tick {
    events: Vec<In>,
    hw: i64,
    /// Recordings that ended during the tick: trace, last event, high-water mark then.
    ends: Vec<(u32, i64, i64)>,
    bytes: u64,
}

/// What a partition sends back.
enum Back {
    /// The decisions of one tick, with the tick's `ends` and `bytes` (passed on by partition 0).
    Tick(Outbox, Vec<(u32, i64, i64)>, u64),
    /// The decisions left at the end, and the partition's counts.
    Done(Outbox, MatchStats),
}

/// Ticks in flight per partition: enough to keep every thread busy, and a bound on memory.
const QUEUE: usize = 4;

/// The reader's side: events sorted into one batch per partition.
struct Router {
    senders: Vec<SyncSender<Tick>>,
    batches: Vec<Vec<In>>,
    /// Batches the partitions are done with, to fill again (no allocation per tick).
    spare: Receiver<Vec<In>>,
    ends: Vec<(u32, i64, i64)>,
}

impl Dispatch for Router {
    #[inline]
    fn event(&mut self, trace: u32, e: &PacketEvent, hash: u64, index: u64, hw: i64, seq: u64) {
        // The low half of the hash: the partitions' tables index by the high half.
        let n = self.batches.len() as u64;
        let part = ((hash & 0xFFFF_FFFF) * n) >> 32;
        self.batches[part as usize].push(In {
            e: *e,
            hash,
            trace,
            index,
            hw,
            seq,
        });
    }

    fn trace_ends(&mut self, trace: u32, last: i64, hw: i64) {
        self.ends.push((trace, last, hw));
    }

    fn tick(&mut self, hw: i64, bytes: u64) {
        let ends = std::mem::take(&mut self.ends);
        for (i, (tx, batch)) in self.senders.iter().zip(&mut self.batches).enumerate() {
            let fresh = self
                .spare
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(batch.capacity()));
            let events = std::mem::replace(batch, fresh);
            let tick = Tick {
                events,
                hw,
                ends: ends.clone(),
                bytes: if i == 0 { bytes } else { 0 },
            };
            // A partition that stopped has panicked: the scope's join reports it.
            let _ = tx.send(tick);
        }
    }
}

/// The channels of one partition's thread: ticks in, decisions out, and the buffers that come
/// back to be filled again.
struct Lanes {
    ticks: Receiver<Tick>,
    back: SyncSender<Back>,
    spare_outboxes: Receiver<Outbox>,
    spare_batches: Sender<Vec<In>>,
}

/// One partition's thread.
fn partition(mut keys: KeyMatcher, lanes: Lanes) {
    let Lanes {
        ticks: rx,
        back: tx,
        spare_outboxes,
        spare_batches,
    } = lanes;
    for mut tick in rx {
        for &(trace, last, hw) in &tick.ends {
            keys.recordings.ends(trace, last, hw);
        }
        let mut out = spare_outboxes.try_recv().unwrap_or_default();
        for (i, ev) in tick.events.iter().enumerate() {
            if let Some(ahead) = tick.events.get(i + 4) {
                keys.prefetch(ahead.hash);
            }
            keys.event_hashed(
                ev.trace,
                &ev.e,
                ev.hash,
                ev.e.ts_ns as i64,
                ev.hw,
                ev.index,
                ev.seq,
                &mut out,
            );
        }
        keys.expire(tick.hw, &mut out);
        out.sort();
        tick.events.clear();
        let _ = spare_batches.send(tick.events);
        if tx.send(Back::Tick(out, tick.ends, tick.bytes)).is_err() {
            return;
        }
    }
    let mut out = Outbox::default();
    let (stats, _) = keys.finish(&mut out);
    out.sort();
    let _ = tx.send(Back::Done(out, stats));
}

/// Several threads: the reader on one, each partition on one, the merge and the sequencer on the
/// calling thread.
fn threaded<S: MessageSink + ?Sized>(
    reader: &mut Reader,
    keys: Vec<KeyMatcher>,
    sequencer: &mut Sequencer,
    sink: &mut S,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    std::thread::scope(|scope| {
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        let mut returns = Vec::new();
        let (spare_batches, spare) = channel();
        for k in keys {
            let (tx, ticks) = sync_channel::<Tick>(QUEUE);
            let (back, back_rx) = sync_channel::<Back>(QUEUE);
            let (ret, spare_outboxes) = channel();
            let lanes = Lanes {
                ticks,
                back,
                spare_outboxes,
                spare_batches: spare_batches.clone(),
            };
            scope.spawn(move || partition(k, lanes));
            senders.push(tx);
            receivers.push(back_rx);
            returns.push(ret);
        }
        drop(spare_batches);
        let n = senders.len();
        let reading = scope.spawn(move || {
            let mut router = Router {
                senders,
                batches: (0..n).map(|_| Vec::new()).collect(),
                spare,
                ends: Vec::new(),
            };
            reader.run(&mut router)
            // Dropping the router closes the partitions' queues: they finish.
        });
        let mut stats = MatchStats::default();
        let mut boxes: Vec<Outbox> = Vec::with_capacity(n);
        let mut finished = false;
        'ticks: while !finished {
            boxes.clear();
            let mut bytes = 0;
            for rx in &receivers {
                match rx.recv() {
                    Ok(Back::Tick(out, ends, b)) => {
                        if boxes.is_empty() {
                            for (trace, last, hw) in ends {
                                sequencer.recordings.ends(trace, last, hw);
                            }
                        }
                        bytes += b;
                        boxes.push(out);
                    }
                    Ok(Back::Done(out, s)) => {
                        finished = true;
                        stats.add(&s);
                        boxes.push(out);
                    }
                    // A partition panicked: the scope's join reports it.
                    Err(_) => break 'ticks,
                }
            }
            pass(&mut boxes, sequencer, sink);
            for (b, ret) in boxes.drain(..).zip(&returns) {
                let _ = ret.send(b);
            }
            if bytes > 0 {
                progress(bytes);
            }
        }
        // Unblocks the partitions (and through them the reader) if one of them panicked.
        drop(receivers);
        match reading.join() {
            Ok(read) => read?,
            Err(panic) => std::panic::resume_unwind(panic),
        }
        Ok(stats)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_threads_pipeline_and_more_partition() {
        let plan = |decoders, partitions| Plan {
            decoders,
            partitions,
        };
        assert_eq!(Plan::new(0, 2), plan(0, 1));
        assert_eq!(Plan::new(1, 2), plan(0, 1));
        assert_eq!(Plan::new(2, 2), plan(2, 1));
        assert_eq!(Plan::new(2, ahead::MAX_FILES), plan(2, 1));
        assert_eq!(Plan::new(3, 16), plan(3, 3));
        // Too many files to decode ahead each: two threads partition; more decode on request.
        assert_eq!(Plan::new(2, ahead::MAX_FILES + 1), plan(0, 2));
        assert_eq!(Plan::new(8, 600), plan(8, 8));
    }
}
