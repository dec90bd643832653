//! `tsync-lab`: what runs inside a lab node.
//!
//! - `tsync-lab traffic`: the request/response and bulk TCP traffic generator, run in each
//!   namespace by the demo (`cargo xtask demo`).
//! - `tsync-lab datagrams`: UDP request/response from connected and unconnected sockets and
//!   QUIC-like UDP, run in each pod of the cluster lab (`cargo xtask cluster`); only with the
//!   `host` feature (the default), which brings the random numbers it sends.
//! - `tsync-lab guest`: the program each VM lab guest runs (`cargo xtask lab` starts it through
//!   virtme-ng; it starts the agent and the traffic generator itself).
//!
//! A binary of its own, not an xtask command, so that it can be built small and static for another
//! architecture's guests (`--no-default-features`: none of the host's dependencies).
use std::process::ExitCode;

use clap::Parser;
use tsync_lab::{traffic::TrafficArgs, vm::guest::GuestArgs};

#[derive(clap::Subcommand)]
enum Command {
    /// Generate request/response and bulk TCP traffic to peers (one per node).
    Traffic(TrafficArgs),
    /// Generate UDP request/response traffic (DNS-like from connected and unconnected sockets,
    /// QUIC-like) to peers, and serve it.
    #[cfg(feature = "host")]
    Datagrams(tsync_lab::datagrams::DatagramArgs),
    /// Run one VM lab guest: measure its TSC against the host's, record with an agent while
    /// talking to the other guests, slew its clock if asked, report (started by the host).
    Guest(GuestArgs),
}

#[derive(Parser)]
#[command(
    name = "tsync-lab",
    about = "What runs inside a tsync lab node",
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Traffic(args) => args.run(),
        #[cfg(feature = "host")]
        Command::Datagrams(args) => args.run(),
        Command::Guest(args) => args.run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tsync-lab: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
