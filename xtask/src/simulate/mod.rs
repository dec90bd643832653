//! `cargo xtask simulate`: agent-format traces of N simulated nodes whose clocks we choose, with
//! the truth beside them.
//!
//! Network namespaces share one real clock, so they can only show linear skews injected by the
//! agent. The simulator covers what they cannot: NTP-slewed and temperature-curved clocks,
//! asymmetric minimum delays, heavy-tailed latencies, many nodes. Each node's file is exactly what
//! `tsync-agent` would have written had it run there, so the analyzer reads it the same way.

pub mod check;
pub mod clock;
pub mod network;
mod traffic;

use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tsync_common::PacketEvent;
use tsync_common::format::{AgentOptions, Footer, Header, Interface, TraceWriter};

pub use clock::{ClockKind, ClockModel};
use traffic::Connection;

/// `cargo xtask simulate`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    config: SimConfig,
    /// Output directory.
    #[arg(short, long, default_value = "target/simulate")]
    out: PathBuf,
    /// Then synchronize the traces with both algorithms and print each node's error against the
    /// truth.
    #[arg(long)]
    check: bool,
}

impl Args {
    pub fn run(self) -> anyhow::Result<()> {
        let truth = simulate(&self.config, &self.out)?;
        println!(
            "{} messages among {} nodes written to {}",
            truth.messages,
            truth.nodes.len(),
            self.out.display()
        );
        if self.check {
            print!("{}", check::table(&check::measure_both(&truth)?));
        }
        Ok(())
    }
}

/// Local clocks start at this value (ns), as a node's monotonic clock reads its uptime, so that
/// negative offsets still give positive times.
pub const BOOT_NS: f64 = 1000e9;

/// What to simulate.
#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct SimConfig {
    /// Number of nodes; node 0 has a perfect clock.
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// Simulated seconds.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Clock family of every node but node 0.
    #[arg(long, value_enum, default_value_t = ClockKind::Linear)]
    pub clock: ClockKind,
    /// Largest clock offset, in ms.
    #[arg(long, default_value_t = 50.0)]
    pub max_offset_ms: f64,
    /// Largest drift, in ppm.
    #[arg(long, default_value_t = 100.0)]
    pub max_drift_ppm: f64,
    /// Request/response exchanges per second between each pair of nodes.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Smallest one-way delay, in µs.
    #[arg(long, default_value_t = 30.0)]
    pub min_delay_us: f64,
    /// Largest extra minimum delay of one direction over the other, in µs.
    #[arg(long, default_value_t = 5.0)]
    pub asymmetry_us: f64,
    /// Mean extra delay above the minimum, in µs.
    #[arg(long, default_value_t = 20.0)]
    pub mean_extra_us: f64,
    /// Random seed: the same seed gives the same files.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The truth about a simulation, written as `truth.json` beside the traces.
#[derive(Serialize, Debug, Clone)]
pub struct Truth {
    pub config: SimConfig,
    pub boot_ns: f64,
    pub nodes: Vec<NodeTruth>,
    pub messages: u64,
}

/// One simulated node.
#[derive(Serialize, Debug, Clone)]
pub struct NodeTruth {
    pub name: String,
    pub file: PathBuf,
    pub clock: ClockModel,
    pub events: u64,
    /// Local times of the node's first and last events (ns).
    pub first_ns: u64,
    pub last_ns: u64,
}

impl Truth {
    /// Maps a local time of trace `k` to what trace `r`'s clock read at the same true instant.
    pub fn map(&self, k: usize, r: usize, t_k: f64) -> f64 {
        let t = self.nodes[k].clock.true_time(t_k - self.boot_ns);
        self.nodes[r].clock.local(t) + self.boot_ns
    }
}

/// One event waiting in a node's reorder buffer, ordered by local time (earliest first).
#[derive(PartialEq, Eq)]
struct Pending(PacketEvent);

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.ts_ns.cmp(&self.0.ts_ns)
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// A node being written: its clock, its file, and events not yet safe to write.
struct Node {
    clock: ClockModel,
    writer: TraceWriter<std::io::BufWriter<std::fs::File>>,
    pending: BinaryHeap<Pending>,
    events: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl Node {
    fn local_ns(&self, t: f64) -> u64 {
        (self.clock.local(t) + BOOT_NS).round() as u64
    }

    /// Writes the pending events that happened before true time `t`: every later event of this
    /// node happens after `t`, so its local time is larger (clocks only go forward).
    fn flush_before(&mut self, t: f64) -> anyhow::Result<()> {
        let horizon = self.local_ns(t);
        while self.pending.peek().is_some_and(|p| p.0.ts_ns <= horizon) {
            let event = self.pending.pop().expect("peeked").0;
            self.writer.write_event(&event)?;
            self.events += 1;
            self.first_ns.get_or_insert(event.ts_ns);
            self.last_ns = event.ts_ns;
        }
        Ok(())
    }
}

/// Simulates `config` and writes `node-K.tsync` files and `truth.json` into `out`.
pub fn simulate(config: &SimConfig, out: &Path) -> anyhow::Result<Truth> {
    anyhow::ensure!(config.nodes >= 2, "a simulation needs at least 2 nodes");
    anyhow::ensure!(
        config.duration > 0.0 && config.rate > 0.0,
        "duration and rate must be positive"
    );
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(config.seed);
    let duration_ns = config.duration * 1e9;
    let mut nodes = Vec::new();
    let mut truth_nodes = Vec::new();
    for k in 0..config.nodes {
        let clock = if k == 0 {
            ClockModel::perfect()
        } else {
            ClockModel::random(
                config.clock,
                config.max_offset_ms * 1e6,
                config.max_drift_ppm,
                duration_ns,
                &mut rng,
            )
        };
        let name = format!("sim-{k}");
        let file = out.join(format!("node-{k}.tsync"));
        let writer = TraceWriter::create(&file, &node_header(&name, k, config))?;
        truth_nodes.push(NodeTruth {
            name,
            file,
            clock: clock.clone(),
            events: 0,
            first_ns: 0,
            last_ns: 0,
        });
        nodes.push(Node {
            clock,
            writer,
            pending: BinaryHeap::new(),
            events: 0,
            first_ns: None,
            last_ns: 0,
        });
    }
    let mut connections = traffic::connections(config, &mut rng);
    let mut messages = 0u64;
    // Exchanges start in true-time order across all connections.
    let mut next: BinaryHeap<std::cmp::Reverse<(u64, usize)>> = BinaryHeap::new();
    for (c, conn) in connections.iter_mut().enumerate() {
        let start = conn.next_start(&mut rng);
        next.push(std::cmp::Reverse((start as u64, c)));
    }
    while let Some(std::cmp::Reverse((start, c))) = next.pop() {
        let start = start as f64;
        if start >= duration_ns {
            break;
        }
        for node in &mut nodes {
            node.flush_before(start)?;
        }
        let conn: &mut Connection = &mut connections[c];
        for packet in conn.exchange(start, &mut rng) {
            let mut event = packet.event;
            for (node, direction, t) in [
                (packet.from, tsync_common::direction::SEND, packet.sent),
                (packet.to, tsync_common::direction::RECV, packet.received),
            ] {
                event.direction = direction;
                event.ts_ns = nodes[node].local_ns(t);
                event.ifindex = 2;
                event.cpu = rng.random_range(0..2);
                nodes[node].pending.push(Pending(event));
            }
            messages += 1;
        }
        let following = start + conn.next_start(&mut rng);
        next.push(std::cmp::Reverse((following as u64, c)));
    }
    for (node, truth) in nodes.into_iter().zip(&mut truth_nodes) {
        (truth.first_ns, truth.last_ns) = (node.first_ns.unwrap_or(0), node.last_ns);
        truth.events = finish_node(node)?;
    }
    let truth = Truth {
        config: config.clone(),
        boot_ns: BOOT_NS,
        nodes: truth_nodes,
        messages,
    };
    let truth_path = out.join("truth.json");
    std::fs::write(&truth_path, serde_json::to_string_pretty(&truth)?)
        .with_context(|| format!("cannot write {}", truth_path.display()))?;
    Ok(truth)
}

fn finish_node(mut node: Node) -> anyhow::Result<u64> {
    node.flush_before(f64::INFINITY)?;
    let footer = Footer {
        events: node.events,
        ..Default::default()
    };
    node.writer.finish(&footer)?;
    Ok(node.events)
}

/// 2026-01-01 00:00:00 UTC, the simulated nodes' wall-clock time at true time 0.
const SIM_EPOCH_REALTIME_NS: i64 = 1_767_225_600_000_000_000;

fn node_header(name: &str, k: usize, config: &SimConfig) -> Header {
    Header {
        node: name.into(),
        hostname: name.into(),
        boot_id: format!("simulated-{}-{k}", config.seed),
        kernel_release: "simulated".into(),
        clocksource: "simulated".into(),
        interfaces: vec![Interface {
            ifindex: 2,
            name: "sim0".into(),
            mac: None,
            addresses: vec![format!("{}/16", traffic::address(k))],
        }],
        // Wall-clock time at the start (monotonic BOOT_NS): 2026-01-01 00:00:00 UTC on every
        // node (their realtime clocks agree, as NTP keeps them), so exports show plausible dates.
        start_realtime_ns: SIM_EPOCH_REALTIME_NS,
        start_monotonic_ns: BOOT_NS as u64,
        options: AgentOptions {
            agent_version: format!("xtask simulate {}", env!("CARGO_PKG_VERSION")),
            command_line: std::env::args().collect(),
            ..Default::default()
        },
    }
}
