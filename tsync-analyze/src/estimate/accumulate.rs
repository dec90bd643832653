//! The message pass: per trace pair, the half hulls (bucketed in time, for the segments) and
//! the exchanges' offset samples, on the estimation clocks. This is the per-message hot path.

use crate::estimate::hull::Point;
use crate::estimate::linreg::LinRegAccumulator;
use crate::estimate::pair_index::PairIndex;
use crate::estimate::segments::Buckets;
use crate::estimate::timebase::Timebases;
use crate::model::{Exchange, MatchedMessage, Message, MessageSink};

/// Per-pair accumulation during the message pass.
#[derive(Clone, Debug)]
pub(super) struct PairState {
    pub(super) a: u32,
    pub(super) b: u32,
    pub(super) buckets: Buckets,
    pub(super) messages_ab: u64,
    pub(super) messages_ba: u64,
    pub(super) x_min: i64,
    pub(super) x_max: i64,
    pub(super) linreg: LinRegAccumulator,
}

impl PairState {
    fn new(a: u32, b: u32) -> Self {
        PairState {
            a,
            b,
            buckets: Buckets::default(),
            messages_ab: 0,
            messages_ba: 0,
            x_min: i64::MAX,
            x_max: i64::MIN,
            linreg: LinRegAccumulator::default(),
        }
    }
}

/// The message sink that builds the hulls: the per-message hot path.
#[derive(Clone, Debug, Default)]
pub struct PairAccumulator {
    /// Slot of pair (a, b) in `pairs`.
    index: PairIndex,
    /// The pair of the previous message and its slot.
    last: LastPair,
    pub(super) pairs: Vec<PairState>,
    /// Converts message times to the estimation clocks.
    pub(super) timebases: Timebases,
    /// Whether any trace is converted (decided once: the per-message path then skips it).
    converting: bool,
}

/// The pair the previous message belonged to: with two traces every message belongs to it, and
/// comparing one word costs less than the index's arithmetic (with many traces it mostly
/// misses, and the index answers in a few instructions more).
#[derive(Clone, Copy, Debug)]
struct LastPair {
    /// `a << 32 | b`; `u64::MAX` (a = b = u32::MAX, never named by a message) when there is none.
    key: u64,
    slot: u32,
}

impl LastPair {
    #[inline]
    fn key(a: u32, b: u32) -> u64 {
        u64::from(a) << 32 | u64::from(b)
    }
}

impl Default for LastPair {
    fn default() -> Self {
        LastPair {
            key: u64::MAX,
            slot: 0,
        }
    }
}

impl PairAccumulator {
    /// An empty accumulator on the recorded clocks.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty accumulator that converts message times with `timebases` first.
    pub fn with_timebases(timebases: Timebases) -> Self {
        PairAccumulator {
            converting: !timebases.all_recorded(),
            timebases,
            ..Self::default()
        }
    }

    /// The state of pair (a, b), a < b: the last pair's, else one load in the index
    /// (consecutive messages of a mesh mostly change pair).
    #[inline(always)]
    fn slot(&mut self, a: u32, b: u32) -> &mut PairState {
        let key = LastPair::key(a, b);
        if self.last.key != key {
            let slot = match self.index.get(a, b) {
                Some(s) => s,
                None => self.create(a, b),
            };
            self.last = LastPair { key, slot };
        }
        &mut self.pairs[self.last.slot as usize]
    }

    /// A new pair's slot.
    #[cold]
    #[inline(never)]
    fn create(&mut self, a: u32, b: u32) -> u32 {
        let s = self.pairs.len() as u32;
        self.pairs.push(PairState::new(a, b));
        self.index.insert(a, b, s);
        s
    }

    /// Takes the pairs of accumulators that each saw a disjoint set of pairs (`spread.rs`).
    /// Their order differs from the one-accumulator pass's, which nothing depends on: the
    /// finishing sorts the pairs by trace indices.
    pub(super) fn adopt(&mut self, parts: Vec<PairAccumulator>) {
        debug_assert!(self.pairs.is_empty(), "adopting into a used accumulator");
        let total = parts.iter().map(|p| p.pairs.len()).sum();
        self.pairs.reserve_exact(total);
        for state in parts.into_iter().flat_map(|p| p.pairs) {
            let slot = self.pairs.len() as u32;
            self.index.insert(state.a, state.b, slot);
            self.pairs.push(state);
        }
        self.last = LastPair::default();
    }

    /// Adds one message.
    #[inline(always)]
    pub fn add(&mut self, m: &Message) {
        let Message {
            send_ns, recv_ns, ..
        } = self.converted(m);
        if m.send_trace < m.recv_trace {
            let p = self.slot(m.send_trace, m.recv_trace);
            p.messages_ab += 1;
            p.x_min = p.x_min.min(send_ns);
            p.x_max = p.x_max.max(send_ns);
            p.buckets.push_ab(Point::new(send_ns, recv_ns));
        } else {
            let p = self.slot(m.recv_trace, m.send_trace);
            p.messages_ba += 1;
            p.x_min = p.x_min.min(recv_ns);
            p.x_max = p.x_max.max(recv_ns);
            p.buckets.push_ba(Point::new(recv_ns, send_ns));
        }
    }

    /// A message with its times on the estimation clocks.
    #[inline]
    pub fn converted(&mut self, m: &Message) -> Message {
        if !self.converting {
            return *m;
        }
        Message {
            send_ns: self.timebases.convert(m.send_trace, m.send_ns),
            recv_ns: self.timebases.convert(m.recv_trace, m.recv_ns),
            ..*m
        }
    }

    /// Adds one exchange's offset sample.
    pub fn add_exchange(&mut self, x: &Exchange) {
        let (q, r) = (&self.converted(&x.request), &self.converted(&x.reply));
        // Times of the exchange on each clock: request send + reply receive on the initiator,
        // request receive + reply send on the responder.
        let (init_sum, resp_sum) = (q.send_ns + r.recv_ns, q.recv_ns + r.send_ns);
        let e = x.rtt_ns().max(0) as f64 / 2.0;
        let (a, b) = (
            q.send_trace.min(q.recv_trace),
            q.send_trace.max(q.recv_trace),
        );
        let (mid2_a, mid2_b) = if q.send_trace == a {
            (init_sum, resp_sum)
        } else {
            (resp_sum, init_sum)
        };
        self.slot(a, b).linreg.add(mid2_a, mid2_b, e);
    }
}

impl MessageSink for PairAccumulator {
    #[inline(always)]
    fn message(&mut self, m: &MatchedMessage<'_>) {
        self.add(&m.message);
    }

    fn exchange(&mut self, e: &Exchange) {
        self.add_exchange(e);
    }

    fn wants_events(&self) -> bool {
        false
    }
}

/// Puts `pairs` in (a, b) order, the order of the results. A pair's state is a few hundred
/// bytes and a large mesh has hundreds of thousands of pairs: the keys are sorted, then each
/// state moves once (following the permutation's cycles), where sorting the states themselves
/// would copy each of them many times.
pub(super) fn sort_by_pair(pairs: &mut [PairState]) {
    let mut order: Vec<(u32, u32, usize)> = pairs
        .iter()
        .enumerate()
        .map(|(i, p)| (p.a, p.b, i))
        .collect();
    order.sort_unstable();
    // from[k]: where the state that belongs at k is now.
    let mut from: Vec<usize> = order.into_iter().map(|(_, _, i)| i).collect();
    for start in 0..from.len() {
        let mut at = start;
        loop {
            let next = from[at];
            from[at] = at;
            if next == start {
                break;
            }
            pairs.swap(at, next);
            at = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorting_by_pair_moves_every_state_to_its_place() {
        // Permutations with long cycles, fixed points and 2-cycles.
        for (n, step) in [
            (0usize, 1usize),
            (1, 1),
            (7, 3),
            (100, 37),
            (64, 1),
            (50, 49),
        ] {
            let mut pairs: Vec<PairState> = (0..n)
                .map(|i| {
                    let k = (i * step + n / 3) % n.max(1);
                    let mut p = PairState::new(k as u32 / 10, k as u32 % 10 + 1000);
                    p.messages_ab = k as u64;
                    p
                })
                .collect();
            sort_by_pair(&mut pairs);
            let keys: Vec<u64> = pairs.iter().map(|p| p.messages_ab).collect();
            assert_eq!(
                keys,
                (0..n as u64).collect::<Vec<_>>(),
                "n {n}, step {step}"
            );
            assert!(
                pairs
                    .windows(2)
                    .all(|w| (w[0].a, w[0].b) < (w[1].a, w[1].b))
            );
        }
    }
}
