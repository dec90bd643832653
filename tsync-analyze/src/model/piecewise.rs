//! Piecewise-linear clock maps: what a real clock needs once one line no longer fits it (NTP
//! slewing undone from the clock samples, crystal wander over hours, a pair synchronized segment
//! by segment), and what composing such maps along a path of traces gives.
//!
//! A map is a list of pieces in time order. A piece applies from its `start_ns` to the next
//! piece's; the first one also applies before its start, the last one after. Maps built here are
//! continuous (each piece meets the next at its start) and strictly increasing; [`apply`] is what
//! every command uses, so the list is the complete map.
//!
//! [`apply`]: PiecewiseMap::apply

use crate::model::Affine;

/// One piece: `t_to = drift · t_from + offset_ns` from `start_ns` (on the `t_from` clock) on.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Piece {
    /// Where the piece starts, on the clock the map reads.
    pub start_ns: f64,
    /// The piece's line.
    #[serde(flatten)]
    pub line: Affine,
}

/// A continuous, strictly increasing piecewise-linear clock map; one piece for a linear clock.
#[derive(Clone, Debug, PartialEq)]
pub struct PiecewiseMap {
    /// Never empty, sorted by `start_ns`.
    pieces: Vec<Piece>,
}

impl From<Affine> for PiecewiseMap {
    fn from(line: Affine) -> Self {
        PiecewiseMap::linear(line)
    }
}

impl PiecewiseMap {
    /// The map that leaves every time unchanged.
    pub fn identity() -> Self {
        Self::linear(Affine::IDENTITY)
    }

    /// A map of one piece.
    pub fn linear(line: Affine) -> Self {
        PiecewiseMap {
            pieces: vec![Piece {
                start_ns: f64::NEG_INFINITY,
                line,
            }],
        }
    }

    /// Pieces in order (the first one's `start_ns` is −∞ for a map made with
    /// [`linear`](Self::linear)).
    pub fn from_pieces(mut pieces: Vec<Piece>) -> Self {
        assert!(!pieces.is_empty(), "a piecewise map has at least one piece");
        pieces.sort_by(|a, b| a.start_ns.total_cmp(&b.start_ns));
        PiecewiseMap { pieces }
    }

    /// The map through `knots` (x ascending, y strictly ascending), linear between them. Before
    /// the first knot the first piece continues; after the last one a piece of slope `last_drift`
    /// does, or the last chord continues (without `last_drift`, or when it is the last chord's
    /// slope: knots on one line give one piece). One knot gives one piece of slope `last_drift`
    /// (or 1).
    pub fn through_knots(knots: &[(f64, f64)], last_drift: Option<f64>) -> Self {
        assert!(!knots.is_empty(), "a map through knots needs at least one");
        let mut pieces: Vec<Piece> = knots
            .windows(2)
            .filter(|w| w[1].0 > w[0].0)
            .map(|w| {
                let drift = (w[1].1 - w[0].1) / (w[1].0 - w[0].0);
                Piece {
                    start_ns: w[0].0,
                    line: Affine {
                        drift,
                        offset_ns: w[0].1 - drift * w[0].0,
                    },
                }
            })
            .collect();
        let &(x, y) = knots.last().expect("not empty");
        let chord = pieces.last().map(|p| p.line.drift);
        // A last drift equal to the last chord's up to rounding (10⁻⁶ ppm) is the chord
        // continuing.
        let same = |d: f64, c: f64| (d - c).abs() <= 1e-12 * c.abs();
        match (last_drift, chord) {
            (None, Some(_)) => {}
            (Some(d), Some(c)) if same(d, c) => {}
            (d, _) => {
                let drift = d.unwrap_or(1.0);
                pieces.push(Piece {
                    start_ns: x,
                    line: Affine {
                        drift,
                        offset_ns: y - drift * x,
                    },
                });
            }
        }
        PiecewiseMap { pieces }.merged()
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// True for a map of one piece.
    pub fn is_linear(&self) -> bool {
        self.pieces.len() == 1
    }

    /// Index of the piece that applies at `t`.
    #[inline]
    pub fn piece_index(&self, t_ns: f64) -> usize {
        if self.pieces.len() == 1 {
            return 0;
        }
        self.pieces
            .partition_point(|p| p.start_ns <= t_ns)
            .saturating_sub(1)
    }

    /// The piece that applies at `t`.
    #[inline]
    pub fn piece_at(&self, t_ns: f64) -> &Piece {
        &self.pieces[self.piece_index(t_ns)]
    }

    /// Maps a time.
    #[inline]
    pub fn apply(&self, t_ns: f64) -> f64 {
        self.piece_at(t_ns).line.apply(t_ns)
    }

    /// One line for the whole map: the piece of a linear map, else the chord between the first
    /// and the last piece's starts (what a reader that takes one line gets).
    pub fn chord(&self) -> Affine {
        let starts: Vec<f64> = self
            .pieces
            .iter()
            .map(|p| p.start_ns)
            .filter(|s| s.is_finite())
            .collect();
        match (starts.first(), starts.last()) {
            (Some(&a), Some(&b)) if b > a => {
                let drift = (self.apply(b) - self.apply(a)) / (b - a);
                Affine {
                    drift,
                    offset_ns: self.apply(a) - drift * a,
                }
            }
            _ => self.pieces[0].line,
        }
    }

    /// [`apply`](Self::apply) for times that mostly follow each other: `hint` is the piece the
    /// previous time fell in, checked (and its successor) before any search.
    #[inline]
    pub fn apply_near(&self, t_ns: f64, hint: &mut usize) -> f64 {
        let p = &self.pieces;
        let fits = |i: usize| {
            i < p.len()
                && (i == 0 || p[i].start_ns <= t_ns)
                && p.get(i + 1).is_none_or(|n| t_ns < n.start_ns)
        };
        if !fits(*hint) {
            *hint = if fits(*hint + 1) {
                *hint + 1
            } else {
                self.piece_index(t_ns)
            };
        }
        p[*hint].line.apply(t_ns)
    }

    /// The inverse map (requires a strictly increasing map).
    pub fn inverse(&self) -> PiecewiseMap {
        let pieces = self
            .pieces
            .iter()
            .map(|p| Piece {
                start_ns: if p.start_ns.is_finite() {
                    p.line.apply(p.start_ns)
                } else {
                    p.start_ns
                },
                line: p.line.inverse(),
            })
            .collect();
        PiecewiseMap { pieces }
    }

    /// `self ∘ inner`: first `inner`, then `self`. Its pieces start where `inner`'s do and where
    /// `inner` reaches the start of one of `self`'s.
    pub fn compose(&self, inner: &PiecewiseMap) -> PiecewiseMap {
        if self.is_linear() && inner.is_linear() {
            return PiecewiseMap::linear(self.pieces[0].line.compose(&inner.pieces[0].line));
        }
        let back = inner.inverse();
        let mut starts: Vec<f64> = inner
            .pieces
            .iter()
            .map(|p| p.start_ns)
            .chain(self.pieces.iter().map(|p| {
                if p.start_ns.is_finite() {
                    back.apply(p.start_ns)
                } else {
                    f64::NEG_INFINITY
                }
            }))
            .collect();
        starts.sort_by(f64::total_cmp);
        starts.dedup();
        let pieces = starts
            .iter()
            .enumerate()
            .map(|(j, &start)| {
                // The pieces that apply inside [start, next): decided at an inner point, so that
                // rounding at the boundaries cannot pick a neighbour.
                let probe = match (start.is_finite(), starts.get(j + 1)) {
                    (true, Some(&next)) => start + (next - start) / 2.0,
                    (false, Some(&next)) => next - 1.0,
                    (true, None) => start + 1.0,
                    (false, None) => 0.0,
                };
                let inner_line = inner.piece_at(probe).line;
                let outer_line = self.piece_at(inner_line.apply(probe)).line;
                Piece {
                    start_ns: start,
                    line: outer_line.compose(&inner_line),
                }
            })
            .collect();
        PiecewiseMap { pieces }.merged()
    }

    /// The same map with consecutive pieces of identical lines joined.
    fn merged(mut self) -> Self {
        self.pieces.dedup_by(|next, prev| next.line == prev.line);
        self
    }

    /// True when every piece is increasing and each meets the next at its start to within
    /// `tolerance_ns`.
    pub fn is_continuous_and_increasing(&self, tolerance_ns: f64) -> bool {
        self.pieces.iter().all(|p| p.line.drift > 0.0)
            && self.pieces.windows(2).all(|w| {
                let t = w[1].start_ns;
                (w[0].line.apply(t) - w[1].line.apply(t)).abs() <= tolerance_ns.max(t.abs() * 1e-15)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn knots_map(knots: &[(f64, f64)]) -> PiecewiseMap {
        PiecewiseMap::through_knots(knots, None)
    }

    #[test]
    fn linear_map_is_its_line() {
        let line = Affine {
            offset_ns: 5.0,
            drift: 1.0001,
        };
        let m = PiecewiseMap::linear(line);
        assert!(m.is_linear());
        assert_eq!(m.apply(1e9), line.apply(1e9));
        assert_eq!(m.apply(-1e9), line.apply(-1e9));
        let c = m.compose(&PiecewiseMap::linear(line.inverse()));
        assert!(c.is_linear());
        assert!((c.apply(1e12) - 1e12).abs() < 1e-3);
    }

    #[test]
    fn knots_on_one_line_give_one_piece() {
        let m = knots_map(&[(0.0, 10.0), (100.0, 110.0), (200.0, 210.0)]);
        assert!(m.is_linear(), "{:?}", m.pieces());
        let m = PiecewiseMap::through_knots(&[(0.0, 10.0), (100.0, 110.0)], Some(1.0));
        assert!(m.is_linear(), "{:?}", m.pieces());
        let m = PiecewiseMap::through_knots(&[(0.0, 10.0), (100.0, 110.0)], Some(2.0));
        assert_eq!(m.pieces().len(), 2);
        assert_eq!(m.apply(200.0), 310.0);
    }

    #[test]
    fn knots_are_interpolated_and_extended() {
        let m = knots_map(&[(0.0, 10.0), (100.0, 110.0), (200.0, 230.0)]);
        assert_eq!(m.apply(50.0), 60.0);
        assert_eq!(m.apply(150.0), 170.0);
        assert_eq!(m.apply(-100.0), -90.0); // first chord continued
        assert_eq!(m.apply(300.0), 350.0); // last chord continued
        assert!(m.is_continuous_and_increasing(1e-9));
    }

    fn increasing_knots() -> impl Strategy<Value = Vec<(f64, f64)>> {
        prop::collection::vec((1.0f64..1e6, 0.5f64..2.0), 1..20).prop_map(|steps| {
            let (mut x, mut y) = (1e9, 3e9);
            let mut knots = vec![(x, y)];
            for (dx, rate) in steps {
                x += dx;
                y += dx * rate;
                knots.push((x, y));
            }
            knots
        })
    }

    proptest! {
        #[test]
        fn applying_near_a_hint_is_applying(knots in increasing_knots(), ts in prop::collection::vec(0.0f64..3e9, 1..50)) {
            let m = knots_map(&knots);
            let mut hint = 0;
            for t in ts {
                prop_assert_eq!(m.apply_near(t, &mut hint), m.apply(t));
            }
        }

        #[test]
        fn inverse_undoes_the_map(knots in increasing_knots(), t in 0.0f64..3e9) {
            let m = knots_map(&knots);
            prop_assert!(m.is_continuous_and_increasing(1e-6));
            let back = m.inverse().apply(m.apply(t));
            prop_assert!((back - t).abs() < 1e-4, "{} vs {}", back, t);
        }

        #[test]
        fn composition_is_applying_one_then_the_other(
            a in increasing_knots(),
            b in increasing_knots(),
            t in 0.0f64..3e9,
        ) {
            let inner = knots_map(&a);
            // Shift the outer map's knots to where the inner map's values are.
            let outer = knots_map(&b.iter().map(|&(x, y)| (x + 2e9, y)).collect::<Vec<_>>());
            let c = outer.compose(&inner);
            prop_assert!(c.is_continuous_and_increasing(1e-3));
            let want = outer.apply(inner.apply(t));
            prop_assert!((c.apply(t) - want).abs() < 1e-3, "{} vs {}", c.apply(t), want);
        }
    }
}
