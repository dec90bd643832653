//! The corridor between the two half hulls: its limit lines, the estimate inside it, and what to say
//! when there is no corridor.
//!
//! A line t_b = a0 + a1·t_a is consistent with the messages iff it passes on or below every lower-hull
//! point l (a→b messages) and on or above every upper-hull point u (b→a messages). Eliminating a0
//! (Fourier–Motzkin) leaves one constraint per pair (u, l): a1·(l.x − u.x) ≤ l.y − u.y. So
//! - the maximum slope is min{ slope(u→l) : u.x < l.x } (touches a u on the left, an l on the right),
//! - the minimum slope is max{ slope(l→u) : l.x < u.x },
//! - a pair with u.x = l.x needs u.y ≤ l.y,
//!
//! and the corridor is empty iff these conflict. Every comparison is an exact i128 cross product;
//! floating point only turns the chosen lines into factors.

use crate::estimate::hull::{Point, cross};
use crate::model::Affine;

/// How good the estimate of a pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    /// Both limit lines exist: the estimate lies between them, no message inversion is possible,
    /// and the accuracy interval is guaranteed.
    Accurate,
    /// The half hulls cross: no line separates them (clocks not linear, or misattributed events).
    /// The estimate is Ashton's minimum-error line, without any guarantee.
    Approximate,
    /// One limit line is unbounded (e.g. every b→a message came after every a→b one).
    Incomplete,
    /// No messages in at least one direction.
    Absent,
    /// The computation could not produce a line at all.
    Fail,
}

impl Quality {
    /// Lowercase name, as printed in reports and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Quality::Accurate => "accurate",
            Quality::Approximate => "approximate",
            Quality::Incomplete => "incomplete",
            Quality::Absent => "absent",
            Quality::Fail => "fail",
        }
    }
}

/// A line through two message points (p.x < q.x), kept exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExactLine {
    pub p: Point,
    pub q: Point,
}

impl ExactLine {
    /// Orders the two points by x. They must have different x.
    pub fn through(a: Point, b: Point) -> Self {
        debug_assert!(a.x != b.x);
        if a.x < b.x {
            ExactLine { p: a, q: b }
        } else {
            ExactLine { p: b, q: a }
        }
    }

    fn dx(&self) -> i128 {
        self.q.x as i128 - self.p.x as i128
    }

    fn dy(&self) -> i128 {
        self.q.y as i128 - self.p.y as i128
    }

    /// Slope comparison: is self's slope < other's? Exact.
    pub fn slope_lt(&self, other: &ExactLine) -> bool {
        self.dy() * other.dx() < other.dy() * self.dx()
    }

    /// Slope as f64 (correctly rounded from the exact ratio up to one extra rounding).
    pub fn a1(&self) -> f64 {
        exact_f64(self.dy()) / exact_f64(self.dx())
    }

    /// Intercept at t_a = 0, as f64.
    pub fn a0(&self) -> f64 {
        // (p.y·q.x − q.y·p.x) / dx; both products are of non-negative values below 2^126.
        let num = self.p.y as i128 * self.q.x as i128 - self.q.y as i128 * self.p.x as i128;
        ratio(num, self.dx())
    }

    pub fn affine(&self) -> Affine {
        Affine {
            offset_ns: self.a0(),
            drift: self.a1(),
        }
    }

    /// Value at abscissa t, minus y0, as f64: computed exactly in integers then rounded once or
    /// twice, so that values near 10^18 ns keep sub-nanosecond precision relative to y0.
    pub fn value_minus(&self, t: i64, y0: i64) -> f64 {
        let num = self.dy() * (t as i128 - self.p.x as i128);
        let dx = self.dx();
        let (q, r) = div_rem_euclid(num, dx);
        exact_f64(self.p.y as i128 - y0 as i128 + q) + exact_f64(r) / exact_f64(dx)
    }

    /// Intercept in a frame whose origin is (x0, y0), as f64.
    fn local_a0(&self, x0: i64, y0: i64) -> f64 {
        self.value_minus(x0, y0)
    }
}

fn ratio(num: i128, den: i128) -> f64 {
    let (q, r) = div_rem_euclid(num, den);
    exact_f64(q) + exact_f64(r) / exact_f64(den)
}

/// `v` rounded to the nearest f64, as `v as f64` rounds it, through the machine's 64-bit
/// conversion where `v` fits (nearly always: differences of times): the 128-bit one is a
/// library call of some 45 instructions, and the accuracy curves and the segments' residuals
/// convert hundreds of thousands of values. Both round the same integer to nearest, ties to
/// even, so the result is the same.
#[inline]
pub(crate) fn exact_f64(v: i128) -> f64 {
    match i64::try_from(v) {
        Ok(narrow) => narrow as f64,
        Err(_) => wide_f64(v),
    }
}

/// `v as f64` out of line: inlined, the compiler sees that both of [`exact_f64`]'s branches
/// give `v as f64` and keeps only the library call for both.
#[cold]
#[inline(never)]
fn wide_f64(v: i128) -> f64 {
    v as f64
}

/// `(num.div_euclid(den), num.rem_euclid(den))`, in 64 bits where both fit and `den` is
/// positive (no overflow then): the same integers, without the 128-bit division's library call.
#[inline]
fn div_rem_euclid(num: i128, den: i128) -> (i128, i128) {
    match (i64::try_from(num), i64::try_from(den)) {
        (Ok(n), Ok(d)) if d > 0 => (n.div_euclid(d).into(), n.rem_euclid(d).into()),
        _ => (num.div_euclid(den), num.rem_euclid(den)),
    }
}

/// What the two hulls say about the pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Corridor {
    pub quality: Quality,
    /// Maximum-slope line (touches an upper point on the left, a lower point on the right).
    pub maxslope: Option<ExactLine>,
    /// Minimum-slope line.
    pub minslope: Option<ExactLine>,
    /// The estimate: Haddad's bisector (accurate) or Ashton's line (approximate).
    pub estimate: Option<Affine>,
    /// For `approximate`: Ashton's error, the sum of vertical distances of the hull points on the
    /// wrong side of the chosen line (ns).
    pub approx_error_ns: Option<f64>,
}

/// Computes limit lines, quality and estimate from the lower hull (a→b) and the upper hull (b→a).
pub fn analyze(lower: &[Point], upper: &[Point]) -> Corridor {
    if lower.is_empty() || upper.is_empty() {
        return Corridor {
            quality: Quality::Absent,
            maxslope: None,
            minslope: None,
            estimate: None,
            approx_error_ns: None,
        };
    }
    let mut maxslope: Option<ExactLine> = None;
    let mut minslope: Option<ExactLine> = None;
    let mut same_x_conflict = false;
    for &u in upper {
        for &l in lower {
            if u.x < l.x {
                let line = ExactLine { p: u, q: l };
                if maxslope.is_none_or(|m| line.slope_lt(&m)) {
                    maxslope = Some(line);
                }
            } else if l.x < u.x {
                let line = ExactLine { p: l, q: u };
                if minslope.is_none_or(|m| m.slope_lt(&line)) {
                    minslope = Some(line);
                }
            } else if u.y > l.y {
                same_x_conflict = true;
            }
        }
    }
    let feasible = !same_x_conflict
        && match (&maxslope, &minslope) {
            (Some(max), Some(min)) => !max.slope_lt(min),
            _ => true,
        };
    if !feasible {
        return approximate(lower, upper);
    }
    match (maxslope, minslope) {
        (Some(max), Some(min)) => Corridor {
            quality: Quality::Accurate,
            estimate: Some(bisector(&min, &max)),
            maxslope: Some(max),
            minslope: Some(min),
            approx_error_ns: None,
        },
        (None, None) => Corridor {
            quality: Quality::Absent,
            maxslope,
            minslope,
            estimate: None,
            approx_error_ns: None,
        },
        _ => Corridor {
            quality: Quality::Incomplete,
            maxslope,
            minslope,
            estimate: None,
            approx_error_ns: None,
        },
    }
}

/// Haddad's bisector of the two limit lines (Poirier eqs. 2.28 and 2.30), computed in a frame
/// centred on the lines' intersection region so that nanosecond offsets near 10^18 keep their
/// precision; the bisector commutes with translations.
pub fn bisector(min: &ExactLine, max: &ExactLine) -> Affine {
    let x0 = max.p.x;
    let y0 = max.p.y;
    let b_min = min.a1();
    let b_max = max.a1();
    // Offsets in the local frame: α_min belongs to the max-slope line, α_max to the min-slope one.
    let a_min = max.local_a0(x0, y0);
    let a_max = min.local_a0(x0, y0);
    let sum = b_min + b_max;
    let b = if sum != 0.0 {
        (b_min * b_max - 1.0
            + (1.0 + b_min * b_min * b_max * b_max + b_max * b_max + b_min * b_min).sqrt())
            / sum
    } else {
        ((b_min.atan() + b_max.atan()) / 2.0).tan()
    };
    let den_max = b * b_max + 1.0;
    let a_local = if den_max != 0.0 {
        a_max - (a_max - a_min) / 2.0 * (b * b + 1.0) / den_max
    } else {
        a_min + (a_max - a_min) / 2.0 * (b * b + 1.0) / (b * b_min + 1.0)
    };
    // t_b − y0 = a_local + b (t_a − x0)
    Affine {
        offset_ns: (y0 as f64 - b * x0 as f64) + a_local,
        drift: b,
    }
}

/// Ashton's fallback when the hulls cross: among the lines through one lower-hull and one
/// upper-hull point, the one with the least sum of vertical distances to the hull points on its
/// wrong side. O(|L|·|U|·(|L|+|U|)), only ever run on hulls, which are small. The first minimum in
/// (lower, upper) order wins, as in the reference implementation.
fn approximate(lower: &[Point], upper: &[Point]) -> Corridor {
    let mut best: Option<(f64, ExactLine)> = None;
    for &l in lower {
        for &u in upper {
            if l.x == u.x {
                continue;
            }
            let line = ExactLine::through(l, u);
            let dx = line.dx() as f64;
            let mut error = 0.0f64;
            for &p in lower {
                let c = cross(line.p, line.q, p);
                if c < 0 {
                    error += (-c) as f64 / dx;
                }
            }
            for &p in upper {
                let c = cross(line.p, line.q, p);
                if c > 0 {
                    error += c as f64 / dx;
                }
            }
            if best.is_none_or(|(e, _)| error < e) {
                best = Some((error, line));
            }
        }
    }
    match best {
        Some((error, line)) => Corridor {
            quality: Quality::Approximate,
            maxslope: None,
            minslope: None,
            estimate: Some(line.affine()),
            approx_error_ns: Some(error),
        },
        None => Corridor {
            quality: Quality::Fail,
            maxslope: None,
            minslope: None,
            estimate: None,
            approx_error_ns: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values around the edges of the 64-bit range, where the two conversions part ways.
    fn edges() -> Vec<i128> {
        let mut v = vec![0, 1, -1, 7, -7, 1 << 53, (1 << 53) + 1, -(1 << 53) - 1];
        for base in [
            i64::MAX as i128,
            i64::MIN as i128,
            1i128 << 100,
            -(1i128 << 100),
        ] {
            v.extend((-3..=3).map(|d| base + d));
        }
        v.extend([
            i128::MAX,
            i128::MIN,
            1_700_000_000_123_456_789,
            -987_654_321_987,
        ]);
        v
    }

    #[test]
    fn exact_f64_rounds_as_the_128_bit_conversion() {
        for v in edges() {
            assert_eq!(exact_f64(v).to_bits(), (v as f64).to_bits(), "{v}");
        }
    }

    #[test]
    fn div_rem_euclid_is_the_128_bit_division() {
        let dens = [1i128, 2, 3, 1_000_000_007, -5, i64::MAX as i128, 1 << 70];
        for num in edges().into_iter().filter(|&n| n != i128::MIN) {
            for den in dens {
                assert_eq!(
                    div_rem_euclid(num, den),
                    (num.div_euclid(den), num.rem_euclid(den)),
                    "{num} / {den}"
                );
            }
        }
    }
}
