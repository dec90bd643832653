//! The demo (`cargo xtask demo`): tsync end to end on real kernels, with known truth.
//!
//! Three "nodes" (network namespaces on one bridge) share the machine's clock. Each node's agent
//! is given a known `--clock-skew`, so the exact mapping between any two traces is known. Real TCP
//! traffic flows among the nodes while the agents record ([`record`]); then the analyzer
//! synchronizes the traces without ever reading the skews, and the demo checks every figure it
//! reports against the truth ([`checks`]): the recovered offset and drift, the error in the middle
//! of the trace, and whether the truth lies inside the accuracy interval the analyzer guarantees.
//! Each node also writes a small application log stamped with its own (skewed) clock;
//! `tsync-analyze apply` puts the logs on one timeline, and every logged request/response must
//! then read in causal order ([`app_logs`]).
//!
//! [`Demo::run`] is the list of steps, one small function each, so that a step is added in one
//! place.
pub mod app_logs;
pub mod checks;
pub mod record;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use tsync_analyze::SyncResult;

pub use crate::known_skew::skews;
use crate::{Binaries, Offloads};

/// Options of the demo.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoOptions {
    /// Number of nodes (node 0 keeps the true clock).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Seed of the injected skews; random when absent (printed, so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default: target/demo/<seed>).
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Largest error (µs) tolerated between recovered and true mapping, besides the interval.
    #[arg(long, default_value_t = 5.0)]
    pub max_error_us: f64,
    /// Segmentation and receive offloads on the veth links: `on` (TSO, GSO and GRO), `off`, or
    /// as the kernel sets them (`kernel`: veth's TSO and GSO on, GRO off).
    #[arg(long, value_enum, default_value = "kernel")]
    pub offloads: Offloads,
}

/// A demo about to run, its options checked.
pub struct Demo {
    options: DemoOptions,
    /// Where the default output (`demo/SEED/`) goes.
    target: PathBuf,
}

impl Demo {
    /// Checks the options and makes Ctrl-C a request to stop: Ctrl-C reaches the agents and
    /// traffic generators too (same process group), they stop, the run fails over, and the guards
    /// tear everything down. The demo itself must survive the signal to do that.
    pub fn new(options: DemoOptions, target: &Path) -> anyhow::Result<Demo> {
        crate::interrupt::catch()?;
        anyhow::ensure!(options.nodes >= 2, "the demo needs at least 2 nodes");
        Ok(Demo {
            options,
            target: target.to_owned(),
        })
    }

    /// Runs the demo with `binaries`; prints the report and `demo: N passed, M failed`, and fails
    /// if any check did.
    pub fn run(self, binaries: &Binaries) -> anyhow::Result<()> {
        let args = &self.options;
        let seed = args.seed.unwrap_or_else(rand::random);
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| self.target.join(format!("demo/{seed}")));
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        let skews = skews(args.nodes, seed);
        eprintln!("demo: seed {seed}, output in {}", out.display());
        let files = record::record(args, binaries, &skews, &out)?;
        let (sync, checks, inversions) = checks::analyze(&files, &skews)?;
        let by_digest = crate::matching::digest_only(&files)?;
        write_sync_json(&sync, &out)?;
        artifacts(&binaries.analyzer, &files, &out)?;
        let logs = app_logs::apply_and_merge(&binaries.analyzer, &files, args.nodes, &out)?;
        let report = checks::summary(args, seed, &out, &sync, &checks, inversions, &by_digest)
            + &logs.report();
        std::fs::write(out.join("report.md"), &report)?;
        println!("{report}");
        checks::verdict(args, &sync, &checks, inversions, &logs)
    }
}

/// The synchronization's JSON report (`sync.json`), as `tsync-analyze sync --json` writes it.
fn write_sync_json(sync: &SyncResult, out: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&tsync_analyze::output::report::to_json(sync))?;
    std::fs::write(out.join("sync.json"), json + "\n")?;
    Ok(())
}

/// Plots and a pcapng export of the corrected timeline, made by the analyzer's own commands.
fn artifacts(analyzer: &Path, files: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    let plot = out.join("plots");
    let pcapng = out.join("timeline.pcapng");
    let plots: [&OsStr; 5] = [
        "sync".as_ref(),
        "--reference".as_ref(),
        "node-0".as_ref(),
        "--plot".as_ref(),
        plot.as_ref(),
    ];
    run_analyzer(analyzer, "plots", &plots, files)?;
    let export: [&OsStr; 5] = [
        "export".as_ref(),
        "--format".as_ref(),
        "pcapng".as_ref(),
        "-o".as_ref(),
        pcapng.as_ref(),
    ];
    run_analyzer(analyzer, "pcapng export", &export, files)
}

/// Runs `tsync-analyze ARGS FILES`, failing with what it printed on stderr.
fn run_analyzer(
    analyzer: &Path,
    what: &str,
    args: &[impl AsRef<OsStr>],
    files: &[PathBuf],
) -> anyhow::Result<()> {
    let output = Command::new(analyzer)
        .args(args)
        .args(files)
        .output()
        .with_context(|| format!("cannot run {}", analyzer.display()))?;
    if !output.status.success() {
        bail!(
            "{what} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
