//! The agents, as users run them on a cluster: one `tsync-agent record` per node, started on the
//! node's machine ([`super::machine`]: its PID and mount namespaces) inside the node's network
//! namespace (a Kubernetes DaemonSet with `hostNetwork` and `hostPID`), each with its known
//! `--clock-skew`; either recording that namespace only (the agent's default), or the node and
//! its pods (`--netns` for each). Started together, stopped with SIGINT as a user stops them;
//! their programs must be gone afterwards.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use tsync_common::format::ClockSkew;

use super::machine;
use super::network::ClusterNet;
use crate::{Agent, record_command, wait_unloaded};

/// What each node's agent records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum AgentMode {
    /// The node's own namespace only: forwarded pod traffic is seen as the node forwards it.
    #[value(name = "node")]
    Node,
    /// The node's namespace and its pods' (`tsync-agent record --netns` for each).
    #[value(name = "node+pods")]
    NodePods,
}

impl AgentMode {
    pub fn name(self) -> &'static str {
        match self {
            AgentMode::Node => "node",
            AgentMode::NodePods => "node+pods",
        }
    }
}

/// The agents while they record.
pub struct Recording {
    agents: Vec<Agent>,
    /// The BPF programs they hold: none may be left once they exited.
    programs: BTreeSet<u32>,
    files: Vec<PathBuf>,
}

/// What one agent wrote.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    pub events: u64,
    pub lost: u64,
}

/// Fails unless `agent record` takes `--netns` (the node+pods mode needs it).
pub fn ensure_netns_option(agent: &Path) -> Result<()> {
    let help = Command::new(agent)
        .args(["record", "--help"])
        .output()
        .with_context(|| format!("cannot run {}", agent.display()))?;
    if !String::from_utf8_lossy(&help.stdout).contains("--netns") {
        bail!(
            "--agents node+pods needs `tsync-agent record --netns`, which {} does not have",
            agent.display()
        );
    }
    Ok(())
}

/// Starts one agent per node (all at once: loading the programs takes a while) and waits until
/// each records. Node k writes `node-K.tsync` and `agent-K.log` into `out`.
pub fn start(
    net: &ClusterNet,
    mode: AgentMode,
    agent: &Path,
    skews: &[ClockSkew],
    out: &Path,
) -> Result<Recording> {
    let files: Vec<PathBuf> = (0..net.nodes().len())
        .map(|k| out.join(format!("node-{k}.tsync")))
        .collect();
    let started: Vec<Result<Agent>> = std::thread::scope(|scope| {
        let handles: Vec<_> = net
            .nodes()
            .iter()
            .enumerate()
            .map(|(k, node)| {
                let (file, skew) = (&files[k], skews[k]);
                scope.spawn(move || -> Result<Agent> {
                    let log = out.join(format!("agent-{k}.log"));
                    let mut cmd = record_command(agent, None, file);
                    cmd.arg("--force")
                        .args(["--node", &format!("node-{k}")])
                        .arg(format!(
                            "--clock-skew={},{}",
                            skew.offset_ns, skew.drift_ppm
                        ));
                    if mode == AgentMode::NodePods {
                        // By inode: the node's /run/netns does not show the lab's names, and
                        // the agent finds each namespace by the processes in it.
                        cmd.arg(format!("--netns={}", machine::inode(node)?));
                        for pod in net.pods(k) {
                            cmd.arg(format!("--netns={}", machine::inode(pod)?));
                        }
                    }
                    let on_node = |cmd: &mut Command| net.machine(k).spawn(node, cmd);
                    Agent::start_logged_by(cmd, &log, on_node).with_context(|| {
                        format!("the agent of node {k} did not start; see {}", log.display())
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("agent starter panicked"))
            .collect()
    });
    // Every started agent is kept (and killed on drop) even when another failed.
    let mut agents = Vec::new();
    let mut failure = None;
    for a in started {
        match a {
            Ok(a) => agents.push(a),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let mut programs = BTreeSet::new();
    for a in &agents {
        programs.extend(a.program_ids()?);
    }
    Ok(Recording {
        agents,
        programs,
        files,
    })
}

impl Recording {
    /// Stops the agents with SIGINT and checks that each exited cleanly and that their programs
    /// are gone; returns the trace files and what each agent wrote.
    pub fn stop(self) -> Result<(Vec<PathBuf>, Vec<Written>)> {
        for a in &self.agents {
            a.signal(libc::SIGINT);
        }
        let mut written = Vec::new();
        for (k, a) in self.agents.into_iter().enumerate() {
            let stopped = a.wait()?;
            if !stopped.status.success() || stopped.stderr.contains("panicked") {
                bail!(
                    "the agent of node {k} exited with {}:\n{}",
                    stopped.status,
                    stopped.stderr
                );
            }
            let (events, lost) = stopped.summary().with_context(|| {
                format!("no summary from node {k}'s agent:\n{}", stopped.stdout)
            })?;
            written.push(Written { events, lost });
        }
        let left = wait_unloaded(&self.programs)?;
        if !left.is_empty() {
            bail!("BPF programs left loaded after the agents exited: {left:?}");
        }
        Ok((self.files, written))
    }
}
