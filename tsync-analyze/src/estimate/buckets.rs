//! A pair's messages as half hulls per bucket of time ([`BUCKET_NS`]), during the message pass:
//! what the segments (`segments.rs`) cut the pair's time into, and whose union is the pair's
//! hulls.
//!
//! Memory. A pair of a long trace holds one bucket per four seconds, and a mesh of hundreds of
//! traces has hundreds of thousands of pairs, so a bucket must cost little more than its hull
//! vertices. Only the bucket the last point went to and the latest one stay open (two half hulls
//! under construction, each with its vectors); the others are sealed into one exact-size array of
//! their vertices (a late point reopens its bucket: the hull of the vertices and the new point is
//! the hull of every point). And a pair's first [`SMALL`] points are only kept as they came (a
//! bit per point for the direction) and replayed into buckets when one more arrives or the pair
//! is finished: most pairs of a large mesh carry a few dozen messages over as many buckets.
//! Either way the finished buckets are exactly what they would have been.

use crate::estimate::hull::{HalfHull, Point, Side};
use crate::estimate::segments::BUCKET_NS;

/// Points a pair keeps as they came before it builds its buckets.
const SMALL: usize = 64;

/// The messages of one bucket, as half hulls.
#[derive(Clone, Debug)]
struct Bucket {
    /// `floor((x − origin) / BUCKET_NS)`.
    index: i64,
    lower: HalfHull,
    upper: HalfHull,
    messages_ab: u64,
    messages_ba: u64,
}

impl Bucket {
    fn new(index: i64) -> Bucket {
        Bucket {
            index,
            lower: HalfHull::new(Side::Lower),
            upper: HalfHull::new(Side::Upper),
            messages_ab: 0,
            messages_ba: 0,
        }
    }
}

/// A bucket no point is expected in any more: its vertices, lower hull first.
#[derive(Clone, Debug)]
struct Sealed {
    index: i64,
    vertices: Box<[Point]>,
    lower_len: u32,
    out_of_order: u32,
    messages_ab: u64,
    messages_ba: u64,
}

#[derive(Clone, Debug)]
enum Slot {
    Open(Box<Bucket>),
    Sealed(Sealed),
}

impl Slot {
    fn index(&self) -> i64 {
        match self {
            Slot::Open(b) => b.index,
            Slot::Sealed(s) => s.index,
        }
    }

    /// Seals an open bucket; returns its emptied box for the next bucket to reuse.
    fn seal(&mut self) -> Option<Box<Bucket>> {
        let Slot::Open(b) = self else { return None };
        let out_of_order = b.lower.out_of_order() + b.upper.out_of_order();
        let (lower, upper) = (b.lower.finish(), b.upper.finish());
        // Kept open where a count would not fit.
        let lower_len = u32::try_from(lower.len()).ok()?;
        let out_of_order = u32::try_from(out_of_order).ok()?;
        let mut vertices = Vec::with_capacity(lower.len() + upper.len());
        vertices.extend_from_slice(lower);
        vertices.extend_from_slice(upper);
        let sealed = Slot::Sealed(Sealed {
            index: b.index,
            vertices: vertices.into_boxed_slice(),
            lower_len,
            out_of_order,
            messages_ab: b.messages_ab,
            messages_ba: b.messages_ba,
        });
        let Slot::Open(mut emptied) = std::mem::replace(self, sealed) else {
            unreachable!("open above")
        };
        emptied.lower.clear();
        emptied.upper.clear();
        (emptied.messages_ab, emptied.messages_ba) = (0, 0);
        Some(emptied)
    }

    fn open(&mut self) -> &mut Bucket {
        if let Slot::Sealed(s) = self {
            let (lower, upper) = s.vertices.split_at(s.lower_len as usize);
            let bucket = Bucket {
                index: s.index,
                // All the out-of-order count on one side: only the sum is ever read.
                lower: HalfHull::from_vertices(Side::Lower, lower.to_vec(), s.out_of_order.into()),
                upper: HalfHull::from_vertices(Side::Upper, upper.to_vec(), 0),
                messages_ab: s.messages_ab,
                messages_ba: s.messages_ba,
            };
            *self = Slot::Open(Box::new(bucket));
        }
        match self {
            Slot::Open(b) => b,
            Slot::Sealed(_) => unreachable!("opened above"),
        }
    }

    fn out_of_order(&self) -> u64 {
        match self {
            Slot::Open(b) => b.lower.out_of_order() + b.upper.out_of_order(),
            Slot::Sealed(s) => s.out_of_order.into(),
        }
    }
}

/// The buckets of a pair under construction; messages come in nearly in time order, so the
/// bucket of a message is almost always the last one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Buckets {
    origin: Option<i64>,
    list: Vec<Slot>,
    /// The bucket the last point went to, and its time range `[start, end)`: the next point
    /// almost always falls there too, which a comparison tells without a division.
    last: Option<(usize, i64, i64)>,
    /// The first points, before any bucket exists.
    small: Vec<Point>,
    /// Bit i set: `small[i]` is a b→a point.
    small_ba: u64,
}

impl Buckets {
    /// Keeps `p` among the first points; false once the buckets are built.
    #[inline]
    fn keep(&mut self, p: Point, ba: bool) -> bool {
        if self.origin.is_some() {
            return false;
        }
        let n = self.small.len();
        if n == SMALL {
            self.build();
            return false;
        }
        if n == self.small.capacity() {
            // Grow by half, not double: the spare room is what a small pair would waste.
            self.small.reserve_exact((n / 2).max(4).min(SMALL - n));
        }
        self.small_ba |= u64::from(ba) << n;
        self.small.push(p);
        true
    }

    /// Replays the kept points into buckets.
    pub fn build(&mut self) {
        let small = std::mem::take(&mut self.small);
        let ba = std::mem::take(&mut self.small_ba);
        for (i, p) in small.into_iter().enumerate() {
            if ba >> i & 1 == 1 {
                self.add_ba(p);
            } else {
                self.add_ab(p);
            }
        }
    }

    #[inline]
    fn slot(&mut self, x: i64) -> &mut Bucket {
        if let Some((at, start, end)) = self.last
            && start <= x
            && x < end
            && matches!(self.list[at], Slot::Open(_))
        {
            let Slot::Open(b) = &mut self.list[at] else {
                unreachable!("matched above")
            };
            return b;
        }
        self.find(x)
    }

    /// The bucket of `x`, created or reopened if needed (the slow path of [`slot`](Self::slot)).
    /// The bucket the previous point went to is sealed unless it is the latest.
    fn find(&mut self, x: i64) -> &mut Bucket {
        let origin = *self.origin.get_or_insert(x);
        let index = ((x as i128 - origin as i128).div_euclid(BUCKET_NS as i128)) as i64;
        let previous = self.last.map(|l| l.0);
        let len = self.list.len();
        let found = match self.list.last() {
            Some(b) if b.index() == index => Ok(len - 1),
            _ => self.list.binary_search_by_key(&index, Slot::index),
        };
        let at = match found {
            Ok(at) => {
                if let Some(p) = previous
                    && p != at
                    && p + 1 != len
                {
                    self.list[p].seal();
                }
                at
            }
            Err(at) => {
                // The previous bucket is sealed unless it stays the latest (a bucket inserted
                // after it is the new latest); its box then holds the new bucket.
                let recycled = match previous {
                    Some(p) if at > p || p + 1 != len => self.list[p].seal(),
                    _ => None,
                };
                let bucket = match recycled {
                    Some(mut b) => {
                        b.index = index;
                        b
                    }
                    None => Box::new(Bucket::new(index)),
                };
                self.list.insert(at, Slot::Open(bucket));
                at
            }
        };
        let start = origin as i128 + index as i128 * BUCKET_NS as i128;
        let clamp = |v: i128| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        self.last = Some((at, clamp(start), clamp(start + BUCKET_NS as i128)));
        self.list[at].open()
    }

    /// Adds an a→b message point (x on a, y on b).
    #[inline]
    pub fn push_ab(&mut self, p: Point) {
        if !self.keep(p, false) {
            self.add_ab(p);
        }
    }

    /// Adds a b→a message point (x on a, y on b).
    #[inline]
    pub fn push_ba(&mut self, p: Point) {
        if !self.keep(p, true) {
            self.add_ba(p);
        }
    }

    #[inline]
    fn add_ab(&mut self, p: Point) {
        let b = self.slot(p.x);
        b.messages_ab += 1;
        b.lower.push(p);
    }

    #[inline]
    fn add_ba(&mut self, p: Point) {
        let b = self.slot(p.x);
        b.messages_ba += 1;
        b.upper.push(p);
    }

    /// Points that arrived out of order inside their bucket.
    pub fn out_of_order(&mut self) -> u64 {
        self.build();
        self.list.iter().map(Slot::out_of_order).sum()
    }

    /// The finished buckets, in time order.
    pub fn finish(mut self) -> Vec<HullBucket> {
        self.build();
        let origin = self.origin.unwrap_or(0);
        let start = |index: i64| origin.saturating_add(index.saturating_mul(BUCKET_NS));
        self.list
            .into_iter()
            .map(|slot| match slot {
                Slot::Open(mut b) => HullBucket {
                    start_ns: start(b.index),
                    lower: b.lower.finish().to_vec(),
                    upper: b.upper.finish().to_vec(),
                    messages_ab: b.messages_ab,
                    messages_ba: b.messages_ba,
                },
                Slot::Sealed(s) => {
                    let (lower, upper) = s.vertices.split_at(s.lower_len as usize);
                    HullBucket {
                        start_ns: start(s.index),
                        lower: lower.to_vec(),
                        upper: upper.to_vec(),
                        messages_ab: s.messages_ab,
                        messages_ba: s.messages_ba,
                    }
                }
            })
            .collect()
    }
}

/// A finished bucket: its start on the pair's first clock and its hull vertices.
#[derive(Clone, Debug)]
pub(crate) struct HullBucket {
    pub start_ns: i64,
    pub lower: Vec<Point>,
    pub upper: Vec<Point>,
    pub messages_ab: u64,
    pub messages_ba: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::hull::half_hull;

    /// Points in nearly increasing x with some late ones, many buckets: the finished buckets
    /// equal each bucket's hull of its points, however the slots were sealed and reopened.
    #[test]
    fn sealing_and_reopening_keep_every_bucket_exact() {
        let mut rng = tsync_sim::SplitMix64::new(7);
        for round in 0..20 {
            let mut b = Buckets::default();
            let mut all: Vec<(Point, bool)> = Vec::new();
            let mut x = 1_000_000_000i64;
            for _ in 0..(50 + 200 * round) {
                x += rng.below(200_000_000) as i64;
                // One point in eight arrives late, up to two buckets back.
                let late = if rng.below(8) == 0 {
                    rng.below(2 * BUCKET_NS as u64) as i64
                } else {
                    0
                };
                let px = x - late;
                let ba = rng.below(2) == 1;
                let y = px + 5_000 + rng.below(100_000) as i64 * if ba { -1 } else { 1 };
                let p = Point::new(px, y);
                all.push((p, ba));
                if ba { b.push_ba(p) } else { b.push_ab(p) }
            }
            let origin = all[0].0.x;
            let finished = b.finish();
            let mut expected: std::collections::BTreeMap<i64, (Vec<Point>, Vec<Point>)> =
                Default::default();
            for &(p, ba) in &all {
                let e = expected
                    .entry((p.x - origin).div_euclid(BUCKET_NS))
                    .or_default();
                if ba { e.1.push(p) } else { e.0.push(p) }
            }
            assert_eq!(finished.len(), expected.len(), "round {round}");
            for (f, (index, (ab, ba))) in finished.iter().zip(&expected) {
                assert_eq!(f.start_ns, origin + index * BUCKET_NS);
                assert_eq!(f.lower, half_hull(Side::Lower, ab), "round {round}");
                assert_eq!(f.upper, half_hull(Side::Upper, ba), "round {round}");
                assert_eq!(f.messages_ab, ab.len() as u64);
                assert_eq!(f.messages_ba, ba.len() as u64);
            }
        }
    }
}
