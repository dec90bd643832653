//! tsync's lab: several "nodes" on one Linux machine — network namespaces, or QEMU guests with
//! kernels and clocks of their own — with real agents recording them, and the checks of what the
//! analyzer makes of their traces against a known truth.
//!
//! The namespace lab (one kernel, one clock):
//! - [`Netns`]: a network namespace, deleted on drop (its devices go with it), in which commands
//!   and threads run; [`VethPair`]: two namespaces joined by a veth pair; [`Bridge`]: N node
//!   namespaces on a bridge that lives in a namespace of its own, so the host's network is never
//!   touched.
//! - [`Agent`]: a running `tsync-agent record`, started with [`record_command`] and waited for
//!   until it says it is recording; stopped with a signal, its output collected; killed on drop.
//! - [`StallingFs`]: a FUSE file system whose writes stall (periodically, or while a gate is
//!   closed), as a saturated disk's do: for the agent's output.
//! - [`programs`]: tsync's BPF programs loaded in the kernel (the `bpf(2)` call, as bpftool), to check that an
//!   agent attached them and that none is left once it exited ([`wait_unloaded`]).
//! - [`demo`]: nodes in namespaces with known clock skews, traffic, analyzer, every figure
//!   checked against the truth (`cargo xtask demo`); [`bench::capture`]: what recording costs
//!   under iperf3 load (`cargo xtask bench capture`).
//! - [`cluster`]: nodes with pods behind them — bridged, routed, VXLAN overlays, NAT — one agent
//!   per node, TCP and UDP applications in the pods, the analyzer's matching and intervals checked
//!   against the truth per topology (`cargo xtask cluster`); [`known_skew`]: the truth of known
//!   clock skews that it and the demo check against.
//!
//! The VM lab ([`vm`], `cargo xtask lab`): guests on Debian's kernels under QEMU/TCG, one clock
//! slewed, a TSC ground truth through a page of shared memory.
//!
//! What runs *inside* a node is the `tsync-lab` binary (`src/main.rs`): `tsync-lab traffic`
//! ([`traffic`], in each namespace of the demo and each guest), `tsync-lab datagrams` (UDP, in each
//! pod of the cluster lab; with the `host` feature) and `tsync-lab guest` ([`vm::guest`], in each
//! guest). Its modules build without the `host` feature (the default), which adds what
//! only the host runs (the analyzer's library among it): the binary stays small and static-able.
//!
//! Used by the real-kernel tests (`tests/capture.rs`, root only, run by `cargo xtask test`) and
//! by xtask's tasks, which parse arguments, build the binaries and call in here. Everything here
//! needs root, except reading an agent's summary and the pure logic the unit tests check.
mod agent;
pub mod command;
mod fuse;
mod netns;
pub mod offloads;
mod programs;
pub mod traffic;
pub mod vm;

#[cfg(feature = "host")]
pub mod bench;
#[cfg(feature = "host")]
pub mod cluster;
#[cfg(feature = "host")]
pub mod datagrams;
#[cfg(feature = "host")]
pub mod demo;
#[cfg(feature = "host")]
pub mod interrupt;
#[cfg(feature = "host")]
pub mod known_skew;
#[cfg(feature = "host")]
pub mod matching;

pub use agent::{
    Agent, READY, Stopped, agent_binary, cpu_seconds_of, parse_summary, record_command,
};
pub use fuse::{ClosedGate, Stall, StallingFs};
pub use netns::{Bridge, Netns, VethPair, ip, leftovers, unique_name};
pub use offloads::Offloads;
pub use programs::{Program, program_ids, programs, wait_unloaded};

/// True when this process runs as root (namespaces and eBPF need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The release binaries the demo and the VM lab run (xtask builds them and says where they are).
#[cfg(feature = "host")]
#[derive(Clone, Debug)]
pub struct Binaries {
    /// `tsync-agent`: records each node.
    pub agent: std::path::PathBuf,
    /// `tsync-analyze`: the demo's plots, export and `apply` run its commands.
    pub analyzer: std::path::PathBuf,
    /// `tsync-lab` (this crate's binary): the traffic generator and the guest program.
    pub lab: std::path::PathBuf,
}
