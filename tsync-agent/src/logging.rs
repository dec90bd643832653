//! The agent's log: its own diagnostics and the eBPF programs' messages (forwarded by aya-log's
//! `EbpfLogger`), through the `log` crate to stderr, one line each:
//! `tsync-agent: LEVEL: [TARGET] message`.
//!
//! Warnings are shown by default, `-v` adds info, `-vv` debug, `-vvv` trace. `RUST_LOG`, when set,
//! takes env_logger's directives on top (`RUST_LOG=debug`, `RUST_LOG=tsync_ebpf=info`). The
//! programs' own level filter (`AYA_LOG_LEVEL`) is set from the result before loading, so a
//! message nobody would see is not even built in the kernel.
use log::{Level, LevelFilter, Log, Metadata, Record};

use crate::progress;

/// Level shown for `-v` given `count` times.
fn level_for(count: u8) -> LevelFilter {
    match count {
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// Installs the logger; `verbose` is the number of `-v` flags.
pub fn init(verbose: u8) {
    let mut builder = env_logger::Builder::new();
    builder
        .filter_level(level_for(verbose))
        .format(|out, record| {
            use std::io::Write as _;
            let level = match record.level() {
                Level::Error => "error",
                Level::Warn => "warning",
                Level::Info => "info",
                Level::Debug => "debug",
                Level::Trace => "trace",
            };
            writeln!(
                out,
                "tsync-agent: {level}: [{}] {}",
                record.target(),
                record.args()
            )
        });
    if let Ok(directives) = std::env::var("RUST_LOG")
        && !directives.trim().is_empty()
    {
        builder.parse_filters(&directives);
    }
    let logger = builder.build();
    let max = logger.filter();
    // Only fails if a logger is installed already, which leaves that one in place.
    if log::set_boxed_logger(Box::new(Stderr(logger))).is_ok() {
        log::set_max_level(max);
    }
}

/// aya-log's level filter for the eBPF programs (`AYA_LOG_LEVEL`): the most verbose level any
/// directive lets through (aya-log's levels are 1 = error … 5 = trace, 0 = off).
pub fn ebpf_level() -> u8 {
    log::max_level() as u8
}

/// env_logger's logger, with the progress line (if any) cleared while a line is written.
struct Stderr(env_logger::Logger);

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if self.0.matches(record) {
            progress::suspend(|| self.0.log(record));
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_v_shows_one_level_more() {
        assert_eq!(level_for(0), LevelFilter::Warn);
        assert_eq!(level_for(1), LevelFilter::Info);
        assert_eq!(level_for(2), LevelFilter::Debug);
        assert_eq!(level_for(9), LevelFilter::Trace);
    }

    #[test]
    fn ebpf_levels_follow_aya_log() {
        // aya-log-common: Error = 1, Warn, Info, Debug, Trace; LevelFilter: Off = 0, Error = 1, …
        assert_eq!(LevelFilter::Off as u8, 0);
        assert_eq!(LevelFilter::Warn as u8, aya_log::Level::Warn as u8);
        assert_eq!(LevelFilter::Trace as u8, aya_log::Level::Trace as u8);
    }
}
