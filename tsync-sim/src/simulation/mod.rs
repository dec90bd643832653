//! The simulator (`cargo xtask simulate`): agent-format traces of N simulated nodes whose clocks
//! we choose, with the truth beside them.
//!
//! Network namespaces share one real clock, so they can only show linear skews injected by the
//! agent. The simulator covers what they cannot: crystals that wander with temperature, NTP and
//! chrony slewing CLOCK_MONOTONIC (and only it: CLOCK_MONOTONIC_RAW keeps following the crystal),
//! asymmetric minimum delays, heavy-tailed latencies, many nodes, hours of traffic. Each node's
//! file is what `tsync-agent` would have written had it run there — events stamped with
//! CLOCK_MONOTONIC, a bracketed clock sample every 20 ms, the kernel's clock discipline when it
//! changes, a flush every 0.5 s — so the analyzer reads it the same way. The same messages can
//! also be written as one text message file, the input that has no clock samples at all.

#[cfg(test)]
mod tests;

use std::collections::BinaryHeap;
use std::path::Path;

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tsync_common::format::{AgentOptions, Header, Interface};

use crate::agent::{NodeWriter, Sampler};
use crate::clock::{BOOT_NS, ClockKind, ClockModel, Crystal, LinearClock};
use crate::ntp;
use crate::random::substream;
use crate::text::TextWriter;
use crate::traffic::{self, Connection};
use crate::truth::{NodeTruth, Truth};

/// What to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One agent trace file per node (`node-K.tsync`).
    Trace,
    /// One text message file (`messages.txt`), trace K being node K: no clock samples.
    Text,
    /// Both.
    Both,
}

impl Format {
    /// Whether trace files are written.
    pub fn traces(self) -> bool {
        self != Format::Text
    }

    /// Whether the text message file is written.
    pub fn text(self) -> bool {
        self != Format::Trace
    }
}

/// What to simulate: `cargo xtask simulate`'s options, whose defaults are
/// [`SimConfig::default`].
#[derive(clap::Args, Clone, Debug, Serialize)]
pub struct SimConfig {
    /// Number of nodes; node 0's crystal is perfect (its CLOCK_MONOTONIC is still slewed when a
    /// daemon runs).
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// Simulated seconds. An hour at the default rate is ~3.2 million messages and ~0.5 GB of
    /// trace files.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Clock family of every node.
    #[arg(long, value_enum, default_value_t = ClockKind::Linear)]
    pub clock: ClockKind,
    /// Largest CLOCK_MONOTONIC offset at the start, in ms.
    #[arg(long, default_value_t = 50.0)]
    pub max_offset_ms: f64,
    /// Largest crystal drift, in ppm.
    #[arg(long, default_value_t = 100.0)]
    pub max_drift_ppm: f64,
    /// How fast a wandering crystal's frequency changes, in ppm per hour (root mean square; the
    /// peak is at most √6 times that) (`--clock curved|disciplined`).
    #[arg(long, default_value_t = 2.0)]
    pub wander_ppm_per_hour: f64,
    /// Mean seconds between the NTP daemon's polls, each a frequency step and a phase slew
    /// (`--clock slewed|disciplined`).
    #[arg(long, default_value_t = 16.0)]
    pub ntp_poll: f64,
    /// Standard deviation of the daemon's offset measurements, in µs.
    #[arg(long, default_value_t = 50.0)]
    pub ntp_noise_us: f64,
    /// Share of the daemon's measurements that are 1–4 ms off (slewed away at the full rate).
    #[arg(long, default_value_t = 0.05)]
    pub ntp_outliers: f64,
    /// Largest phase-slew rate, in ppm (the kernel's PLL limit).
    #[arg(long, default_value_t = 500.0)]
    pub max_slew_ppm: f64,
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
    /// What to write: agent trace files, one text message file, or both.
    #[arg(long, value_enum, default_value_t = Format::Trace)]
    pub format: Format,
    /// Random seed: the same seed gives the same files.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// A node being written: its clock, its sampling timer, and its file.
struct Node {
    clock: ClockModel,
    sampler: Sampler,
    out: NodeWriter,
}

impl Node {
    fn local_ns(&self, t: f64) -> u64 {
        (self.clock.mono(t) + BOOT_NS).round() as u64
    }

    /// Writes the pending events that happened before true time `t`: every later event of this
    /// node happens after `t`, so its local time is larger (clocks only go forward).
    fn flush_before(&mut self, t: f64) -> anyhow::Result<()> {
        Ok(self.out.write_until(self.local_ns(t))?)
    }

    /// Brings the file up to true time `t`: the clock samples due before `t`, each after the
    /// events that precede it, then the remaining events before `t`.
    fn advance(&mut self, t: f64) -> anyhow::Result<()> {
        if self.out.has_file() {
            while self.sampler.next_true_ns() <= t {
                let at = self.sampler.next_true_ns();
                self.flush_before(at)?;
                let reading = self.sampler.take(&self.clock);
                self.out.write_reading(reading)?;
            }
        }
        self.flush_before(t)
    }

    /// Writes the last events, the agent's last clock sample (taken when it stops, at true time
    /// `end_ns`) and the end chunk.
    fn finish(mut self, end_ns: f64, truth: &mut NodeTruth) -> anyhow::Result<()> {
        let last = self
            .out
            .has_file()
            .then(|| self.sampler.take_final(&self.clock, end_ns));
        let w = self.out.finish(last)?;
        (truth.first_ns, truth.last_ns) = (w.first_ns, w.last_ns);
        (truth.events, truth.samples, truth.kernel_states) = (w.events, w.samples, w.kernel_states);
        Ok(())
    }
}

impl Default for SimConfig {
    /// The options' defaults, as `cargo xtask simulate` with no flag takes them.
    fn default() -> Self {
        use clap::{Args, FromArgMatches};
        let matches =
            Self::augment_args(clap::Command::new("simulate")).get_matches_from(["simulate"]);
        Self::from_arg_matches(&matches).expect("the defaults are valid options")
    }
}

/// How long the agents keep recording after the last exchange started (true ns): every packet
/// of it has arrived by then (each delay is capped at 20 ms).
const TAIL_NS: f64 = 0.5e9;

/// Node `k`'s clocks. The offset and drift come from the main stream (as they always did), the
/// rest from the node's own.
fn draw_clock(
    config: &SimConfig,
    k: usize,
    end_ns: f64,
    rng: &mut StdRng,
) -> anyhow::Result<ClockModel> {
    let (offset_ns, drift_ppm) = if k == 0 {
        (0.0, 0.0)
    } else {
        let max_offset_ns = config.max_offset_ms * 1e6;
        (
            rng.random_range(-max_offset_ns..=max_offset_ns),
            rng.random_range(-config.max_drift_ppm..=config.max_drift_ppm),
        )
    };
    let mut own = substream(config.seed, k, 1);
    let kind = config.clock;
    let unsynchronized_realtime = SIM_EPOCH_REALTIME_NS - BOOT_NS as i64;
    if !kind.slewed() {
        let raw = if kind.wanders() && k > 0 {
            Crystal::wander(offset_ns, drift_ppm, config.wander_ppm_per_hour, &mut own)
        } else {
            Crystal::Linear(LinearClock {
                offset_ns,
                drift_ppm,
            })
        };
        return Ok(ClockModel::unslewed(raw, unsynchronized_realtime));
    }
    anyhow::ensure!(
        config.ntp_poll > 0.0 && config.max_slew_ppm > 0.0 && config.max_slew_ppm < 5000.0,
        "--ntp-poll must be positive and --max-slew-ppm within (0, 5000)"
    );
    // CLOCK_MONOTONIC starts at the drawn offset. CLOCK_MONOTONIC_RAW is off from it by what the
    // daemon's frequency correction (about −drift) took away over the node's uptime before the
    // recording (1–10 h): seconds apart on a real node, and not knowable from the events.
    let uptime_ns = own.random_range(3600e9..36000e9);
    let raw_offset_ns = offset_ns + drift_ppm * 1e-6 * uptime_ns;
    let raw = if kind.wanders() && k > 0 {
        Crystal::wander(
            raw_offset_ns,
            drift_ppm,
            config.wander_ppm_per_hour,
            &mut own,
        )
    } else {
        Crystal::Linear(LinearClock {
            offset_ns: raw_offset_ns,
            drift_ppm,
        })
    };
    let mut clock = ClockModel::unslewed(raw, 0);
    let daemon = ntp::Daemon {
        poll_s: config.ntp_poll,
        noise_ns: config.ntp_noise_us * 1e3,
        outliers: config.ntp_outliers,
        max_slew_ppm: config.max_slew_ppm,
    };
    let realtime_error = daemon.discipline(&mut clock, offset_ns, end_ns, &mut own);
    // Realtime = monotonic + this reads UTC plus the daemon's error at true time 0.
    // (Integers: an f64 near 1.8·10¹⁸ ns only holds multiples of 256 ns.)
    clock.realtime_minus_monotonic_ns =
        SIM_EPOCH_REALTIME_NS - BOOT_NS as i64 + (realtime_error - offset_ns).round() as i64;
    Ok(clock)
}

/// Simulates `config` and writes, into `out`, `node-K.tsync` files and/or `messages.txt`, and
/// `truth.json`.
pub fn simulate(config: &SimConfig, out: &Path) -> anyhow::Result<Truth> {
    anyhow::ensure!(config.nodes >= 2, "a simulation needs at least 2 nodes");
    anyhow::ensure!(
        config.duration > 0.0 && config.rate > 0.0,
        "duration and rate must be positive"
    );
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut rng = StdRng::seed_from_u64(config.seed);
    let duration_ns = config.duration * 1e9;
    let end_ns = duration_ns + TAIL_NS;
    let mut nodes = Vec::new();
    let mut truth_nodes = Vec::new();
    for k in 0..config.nodes {
        let clock = draw_clock(config, k, end_ns + 1e9, &mut rng)?;
        let name = format!("sim-{k}");
        let file = out.join(format!("node-{k}.tsync"));
        let out = if config.format.traces() {
            NodeWriter::create(&file, &node_header(&name, k, config, &clock))?
        } else {
            NodeWriter::without_file()
        };
        truth_nodes.push(NodeTruth {
            name,
            file,
            clock: clock.clone(),
            events: 0,
            first_ns: 0,
            last_ns: 0,
            samples: 0,
            kernel_states: 0,
        });
        let sampler = Sampler::new(&clock, config.clock.slewed(), substream(config.seed, k, 2));
        nodes.push(Node {
            clock,
            sampler,
            out,
        });
    }
    let text_path = out.join("messages.txt");
    let mut text = if config.format.text() {
        Some(TextWriter::create(
            &text_path,
            config.nodes,
            &format!(
                "cargo xtask simulate: {} nodes, {} s, --clock {:?}, seed {}; CLOCK_MONOTONIC \
                 times, trace K is node K",
                config.nodes, config.duration, config.clock, config.seed
            ),
        )?)
    } else {
        None
    };
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
            node.advance(start)?;
        }
        if let Some(text) = &mut text {
            text.write_before(start)?;
        }
        let conn: &mut Connection = &mut connections[c];
        for packet in conn.exchange(start, &mut rng) {
            let mut event = packet.event;
            let mut stamps = [0i64; 2];
            for (i, (node, direction, t)) in [
                (packet.from, tsync_common::direction::SEND, packet.sent),
                (packet.to, tsync_common::direction::RECV, packet.received),
            ]
            .into_iter()
            .enumerate()
            {
                event.direction = direction;
                event.ts_ns = nodes[node].local_ns(t);
                event.ifindex = 2;
                event.cpu = rng.random_range(0..2);
                stamps[i] = event.ts_ns as i64;
                nodes[node].out.queue(event);
            }
            if let Some(text) = &mut text {
                let (from, to) = (packet.from as u32, packet.to as u32);
                text.push(packet.sent, from, to, stamps[0], stamps[1]);
            }
            messages += 1;
        }
        let following = start + conn.next_start(&mut rng);
        next.push(std::cmp::Reverse((following as u64, c)));
    }
    for node in &mut nodes {
        node.advance(end_ns)?;
    }
    if let Some(text) = text {
        text.finish()?;
    }
    for (node, truth) in nodes.into_iter().zip(&mut truth_nodes) {
        node.finish(end_ns, truth)?;
    }
    let truth = Truth {
        config: config.clone(),
        boot_ns: BOOT_NS,
        nodes: truth_nodes,
        messages,
        text: config.format.text().then_some(text_path),
    };
    let truth_path = out.join("truth.json");
    std::fs::write(&truth_path, serde_json::to_string_pretty(&truth)?)
        .with_context(|| format!("cannot write {}", truth_path.display()))?;
    Ok(truth)
}

/// 2026-01-01 00:00:00 UTC, the simulated nodes' wall-clock time at true time 0.
const SIM_EPOCH_REALTIME_NS: i64 = 1_767_225_600_000_000_000;

fn node_header(name: &str, k: usize, config: &SimConfig, clock: &ClockModel) -> Header {
    // `--clock linear` keeps the headers it always had: monotonic BOOT_NS at 2026-01-01
    // 00:00:00 UTC on every node, so exports show plausible dates. Otherwise the header holds
    // the node's own clocks at true time 0, realtime = monotonic + the node's constant.
    let (start_monotonic_ns, start_realtime_ns) = if config.clock == ClockKind::Linear {
        (BOOT_NS as u64, SIM_EPOCH_REALTIME_NS)
    } else {
        let mono = (clock.mono(0.0) + BOOT_NS).round() as u64;
        (
            mono,
            (mono as i64).saturating_add(clock.realtime_minus_monotonic_ns),
        )
    };
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
            ..Default::default()
        }],
        start_realtime_ns,
        start_monotonic_ns,
        options: AgentOptions {
            // What `cargo xtask simulate` always wrote, whoever runs the simulator.
            agent_version: format!("xtask simulate {}", env!("CARGO_PKG_VERSION")),
            command_line: std::env::args().collect(),
            ..Default::default()
        },
    }
}
