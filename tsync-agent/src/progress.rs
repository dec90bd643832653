//! The live progress line (only on a terminal): events written, rate, lost.
use std::{io::IsTerminal as _, sync::OnceLock, time::Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The line being shown, for [`suspend`].
static SHOWN: OnceLock<ProgressBar> = OnceLock::new();

/// Runs `f` (which writes to stderr: a log line) with the progress line cleared, then redraws it.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    match SHOWN.get() {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// A spinner line on stderr, or nothing when stderr is not a terminal (logs, tests, pipes).
pub struct Progress {
    bar: Option<ProgressBar>,
    last: Instant,
    last_events: u64,
}

impl Progress {
    pub fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            let _ = SHOWN.set(bar.clone());
            bar
        });
        Self {
            bar,
            last: Instant::now(),
            last_events: 0,
        }
    }

    /// Whether a line is shown at all.
    pub fn visible(&self) -> bool {
        self.bar.is_some()
    }

    /// Redraws with the current totals.
    pub fn update(&mut self, events: u64, lost: u64) {
        let Some(bar) = &self.bar else { return };
        let now = Instant::now();
        let secs = now.duration_since(self.last).as_secs_f64();
        let rate = if secs > 0.0 {
            (events - self.last_events) as f64 / secs
        } else {
            0.0
        };
        self.last = now;
        self.last_events = events;
        bar.set_message(format!("{events} events, {rate:.0} events/s, {lost} lost"));
        bar.tick();
    }

    /// Removes the line before the summary is printed.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
