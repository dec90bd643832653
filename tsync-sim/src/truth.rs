//! The truth about a simulation, written as `truth.json` beside its files: the configuration and
//! each node's clocks, from which [`Truth::map`] gives the exact map between any two nodes'
//! clocks, what the analyzer's maps are checked against.

use std::path::PathBuf;

use serde::Serialize;

use crate::clock::ClockModel;
use crate::simulation::SimConfig;

/// The truth about a simulation.
#[derive(Serialize, Debug, Clone)]
pub struct Truth {
    /// What was simulated.
    pub config: SimConfig,
    /// What every node's clocks read at true time 0 besides their offset
    /// ([`BOOT_NS`](crate::clock::BOOT_NS)).
    pub boot_ns: f64,
    /// The nodes, node K being trace K of the text file.
    pub nodes: Vec<NodeTruth>,
    /// Messages sent (each packet of an exchange is one).
    pub messages: u64,
    /// The text message file, when written (`--format text|both`).
    pub text: Option<PathBuf>,
}

/// One simulated node.
#[derive(Serialize, Debug, Clone)]
pub struct NodeTruth {
    /// Its name (`sim-K`), the trace file's node name.
    pub name: String,
    /// Its trace file; written unless `--format text`.
    pub file: PathBuf,
    /// Its clocks.
    pub clock: ClockModel,
    /// Events it recorded.
    pub events: u64,
    /// Local times (CLOCK_MONOTONIC) of the node's first and last events (ns).
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// Clock samples and kernel clock states written (0 with `--format text`).
    pub samples: u64,
    /// See `samples`.
    pub kernel_states: u64,
}

impl Truth {
    /// Maps a local time of trace `k` (its CLOCK_MONOTONIC, what its events are stamped with)
    /// to what trace `r`'s CLOCK_MONOTONIC read at the same true instant: exactly what the
    /// analyzer's map of trace `k` onto reference `r` should give.
    pub fn map(&self, k: usize, r: usize, t_k: f64) -> f64 {
        let t = self.nodes[k].clock.true_time(t_k - self.boot_ns);
        self.nodes[r].clock.mono(t) + self.boot_ns
    }
}
