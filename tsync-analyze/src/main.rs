//! `tsync-analyze`: brings the traces of several nodes onto one timebase.
//!
//! Each subcommand lives in its own module under `cli/`; the work itself is in the library
//! (`tsync_analyze::timeline` holds the pipeline the later commands share).

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tsync-analyze",
    version,
    about = "Offline synchronization of distributed traces"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Header, event counts, lost events, clock samples and time span of each input.
    Info(cli::info::InfoCmd),
    /// Estimate the clock correction of every trace.
    Sync(cli::sync::SyncCmd),
    /// Print the matched messages in the text message format.
    Messages(cli::messages::MessagesCmd),
    /// Linear correction, then the controlled logical clock: report what it changed.
    Correct(cli::correct::CorrectCmd),
    /// Evaluate the correction per ordered pair: inversions, too-fast messages, round trips,
    /// transfer times, accuracy.
    Eval(cli::eval::EvalCmd),
    /// Write every event on the common timebase as pcapng, JSON Lines or CSV.
    Export(cli::export::ExportCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(a) => cli::info::run(a),
        Command::Sync(a) => cli::sync::run(a),
        Command::Messages(a) => cli::messages::run(a),
        Command::Correct(a) => cli::correct::run(a),
        Command::Eval(a) => cli::eval::run(a),
        Command::Export(a) => cli::export::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tsync-analyze: error: {e}");
            ExitCode::FAILURE
        }
    }
}
