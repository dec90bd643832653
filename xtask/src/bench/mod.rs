//! `cargo xtask bench`: every benchmark, and one Markdown report with the machine they ran on.
//!
//! `cargo xtask bench capture`, `analyze`, `apply`, `merge`, `spans` and `spans-adjuster` run one
//! benchmark each; with no subcommand, all run and their tables go into
//! `target/bench/report.md`, after a line that
//! says which machine, kernel and commit produced them, and before the simulator's accuracy
//! figures (which are not speeds, but belong to the same "how good is it" report).

use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use tsync_sim::{ClockKind, SimConfig, check, simulate};

use crate::util::{cargo, defaults, workspace_root};

pub mod analyze;
pub mod apply;
pub mod capture;
mod merge;
pub mod mesh;
pub mod spans;
mod spans_adjuster;

// `analyze` reaches it here.
use tsync_lab::bench::machine;

/// The benchmarks.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    which: Option<Which>,
}

#[derive(Subcommand)]
enum Which {
    /// Analyzer throughput and peak memory on generated text and trace-file inputs.
    Analyze(analyze::Args),
    /// Capture overhead: iperf3 between two network namespaces, with and without agents.
    Capture(capture::Args),
    /// Network-wide estimation on synthetic meshes: path against joint, against the truth.
    Mesh(mesh::Args),
    /// `tsync-analyze apply` throughput on a large application log (JSON Lines, CSV).
    Apply(apply::Args),
    /// `tsync-analyze merge` of three nodes' applied logs, beside GNU `sort -m`.
    Merge(merge::Args),
    /// Reading OpenTelemetry span files (OTLP/JSON, protobuf): spans per second (criterion).
    Spans(spans::Args),
    /// Spans corrected from themselves: tsync beside a reimplementation of Jaeger's clock-skew
    /// adjuster's rule, on the same OpenTelemetry SDK spans, against the truth.
    SpansAdjuster(spans_adjuster::Args),
}

impl Args {
    pub fn run(self) -> Result<()> {
        match self.which {
            Some(Which::Analyze(args)) => args.run(),
            Some(Which::Capture(args)) => args.run(),
            Some(Which::Mesh(args)) => args.run(),
            Some(Which::Apply(args)) => args.run(),
            Some(Which::Merge(args)) => args.run(),
            Some(Which::Spans(args)) => args.run(),
            Some(Which::SpansAdjuster(args)) => args.run(),
            None => all(),
        }
    }
}

/// Runs every benchmark and the simulator's accuracy check, and writes the combined report.
fn all() -> Result<()> {
    if cfg!(debug_assertions) {
        // The analyzer benchmark generates 10⁷ messages: that needs optimized code.
        return rerun_in_release();
    }
    let root = workspace_root();
    defaults::<capture::Args>()?.run()?;
    defaults::<analyze::Args>()?.run()?;
    defaults::<apply::Args>()?.run()?;
    defaults::<merge::Args>()?.run()?;
    defaults::<spans::Args>()?.run()?;
    defaults::<spans_adjuster::Args>()?.run()?;
    let capture = read_table(&root.join("target/bench/capture.md"))?;
    let analyze = read_table(&root.join("target/bench/analyze.md"))?;
    let apply = read_table(&root.join("target/bench/apply.md"))?;
    let merge = read_table(&root.join("target/bench/merge.md"))?;
    let spans = read_table(&root.join("target/bench/spans.md"))?;
    let spans_adjuster = read_table(&root.join("target/bench/spans-adjuster.md"))?;
    let accuracy = accuracy()?;
    let report = format!(
        "# tsync benchmarks\n\n\
         Machine: {}.\n\
         Commit: {}. Every ratio compares figures measured in the same run.\n\n\
         {capture}\n\n\
         {analyze}\n\n\
         {apply}\n\n\
         {merge}\n\n\
         {spans}\n\n\
         {spans_adjuster}\n\n\
         ## Accuracy on simulated clocks (`cargo xtask simulate --check`)\n\n\
         4 nodes, 50 exchanges/s per connection, one-way delays ≥ 30 µs (±5 µs \
         asymmetry) plus an exponential tail of mean 20 µs; offsets up to ±50 ms, drifts up to \
         ±100 ppm; sim-0's crystal is true and sim-0 is the reference. Linear clocks over 60 s; \
         slewed (a chrony-like daemon), wandering (4 ppm/h) and disciplined (both) clocks over \
         30 min, where the slewing is undone from the clock samples and the wander followed by \
         piecewise maps.\n\n\
         {accuracy}",
        machine::describe(),
        commit(),
    );
    let path = root.join("target/bench/report.md");
    std::fs::write(&path, &report).with_context(|| format!("cannot write {}", path.display()))?;
    println!("{report}");
    eprintln!("bench: report written to {}", path.display());
    Ok(())
}

/// The simulator's accuracy table for each kind of clock, both algorithms.
fn accuracy() -> Result<String> {
    let mut out = String::new();
    for clock in [
        ClockKind::Linear,
        ClockKind::Slewed,
        ClockKind::Curved,
        ClockKind::Disciplined,
    ] {
        let mut config = SimConfig {
            clock,
            ..SimConfig::default()
        };
        if clock != ClockKind::Linear {
            config.duration = 1800.0;
            config.wander_ppm_per_hour = 4.0;
        }
        let dir = workspace_root().join(format!("target/bench/simulate-{clock:?}"));
        let truth = simulate(&config, &dir)?;
        out.push_str(&format!(
            "### {clock:?} clocks ({} messages)\n\n{}\n",
            truth.messages,
            check::table(&check::measure_both(&truth)?)
        ));
    }
    Ok(out)
}

fn read_table(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// The commit the benchmarks ran on (with "+changes" when the tree is dirty).
fn commit() -> String {
    let root = workspace_root();
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(&root)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let dirty = git(&["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    format!(
        "{head}{}",
        if dirty {
            " (+ uncommitted changes)"
        } else {
            ""
        }
    )
}

/// Runs the same xtask command again from a release build.
pub fn rerun_in_release() -> Result<()> {
    let status = cargo()
        .args(["run", "--quiet", "--release", "-p", "xtask", "--"])
        .args(std::env::args_os().skip(1))
        .status()?;
    if !status.success() {
        bail!("the release build of the benchmark failed");
    }
    Ok(())
}
