//! Restores time order. The ring buffer holds events in reservation order, which differs from
//! timestamp order by at most the few microseconds a hook runs on another CPU; holding events for a
//! bounded window and releasing them sorted lets the agent write a time-sorted file.
use std::collections::VecDeque;

use tsync_common::{EVENT_SIZE, PacketEvent};

/// How long an event is held back before it is written (ns). Far above the hooks' run time, far
/// below anything a user would notice.
pub const WINDOW_NS: u64 = 50_000_000;

/// Events waiting to be released in timestamp order.
#[derive(Default)]
pub struct Reorder {
    /// Sorted by timestamp, equal ones in arrival order. A deque: releasing the oldest events
    /// must not move the rest of the window (with a `Vec`, every drain moved the whole window,
    /// and each event was copied once per drain).
    pending: VecDeque<PacketEvent>,
    /// Newest timestamp already released.
    released_upto: u64,
    /// Events that arrived after newer ones had been released: written out of order.
    late: u64,
    /// Newest timestamp seen.
    newest: u64,
    /// Scratch for [`push_run`](Self::push_run): the pending events a run is merged with.
    tail: Vec<PacketEvent>,
    /// Scratch for [`push_record`](Self::push_record): a record's events.
    run: Vec<PacketEvent>,
}

impl Reorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one event from the ring buffer, in its place: after every pending event stamped at
    /// or before it.
    ///
    /// Why insert rather than sort at release: an event out of order is only a few events away
    /// from its place (it is late by the microseconds a hook runs on another CPU), so inserting
    /// it moves a few events; a stable sort of the window at every drain allocated scratch as
    /// large as the window (1 MB at 200 000 events/s), fresh pages each time with musl's
    /// allocator, and went over every pending event (docs/benchmarks.md).
    pub fn push(&mut self, ev: PacketEvent) {
        self.newest = self.newest.max(ev.ts_ns);
        if ev.ts_ns < self.released_upto {
            self.late += 1;
        }
        match self.pending.back() {
            Some(last) if ev.ts_ns < last.ts_ns => {
                let at = self.pending.partition_point(|e| e.ts_ns <= ev.ts_ns);
                self.pending.insert(at, ev);
            }
            _ => self.pending.push_back(ev),
        }
    }

    /// Takes one ring-buffer record: an event, or a CPU's batch of them (`tsync_common::batch`).
    /// The ring buffer aligns records to 8 bytes, as an event needs, so a batch is read in place;
    /// a record that is not (never seen) is copied first.
    pub fn push_record(&mut self, record: &[u8]) {
        if record.len() == EVENT_SIZE {
            self.push(bytemuck::pod_read_unaligned(record));
            return;
        }
        if let Ok(run) = bytemuck::try_cast_slice::<u8, PacketEvent>(record) {
            self.push_run(run);
            return;
        }
        let mut run = std::mem::take(&mut self.run);
        run.clear();
        run.extend(
            record
                .chunks_exact(EVENT_SIZE)
                .map(bytemuck::pod_read_unaligned::<PacketEvent>),
        );
        self.push_run(&run);
        self.run = run;
    }

    /// Takes a run of events from the ring buffer (one CPU's batch), in place as [`push`] puts
    /// each: the run is in time order, and so merged with the pending events stamped after its
    /// first in one pass. Batches of two CPUs interleave in time, and inserting a batch's events
    /// one by one moved each of those pending events once per event of the batch.
    ///
    /// [`push`]: Self::push
    pub fn push_run(&mut self, run: &[PacketEvent]) {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            return;
        };
        // A hook interrupted between reading the clock and appending its event can leave a run
        // out of order (the interrupting hook's event went first): place such a run event by
        // event.
        if !run.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns) {
            run.iter().for_each(|ev| self.push(*ev));
            return;
        }
        self.newest = self.newest.max(last.ts_ns);
        self.late += run
            .iter()
            .take_while(|ev| ev.ts_ns < self.released_upto)
            .count() as u64;
        let at = match self.pending.back() {
            Some(back) if first.ts_ns < back.ts_ns => {
                self.pending.partition_point(|e| e.ts_ns <= first.ts_ns)
            }
            _ => {
                self.pending.extend(run.iter().copied());
                return;
            }
        };
        self.tail.clear();
        self.tail.extend(self.pending.drain(at..));
        // Merge: a pending event goes first when stamped at or before the run's (it arrived
        // first).
        let mut tail = self.tail.iter().peekable();
        for ev in run {
            while let Some(t) = tail.next_if(|t| t.ts_ns <= ev.ts_ns) {
                self.pending.push_back(*t);
            }
            self.pending.push_back(*ev);
        }
        self.pending.extend(tail.copied());
    }

    /// Hands every pending event with `ts_ns <= cutoff` to `out`, oldest first, in at most two
    /// slices taken in place (the writer applies the skew there and copies them once, into its
    /// chunk), then forgets them. An error from `out` stops the release and is returned.
    pub fn release<E>(
        &mut self,
        cutoff: u64,
        mut out: impl FnMut(&mut [PacketEvent]) -> Result<(), E>,
    ) -> Result<(), E> {
        let n = self.pending.partition_point(|e| e.ts_ns <= cutoff);
        if n == 0 {
            return Ok(());
        }
        self.released_upto = self.released_upto.max(self.pending[n - 1].ts_ns);
        let (front, back) = self.pending.as_mut_slices();
        let from_front = n.min(front.len());
        out(&mut front[..from_front])?;
        if n > from_front {
            out(&mut back[..n - from_front])?;
        }
        self.pending.drain(..n);
        Ok(())
    }

    /// The newest timestamp pushed so far.
    pub fn newest(&self) -> u64 {
        self.newest
    }

    /// Events that came too late to be put in order (the reorder window was too short for them).
    pub fn late(&self) -> u64 {
        self.late
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Releases up to `cutoff` into `out`.
    fn release(r: &mut Reorder, cutoff: u64, out: &mut Vec<PacketEvent>) {
        r.release(cutoff, |s| {
            out.extend_from_slice(s);
            Ok::<(), ()>(())
        })
        .unwrap();
    }

    fn ev(ts: u64) -> PacketEvent {
        PacketEvent {
            ts_ns: ts,
            ..PacketEvent::default()
        }
    }

    fn times(v: &[PacketEvent]) -> Vec<u64> {
        v.iter().map(|e| e.ts_ns).collect()
    }

    #[test]
    fn releases_in_time_order_up_to_the_cutoff() {
        let mut r = Reorder::new();
        for t in [10, 30, 20, 50, 40] {
            r.push(ev(t));
        }
        let mut out = Vec::new();
        release(&mut r, 35, &mut out);
        assert_eq!(times(&out), [10, 20, 30]);
        assert_eq!(r.newest(), 50);
        release(&mut r, u64::MAX, &mut out);
        assert_eq!(times(&out), [10, 20, 30, 40, 50]);
        assert_eq!(r.late(), 0);
    }

    #[test]
    fn counts_events_older_than_what_was_released() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.push(ev(100));
        release(&mut r, 100, &mut out);
        r.push(ev(90)); // arrives after 100 went out
        r.push(ev(110));
        release(&mut r, u64::MAX, &mut out);
        assert_eq!(times(&out), [100, 90, 110]);
        assert_eq!(r.late(), 1);
    }

    /// Events late by up to 40 places (others early by more), pairs with equal stamps, released in several steps: the
    /// order of a stable sort, whatever the cutoffs.
    #[test]
    fn releases_what_a_stable_sort_would() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut arrived: Vec<PacketEvent> = (0..5000u64)
            .map(|i| PacketEvent {
                // Pairs share a stamp; `cpu` tells arrival order apart.
                ts_ns: 1000 + i / 2 * 10,
                ..PacketEvent::default()
            })
            .collect();
        for i in (0..arrived.len()).rev() {
            let j = i.saturating_sub((next() % 40) as usize);
            arrived.swap(i, j);
        }
        for (i, e) in arrived.iter_mut().enumerate() {
            e.cpu = i as u16;
        }
        let mut r = Reorder::new();
        let mut out = Vec::new();
        for (i, e) in arrived.iter().enumerate() {
            r.push(*e);
            if i % 700 == 699 {
                // Below the stamp of every event still to come (none is late by 40 places).
                release(&mut r, 1000 + (i as u64 - 40) / 2 * 10, &mut out);
            }
        }
        release(&mut r, u64::MAX, &mut out);
        let mut expected = arrived.clone();
        expected.sort_by_key(|e| e.ts_ns);
        let key = |v: &[PacketEvent]| v.iter().map(|e| (e.ts_ns, e.cpu)).collect::<Vec<_>>();
        assert_eq!(r.late(), 0);
        assert_eq!(key(&out), key(&expected));
    }

    /// Runs (sorted, interleaving in time, one unsorted, some late) give what event-by-event
    /// pushes give.
    #[test]
    fn a_run_goes_where_its_events_would() {
        let runs: [&[u64]; 6] = [
            &[10, 20, 30, 40],
            &[15, 25, 26, 50],
            &[5, 45],
            &[60, 55, 70],
            &[70, 70, 80],
            &[],
        ];
        let (mut by_run, mut by_event) = (Reorder::new(), Reorder::new());
        let (mut out_run, mut out_event) = (Vec::new(), Vec::new());
        for (i, run) in runs.iter().enumerate() {
            let run: Vec<PacketEvent> = run
                .iter()
                .enumerate()
                .map(|(j, &t)| PacketEvent {
                    cpu: (10 * i + j) as u16,
                    ..ev(t)
                })
                .collect();
            by_run.push_run(&run);
            run.iter().for_each(|e| by_event.push(*e));
            if i == 2 {
                release(&mut by_run, 12, &mut out_run);
                release(&mut by_event, 12, &mut out_event);
            }
        }
        release(&mut by_run, u64::MAX, &mut out_run);
        release(&mut by_event, u64::MAX, &mut out_event);
        let key = |v: &[PacketEvent]| v.iter().map(|e| (e.ts_ns, e.cpu)).collect::<Vec<_>>();
        assert_eq!(key(&out_run), key(&out_event));
        assert_eq!(
            (by_run.late(), by_run.newest()),
            (by_event.late(), by_event.newest())
        );
    }

    /// A batch record is read in place when aligned and copied when not: the same events come
    /// out either way, as do single-event records.
    #[test]
    fn records_aligned_or_not_give_the_same_events() {
        let batch: Vec<PacketEvent> = [30, 10, 20, 40]
            .iter()
            .enumerate()
            .map(|(i, &t)| PacketEvent {
                cpu: i as u16,
                ..ev(t)
            })
            .collect();
        let bytes: &[u8] = bytemuck::cast_slice(&batch);
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(bytes);
        let mut outs = Vec::new();
        for record in [bytes, &shifted[1..]] {
            let mut r = Reorder::new();
            r.push_record(bytemuck::bytes_of(&ev(15)));
            r.push_record(record);
            let mut out = Vec::new();
            release(&mut r, u64::MAX, &mut out);
            outs.push(times(&out));
        }
        assert_eq!(outs[0], [10, 15, 20, 30, 40]);
        assert_eq!(outs[0], outs[1]);
    }

    #[test]
    fn equal_timestamps_keep_arrival_order() {
        let mut r = Reorder::new();
        let mut a = ev(5);
        a.cpu = 1;
        let mut b = ev(5);
        b.cpu = 2;
        r.push(ev(6));
        r.push(a);
        r.push(b);
        let mut out = Vec::new();
        release(&mut r, u64::MAX, &mut out);
        assert_eq!(out.iter().map(|e| e.cpu).collect::<Vec<_>>(), [1, 2, 0]);
    }
}
