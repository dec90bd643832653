//! tsync's test lab: several "nodes" on one Linux machine, with real agents recording them.
//!
//! - [`Netns`]: a network namespace, deleted on drop (its devices go with it), in which commands
//!   and threads run; [`VethPair`]: two namespaces joined by a veth pair; [`Bridge`]: N node
//!   namespaces on a bridge that lives in a namespace of its own, so the host's network is never
//!   touched.
//! - [`Agent`]: a running `tsync-agent record`, started with [`record_command`] and waited for
//!   until it says it is recording; stopped with a signal, its output collected; killed on drop.
//! - [`StallingFs`]: a FUSE file system whose writes stall (periodically, or while a gate is
//!   closed), as a saturated disk's do: for the agent's output.
//! - [`programs`]: tsync's BPF programs loaded in the kernel (from `bpftool`), to check that an
//!   agent attached them and that none is left once it exited ([`wait_unloaded`]).
//!
//! Used by the real-kernel tests (`tests/capture.rs`, root only, run by `cargo xtask test`), the
//! capture benchmark and the demo (`cargo xtask bench capture`, `cargo xtask demo`). Everything
//! here needs root, except reading an agent's summary.
mod agent;
mod fuse;
mod netns;
mod programs;

pub use agent::{
    Agent, READY, Stopped, agent_binary, cpu_seconds_of, parse_summary, record_command,
};
pub use fuse::{ClosedGate, Stall, StallingFs};
pub use netns::{Bridge, Netns, VethPair, ip, leftovers, unique_name};
pub use programs::{Program, program_ids, programs, wait_unloaded};

/// True when this process runs as root (namespaces and eBPF need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
