//! Half convex hulls of message points, built incrementally in linear time.
//!
//! For a trace pair (a, b), a message a→b is the point (send time on a, receive time on b) and lies
//! above the true clock line; a message b→a is the point (receive time on a, send time on b) and lies
//! below it. Only the lower half-hull of the first set and the upper half-hull of the second can
//! constrain a line between them (Poirier §3.3), so those are all that is kept.
//!
//! Points normally arrive sorted by x (traces are time-ordered), and Andrew's monotone chain then
//! costs amortized O(1) per point. A point that arrives out of order is not dropped (the LTTV code
//! drops it): if it lies on the inner side of the hull built so far it can never be a vertex and
//! is done with; otherwise it waits in a side buffer that is merged with the hull — hull vertices
//! plus pending points, sorted, rescanned — when it grows past the hull size, and at the end. The
//! result is the exact hull of every point in every case; memory stays O(hull + buffer).
//!
//! All geometry is exact: coordinates are i64 nanoseconds and orientation tests use i128.

/// A message point: x on trace a's clock, y on trace b's clock, both ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Point {
    /// Time on trace a's clock (ns).
    pub x: i64,
    /// Time on trace b's clock (ns).
    pub y: i64,
}

impl Point {
    /// The point (`x`, `y`).
    pub const fn new(x: i64, y: i64) -> Self {
        Point { x, y }
    }
}

/// Which half of the hull is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Lower half: a→b messages, the line must pass on or below every point.
    Lower,
    /// Upper half: b→a messages, the line must pass on or above every point.
    Upper,
}

/// Orientation of (o, a, b): > 0 for a left (counter-clockwise) turn, < 0 right, 0 collinear.
/// Exact for all i64 coordinates with non-negative values (differences fit in 64 bits + sign).
#[inline]
pub fn cross(o: Point, a: Point, b: Point) -> i128 {
    // Fast path: differences that fit in i64 (always, for times of one trace pair) need only two
    // 64×64→128-bit products; the exact difference of two such products fits in i128 (each is at
    // most 2⁶² in magnitude, 2⁶³ for `i64::MIN`², and both cannot reach it with opposite signs).
    if let (Some(ax), Some(ay), Some(bx), Some(by)) = (
        a.x.checked_sub(o.x),
        a.y.checked_sub(o.y),
        b.x.checked_sub(o.x),
        b.y.checked_sub(o.y),
    ) {
        return ax as i128 * by as i128 - ay as i128 * bx as i128;
    }
    let (ax, ay) = (a.x as i128 - o.x as i128, a.y as i128 - o.y as i128);
    let (bx, by) = (b.x as i128 - o.x as i128, b.y as i128 - o.y as i128);
    ax * by - ay * bx
}

/// [`cross`] for points whose coordinates are all non-negative (times since a boot, the usual
/// case): their differences cannot overflow i64, so no check is needed; the value is the same.
#[inline(always)]
fn cross_nonneg(o: Point, a: Point, b: Point) -> i128 {
    debug_assert!([o, a, b].iter().all(|q| q.x >= 0 && q.y >= 0));
    let (ax, ay) = (a.x - o.x, a.y - o.y);
    let (bx, by) = (b.x - o.x, b.y - o.y);
    ax as i128 * by as i128 - ay as i128 * bx as i128
}

/// Whether `p`'s coordinates are both non-negative.
#[inline(always)]
fn nonneg(p: Point) -> bool {
    (p.x | p.y) >= 0
}

/// Pops the vertices that `p` makes non-convex (monotone chain), `orient` being [`cross`] or,
/// where it gives the same, [`cross_nonneg`].
#[inline(always)]
fn chain(v: &mut Vec<Point>, p: Point, side: Side, orient: impl Fn(Point, Point, Point) -> i128) {
    match side {
        Side::Lower => {
            while let [.., a, b] = v[..]
                && orient(a, b, p) <= 0
            {
                v.pop();
            }
        }
        Side::Upper => {
            while let [.., a, b] = v[..]
                && orient(a, b, p) >= 0
            {
                v.pop();
            }
        }
    }
}

/// A half hull under construction.
#[derive(Clone, Debug)]
pub struct HalfHull {
    side: Side,
    vertices: Vec<Point>,
    /// Every vertex has non-negative coordinates (false may be stale: it only selects the
    /// orientation test, and both give the same value).
    nonneg: bool,
    /// Points that arrived with an x smaller than the last vertex's.
    pending: Vec<Point>,
    points: u64,
    out_of_order: u64,
}

impl HalfHull {
    pub fn new(side: Side) -> Self {
        HalfHull {
            side,
            vertices: Vec::new(),
            nonneg: true,
            pending: Vec::new(),
            points: 0,
            out_of_order: 0,
        }
    }

    /// A hull that continues from the finished `vertices` of another (sorted, strictly convex),
    /// which counted `out_of_order` points: pushing more points gives the hull of all of them.
    pub fn from_vertices(side: Side, vertices: Vec<Point>, out_of_order: u64) -> Self {
        HalfHull {
            side,
            nonneg: vertices.iter().all(|&q| nonneg(q)),
            points: vertices.len() as u64,
            vertices,
            pending: Vec::new(),
            out_of_order,
        }
    }

    /// Empties the hull (its vectors keep their room).
    pub fn clear(&mut self) {
        self.vertices.clear();
        self.nonneg = true;
        self.pending.clear();
        (self.points, self.out_of_order) = (0, 0);
    }

    /// Number of points that arrived out of x order (all of them are in the hull nonetheless).
    pub fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Adds a point.
    #[inline(always)]
    pub fn push(&mut self, p: Point) {
        self.points += 1;
        match self.vertices.last() {
            Some(last) if p.x < last.x => self.push_out_of_order(p),
            _ => self.push_sorted(p),
        }
    }

    /// [`push`](Self::push) of a point that came out of x order (rare: kept off the inline path).
    #[cold]
    #[inline(never)]
    fn push_out_of_order(&mut self, p: Point) {
        self.out_of_order += 1;
        if self.dominated(p) {
            return;
        }
        self.pending.push(p);
        if self.pending.len() >= 4096.max(2 * self.vertices.len()) {
            self.merge_pending();
        }
    }

    /// True if p lies inside the current hull's x range on the inner side of the hull (on or
    /// above a lower hull, on or below an upper one). Such a point can never become a vertex: the
    /// hull of a growing set only moves outward.
    #[inline]
    fn dominated(&self, p: Point) -> bool {
        let v = &self.vertices;
        if v.is_empty() || p.x < v[0].x {
            return false;
        }
        let i = v.partition_point(|q| q.x <= p.x);
        if i == 0 || i == v.len() {
            return false;
        }
        let c = cross(v[i - 1], v[i], p);
        match self.side {
            Side::Lower => c >= 0,
            Side::Upper => c <= 0,
        }
    }

    /// Monotone chain step for a point with x >= every vertex's x.
    #[inline(always)]
    fn push_sorted(&mut self, p: Point) {
        let v = &mut self.vertices;
        if let Some(&last) = v.last()
            && last.x == p.x
        {
            // Same abscissa: only the lowest (lower hull) or highest (upper hull) point matters.
            let keep_last = match self.side {
                Side::Lower => last.y <= p.y,
                Side::Upper => last.y >= p.y,
            };
            if keep_last {
                return;
            }
            v.pop();
        }
        let side = self.side;
        if self.nonneg && nonneg(p) {
            chain(v, p, side, cross_nonneg);
        } else {
            self.nonneg = false;
            chain(v, p, side, cross);
        }
        v.push(p);
    }

    fn merge_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut all = std::mem::take(&mut self.vertices);
        all.append(&mut self.pending);
        match self.side {
            Side::Lower => all.sort_unstable(),
            // Same x: the highest first, so that the others are dropped as dominated.
            Side::Upper => all.sort_unstable_by(|a, b| a.x.cmp(&b.x).then(b.y.cmp(&a.y))),
        }
        self.vertices = Vec::with_capacity(all.len().min(1024));
        self.nonneg = true;
        for p in all {
            self.push_sorted(p);
        }
    }

    /// The finished hull vertices, sorted by x, strictly convex (no collinear middle points).
    pub fn finish(&mut self) -> &[Point] {
        self.merge_pending();
        &self.vertices
    }
}

#[cfg(test)]
/// Builds the half hull of a set of points in any order (sort + monotone chain).
pub fn half_hull(side: Side, points: &[Point]) -> Vec<Point> {
    let mut h = HalfHull::new(side);
    for &p in points {
        h.push(p);
    }
    h.finish().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute force: p is a lower-hull vertex iff no two other points (or one, same x) put it above.
    fn brute(side: Side, pts: &[Point]) -> Vec<Point> {
        let mut s: Vec<Point> = pts.to_vec();
        s.sort();
        s.dedup();
        let sign = if side == Side::Lower { 1 } else { -1 };
        let mut out = Vec::new();
        'next: for &p in &s {
            for &q in &s {
                if q.x == p.x && sign * (q.y - p.y) < 0 {
                    continue 'next;
                }
            }
            for &a in &s {
                for &b in &s {
                    if a.x < p.x && p.x < b.x && sign as i128 * cross(a, b, p) >= 0 {
                        continue 'next;
                    }
                }
            }
            out.push(p);
        }
        out
    }

    proptest! {
        #[test]
        fn hull_of_unsorted_points_is_exact(pts in prop::collection::vec((0i64..50, 0i64..50), 0..40)) {
            let pts: Vec<Point> = pts.into_iter().map(|(x, y)| Point::new(x, y)).collect();
            for side in [Side::Lower, Side::Upper] {
                prop_assert_eq!(half_hull(side, &pts), brute(side, &pts));
            }
        }
    }

    /// Textbook monotone chain on sorted input, as the reference for large inputs.
    fn textbook(side: Side, pts: &[Point]) -> Vec<Point> {
        let mut s = pts.to_vec();
        s.sort_by(|a, b| match side {
            Side::Lower => a.cmp(b),
            Side::Upper => a.x.cmp(&b.x).then(b.y.cmp(&a.y)),
        });
        s.dedup_by_key(|p| p.x);
        let mut h: Vec<Point> = Vec::new();
        for p in s {
            while h.len() >= 2 && {
                let c = cross(h[h.len() - 2], h[h.len() - 1], p);
                if side == Side::Lower { c <= 0 } else { c >= 0 }
            } {
                h.pop();
            }
            h.push(p);
        }
        h
    }

    #[test]
    fn many_shuffled_points_give_the_exact_hull() {
        let mut rng = tsync_sim::SplitMix64::new(3);
        for round in 0..20 {
            let n = 20_000;
            let pts: Vec<Point> = (0..n)
                .map(|_| {
                    let x = rng.below(1_000_000_000) as i64;
                    let noise = rng.below(1 << (10 + round)) as i64;
                    Point::new(x, x + 5_000_000_000 + noise)
                })
                .collect();
            for side in [Side::Lower, Side::Upper] {
                assert_eq!(half_hull(side, &pts), textbook(side, &pts), "round {round}");
            }
        }
    }

    #[test]
    fn out_of_order_point_is_kept() {
        let mut h = HalfHull::new(Side::Lower);
        for p in [(0, 10), (10, 10), (20, 10), (5, 0)] {
            h.push(Point::new(p.0, p.1));
        }
        assert_eq!(h.out_of_order(), 1);
        assert_eq!(
            h.finish(),
            &[Point::new(0, 10), Point::new(5, 0), Point::new(20, 10)]
        );
    }

    #[test]
    fn cross_is_exact_at_the_extremes() {
        // The fast path (differences in i64) and the wide one must agree, including where the
        // differences overflow i64.
        let wide = |o: Point, a: Point, b: Point| {
            let (ax, ay) = (a.x as i128 - o.x as i128, a.y as i128 - o.y as i128);
            let (bx, by) = (b.x as i128 - o.x as i128, b.y as i128 - o.y as i128);
            // None where even i128 overflows (outside `cross`'s domain).
            ax.checked_mul(by)?.checked_sub(ay.checked_mul(bx)?)
        };
        let vals = [
            i64::MIN,
            i64::MIN + 1,
            -1,
            0,
            1,
            12345,
            i64::MAX - 1,
            i64::MAX,
        ];
        for &ox in &vals {
            for &ay in &vals {
                for &bx in &vals {
                    let (o, a, b) = (
                        Point::new(ox, 0),
                        Point::new(ox / 2, ay),
                        Point::new(bx, ay / -3),
                    );
                    if let Some(w) = wide(o, a, b) {
                        assert_eq!(cross(o, a, b), w, "{o:?} {a:?} {b:?}");
                    }
                }
            }
        }
        let (m, mix) = (
            Point::new(i64::MIN, i64::MIN),
            Point::new(i64::MIN, i64::MAX),
        );
        let (far, near) = (Point::new(i64::MAX, 0), Point::new(i64::MIN, 1));
        for (o, a, b) in [
            (Point::new(0, 0), m, mix),
            (Point::new(0, 0), m, m),
            // Differences beyond i64: the wide path.
            (far, Point::new(i64::MIN, 0), near),
        ] {
            let w = wide(o, a, b).expect("within i128");
            assert_eq!(cross(o, a, b), w);
        }
    }
}
