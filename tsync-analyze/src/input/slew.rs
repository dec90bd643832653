//! INTERIM (replaced by the agent branch's module): chord through bracket midpoints.
use tsync_common::format::ClockSample;

use crate::model::PiecewiseMap;

/// Slew correction.
pub struct SlewCorrection {
    /// Recorded → raw.
    pub to_raw: PiecewiseMap,
    /// Bound.
    pub bound_ns: f64,
}

/// Why not.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SlewUnavailable(String);

impl SlewCorrection {
    /// From samples.
    pub fn from_samples(samples: &[ClockSample], bracketed: bool) -> Result<Self, SlewUnavailable> {
        if !bracketed {
            return Err(SlewUnavailable("version 1 samples".into()));
        }
        if samples.len() < 2 {
            return Err(SlewUnavailable("fewer than 2 samples".into()));
        }
        let knots: Vec<(f64, f64)> = samples
            .iter()
            .map(|s| {
                (
                    (s.monotonic_ns as f64 + s.monotonic_after_ns as f64) / 2.0,
                    s.monotonic_raw_ns as f64,
                )
            })
            .collect();
        let bound = samples.iter().map(|s| s.bracket_ns()).max().unwrap_or(0) as f64;
        Ok(SlewCorrection {
            to_raw: PiecewiseMap::through_knots(&knots, None),
            bound_ns: bound,
        })
    }
}
