//! `cargo xtask`: developer tasks (setup, test, benchmarks, demo).
//!
//! Every task is a module with an `Args` type (clap) that has `fn run(self) -> anyhow::Result<()>`;
//! adding a task is one line in one of the `tasks!` lists below.
mod bench_capture;
mod setup;
mod test;

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
        /// Benchmarks (not timed tests).
        #[command(subcommand)]
        Bench(Bench),
    }
}

tasks! {
    /// The benchmarks.
    enum Bench {
        /// Capture overhead: iperf3 between two network namespaces, with and without agents.
        Capture(bench_capture::Args),
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
