//! The cluster lab (`cargo xtask cluster`): tsync where distributed systems run — applications in
//! pods behind nodes that bridge, route, tunnel and NAT their traffic, one agent per node.
//!
//! Each run builds a cluster of network namespaces for one [`Topology`] ([`network`]): N nodes on
//! one wire (a bridge in a switch namespace), each with pods behind it and a machine of its own
//! (PID and mount namespaces: [`machine`]); starts one `tsync-agent` per node on its machine in
//! the node's namespace, with a known `--clock-skew` ([`record`]); runs TCP and UDP applications
//! in the pods, talking to pods on the other nodes over IPv4 and IPv6 ([`traffic`]); stops the
//! agents, tears the cluster down, synchronizes the traces with `tsync-analyze sync --json` and
//! checks the result against the truth ([`checks`]): per kind of packet the share of those
//! between nodes that matched, the truth inside every interval, the error at the middle, the
//! intervals' widths, the messages non-causal in true time. One table row per run, and every
//! figure against the expectations kept in [`expectations`] ([`report`]): the lab fails naming
//! each one missed.
//!
//! [`Cluster::run`] is the list of steps.
pub mod checks;
pub mod expectations;
pub mod machine;
pub mod nat;
pub mod network;
pub mod record;
pub mod report;
pub mod topology;
pub mod traffic;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use tsync_common::format::ClockSkew;

use crate::Binaries;
use crate::known_skew::skews;
use network::ClusterNet;
use record::AgentMode;
use report::Run;
pub use topology::{Plan, Topology};

/// Options of the cluster lab.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterOptions {
    /// Topology to run (repeatable; default: all of flat, routed, vxlan, vxlan-l2, nat).
    #[arg(long = "topology", value_enum, value_name = "NAME")]
    pub topologies: Vec<Topology>,
    /// What each node's agent records (repeatable; default: both): `node` (its own namespace, as
    /// a DaemonSet with hostNetwork) or `node+pods` (also its pods', with `--netns`).
    #[arg(long = "agents", value_enum, value_name = "MODE", default_values = ["node", "node+pods"])]
    pub agents: Vec<AgentMode>,
    /// Number of nodes (node 0 keeps the true clock and is the reference).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 2)]
    pub pods: usize,
    #[command(flatten)]
    pub load: traffic::Load,
    /// Seed of the injected skews; random when absent (printed, so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default: target/cluster/<seed>).
    #[arg(short, long)]
    pub out: Option<PathBuf>,
}

/// A cluster lab about to run, its options checked.
pub struct Cluster {
    options: ClusterOptions,
    topologies: Vec<Topology>,
    /// Where the default output (`cluster/SEED/`) goes.
    target: PathBuf,
}

impl Cluster {
    /// Checks the options and makes Ctrl-C a request to stop (the run then fails over to the
    /// teardown of what it started).
    pub fn new(options: ClusterOptions, target: &Path) -> anyhow::Result<Cluster> {
        crate::interrupt::catch()?;
        let mut topologies = if options.topologies.is_empty() {
            Topology::ALL.to_vec()
        } else {
            options.topologies.clone()
        };
        topologies.sort();
        topologies.dedup();
        for &t in &topologies {
            Plan::new(t, options.nodes, options.pods)?;
        }
        let load = &options.load;
        anyhow::ensure!(
            load.duration > 0.0 && load.tcp_rate > 0.0 && load.udp_rate > 0.0,
            "--duration, --tcp-rate and --udp-rate must be positive"
        );
        anyhow::ensure!(
            crate::is_root(),
            "the cluster lab needs root (network namespaces, eBPF)"
        );
        Ok(Cluster {
            options,
            topologies,
            target: target.to_owned(),
        })
    }

    /// Runs every topology with every agent mode asked for; prints the report and fails naming
    /// every figure that missed its expectation.
    pub fn run(self, binaries: &Binaries) -> anyhow::Result<()> {
        let o = &self.options;
        let seed = o.seed.unwrap_or_else(rand::random);
        let out = o
            .out
            .clone()
            .unwrap_or_else(|| self.target.join(format!("cluster/{seed}")));
        let skews = skews(o.nodes, seed);
        let mut agents = o.agents.clone();
        agents.sort();
        agents.dedup();
        if agents.contains(&AgentMode::NodePods) {
            record::ensure_netns_option(&binaries.agent)?;
        }
        eprintln!("cluster: seed {seed}, output in {}", out.display());
        let mut runs = Vec::new();
        for &mode in &agents {
            for &topology in &self.topologies {
                if crate::interrupt::interrupted() {
                    bail!("interrupted");
                }
                let plan = Plan::new(topology, o.nodes, o.pods)?;
                let dir = out.join(match mode {
                    AgentMode::Node => topology.name().to_owned(),
                    AgentMode::NodePods => format!("{}-node+pods", topology.name()),
                });
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                eprintln!(
                    "cluster: {} ({} agents): {} nodes × {} pods, {} s of traffic",
                    topology.name(),
                    mode.name(),
                    o.nodes,
                    o.pods,
                    o.load.duration
                );
                let outcome = measure(&plan, mode, binaries, &o.load, &skews, &dir, runs.len())
                    .map_err(|e| format!("{e:#}"));
                if let Err(e) = &outcome {
                    eprintln!("cluster: {}: {e}", topology.name());
                }
                runs.push(Run {
                    topology,
                    agents: mode,
                    outcome,
                });
            }
        }
        let report = format!(
            "tsync cluster lab: {} nodes × {} pods, {} s of traffic per topology, seed {seed}\n\n\
             {}\n{}\nexpectations (cluster/expectations.rs):\n\n{}\noutput: {}\n",
            o.nodes,
            o.pods,
            o.load.duration,
            report::table(&runs),
            report::details(&runs),
            report::expectations_table(&runs),
            out.display()
        );
        std::fs::write(out.join("report.md"), &report)?;
        println!("{report}");
        let failed = report::failures(&runs);
        println!(
            "cluster: {} run(s), {} expectation(s) missed",
            runs.len(),
            failed.len()
        );
        if failed.is_empty() {
            Ok(())
        } else {
            bail!(
                "the cluster lab's checks failed:\n  {}",
                failed.join("\n  ")
            )
        }
    }
}

/// One topology with one agent mode: build, record, tear down, check.
fn measure(
    plan: &Plan,
    mode: AgentMode,
    binaries: &Binaries,
    load: &traffic::Load,
    skews: &[ClockSkew],
    dir: &Path,
    run: usize,
) -> anyhow::Result<checks::Figures> {
    // Short: interface names are built from nothing longer, namespace names from this.
    let prefix = format!("tsc{}r{run}", std::process::id());
    let net = ClusterNet::build(plan, &prefix)?;
    if plan.topology == Topology::Nat
        && let Some(rules) = nat::listed(&net.nodes()[0])
    {
        std::fs::write(dir.join("nft-node-0.txt"), rules)?;
    }
    let start = Instant::now();
    let recording = record::start(&net, mode, &binaries.agent, skews, dir)?;
    let recording_at = start.elapsed();
    traffic::run(&net, plan, &binaries.lab, load, dir)?;
    let (files, written) = recording.stop()?;
    let egress: Vec<u32> = (0..plan.nodes).map(|k| net.egress_ifindex(k)).collect();
    drop(net);
    let left = crate::leftovers(&format!("{prefix}-"))?;
    if !left.is_empty() {
        bail!("namespaces left behind: {}", left.join(", "));
    }
    if crate::interrupt::interrupted() {
        bail!("interrupted");
    }
    let recorded = start.elapsed();
    let figures = checks::analyze(&binaries.analyzer, &files, &egress, skews, written, dir)?;
    eprintln!(
        "cluster: {}: agents recording after {:.1} s, recorded and torn down after {:.1} s, \
         analyzed in {:.1} s",
        plan.topology.name(),
        recording_at.as_secs_f64(),
        recorded.as_secs_f64(),
        (start.elapsed() - recorded).as_secs_f64()
    );
    Ok(figures)
}
