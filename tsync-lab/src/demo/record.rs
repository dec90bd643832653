//! The nodes' traffic recorded: namespaces on a bridge, one agent per node with its known
//! `--clock-skew`, `tsync-lab traffic` in every node talking to every other; then the check that
//! the agents exited cleanly and nothing is left (programs, namespaces).
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use anyhow::{Context, bail};
use tsync_common::format::ClockSkew;

use super::DemoOptions;
use crate::{Agent, Binaries, Bridge, Offloads, record_command, wait_unloaded};

/// A child process that is killed and reaped if still running when dropped (the traffic
/// generators of the demo and the cluster lab).
pub(crate) struct Guarded(pub Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts an agent in node `k`'s namespace, its stderr copied to `agent-K.log`, and waits until
/// it says it is recording.
fn start_agent(
    lab: &Bridge,
    agent: &Path,
    k: usize,
    skew: ClockSkew,
    out: &Path,
) -> anyhow::Result<Agent> {
    let file = out.join(format!("node-{k}.tsync"));
    let log = out.join(format!("agent-{k}.log"));
    let mut cmd = record_command(agent, Some(&lab.nodes()[k]), &file);
    // The demo owns its output directory: a repeated run replaces its own traces.
    cmd.arg("--force")
        .args(["--node", &format!("node-{k}")])
        .arg(format!(
            "--clock-skew={},{}",
            skew.offset_ns, skew.drift_ppm
        ));
    Agent::start_logged(cmd, &log)
        .with_context(|| format!("agent of node {k} did not start; see {}", log.display()))
}

/// Stops the agents with SIGINT, as a user would, and checks that they exit cleanly.
fn stop_agents(agents: Vec<Agent>) -> anyhow::Result<()> {
    for agent in &agents {
        agent.signal(libc::SIGINT);
    }
    for (k, agent) in agents.into_iter().enumerate() {
        let status = agent.wait()?.status;
        if !status.success() {
            bail!("agent of node {k} exited with {status}");
        }
    }
    Ok(())
}

/// Runs the traffic generator (`tsync-lab traffic`, binary `generator`) in every node, all
/// talking to all, and waits for them. Each also writes its node's application log
/// (`app-K.jsonl`), stamped with the node's skewed clock.
fn run_traffic(
    lab: &Bridge,
    generator: &Path,
    duration: f64,
    skews: &[ClockSkew],
    out: &Path,
) -> anyhow::Result<()> {
    let n = lab.nodes().len();
    let mut generators = Vec::new();
    for (k, skew) in skews.iter().enumerate().take(n) {
        let peers: Vec<String> = (0..n)
            .filter(|&p| p != k)
            .map(|p| format!("{}:7000", Bridge::address(p)))
            .collect();
        let log = std::fs::File::create(out.join(format!("traffic-{k}.log")))?;
        let child = lab.nodes()[k]
            .command(generator)
            .args([
                "traffic",
                "--listen",
                &format!("{}:7000", Bridge::address(k)),
            ])
            .arg(format!("--peers={}", peers.join(",")))
            .arg(format!("--duration={duration}"))
            .arg(format!("--node-index={k}"))
            .arg(format!(
                "--clock-skew={},{}",
                skew.offset_ns, skew.drift_ppm
            ))
            .arg("--app-log")
            .arg(out.join(format!("app-{k}.jsonl")))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start the traffic generator")?;
        generators.push(Guarded(child));
    }
    for (k, g) in generators.iter_mut().enumerate() {
        let status = g.0.wait()?;
        if !status.success() {
            bail!(
                "traffic generator of node {k} failed ({status}); see {}",
                out.join(format!("traffic-{k}.log")).display()
            );
        }
    }
    Ok(())
}

/// Records the nodes' traffic with known skews; returns the trace files, once the agents have
/// stopped, their programs are gone and the namespaces deleted.
pub fn record(
    args: &DemoOptions,
    binaries: &Binaries,
    skews: &[ClockSkew],
    out: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let prefix = format!("tsd{}", std::process::id());
    let lab = Bridge::create(&prefix, args.nodes)?;
    if args.offloads != Offloads::Kernel {
        lab.set_offloads(args.offloads == Offloads::On)?;
    }
    let mut agents = Vec::new();
    let mut programs = BTreeSet::new();
    for (k, &skew) in skews.iter().enumerate() {
        let agent = start_agent(&lab, &binaries.agent, k, skew, out)?;
        programs.extend(agent.program_ids()?);
        agents.push(agent);
    }
    eprintln!(
        "agents recording; {} s of traffic among {} nodes",
        args.duration, args.nodes
    );
    run_traffic(&lab, &binaries.lab, args.duration, skews, out)?;
    stop_agents(agents)?;
    let left = wait_unloaded(&programs)?;
    if !left.is_empty() {
        bail!("BPF programs left loaded after the agents exited: {left:?}");
    }
    drop(lab);
    let left = crate::leftovers(&prefix)?;
    if !left.is_empty() {
        bail!("namespaces left behind: {}", left.join(", "));
    }
    Ok((0..args.nodes)
        .map(|k| out.join(format!("node-{k}.tsync")))
        .collect())
}
