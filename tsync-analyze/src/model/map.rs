//! The affine clock map: how one clock's time reads on another (a pair's estimate, a limit line,
//! a trace's correction onto its reference). Every line in the analyzer is one.

/// An affine clock map `t_to = offset_ns + drift · t_from` (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Affine {
    /// The map's value at `t_from = 0`, ns.
    pub offset_ns: f64,
    /// The rate of `t_to` per unit of `t_from` (1 + drift in ppm · 10⁻⁶).
    pub drift: f64,
}

impl Affine {
    /// The map that leaves every time unchanged (offset 0, rate 1).
    pub const IDENTITY: Affine = Affine {
        offset_ns: 0.0,
        drift: 1.0,
    };

    /// Maps a time.
    #[inline]
    pub fn apply(&self, t_ns: f64) -> f64 {
        self.offset_ns + self.drift * t_ns
    }

    /// The inverse map (t_from from t_to).
    pub fn inverse(&self) -> Affine {
        Affine {
            offset_ns: -self.offset_ns / self.drift,
            drift: 1.0 / self.drift,
        }
    }

    /// `self ∘ inner`: first `inner`, then `self`.
    pub fn compose(&self, inner: &Affine) -> Affine {
        Affine {
            offset_ns: self.drift * inner.offset_ns + self.offset_ns,
            drift: self.drift * inner.drift,
        }
    }
}
