//! `tsync-agent`: records the packet digests of one node into a trace file.
//!
//! `tsync-agent record -o FILE [--duration SECS] [--node NAME] [--ring-size BYTES]
//! [--buffer-size BYTES] [--netns NS]... [--all-netns] [--clock-skew OFFSET_NS,DRIFT_PPM] [-v]`
//! loads two eBPF
//! programs (send and receive hooks), drains their ring buffer into the file until SIGINT/SIGTERM
//! or the duration ends, then prints a summary.
//! `tsync-agent check [-o DIR]` tells whether this node can record, one line per precondition.
mod batches;
mod btf;
mod check;
mod clock;
mod console;
mod loader;
mod logging;
mod netns;
mod node;
mod offsets;
mod output;
mod privileges;
mod progress;
mod recorder;
mod reorder;
mod sampler;
mod summary;
mod version;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context as _, Result};
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use tsync_common::format::{AgentOptions, ClockSkew, Header, RecordedNetns};

use crate::{
    loader::{Capture, LoadOptions},
    recorder::RecordPlan,
};

/// Default ring buffer size: 16 MiB holds about 190 000 events, 0.19 s at 1 M events/s.
const DEFAULT_RING_SIZE: u64 = 1 << 24;
/// Default memory for events waiting to be written: 160 MiB, 10.5 s of 200 000 events/s (a busy
/// node under a load test) during which the output may accept nothing.
const DEFAULT_BUFFER_SIZE: u64 = 160 << 20;

#[derive(Parser)]
#[command(
    name = "tsync-agent",
    version = version::SHORT,
    about = "Records packet digests of this node for offline trace synchronization"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Show more of the log on stderr: -v info (the eBPF programs' notices about odd packets),
    /// -vv debug, -vvv trace; warnings are always shown. RUST_LOG (env_logger syntax) adds its
    /// directives, e.g. RUST_LOG=tsync_ebpf=info.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

#[derive(Subcommand)]
enum Command {
    /// Record until SIGINT/SIGTERM (or --duration), then flush and print a summary.
    Record(RecordArgs),
    /// Check that this node can record: kernel, privileges, BTF, the hooks (loaded, attached and
    /// detached), clocksource, NTP state, free disk. One line each; the exit status is non-zero
    /// when recording would fail.
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// Directory the trace would be written to (its free space is checked).
    #[arg(short, long, value_name = "DIR", default_value = ".")]
    output: PathBuf,
}

/// Prints the checks; fails when one says recording would fail.
fn check(args: CheckArgs) -> Result<()> {
    let lines = check::run(&args.output);
    for line in &lines {
        console::out(&line.to_string());
    }
    let failed = lines
        .iter()
        .filter(|l| l.status == check::Status::Fail)
        .count();
    anyhow::ensure!(
        failed == 0,
        "{failed} check(s) failed: recording would fail"
    );
    Ok(())
}

#[derive(clap::Args)]
struct RecordArgs {
    /// Trace file to write (created with mode 0600). An existing file is refused (an earlier
    /// recording is never lost by accident) unless --force.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Replace the output file if it exists.
    #[arg(long)]
    force: bool,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_duration, allow_hyphen_values = true)]
    duration: Option<f64>,
    /// Node name recorded in the header (default: the hostname).
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// Ring buffer size in bytes (a power of two, a multiple of the page size; K, M, G suffixes
    /// are powers of 1024).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_RING_SIZE,
          value_parser = parse_ring_size)]
    ring_size: u64,
    /// Memory for events waiting to be written while the output file system is slow or stalls
    /// (default 160 MiB: 10 s at 200 000 events/s). When it is full, events are dropped and
    /// counted as lost to the disk.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_BUFFER_SIZE,
          value_parser = parse_buffer_size)]
    buffer_size: u64,
    /// Record the packets of every network namespace, not only the agent's own.
    #[arg(long)]
    all_netns: bool,
    /// Record the packets of this network namespace instead of the agent's own; repeat it to
    /// record several (at most 16; every one: --all-netns). NS is /run/netns/NAME, a NAME under
    /// /run/netns, /proc/PID/ns/net, or an inode number (`ls -iL /run/netns`,
    /// `readlink /proc/PID/ns/net`).
    #[arg(long, value_name = "NS", conflicts_with = "all_netns")]
    netns: Vec<String>,
    /// Apply a known skew to every written timestamp: t + OFFSET_NS + t * DRIFT_PPM * 1e-6
    /// (for validating synchronization where the truth is known).
    #[arg(long, value_name = "OFFSET_NS,DRIFT_PPM", value_parser = clock::parse_skew,
          allow_hyphen_values = true)]
    clock_skew: Option<ClockSkew>,
}

fn parse_duration(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("expected a number of seconds, got {s:?}"))?;
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return Err(format!(
            "the duration must be a positive number of seconds, got {s}"
        ));
    }
    Ok(secs)
}

/// A number of bytes, with an optional K, M or G (KiB, MiB, GiB) suffix.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let err = || format!("expected a number of bytes (e.g. 16777216 or 16M), got {s:?}");
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return Err(err()),
    };
    let n: u64 = digits.parse().map_err(|_| err())?;
    n.checked_mul(1 << shift).ok_or_else(err)
}

fn parse_ring_size(s: &str) -> Result<u64, String> {
    loader::check_ring_size(parse_bytes(s)?).map(u64::from)
}

fn parse_buffer_size(s: &str) -> Result<u64, String> {
    let bytes = parse_bytes(s)?;
    if bytes < output::MIN_BUFFER {
        return Err(format!(
            "--buffer-size must be at least {} bytes (1M), got {bytes}",
            output::MIN_BUFFER
        ));
    }
    Ok(bytes)
}

/// Builds the header: who and what is recorded, and with which options.
fn header(
    args: &RecordArgs,
    selection: &netns::Selection,
    own_netns: u64,
    start: &tsync_common::format::ClockSample,
) -> Result<Header> {
    let hostname = node::hostname();
    let recorded_netns = match selection {
        netns::Selection::All => Vec::new(),
        netns::Selection::Only(list) => list.clone(),
    };
    Ok(Header {
        node: args.node.clone().unwrap_or_else(|| hostname.clone()),
        hostname,
        boot_id: node::boot_id(),
        kernel_release: node::kernel_release(),
        clocksource: node::clocksource(),
        interfaces: netns::interfaces(selection, own_netns)?,
        start_realtime_ns: start.realtime_ns,
        start_monotonic_ns: start.monotonic_ns,
        options: AgentOptions {
            agent_version: env!("CARGO_PKG_VERSION").into(),
            ring_size: args.ring_size,
            all_netns: args.all_netns,
            netns_inode: match recorded_netns.as_slice() {
                [one] => Some(one.inode),
                _ => None,
            },
            duration_s: args.duration,
            clock_skew: args.clock_skew,
            command_line: std::env::args().collect(),
            recorded_netns,
        },
    })
}

fn record(args: RecordArgs) -> Result<()> {
    if !args.force && std::fs::symlink_metadata(&args.output).is_ok() {
        anyhow::bail!(
            "{} exists (an earlier recording?): choose another -o, or add --force to replace it",
            args.output.display()
        );
    }
    if let Some(skew) = &args.clock_skew {
        clock::check_skew(skew, clock::monotonic_ns()).map_err(anyhow::Error::msg)?;
    }
    let own_netns = node::netns_inode().context("cannot read /proc/self/ns/net")?;
    let selection = if args.all_netns {
        netns::Selection::All
    } else if args.netns.is_empty() {
        netns::Selection::Only(vec![RecordedNetns {
            inode: own_netns,
            path: netns::OWN.into(),
        }])
    } else {
        netns::Selection::Only(netns::resolve(&args.netns)?)
    };
    let start = clock::sample(args.clock_skew.as_ref());
    let header = header(&args, &selection, own_netns, &start)?;
    // Scans at once: the first address table comes before any event.
    let addresses = netns::Watcher::start(selection.clone(), args.clock_skew, netns::SCAN_PERIOD)
        .context("cannot start the address watcher")?;
    // Sampling starts before the programs are attached, so that every event lies between two
    // clock samples (the analyzer's slew bound grows quickly outside them), and after they are
    // verified (which may hold a one-CPU machine's only CPU for a fifth of a second).
    let mut sampler = None;
    let capture = Capture::load(
        &LoadOptions {
            ring_size: loader::check_ring_size(args.ring_size).map_err(anyhow::Error::msg)?,
            netns: selection.inodes(),
        },
        || {
            sampler = Some(
                sampler::Sampler::start(args.clock_skew, sampler::SAMPLE_PERIOD)
                    .context("cannot start the clock sampler")?,
            );
            Ok(())
        },
    )?;
    let sampler = sampler.context("the programs were attached without the clock sampler")?;
    let ready_message = match selection.inodes() {
        Some(inodes) => format!(
            "tsync-agent: recording on {} interfaces (network namespace{} {}) to {}",
            header.interfaces.len(),
            if inodes.len() == 1 { "" } else { "s" },
            inodes
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            args.output.display()
        ),
        None => format!(
            "tsync-agent: recording on all interfaces of all network namespaces to {}",
            args.output.display()
        ),
    };
    let plan = RecordPlan {
        path: args.output.clone(),
        header,
        skew: args.clock_skew,
        sampler,
        addresses,
        duration: args.duration.map(Duration::from_secs_f64),
        buffer_size: args.buffer_size,
        ready_message,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let summary = runtime.block_on(recorder::record(capture, plan))?;
    console::out(&summary.to_string());
    for warning in summary.warnings() {
        console::err(&warning);
    }
    Ok(())
}

fn main() -> ExitCode {
    // clap wants a 'static long version; it is built once per run.
    let long_version: &'static str = Box::leak(version::long().into_boxed_str());
    let matches = Cli::command().long_version(long_version).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    logging::init(cli.verbose);
    let result = match cli.command {
        Command::Record(args) => record(args),
        Command::Check(args) => check(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            console::err(&format!("tsync-agent: error: {err:#}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("16M"), Ok(16 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("64k"), Ok(64 << 10));
        assert!(parse_bytes("16 MB").is_err());
        assert!(parse_bytes("M").is_err());
        assert!(parse_bytes("99999999999G").is_err());
        assert_eq!(parse_ring_size("16M"), Ok(1 << 24));
        assert!(parse_buffer_size("512K").unwrap_err().contains("at least"));
        assert_eq!(parse_buffer_size("1M"), Ok(1 << 20));
    }
}
