//! What the benchmarks share.

use criterion::Criterion;

/// The workspace builds plotters with its `ab_glyph` font backend (for tsync's own plots), so
/// criterion's report plots need the same registered font; without one, skip them.
pub fn config() -> Criterion {
    if tsync_analyze::output::plot::ensure_font().is_ok() {
        Criterion::default()
    } else {
        Criterion::default().without_plots()
    }
}
