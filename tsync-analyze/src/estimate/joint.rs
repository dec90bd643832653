//! Network-wide joint estimate: every usable pair informs every clock.
//!
//! The path reduction composes pair maps along one shortest path from the reference and throws
//! the other pairs away: in a 16-node mesh, 15 of 120. Each pair's estimate errs by roughly half
//! the asymmetry of its minimum delays (Haddad: offset and delay asymmetry cannot be told apart),
//! and those errors are independent from pair to pair, so loops of pairs can average them out
//! (Huygens' "network effect").
//!
//! At a time T of the reference, let x_k be trace k's clock reading. Each pair (a, b) with map
//! M_ab says x_b − x_a ≈ δ_ab = M_ab(x_a) − x_a. The joint estimate is the weighted least-squares
//! solution of all these differences with x_ref = T (weights 1/σ², σ the pair's uncertainty: its
//! mean guaranteed interval width, or its regression residual or Ashton error for a best-effort
//! pair, ten times that), a graph Laplacian system solved by conjugate gradients (linear in the
//! pairs per iteration, so large groups stay cheap). Differences of the solution do not depend on
//! which trace is the reference. δ_ab is taken at the path estimate of x_a: the pair maps' slopes
//! are within ppm of 1, so the solution moves x_a by far less than that matters.
//!
//! Where every pair is one line, the solution is linear in T, and solving at the group's first
//! and last times gives each trace's joint line exactly. Where some pairs are piecewise, the grid
//! also holds every segment boundary, between which everything is linear again. A group whose
//! pairs form a tree (two traces, a chain, a star) has nothing to average: its path maps are
//! kept, exactly as `--reduction path` gives them.

use crate::estimate::hull::Point;
use crate::estimate::reduction::{Edge, Reduction};
use crate::model::{Affine, PiecewiseMap};

/// How the pair maps become one map per trace (`--reduction`: the variants' first lines are its
/// help).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReductionChoice {
    /// Weighted least squares over every usable pair of a group: loops of pairs average out
    /// each pair's error.
    ///
    /// The default.
    #[default]
    Joint,
    /// Pair maps composed along one shortest accuracy-weighted path from the reference.
    Path,
}

impl ReductionChoice {
    /// The name used on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            ReductionChoice::Joint => "joint",
            ReductionChoice::Path => "path",
        }
    }
}

/// What the middle of a one-segment pair's corridor says: a line through the centre of its two
/// half hulls, fitted over the span both cover. The bisector rests on the four points that fix
/// the limit lines, near the ends of the trace; the centre line uses every hull vertex, so it
/// scatters less, and its scatter tells how much to trust the pair.
#[derive(Clone, Copy, Debug)]
pub struct Centre {
    /// The centre line, a's clock → b's.
    pub line: Affine,
    /// RMS distance of the hulls' centre from the line (ns).
    pub scatter_ns: f64,
    /// Width of the pair's feasible drifts (maximum − minimum limit slope).
    pub drift_range: f64,
}

/// One pair as the joint estimate sees it: its map, how far it may err, and where it has data.
#[derive(Clone, Debug)]
pub struct JointEdge<'a> {
    /// The pair's traces and map (a → b on the estimation clocks).
    pub edge: &'a Edge,
    /// Its uncertainty (ns): the least squares weigh it by 1/σ².
    pub sigma_ns: f64,
    /// First and last time of its messages on a's clock.
    pub span: (i64, i64),
    /// The centre line of a one-segment pair's hulls, with its scatter and the uncertainty of
    /// the pair's drift.
    pub centre: Option<Centre>,
}

/// Replaces the path maps of every group whose pairs hold a loop with the joint estimate; returns,
/// per trace, how many pairs informed its map (0 where the path maps were kept).
pub fn refine(red: &mut Reduction, edges: &[JointEdge<'_>]) -> Vec<usize> {
    let traces = red.traces.len();
    let mut informed = vec![0usize; traces];
    // Members and pairs by group, in one pass each (a text file may declare thousands of traces
    // that no message names, each a group of its own).
    let mut members_of: Vec<Vec<usize>> = vec![Vec::new(); red.groups as usize];
    for (k, t) in red.traces.iter().enumerate() {
        if t.synchronized {
            members_of[t.group as usize].push(k);
        }
    }
    let mut edges_of: Vec<Vec<&JointEdge<'_>>> = vec![Vec::new(); red.groups as usize];
    for e in edges {
        let (a, b) = (e.edge.a as usize, e.edge.b as usize);
        if a != b && red.traces[a].group == red.traces[b].group {
            edges_of[red.traces[a].group as usize].push(e);
        }
    }
    for (members, in_group) in members_of.into_iter().zip(edges_of) {
        if members.len() < 3 || in_group.len() < members.len() {
            continue; // a tree (or less): the path maps are the only consistent answer
        }
        let reference = red.traces[members[0]].reference as usize;
        if let Some(maps) = solve_group(red, &members, reference, &in_group) {
            for (k, map) in maps {
                red.traces[k].map = map;
                informed[k] = in_group.len();
            }
        }
    }
    informed
}

/// The joint maps of one group's traces (the reference's stays the identity).
fn solve_group(
    red: &Reduction,
    members: &[usize],
    reference: usize,
    edges: &[&JointEdge<'_>],
) -> Option<Vec<(usize, PiecewiseMap)>> {
    let grid = grid(red, edges);
    if grid.len() < 2 {
        return None;
    }
    let system = System::new(red, members, reference, edges);
    let centres: Option<Vec<Centre>> = edges.iter().map(|e| e.centre).collect();
    match centres {
        Some(centres) if edges.iter().all(|e| e.edge.map.is_linear()) => {
            system.linear(&centres, (grid[0] + grid[grid.len() - 1]) / 2.0)
        }
        _ => system.piecewise(&grid),
    }
}

/// A group's unknowns and pairs.
struct System<'a, 'b> {
    edges: &'a [&'a JointEdge<'b>],
    /// Unknown number of each trace (`usize::MAX` for the reference and other groups).
    index: Vec<usize>,
    /// The unknowns' traces.
    unknowns: Vec<usize>,
    /// Path maps inverted: reference time → each trace's clock.
    inverse: Vec<Option<PiecewiseMap>>,
    /// Path maps' slopes at the group's middle, for the drift problem.
    path_drift: Vec<f64>,
}

impl<'a, 'b> System<'a, 'b> {
    fn new(
        red: &Reduction,
        members: &[usize],
        reference: usize,
        edges: &'a [&'a JointEdge<'b>],
    ) -> Self {
        let mut index = vec![usize::MAX; red.traces.len()];
        let unknowns: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&k| k != reference)
            .collect();
        for (i, &k) in unknowns.iter().enumerate() {
            index[k] = i;
        }
        let inverse = (0..red.traces.len())
            .map(|k| (index[k] != usize::MAX).then(|| red.traces[k].map.inverse()))
            .collect();
        let path_drift = (0..red.traces.len())
            .map(|k| red.traces[k].map.pieces()[0].line.drift)
            .collect();
        System {
            edges,
            index,
            unknowns,
            inverse,
            path_drift,
        }
    }

    /// The path estimate of trace k's clock at reference time t.
    fn guess(&self, k: usize, t: f64) -> f64 {
        match &self.inverse[k] {
            Some(inv) => inv.apply(t),
            None => t,
        }
    }

    /// Every pair one line: offsets and drifts are solved apart, each with its own weights. The
    /// offsets at the group's middle `t_mid`, from the pairs' centre lines weighted by their
    /// scatter; the drifts (as logarithms, so that they compose by addition along any loop) from
    /// the pairs' bisector drifts weighted by the width of their feasible drifts.
    fn linear(&self, centres: &[Centre], t_mid: f64) -> Option<Vec<(usize, PiecewiseMap)>> {
        let offset_weight: Vec<f64> = centres
            .iter()
            .map(|c| 1.0 / c.scatter_ns.max(1.0).powi(2))
            .collect();
        let x = self.least_squares(&offset_weight, |e, k| {
            let xa = self.guess(e.edge.a as usize, t_mid);
            let xb = self.guess(e.edge.b as usize, t_mid);
            (centres[k].line.apply(xa) - xa) - (xb - xa)
        })?;
        let drift_weight: Vec<f64> = centres
            .iter()
            .map(|c| 1.0 / c.drift_range.max(1e-12).powi(2))
            .collect();
        // Unknowns: log drift of each trace's map minus the path map's.
        let g = self.least_squares(&drift_weight, |e, _| {
            let (a, b) = (e.edge.a as usize, e.edge.b as usize);
            // log F_a − log F_b = log s_ab  ⇒  (y_a − y_b) = log s_ab − (log P_a − log P_b).
            // Written as y_b − y_a = r:
            -(e.edge.line.drift.ln() - (self.path_drift[a].ln() - self.path_drift[b].ln()))
        })?;
        let mut out = Vec::with_capacity(self.unknowns.len());
        for (i, &k) in self.unknowns.iter().enumerate() {
            let xk = self.guess(k, t_mid) + x[i];
            let drift = (self.path_drift[k].ln() + g[i]).exp();
            out.push((
                k,
                PiecewiseMap::linear(Affine {
                    drift,
                    offset_ns: t_mid - drift * xk,
                }),
            ));
        }
        Some(out)
    }

    /// Some pair piecewise: the differences every pair's map gives, solved at every time of
    /// `grid`, joined into piecewise maps.
    fn piecewise(&self, grid: &[f64]) -> Option<Vec<(usize, PiecewiseMap)>> {
        let weight: Vec<f64> = self
            .edges
            .iter()
            .map(|e| 1.0 / e.sigma_ns.max(1.0).powi(2))
            .collect();
        let mut knots: Vec<Vec<(f64, f64)>> =
            vec![Vec::with_capacity(grid.len()); self.unknowns.len()];
        for &t in grid {
            let y = self.least_squares(&weight, |e, _| {
                let xa = self.guess(e.edge.a as usize, t);
                let xb = self.guess(e.edge.b as usize, t);
                (e.edge.map.apply(xa) - xa) - (xb - xa)
            })?;
            for (i, &k) in self.unknowns.iter().enumerate() {
                knots[i].push((self.guess(k, t) + y[i], t));
            }
        }
        let mut out = Vec::with_capacity(self.unknowns.len());
        for (i, &k) in self.unknowns.iter().enumerate() {
            let k_knots = &knots[i];
            if k_knots
                .windows(2)
                .any(|w| !(w[1].0 > w[0].0 && w[1].1 > w[0].1))
            {
                return None; // not increasing: keep the path maps rather than publish a broken map
            }
            out.push((k, PiecewiseMap::through_knots(k_knots, None)));
        }
        Some(out)
    }

    /// Weighted least squares of the differences `y_b − y_a ≈ r(pair)` with the reference's y
    /// fixed at 0: the unknowns' y.
    fn least_squares(
        &self,
        weight: &[f64],
        r: impl Fn(&JointEdge<'_>, usize) -> f64,
    ) -> Option<Vec<f64>> {
        let n = self.unknowns.len();
        let mut diag = vec![0.0; n];
        let mut rhs = vec![0.0; n];
        let mut links: Vec<(usize, usize, f64)> = Vec::with_capacity(self.edges.len());
        for (k, (e, &w)) in self.edges.iter().zip(weight).enumerate() {
            let (ia, ib) = (self.index[e.edge.a as usize], self.index[e.edge.b as usize]);
            let r = r(e, k);
            if ia != usize::MAX {
                diag[ia] += w;
                rhs[ia] -= w * r;
            }
            if ib != usize::MAX {
                diag[ib] += w;
                rhs[ib] += w * r;
            }
            if ia != usize::MAX && ib != usize::MAX {
                links.push((ia, ib, w));
            }
        }
        if diag.iter().any(|&d| d <= 0.0 || !d.is_finite()) || rhs.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let apply = |v: &[f64], out: &mut [f64]| {
            for i in 0..n {
                out[i] = diag[i] * v[i];
            }
            for &(i, j, w) in &links {
                out[i] -= w * v[j];
                out[j] -= w * v[i];
            }
        };
        conjugate_gradient(n, &apply, &rhs, &diag)
    }
}

/// The reference times to solve at: the group's first and last, and every segment boundary of a
/// piecewise pair, each mapped onto the reference through the path maps.
fn grid(red: &Reduction, edges: &[&JointEdge<'_>]) -> Vec<f64> {
    let to_ref = |trace: u32, t: f64| red.traces[trace as usize].map.apply(t);
    let mut grid = Vec::new();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for e in edges {
        let a = e.edge.a;
        lo = lo.min(to_ref(a, e.span.0 as f64));
        hi = hi.max(to_ref(a, e.span.1 as f64));
        for p in e.edge.map.pieces().iter().skip(1) {
            grid.push(to_ref(a, p.start_ns));
        }
    }
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
        return Vec::new();
    }
    grid.retain(|&t| t > lo && t < hi);
    grid.push(lo);
    grid.push(hi);
    grid.sort_by(f64::total_cmp);
    // Boundaries closer than a microsecond add nothing but rounding.
    grid.dedup_by(|b, a| *b - *a < 1e3);
    grid
}

/// Solves `A y = b` for a symmetric positive definite `A` (given as a product) by Jacobi-
/// preconditioned conjugate gradients.
fn conjugate_gradient(
    n: usize,
    apply: &dyn Fn(&[f64], &mut [f64]),
    b: &[f64],
    diag: &[f64],
) -> Option<Vec<f64>> {
    let mut y = vec![0.0; n];
    let mut r = b.to_vec();
    let mut z: Vec<f64> = r.iter().zip(diag).map(|(r, d)| r / d).collect();
    let mut p = z.clone();
    let mut ap = vec![0.0; n];
    let mut rz: f64 = r.iter().zip(&z).map(|(a, b)| a * b).sum();
    let scale = b.iter().map(|v| v.abs()).fold(0.0, f64::max);
    if scale == 0.0 {
        return Some(y);
    }
    for _ in 0..(10 * n + 100) {
        if r.iter().map(|v| v.abs()).fold(0.0, f64::max) <= scale * 1e-14 {
            break;
        }
        apply(&p, &mut ap);
        let pap: f64 = p.iter().zip(&ap).map(|(a, b)| a * b).sum();
        if pap <= 0.0 || !pap.is_finite() {
            return None;
        }
        let alpha = rz / pap;
        for i in 0..n {
            y[i] += alpha * p[i];
            r[i] -= alpha * ap[i];
            z[i] = r[i] / diag[i];
        }
        let rz_next: f64 = r.iter().zip(&z).map(|(a, b)| a * b).sum();
        let beta = rz_next / rz;
        rz = rz_next;
        for i in 0..n {
            p[i] = z[i] + beta * p[i];
        }
    }
    Some(y)
}

/// The centre line of a pair's two half hulls over the span both cover (see [`Centre`]); None
/// where they do not overlap in time or a limit line is missing.
pub fn centre(lower: &[Point], upper: &[Point], drift_range: Option<f64>) -> Option<Centre> {
    let lo = lower.first()?.x.max(upper.first()?.x) as f64;
    let hi = lower.last()?.x.min(upper.last()?.x) as f64;
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    // Relative to the first sample, so that epoch-sized times keep their nanoseconds.
    let y0 = Chain::new(lower).at(lo)?;
    const SAMPLES: usize = 256;
    let xs: Vec<f64> = (0..=SAMPLES)
        .map(|i| lo + (hi - lo) * i as f64 / SAMPLES as f64)
        .collect();
    let (mut lower, mut upper) = (Chain::new(lower), Chain::new(upper));
    let ms: Vec<f64> = xs
        .iter()
        .map(|&x| Some((lower.at(x)? + upper.at(x)?) / 2.0 - y0))
        .collect::<Option<_>>()?;
    let k = xs.len() as f64;
    let mx = xs.iter().map(|x| x - lo).sum::<f64>() / k;
    let my = ms.iter().sum::<f64>() / k;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, m) in xs.iter().zip(&ms) {
        sxy += (x - lo - mx) * (m - my);
        sxx += (x - lo - mx) * (x - lo - mx);
    }
    let slope = sxy / sxx;
    let scatter = (xs
        .iter()
        .zip(&ms)
        .map(|(x, m)| (m - (my + slope * (x - lo - mx))).powi(2))
        .sum::<f64>()
        / k)
        .sqrt();
    let middle = lo + mx;
    Some(Centre {
        line: Affine {
            drift: slope,
            offset_ns: y0 + my - slope * middle,
        },
        scatter_ns: scatter,
        drift_range: drift_range?,
    })
}

/// A hull chain read at rising abscissae (the centre's samples): the vertex a sample falls
/// before is searched from the previous sample's, a few steps forward instead of a binary
/// search of the whole chain per sample. The vertex found, hence the value, is the same.
struct Chain<'a> {
    h: &'a [Point],
    /// No vertex before it lies at or after the abscissae still to come.
    from: usize,
}

impl<'a> Chain<'a> {
    /// Vertices stepped over one by one before the rest is bisected.
    const STEPS: usize = 8;

    fn new(h: &'a [Point]) -> Self {
        Chain { h, from: 0 }
    }

    /// The chain's value at `x`, inside its span; `x` at least the previous call's.
    fn at(&mut self, x: f64) -> Option<f64> {
        let h = self.h;
        let below = |p: &Point| (p.x as f64) < x;
        let mut i = self.from;
        let stop = (i + Self::STEPS).min(h.len());
        while i < stop && below(&h[i]) {
            i += 1;
        }
        if i == stop {
            i += h[i..].partition_point(below);
        }
        self.from = i;
        if i == 0 {
            return (h.first()?.x as f64 == x).then(|| h[0].y as f64);
        }
        let (p, q) = (&h[i - 1], h.get(i)?);
        let f = (x - p.x as f64) / (q.x - p.x) as f64;
        Some(p.y as f64 + f * (q.y - p.y) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain's value by a binary search of the whole chain, as each sample did before.
    fn searched(h: &[Point], x: f64) -> Option<f64> {
        let i = h.partition_point(|p| (p.x as f64) < x);
        if i == 0 {
            return (h.first()?.x as f64 == x).then(|| h[0].y as f64);
        }
        let (p, q) = (&h[i - 1], h.get(i)?);
        let f = (x - p.x as f64) / (q.x - p.x) as f64;
        Some(p.y as f64 + f * (q.y - p.y) as f64)
    }

    #[test]
    fn a_chain_read_forward_agrees_with_the_binary_search() {
        // Short and long chains, gaps of every size, epoch-sized times.
        for (n, gap) in [(1usize, 5i64), (2, 1), (9, 3), (40, 1_000), (300, 17)] {
            let h: Vec<Point> = (0..n as i64)
                .map(|i| Point::new(1_700_000_000_000_000_000 + i * gap + i * i, i * 7 - 3))
                .collect();
            let (first, last) = (h[0].x as f64, h[n - 1].x as f64);
            for samples in [1usize, 3, 256, 1000] {
                let mut chain = Chain::new(&h);
                for k in 0..=samples + 1 {
                    // From before the chain to past its end.
                    let x = first - 50.0 + (last - first + 100.0) * k as f64 / samples as f64;
                    let (a, b) = (chain.at(x), searched(&h, x));
                    assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "n {n}, x {x}");
                }
            }
        }
    }
}
