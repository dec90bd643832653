//! `cargo xtask bench apply`: throughput of `tsync-analyze apply` on a large application log
//! (`tsync_sim::bench::apply`).

use anyhow::Result;
use tsync_sim::bench;

use crate::util::{build_release, release_binary, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// Records in the generated log.
    #[arg(long, default_value_t = 4_000_000)]
    lines: u64,
    /// Regenerate the inputs even if they exist.
    #[arg(long)]
    regenerate: bool,
    /// Runs of each measurement; the fastest is reported (a shared machine's noise only adds).
    #[arg(long, default_value_t = 3)]
    runs: u32,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if cfg!(debug_assertions) {
            return super::rerun_in_release();
        }
        build_release(&["tsync-analyze"])?;
        let options = bench::apply::Options {
            lines: self.lines,
            regenerate: self.regenerate,
            runs: self.runs,
            analyzer: &release_binary("tsync-analyze"),
            dir: &workspace_root().join("target/bench"),
        };
        bench::apply::run(&options, &super::analyze::meter()?)
    }
}
