//! Restores time order. The ring buffer holds events in reservation order, which differs from
//! timestamp order by at most the few microseconds a hook runs on another CPU; holding events for a
//! bounded window and releasing them sorted lets the agent write a time-sorted file.
use std::collections::VecDeque;

use tsync_common::PacketEvent;

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
