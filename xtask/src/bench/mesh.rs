//! `cargo xtask bench mesh`: network-wide estimation on synthetic meshes, path against joint,
//! against the truth (`tsync_sim::bench::mesh`).

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Traces in the mesh.
    #[arg(long, default_value_t = 16)]
    traces: usize,
    /// Messages per mesh.
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// Seeds, one mesh each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5")]
    seeds: Vec<u64>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if cfg!(debug_assertions) {
            return super::rerun_in_release();
        }
        tsync_sim::bench::mesh::run(self.traces, self.messages, &self.seeds);
        Ok(())
    }
}
