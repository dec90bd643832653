//! `cargo xtask test`: the project's test command (README, CI): setup, fmt, clippy, the
//! workspace's tests, a short run of every fuzz target, then the end-to-end demo with random skews
//! (real kernel, real traffic, every figure checked against the injected truth).
use std::process::Command;

use anyhow::Result;

use crate::setup::{run, run_setup};

#[derive(clap::Args)]
pub struct Args {
    /// Do not run setup first.
    #[arg(long)]
    no_setup: bool,
    /// Skip the end-to-end demo (it needs root and takes about a minute plus a release build).
    #[arg(long)]
    no_demo: bool,
    /// Seconds of fuzzing per fuzz target after the tests, as `cargo xtask fuzz` does (0: skip).
    #[arg(long, value_name = "SECS", default_value_t = 15)]
    fuzz_seconds: u64,
    /// Extra arguments passed to `cargo test` (after `--`).
    #[arg(last = true)]
    test_args: Vec<String>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if !self.no_setup {
            run_setup(true)?;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        eprintln!("test: cargo fmt --all --check");
        run(Command::new(&cargo).args(["fmt", "--all", "--check"]))?;
        eprintln!("test: cargo clippy --workspace --all-targets -- -D warnings");
        run(Command::new(&cargo).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
        eprintln!("test: cargo test --workspace");
        run(Command::new(&cargo)
            .args(["test", "--workspace"])
            .args(&self.test_args))?;
        if self.fuzz_seconds > 0 {
            eprintln!(
                "test: cargo xtask fuzz --seconds {} (every target)",
                self.fuzz_seconds
            );
            crate::fuzz::run_targets(crate::fuzz::TARGETS, self.fuzz_seconds)?;
        }
        if self.no_demo {
            return Ok(());
        }
        eprintln!("test: cargo xtask demo (random skews)");
        crate::defaults::<crate::demo::DemoArgs>()?.run()
    }
}
