//! `tsync-analyze`: brings the traces of several nodes onto one timebase.
//!
//! Each subcommand lives in its own module under `cli/`; the work itself is in the library
//! (`tsync_analyze::Timeline` holds the pipeline the later commands share).

mod cli;

/// The static (musl) binaries allocate with mimalloc: musl's allocator is slow at many small
/// allocations and growths, and the finishing of a mesh makes hundreds of thousands of them
/// (hull vertices, interval curves, printed documents). Measured on the benchmark's inputs, one
/// thread, musl's allocator → mimalloc: the 200-trace mesh 1.28 → 0.83 s, the 1000-trace sparse
/// mesh 2.69 → 1.78 s, 16 trace files 0.09 → 0.08 s, peak memory within 10 MB (`no_thp`:
/// transparent huge pages saved page faults but cost 30 MB more). Builds against glibc (from
/// the source tree) keep glibc's allocator. ripgrep does the same for its musl builds.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tsync-analyze",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TSYNC_GIT_COMMIT"), ")"),
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
    /// Write every event on the common timebase as pcapng, JSON Lines, CSV or Chrome JSON.
    Export(cli::export::ExportCmd),
    /// Put the user's own events (JSON Lines, CSV, Chrome trace, LTTng CTF; OpenTelemetry spans
    /// of many nodes) on the common timebase.
    Apply(cli::apply::ApplyCmd),
    /// Merge applied logs or traces of several nodes into one timeline by corrected time,
    /// each record flagged `certain` or `uncertain` from the guaranteed intervals.
    Merge(cli::merge::MergeCmd),
}

/// Parses the command line; `--version` tells the commit, the target and the trace format too.
fn parse_cli() -> Cli {
    // clap wants a 'static long version; it is built once per run.
    let long_version = format!(
        "{}\n{}",
        env!("CARGO_PKG_VERSION"),
        tsync_common::build_info::describe(env!("TSYNC_GIT_COMMIT"), env!("TSYNC_TARGET"))
    );
    let matches = Cli::command()
        .long_version(&*Box::leak(long_version.into_boxed_str()))
        .get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let mut cli = parse_cli();
    // The check that no output is an input needs the inputs as given.
    let protected = match &cli.command {
        Command::Export(a) => Some((a.sync.inputs.clone(), &a.output)),
        Command::Apply(a) => Some((cli::apply::protected_inputs(a), &a.output)),
        Command::Merge(a) => Some((a.files.clone(), &a.output)),
        _ => None,
    };
    if let Some((inputs, output)) = protected {
        let ids = tsync_analyze::output::InputIds::of(&inputs);
        if let Err(e) = ids.check(output) {
            return fail(&cli::CliError::from(e));
        }
    }
    let inputs = match &mut cli.command {
        // Merge streams its files as they are, pipes included.
        Command::Merge(_) => &mut Vec::new(),
        Command::Info(a) => &mut a.files,
        Command::Sync(a) => &mut a.sync.inputs,
        Command::Messages(a) => &mut a.inputs,
        Command::Correct(a) => &mut a.sync.inputs,
        Command::Eval(a) => &mut a.sync.inputs,
        Command::Export(a) => &mut a.sync.inputs,
        Command::Apply(a) => &mut a.sync.inputs,
    };
    if let Err(e) = cli::spool::spool(inputs) {
        return fail(&e);
    }
    let result = match cli.command {
        Command::Info(a) => cli::info::run(a),
        Command::Sync(a) => cli::sync::run(a),
        Command::Messages(a) => cli::messages::run(a),
        Command::Correct(a) => cli::correct::run(a),
        Command::Eval(a) => cli::eval::run(a),
        Command::Export(a) => cli::export::run(a),
        Command::Apply(a) => cli::apply::run(a),
        Command::Merge(a) => cli::merge::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Prints the error (naming inputs as the user gave them) and gives its exit status.
fn fail(e: &cli::CliError) -> ExitCode {
    eprintln!(
        "tsync-analyze: error: {}",
        cli::spool::as_given(&e.message())
    );
    ExitCode::from(e.exit_status())
}
