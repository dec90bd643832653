//! `cargo xtask`: developer tasks (setup, test, simulation, traffic, demo, lab, benchmarks,
//! fuzzing).
//!
//! One module per task, each with an `Args` type (clap) and `fn run(self) -> anyhow::Result<()>`;
//! adding a task is one variant of [`Task`] and one line of its `match`. What tasks share is in
//! [`util`]; the namespace lab, agents and BPF program checks are the `tsync-lab` crate.
mod bench;
mod demo;
mod fuzz;
mod fuzz_ctf;
mod lab;
mod setup;
mod simulate;
mod test;
mod traffic;
mod util;

use std::process::ExitCode;

use clap::Parser;

// `fuzz` reaches these at the crate root.
pub use util::{defaults, workspace_root};

/// The tasks.
#[derive(clap::Subcommand)]
enum Task {
    /// Install what building and testing need (rust-src, bpf-linker, Debian tools); idempotent.
    Setup(setup::Args),
    /// Run setup, then fmt check, clippy, the whole workspace's tests, the real-kernel tests
    /// (root), fuzzing and the demo.
    Test(test::Args),
    /// Write agent-format traces of simulated nodes with known clocks, and the truth beside them.
    Simulate(simulate::Args),
    /// Generate request/response and bulk TCP traffic to peers (the demo runs one per node).
    Traffic(traffic::TrafficArgs),
    /// End-to-end demo: nodes in network namespaces with known clock skews, real TCP traffic,
    /// agents, analyzer, and every figure checked against the truth.
    Demo(demo::DemoArgs),
    /// Multi-kernel VM lab: guests on Debian's 6.1 and 6.12 kernels under QEMU/TCG, their own
    /// clocks (one slewed), TCP traffic, an agent each, checked against a TSC ground truth.
    Lab(lab::Args),
    /// What runs inside each lab guest (started by `cargo xtask lab`).
    #[command(hide = true)]
    LabGuest(lab::guest::GuestArgs),
    /// Benchmarks (not timed tests): both with no subcommand, and one report.
    Bench(bench::Args),
    /// Coverage-guided fuzzing (cargo-fuzz, nightly) of the trace reader, the text parser and
    /// the sync pipeline; corpus kept in target/fuzz-corpus.
    Fuzz(fuzz::Args),
    /// Runs a program and prints its wall time and peak RSS (a helper of the benchmarks).
    #[command(hide = true)]
    PeakRss(bench::analyze::PeakRss),
}

#[derive(Parser)]
#[command(name = "cargo xtask", about = "tsync developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Setup(args) => args.run(),
        Task::Test(args) => args.run(),
        Task::Simulate(args) => args.run(),
        Task::Traffic(args) => args.run(),
        Task::Demo(args) => args.run(),
        Task::Lab(args) => args.run(),
        Task::LabGuest(args) => args.run(),
        Task::Bench(args) => args.run(),
        Task::Fuzz(args) => args.run(),
        Task::PeakRss(args) => args.run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
