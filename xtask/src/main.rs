//! `cargo xtask`: developer tasks (setup, test, simulation, benchmarks, demo).
//!
//! Every task is an `Args` type (clap) with `fn run(self) -> anyhow::Result<()>`; adding a task is
//! one line in one of the `tasks!` lists below.
mod bench;
mod bench_analyze;
mod bench_capture;
mod demo;
mod fuzz;
mod machine;
mod netns;
mod setup;
mod simulate;
mod test;
mod traffic;

use std::process::ExitCode;

use clap::Parser;

/// Declares a clap subcommand enum whose variants each wrap a task's `Args`, and its dispatch.
macro_rules! tasks {
    ($(#[$meta:meta])* enum $name:ident { $($(#[$vmeta:meta])* $variant:ident($args:ty),)* }) => {
        $(#[$meta])*
        #[derive(clap::Subcommand)]
        enum $name {
            $($(#[$vmeta])* $variant($args),)*
        }

        impl $name {
            fn run(self) -> anyhow::Result<()> {
                match self {
                    $(Self::$variant(args) => args.run(),)*
                }
            }
        }
    };
}

tasks! {
    /// The top-level tasks.
    enum Task {
        /// Install what building and testing need (rust-src, bpf-linker, Debian tools); idempotent.
        Setup(setup::Args),
        /// Run setup, then fmt check, clippy and the whole workspace's tests.
        Test(test::Args),
        /// Write agent-format traces of simulated nodes with known clocks, and the truth beside them.
        Simulate(SimulateArgs),
        /// Generate request/response and bulk TCP traffic to peers (the demo runs one per node).
        Traffic(traffic::TrafficArgs),
        /// End-to-end demo: nodes in network namespaces with known clock skews, real TCP traffic,
        /// agents, analyzer, and every figure checked against the truth.
        Demo(demo::DemoArgs),
        /// Benchmarks (not timed tests): both with no subcommand, and one report.
        Bench(bench::Args),
        /// Coverage-guided fuzzing (cargo-fuzz, nightly) of the trace reader, the text parser and
        /// the sync pipeline; corpus kept in target/fuzz-corpus.
        Fuzz(fuzz::Args),
        /// Runs a program and prints its wall time and peak RSS (a helper of the benchmarks).
        #[command(hide = true)]
        PeakRss(bench_analyze::PeakRss),
    }
}

#[derive(clap::Args)]
struct SimulateArgs {
    #[command(flatten)]
    config: simulate::SimConfig,
    /// Output directory.
    #[arg(short, long, default_value = "target/simulate")]
    out: std::path::PathBuf,
    /// Then synchronize the traces with both algorithms and print each node's error against the
    /// truth.
    #[arg(long)]
    check: bool,
}

impl SimulateArgs {
    fn run(self) -> anyhow::Result<()> {
        let truth = simulate::simulate(&self.config, &self.out)?;
        println!(
            "{} messages among {} nodes written to {}",
            truth.messages,
            truth.nodes.len(),
            self.out.display()
        );
        if self.check {
            let mut rows = Vec::new();
            for algorithm in [
                tsync_analyze::sync::Algorithm::Chull,
                tsync_analyze::sync::Algorithm::Linreg,
            ] {
                rows.push((algorithm, simulate::check::measure(&truth, algorithm)?));
            }
            print!("{}", simulate::check::table(&rows));
        }
        Ok(())
    }
}

impl traffic::TrafficArgs {
    fn run(self) -> anyhow::Result<()> {
        let exchanges = traffic::run(&self)?;
        println!("{exchanges} request/response exchanges completed");
        Ok(())
    }
}

#[derive(Parser)]
#[command(name = "cargo xtask", about = "tsync developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

fn main() -> ExitCode {
    match Cli::parse().task.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace's root folder (xtask lives one level below it).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_owned()
}

/// A task's options at their defaults, as if given no flag (for tasks that run other tasks).
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> anyhow::Result<T> {
    let matches = T::augment_args(clap::Command::new("task")).try_get_matches_from(["task"])?;
    Ok(T::from_arg_matches(&matches)?)
}
