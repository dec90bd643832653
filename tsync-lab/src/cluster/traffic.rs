//! The cluster's applications: in every pod, `tsync-lab traffic` (TCP request/response and bulk)
//! and `tsync-lab datagrams` (UDP request/response from connected and unconnected sockets, and
//! QUIC-like UDP), serving on the [`port`]s and talking to the pods' [`Plan::targets`] on the
//! other nodes (and, with `nat`, to their own node's service: [`Plan::hairpin_targets`]), over
//! IPv4 and IPv6, each process started on its node's machine ([`super::machine`]). All start
//! together and run for the same duration; a generator that fails (a peer it never reached) fails the run with its log.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use super::network::ClusterNet;
use super::topology::{Plan, port};
use crate::demo::record::Guarded;

/// How much traffic each pod sends to each of its targets (one address of one family).
///
/// The defaults keep a 3-node, 2-pod cluster at about 20 000 recorded events per second with
/// node agents (each packet is seen twice on each of its two nodes), below what starves the
/// agents' clock samplers on two cores: a sampler held off for tens of milliseconds widens the
/// raw-clock conversion's bound, and with it every interval, by hundreds of microseconds.
#[derive(clap::Args, Debug, Clone)]
pub struct Load {
    /// Seconds of traffic per topology.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// TCP request/response exchanges per second to each target.
    #[arg(long, default_value_t = 10.0)]
    pub tcp_rate: f64,
    /// TCP bulk bytes per second to each target (0: no bulk flows).
    #[arg(long, default_value_t = 50_000)]
    pub bulk_rate: u64,
    /// UDP requests per second to each target, for each of the three UDP clients (connected,
    /// unconnected, QUIC-like).
    #[arg(long, default_value_t = 10.0)]
    pub udp_rate: f64,
}

/// Seconds each generator keeps serving after its own traffic, for peers finishing late.
const LINGER: f64 = 1.0;

/// One generator process: which pod, what it is, its log.
struct Generator {
    child: Guarded,
    what: String,
    log: PathBuf,
}

/// Runs every pod's generators and waits for them; fails naming the first that failed.
pub fn run(net: &ClusterNet, plan: &Plan, lab: &Path, load: &Load, out: &Path) -> Result<()> {
    let mut generators = Vec::new();
    for k in 0..plan.nodes {
        for (p, pod) in net.pods(k).iter().enumerate() {
            let mut targets = plan.targets(k);
            targets.extend(plan.hairpin_targets(k, p));
            let list = |service: u16| {
                targets
                    .iter()
                    .map(|t| t.at(service).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let tcp = vec![
                "traffic".to_owned(),
                format!("--listen=[::]:{}", port::TCP),
                format!("--peers={}", list(port::TCP)),
                format!("--duration={}", load.duration),
                format!("--rate={}", load.tcp_rate),
                format!("--bulk-rate={}", load.bulk_rate),
                format!("--linger={LINGER}"),
            ];
            let udp = vec![
                "datagrams".to_owned(),
                format!(
                    "--dns-listen=[::]:{},[::]:{}",
                    port::UDP_CONNECTED,
                    port::UDP_UNCONNECTED
                ),
                format!("--quic-listen=[::]:{}", port::QUIC),
                format!("--connected-peers={}", list(port::UDP_CONNECTED)),
                format!("--unconnected-peers={}", list(port::UDP_UNCONNECTED)),
                format!("--quic-peers={}", list(port::QUIC)),
                format!("--rate={}", load.udp_rate),
                format!("--duration={}", load.duration),
                format!("--linger={LINGER}"),
            ];
            for args in [tcp, udp] {
                let what = format!("{} of node {k} pod {p}", args[0]);
                let log = out.join(format!("{}-n{k}p{p}.log", args[0]));
                let file = std::fs::File::create(&log)
                    .with_context(|| format!("cannot create {}", log.display()))?;
                let mut cmd = Command::new(lab);
                cmd.args(&args)
                    .stdin(Stdio::null())
                    .stdout(file.try_clone()?)
                    .stderr(file);
                let child = net
                    .machine(k)
                    .spawn(pod, &mut cmd)
                    .with_context(|| format!("cannot start the {what}"))?;
                generators.push(Generator {
                    child: Guarded(child),
                    what,
                    log,
                });
            }
        }
    }
    for g in &mut generators {
        let status = g.child.0.wait()?;
        if !status.success() {
            let said = std::fs::read_to_string(&g.log).unwrap_or_default();
            bail!(
                "the {} failed ({status}); {}:\n{}",
                g.what,
                g.log.display(),
                said.trim()
            );
        }
    }
    Ok(())
}
