//! A progress bar on stderr, only when stderr is a terminal and the input is large.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Inputs smaller than this finish before a bar would be useful.
const MIN_BYTES: u64 = 64 << 20;

/// Returns a bar for `total` bytes, or None when it should not be shown.
pub fn bar(total: u64) -> Option<ProgressBar> {
    if total < MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{spinner} reading {bytes}/{total_bytes} {wide_bar} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Some(pb)
}
