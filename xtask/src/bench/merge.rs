//! `cargo xtask bench merge`: throughput and memory of `tsync-analyze merge` against GNU `sort
//! -m` on the same files, in the same run (`tsync_sim::bench::merge`).

use anyhow::Result;
use tsync_sim::bench;

use crate::util::{build_release, release_binary, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// Records in all (three files of a third each).
    #[arg(long, default_value_t = 6_000_000)]
    records: u64,
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
        let options = bench::merge::Options {
            records: self.records,
            regenerate: self.regenerate,
            runs: self.runs,
            analyzer: &release_binary("tsync-analyze"),
            dir: &workspace_root().join("target/bench"),
        };
        bench::merge::run(&options, &super::analyze::meter()?)
    }
}
