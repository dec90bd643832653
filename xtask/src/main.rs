//! `cargo xtask`: developer tasks (setup, test, dist, simulation, traffic, demo, cluster lab, lab,
//! benchmarks, fuzzing).
//!
//! One module per task, each with an `Args` type (clap) and `fn run(self) -> anyhow::Result<()>`;
//! adding a task is one variant of [`Task`] and one line of its `match`. What tasks share is in
//! [`util`]. The lab's logic — namespaces, agents, the VM lab, the demo, the cluster lab, the
//! traffic generators, the capture benchmark — is the `tsync-lab` crate: `lab`, `demo`, `cluster`
//! and `bench capture` here parse arguments, install and build what is needed, and call it.
mod bench;
mod cluster;
mod demo;
mod dist;
mod ebpf;
mod fuzz;
mod lab;
mod setup;
mod simulate;
mod test;
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
    /// Build the eBPF programs once into target/ebpf/ and print the object's path (set it as
    /// TSYNC_EBPF_OBJECT and the agent's build script embeds it instead of building its own).
    BuildEbpf(ebpf::Args),
    /// Run setup, then fmt check, clippy, the whole workspace's tests, the real-kernel tests
    /// (root), the dist tarballs, fuzzing, the lab, the demo and the cluster lab.
    Test(test::Args),
    /// Static (musl) agent and analyzer for x86_64 and aarch64: one tarball per architecture
    /// under target/dist, with INSTALL.md, the licenses and SHA256SUMS.
    Dist(dist::Args),
    /// Write agent-format traces of simulated nodes with known clocks, and the truth beside them.
    Simulate(simulate::Args),
    /// Generate request/response and bulk TCP traffic to peers (as `tsync-lab traffic`, which
    /// the demo runs in each node).
    Traffic(tsync_lab::traffic::TrafficArgs),
    /// End-to-end demo: nodes in network namespaces with known clock skews, real TCP traffic,
    /// agents, analyzer, and every figure checked against the truth.
    Demo(demo::DemoArgs),
    /// Cluster lab: nodes with pods behind them (flat, routed, VXLAN, VXLAN L2, NAT), one agent
    /// per node with a known clock skew, TCP and UDP over IPv4 and IPv6 between pods; matching,
    /// intervals and errors per topology checked against expectations.
    Cluster(cluster::Args),
    /// Multi-kernel VM lab: guests on Debian's 6.1 and 6.12 kernels under QEMU/TCG, their own
    /// clocks (one slewed), TCP traffic, an agent each, checked against a TSC ground truth.
    Lab(lab::Args),
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
        Task::BuildEbpf(args) => args.run(),
        Task::Test(args) => args.run(),
        Task::Dist(args) => args.run(),
        Task::Simulate(args) => args.run(),
        Task::Traffic(args) => args.run(),
        Task::Demo(args) => args.run(),
        Task::Cluster(args) => args.run(),
        Task::Lab(args) => args.run(),
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
