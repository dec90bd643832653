//! `cargo xtask bench analyze`: throughput and peak memory of `tsync-analyze sync`
//! (`tsync_sim::bench::analyze`), and the hidden `xtask peak-rss` helper the benchmarks measure
//! through (`tsync_sim::bench::Meter`).

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use tsync_sim::bench::{self, Meter};

use crate::util::{build_release, release_binary, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// Scale the message counts (e.g. 0.1 for a quick run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Regenerate the inputs even if they exist.
    #[arg(long)]
    regenerate: bool,
    /// Another `tsync-analyze` binary (e.g. one built from an older commit) to run `sync` with on
    /// the same inputs, right after each measurement of the current one: a before/after ratio
    /// measured in the same conditions, which matter on a shared machine.
    #[arg(long, value_name = "BINARY")]
    baseline: Option<PathBuf>,
    /// Only the workloads with hundreds of traces (full meshes of 200 and 600, a sparse one of
    /// 1000), each checked against the truth.
    #[arg(long, conflicts_with = "no_many")]
    many_only: bool,
    /// Skip the workloads with hundreds of traces.
    #[arg(long)]
    no_many: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if cfg!(debug_assertions) {
            // Generating 10⁷ messages needs optimized code.
            return super::rerun_in_release();
        }
        build_release(&["tsync-analyze"])?;
        let options = bench::analyze::Options {
            scale: self.scale,
            regenerate: self.regenerate,
            analyzer: &release_binary("tsync-analyze"),
            baseline: self.baseline.as_deref(),
            dir: &workspace_root().join("target/bench"),
            cpu: &super::machine::cpu(),
        };
        let meter = meter()?;
        if !self.many_only {
            bench::analyze::run(&options, &meter)?;
        }
        if !self.no_many {
            bench::many::run(
                self.scale,
                self.regenerate,
                options.analyzer,
                options.baseline,
                options.dir,
                &meter,
            )?;
        }
        Ok(())
    }
}

/// Measures through this program's `peak-rss` helper.
pub(super) fn meter() -> Result<Meter> {
    Ok(Meter::new(std::env::current_exe()?, &["peak-rss"]))
}

/// `xtask peak-rss PROGRAM [ARGS...]`: runs PROGRAM with stdout to /dev/null and prints its wall
/// time (s) and peak RSS (KiB), read from `wait4`. Used by the benchmarks, not by people.
#[derive(clap::Args)]
pub struct PeakRss {
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

impl PeakRss {
    pub fn run(self) -> Result<()> {
        let (program, args) = self.command.split_first().expect("required by clap");
        let m = bench::peak_rss(program, args)?;
        println!("{} {}", m.seconds, m.max_rss_kib);
        Ok(())
    }
}
