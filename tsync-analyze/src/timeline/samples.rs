//! A bounded sample of every pair's messages, for the plots.
//!
//! A pair may carry 10⁷ messages; holding them all for a picture would cost more than the
//! analysis. [`PairSamples`] keeps, per pair and direction, a bounded [`Envelope`]: the lowest
//! and highest offset `t_b − t_a` per time column, which is what the eye (and the hull) uses.

use std::collections::BTreeMap;

use crate::model::Message;

/// Points an envelope holds before it compacts itself.
const ENVELOPE_CAPACITY: usize = 16_384;
/// Time columns of a compaction (each keeps at most two points).
const ENVELOPE_COLUMNS: usize = 2_000;

/// The points with the lowest and the highest offset of one column.
type Extremes = ((i64, i64), (i64, i64));

/// A bounded subset of a point cloud `(t_a, t_b)` that keeps, per time column, the point with
/// the lowest and the one with the highest offset `t_b − t_a`. Points may come in any order.
#[derive(Clone, Debug, Default)]
pub struct Envelope {
    points: Vec<(i64, i64)>,
}

impl Envelope {
    /// Adds a point; memory stays below 16384 points.
    pub fn add(&mut self, p: (i64, i64)) {
        self.points.push(p);
        if self.points.len() >= ENVELOPE_CAPACITY {
            self.compact();
        }
    }

    /// The kept points, in time order.
    pub fn points(&self) -> Vec<(i64, i64)> {
        let mut p = self.points.clone();
        p.sort_unstable();
        p
    }

    /// Reduces the points to the per-column extremes over their current time range. Repeated
    /// compactions keep each column's extremes, since they are extremes of what was kept.
    fn compact(&mut self) {
        let (lo, hi) = self
            .points
            .iter()
            .fold((i64::MAX, i64::MIN), |(lo, hi), p| {
                (lo.min(p.0), hi.max(p.0))
            });
        let width = (hi as i128 - lo as i128 + 1) as f64;
        let mut columns: Vec<Option<Extremes>> = vec![None; ENVELOPE_COLUMNS];
        let offset = |p: &(i64, i64)| p.1 as i128 - p.0 as i128;
        for p in &self.points {
            let c = (((p.0 as i128 - lo as i128) as f64 / width * ENVELOPE_COLUMNS as f64)
                as usize)
                .min(ENVELOPE_COLUMNS - 1);
            let slot = columns[c].get_or_insert((*p, *p));
            if offset(p) < offset(&slot.0) {
                slot.0 = *p;
            }
            if offset(p) > offset(&slot.1) {
                slot.1 = *p;
            }
        }
        self.points = columns
            .into_iter()
            .flatten()
            .flat_map(|(a, b)| if a == b { vec![a] } else { vec![a, b] })
            .collect();
    }
}

/// The message envelopes of every pair (a < b), both directions, as the plot wants them:
/// a→b as (send on a, receive on b), b→a as (receive on a, send on b).
#[derive(Clone, Debug, Default)]
pub struct PairSamples {
    pairs: BTreeMap<(u32, u32), [Envelope; 2]>,
}

impl PairSamples {
    /// No pairs yet.
    pub fn new() -> Self {
        PairSamples::default()
    }

    /// Adds one message.
    pub fn add(&mut self, m: &Message) {
        let (s, r) = (m.send_trace, m.recv_trace);
        if s < r {
            self.pairs.entry((s, r)).or_default()[0].add((m.send_ns, m.recv_ns));
        } else if r < s {
            self.pairs.entry((r, s)).or_default()[1].add((m.recv_ns, m.send_ns));
        }
    }

    /// The envelopes of the pair (a, b), a < b.
    pub fn pair(&self, a: u32, b: u32) -> Option<&[Envelope; 2]> {
        self.pairs.get(&(a, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_stays_bounded_and_keeps_each_columns_extremes() {
        let mut e = Envelope::default();
        // 10⁶ points over 1000 s; offsets cycle through 0..1000 ns, except one very low and one
        // very high point, which must survive every compaction.
        for k in 0..1_000_000i64 {
            let t = k * 1_000_000;
            let offset = match k {
                123_456 => -50_000,
                654_321 => 90_000,
                _ => (k * 37) % 1000,
            };
            e.add((t, t + offset));
            assert!(e.points.len() < ENVELOPE_CAPACITY);
        }
        let points = e.points();
        assert!(points.windows(2).all(|w| w[0] <= w[1]), "time order");
        assert!(points.contains(&(123_456_000_000, 123_456_000_000 - 50_000)));
        assert!(points.contains(&(654_321_000_000, 654_321_000_000 + 90_000)));
        // Offset 0 and 999 come once a second each (1000 of each), never two in one column of
        // the last compaction (0.5 s wide): each is its column's extreme and must be kept.
        let count = |o: i64| points.iter().filter(|p| p.1 - p.0 == o).count();
        assert!(
            count(0) >= 999 && count(999) >= 999,
            "{} {}",
            count(0),
            count(999)
        );
    }

    #[test]
    fn samples_put_each_direction_in_the_plot_orientation() {
        let mut s = PairSamples::new();
        let m = |send_trace, recv_trace, send_ns, recv_ns| Message {
            send_trace,
            recv_trace,
            send_ns,
            recv_ns,
        };
        s.add(&m(0, 1, 10, 25));
        s.add(&m(1, 0, 40, 31));
        s.add(&m(2, 2, 1, 1));
        let [ab, ba] = s.pair(0, 1).unwrap();
        assert_eq!(ab.points(), vec![(10, 25)]);
        assert_eq!(ba.points(), vec![(31, 40)], "(receive on a, send on b)");
        assert!(s.pair(2, 2).is_none());
    }
}
