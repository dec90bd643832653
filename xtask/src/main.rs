//! `cargo xtask`: setup, demo, simulation and benchmarks.

mod demo;
mod netns;
mod simulate;
mod traffic;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "tsync developer tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write agent-format traces of simulated nodes with known clocks, and the truth beside them.
    Simulate {
        #[command(flatten)]
        config: simulate::SimConfig,
        /// Output directory.
        #[arg(short, long, default_value = "target/simulate")]
        out: std::path::PathBuf,
    },
    /// Generate request/response and bulk TCP traffic to peers (the demo runs one per node).
    Traffic(traffic::TrafficArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Simulate { config, out } => {
            let truth = simulate::simulate(&config, &out)?;
            println!(
                "{} messages among {} nodes written to {}",
                truth.messages,
                truth.nodes.len(),
                out.display()
            );
        }
        Command::Traffic(args) => {
            let exchanges = traffic::run(&args)?;
            println!("{exchanges} request/response exchanges completed");
        }
    }
    Ok(())
}

/// The workspace's root folder (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_owned()
}
