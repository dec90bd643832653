//! `cargo xtask simulate`: the simulator of `tsync-sim` (docs/simulator.md) on the command line.

use std::path::PathBuf;

use tsync_sim::{SimConfig, check, simulate};

/// `cargo xtask simulate`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    config: SimConfig,
    /// Output directory.
    #[arg(short, long, default_value = "target/simulate")]
    out: PathBuf,
    /// Then synchronize what was written (trace files, text file or both) with both algorithms
    /// and print each node's error against the truth over its whole trace, and whether the
    /// truth stays inside the guaranteed interval.
    #[arg(long)]
    check: bool,
}

impl Args {
    pub fn run(self) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let truth = simulate(&self.config, &self.out)?;
        println!(
            "{} messages among {} nodes written to {} in {:.1} s",
            truth.messages,
            truth.nodes.len(),
            self.out.display(),
            started.elapsed().as_secs_f64()
        );
        if self.check {
            print!("{}", check::report(&truth)?);
        }
        Ok(())
    }
}
