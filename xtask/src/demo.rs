//! `cargo xtask demo`: tsync end to end on real kernels, with known truth.
//!
//! Three "nodes" (network namespaces on one bridge) share the machine's clock. Each node's agent
//! is given a known `--clock-skew`, so the exact mapping between any two traces is known. Real TCP
//! traffic flows among the nodes while the agents record; then the analyzer synchronizes the
//! traces without ever reading the skews, and the demo checks every figure it reports against
//! the truth: the recovered offset and drift, the error in the middle of the trace, and whether
//! the truth lies inside the accuracy interval the analyzer guarantees. Each node also writes a
//! small application log stamped with its own (skewed) clock; `tsync-analyze apply --interval`
//! maps each log and `tsync-analyze merge` puts them on one timeline: every logged
//! request/response must then read in causal order, every interval must hold the shared realtime
//! clock's truth, and the report counts the events whose order the intervals guarantee.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng};
use tsync_analyze::{
    Algorithm, InputSet, MatchOptions, MatchedMessage, MessageSink, SyncOptions, SyncResult,
};
use tsync_common::format::ClockSkew;

use tsync_lab::{Agent, Bridge, record_command, wait_unloaded};

use crate::util::{build_release, release_binary, workspace_root};

/// Options of the demo.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Number of nodes (node 0 keeps the true clock).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Seed of the injected skews; random when absent (printed, so a run can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default: target/demo/<seed>).
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Largest error (µs) tolerated between recovered and true mapping, besides the interval.
    #[arg(long, default_value_t = 5.0)]
    pub max_error_us: f64,
    /// Segmentation and receive offloads on the veth links: `on` (TSO, GSO and GRO), `off`, or
    /// as the kernel sets them (`kernel`: veth's TSO and GSO on, GRO off).
    #[arg(long, value_enum, default_value = "kernel")]
    pub offloads: Offloads,
}

/// The `--offloads` choices.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offloads {
    On,
    Off,
    Kernel,
}

/// A child process that is killed and reaped if still running when dropped.
struct Guarded(Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The known skew of each node: node 0 none, the others up to ±50 ms and ±100 ppm.
pub fn skews(nodes: usize, seed: u64) -> Vec<ClockSkew> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..nodes)
        .map(|k| {
            if k == 0 {
                ClockSkew::default()
            } else {
                ClockSkew {
                    offset_ns: rng.random_range(-50_000_000..=50_000_000),
                    drift_ppm: (rng.random_range(-100.0..=100.0f64) * 1000.0).round() / 1000.0,
                }
            }
        })
        .collect()
}

/// Starts an agent in node `k`'s namespace, its stderr copied to `agent-K.log`, and waits until
/// it says it is recording.
fn start_agent(lab: &Bridge, k: usize, skew: ClockSkew, out: &Path) -> anyhow::Result<Agent> {
    let file = out.join(format!("node-{k}.tsync"));
    let log = out.join(format!("agent-{k}.log"));
    let mut cmd = record_command(&release_binary("tsync-agent"), Some(&lab.nodes()[k]), &file);
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

/// Runs the traffic generator in every node, all talking to all, and waits for them. Each also
/// writes its node's application log (`app-K.jsonl`), stamped with the node's skewed clock.
fn run_traffic(lab: &Bridge, duration: f64, skews: &[ClockSkew], out: &Path) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let n = lab.nodes().len();
    let mut generators = Vec::new();
    for (k, skew) in skews.iter().enumerate().take(n) {
        let peers: Vec<String> = (0..n)
            .filter(|&p| p != k)
            .map(|p| format!("{}:7000", Bridge::address(p)))
            .collect();
        let log = std::fs::File::create(out.join(format!("traffic-{k}.log")))?;
        let child = lab.nodes()[k]
            .command(&me)
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
pub fn record(args: &DemoArgs, skews: &[ClockSkew], out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let prefix = format!("tsd{}", std::process::id());
    let lab = Bridge::create(&prefix, args.nodes)?;
    if args.offloads != Offloads::Kernel {
        lab.set_offloads(args.offloads == Offloads::On)?;
    }
    let mut agents = Vec::new();
    let mut programs = BTreeSet::new();
    for (k, &skew) in skews.iter().enumerate() {
        let agent = start_agent(&lab, k, skew, out)?;
        programs.extend(agent.program_ids()?);
        agents.push(agent);
    }
    eprintln!(
        "agents recording; {} s of traffic among {} nodes",
        args.duration, args.nodes
    );
    run_traffic(&lab, args.duration, skews, out)?;
    stop_agents(agents)?;
    let left = wait_unloaded(&programs)?;
    if !left.is_empty() {
        bail!("BPF programs left loaded after the agents exited: {left:?}");
    }
    drop(lab);
    let left = tsync_lab::leftovers(&prefix)?;
    if !left.is_empty() {
        bail!("namespaces left behind: {}", left.join(", "));
    }
    Ok((0..args.nodes)
        .map(|k| out.join(format!("node-{k}.tsync")))
        .collect())
}

/// What the demo found for one node, against the truth.
pub struct NodeCheck {
    pub node: String,
    pub injected: ClockSkew,
    /// The node's clock minus node 0's at the middle of the pair's span: true and recovered (ns).
    /// (The offset at time 0 — boot — is less telling: it extrapolates the drift over the
    /// machine's whole uptime.)
    pub true_offset_mid_ns: f64,
    pub recovered_offset_mid_ns: f64,
    /// The node's drift relative to node 0, as recovered from its map onto node 0.
    pub recovered_ppm: f64,
    pub quality: String,
    /// Estimated minus true time on the node's clock at the middle of the pair's span (ns).
    pub mid_error_ns: f64,
    /// The guaranteed interval at that time, relative to the truth (ns): (lo − truth, hi − truth).
    pub interval: Option<(f64, f64)>,
}

impl NodeCheck {
    /// True when the truth lies inside the reported interval (1 ns of slack for the rounding of
    /// written timestamps to whole nanoseconds).
    pub fn truth_inside(&self) -> bool {
        self.interval
            .is_some_and(|(lo, hi)| lo <= 1.0 && hi >= -1.0)
    }
}

/// Counts matched messages received before they were sent once every trace is mapped onto its
/// reference.
struct InversionCounter<'a> {
    sync: &'a SyncResult,
    messages: u64,
    inversions: u64,
}

impl MessageSink for InversionCounter<'_> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        let msg = &m.message;
        let send = self.sync.to_reference(msg.send_trace, msg.send_ns);
        let recv = self.sync.to_reference(msg.recv_trace, msg.recv_ns);
        self.messages += 1;
        self.inversions += u64::from(recv < send);
    }

    fn wants_events(&self) -> bool {
        false
    }
}

/// Synchronizes the traces with node 0 as reference and checks every node against its skew.
pub fn analyze(
    files: &[PathBuf],
    skews: &[ClockSkew],
) -> anyhow::Result<(SyncResult, Vec<NodeCheck>, u64)> {
    let inputs = InputSet::open(files)?;
    let options = SyncOptions {
        algorithm: Algorithm::Chull,
        reference: Some("node-0".into()),
        matching: MatchOptions::default(),
        linreg_filter_z: None,
        ..Default::default()
    };
    let sync = tsync_analyze::sync(&inputs, &options, &mut |_| {})?;
    let mut checks = Vec::new();
    for (k, skew) in skews.iter().enumerate().skip(1) {
        checks.push(check_node(&sync, k, *skew)?);
    }
    let mut counter = InversionCounter {
        sync: &sync,
        messages: 0,
        inversions: 0,
    };
    inputs.for_each_message(&MatchOptions::default(), &mut counter, &mut |_| {})?;
    let inversions = counter.inversions;
    Ok((sync, checks, inversions))
}

/// Compares trace k's map onto node 0 with the truth `t_k = skew(t_0)`, at the middle of the
/// pair (node 0, node k)'s messages. The pair itself is estimated on the nodes' raw clocks, where
/// the agent's `--clock-skew` (applied to CLOCK_MONOTONIC, like NTP's slewing) does not exist;
/// the trace map goes from node k's recorded clock to node 0's, skew included.
fn check_node(sync: &SyncResult, k: usize, skew: ClockSkew) -> anyhow::Result<NodeCheck> {
    let pair = sync
        .pair(0, k as u32)
        .ok_or_else(|| anyhow::anyhow!("no pair between node-0 and node-{k}"))?;
    let trace = &sync.traces[k];
    let drift = trace.line.drift;
    let truth = |t0: f64| t0 + skew.offset_ns as f64 + t0 * skew.drift_ppm * 1e-6;
    let (true_offset_mid_ns, recovered_offset_mid_ns, interval) = match pair.span {
        Some((start, end)) => {
            // The pair's span is on node 0's estimation clock; back to its recorded clock.
            let mid = start as f64 + (end - start) as f64 / 2.0;
            let t0 = sync.timebases.of(0).map_or(mid, |c| c.from_raw.apply(mid));
            let tk = truth(t0).round();
            let back = sync.to_reference(k as u32, tk as i64);
            let interval = sync
                .interval(k as u32, tk as i64)
                .map(|(lo, hi)| (t0 - hi, t0 - lo));
            (tk - t0, tk - back, interval)
        }
        _ => (f64::NAN, f64::NAN, None),
    };
    Ok(NodeCheck {
        node: trace.name.clone(),
        injected: skew,
        true_offset_mid_ns,
        recovered_offset_mid_ns,
        recovered_ppm: (1.0 / drift - 1.0) * 1e6,
        quality: pair.quality.as_str().to_owned(),
        mid_error_ns: recovered_offset_mid_ns - true_offset_mid_ns,
        interval,
    })
}

/// The per-node table the demo prints.
pub fn table(checks: &[NodeCheck]) -> String {
    let mut out = String::from(
        "| node | --clock-skew | true offset at middle (µs) | recovered offset at middle (µs) | \
         true drift (ppm) | recovered drift (ppm) | quality | error at middle (µs) | \
         guaranteed interval around truth (µs) | truth inside |\n\
         |---|---|---:|---:|---:|---:|---|---:|---|---|\n",
    );
    for c in checks {
        let interval = c.interval.map_or("none".to_owned(), |(lo, hi)| {
            format!("[{:+.3}, {:+.3}]", lo * 1e-3, hi * 1e-3)
        });
        out.push_str(&format!(
            "| {} | {},{} | {:.3} | {:.3} | {:.3} | {:.4} | {} | {:+.3} | {} | {} |\n",
            c.node,
            c.injected.offset_ns,
            c.injected.drift_ppm,
            c.true_offset_mid_ns * 1e-3,
            c.recovered_offset_mid_ns * 1e-3,
            c.injected.drift_ppm,
            c.recovered_ppm,
            c.quality,
            c.mid_error_ns * 1e-3,
            interval,
            if c.truth_inside() { "yes" } else { "NO" }
        ));
    }
    out
}

impl DemoArgs {
    pub fn run(self) -> anyhow::Result<()> {
        // Ctrl-C reaches the agents and traffic generators too (same process group): they stop,
        // the run fails over, and the guards tear everything down. The demo itself must survive
        // the signal to do that.
        crate::util::catch_interrupts()?;
        anyhow::ensure!(self.nodes >= 2, "the demo needs at least 2 nodes");
        crate::setup::run_setup(true)?;
        build_release(&["tsync-agent", "tsync-analyze"])?;
        let seed = self.seed.unwrap_or_else(rand::random);
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| workspace_root().join(format!("target/demo/{seed}")));
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        let skews = skews(self.nodes, seed);
        eprintln!("demo: seed {seed}, output in {}", out.display());
        let files = record(&self, &skews, &out)?;
        let (sync, checks, inversions) = analyze(&files, &skews)?;
        let by_digest = digest_only(&files)?;
        let json = serde_json::to_string_pretty(&tsync_analyze::output::report::to_json(&sync))?;
        std::fs::write(out.join("sync.json"), json + "\n")?;
        artifacts(&files, &out)?;
        let logs = app_logs(&files, self.nodes, &out)?;
        let report =
            summary(&self, seed, &out, &sync, &checks, inversions, &by_digest) + &logs.report();
        std::fs::write(out.join("report.md"), &report)?;
        println!("{report}");
        verdict(&self, &sync, &checks, inversions, &logs)
    }
}

/// The nodes' application logs after `tsync-analyze apply --interval`, merged by
/// `tsync-analyze merge`.
pub struct AppLogs {
    /// The merged log's first lines, as written.
    head: Vec<String>,
    /// Events, and exchanges logged on both sides.
    events: usize,
    exchanges: usize,
    /// Exchanges whose four events are out of causal order: merged by the recorded times, and
    /// by the applied ones.
    out_of_order_before: usize,
    out_of_order_after: usize,
    /// Largest |corrected wall_ns − recorded wall_ns| (ns): the nodes share the machine's
    /// realtime clock, so the realtime path must give it back.
    wall_error_ns: i64,
    /// The exchanges' events whose place `merge` guarantees (`certain`), and the others.
    certain: usize,
    uncertain: usize,
    /// Events with a `wall_ns` interval, and those whose interval misses the shared realtime
    /// clock's truth (the recorded `wall_ns`): must be none.
    wall_bounded: usize,
    wall_missed: usize,
}

impl AppLogs {
    fn report(&self) -> String {
        format!(
            "\napplication logs: {} events of {} exchanges, put on node-0's timebase with \
             `tsync-analyze apply --interval` (ts_ns: each node's skewed CLOCK_MONOTONIC; wall_ns: \
             CLOCK_REALTIME); exchanges out of causal order merged by the recorded ts_ns: {}, \
             after apply: {}; corrected wall_ns off the shared realtime clock by at most {:.3} µs; \
             wall_ns intervals holding the truth: {} of {} ({} missed it)\n\
             merged by `tsync-analyze merge` (app-merged.jsonl): of the {} exchanges' events, {} \
             certain (their order against every earlier event of another node guaranteed by the \
             intervals), {} uncertain; first lines:\n{}\n",
            self.events,
            self.exchanges,
            self.out_of_order_before,
            self.out_of_order_after,
            self.wall_error_ns as f64 * 1e-3,
            self.wall_bounded - self.wall_missed,
            self.wall_bounded,
            self.wall_missed,
            self.exchanges,
            self.certain,
            self.uncertain,
            self.head.join("\n")
        )
    }
}

/// Runs the release `tsync-analyze` with `args`; fails with its stderr.
fn analyzer(args: &[OsString]) -> anyhow::Result<()> {
    let bin = release_binary("tsync-analyze");
    let o = Command::new(&bin)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", bin.display()))?;
    if !o.status.success() {
        bail!(
            "tsync-analyze {:?} failed: {}",
            args.first(),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// Applies each node's map to its application log with `--interval` (`ts_ns` as monotonic, then
/// `wall_ns` as realtime), merges the results with `tsync-analyze merge` into
/// `app-merged.jsonl`, and checks every logged exchange (request sent < received < response sent
/// < received), every `wall_ns` interval against the shared realtime clock, and counts the
/// exchanges' events whose order `merge` calls certain.
fn app_logs(files: &[PathBuf], nodes: usize, out: &Path) -> anyhow::Result<AppLogs> {
    let mut applied = Vec::new();
    for k in 0..nodes {
        let log = out.join(format!("app-{k}.jsonl"));
        let mono = out.join(format!("app-{k}.mono.jsonl"));
        let done = out.join(format!("app-{k}.applied.jsonl"));
        for (from, to, field, clock) in [
            (&log, &mono, "ts_ns", "monotonic"),
            (&mono, &done, "wall_ns", "realtime"),
        ] {
            let mut args: Vec<OsString> = ["apply", "--reference", "node-0", "--node"]
                .map(OsString::from)
                .to_vec();
            args.push(format!("node-{k}").into());
            args.extend(files.iter().map(|f| f.into()));
            args.extend([
                "--events".into(),
                from.into(),
                "--field".into(),
                field.into(),
            ]);
            args.extend(["--clock", clock, "--interval", "-o"].map(OsString::from));
            args.push(to.into());
            analyzer(&args)?;
        }
        std::fs::remove_file(&mono)?;
        applied.push(done);
    }
    let merged = out.join("app-merged.jsonl");
    let mut args: Vec<OsString> = vec!["merge".into()];
    args.extend(applied.iter().map(|f| f.into()));
    args.extend(["-o".into(), merged.clone().into()]);
    analyzer(&args)?;
    let text = std::fs::read_to_string(&merged)?;
    let all: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let time = |e: &serde_json::Value, f: &str| e[f].as_i64().unwrap_or(i64::MIN);
    let wall_error_ns = all
        .iter()
        .map(|e| (time(e, "wall_ns") - time(e, "wall_ns_local")).abs())
        .max()
        .unwrap_or(0);
    // Every namespace reads the machine's one CLOCK_REALTIME: the recorded wall_ns is the truth.
    let bounded: Vec<&serde_json::Value> =
        all.iter().filter(|e| e["wall_ns_lo"].is_i64()).collect();
    let wall_missed = bounded
        .iter()
        .filter(|e| {
            let truth = time(e, "wall_ns_local");
            !(time(e, "wall_ns_lo") <= truth && truth <= time(e, "wall_ns_hi"))
        })
        .count();
    let mut by: std::collections::BTreeMap<String, Vec<(&str, i64, i64, &str)>> =
        Default::default();
    for e in &all {
        by.entry(e["exchange"].as_str().unwrap_or("").to_string())
            .or_default()
            .push((
                e["event"].as_str().unwrap_or(""),
                time(e, "ts_ns_local"),
                time(e, "ts_ns"),
                e["tsync_order"].as_str().unwrap_or(""),
            ));
    }
    let complete: Vec<_> = by.values().filter(|v| v.len() == 4).collect();
    let order = [
        "request sent",
        "request received",
        "response sent",
        "response received",
    ];
    let out_of_order = |pick: fn(&(&str, i64, i64, &str)) -> i64| {
        complete
            .iter()
            .filter(|v| {
                let t: Vec<i64> = order
                    .iter()
                    .map(|name| v.iter().find(|e| e.0 == *name).map_or(i64::MIN, pick))
                    .collect();
                !t.windows(2).all(|w| w[0] <= w[1]) || t.contains(&i64::MIN)
            })
            .count()
    };
    let verdicts = || complete.iter().flat_map(|v| v.iter().map(|e| e.3));
    Ok(AppLogs {
        head: text.lines().take(8).map(str::to_owned).collect(),
        events: all.len(),
        exchanges: complete.len(),
        out_of_order_before: out_of_order(|e| e.1),
        out_of_order_after: out_of_order(|e| e.2),
        wall_error_ns,
        certain: verdicts().filter(|v| *v == "certain").count(),
        uncertain: verdicts().filter(|v| *v == "uncertain").count(),
        wall_bounded: bounded.len(),
        wall_missed,
    })
}

/// What matching by digest alone (without pairing by sequence range) makes of the traces: the
/// figure to compare with when offloads are on.
pub fn digest_only(files: &[PathBuf]) -> anyhow::Result<tsync_analyze::MatchStats> {
    struct Nothing;
    impl MessageSink for Nothing {
        fn message(&mut self, _: &MatchedMessage<'_>) {}
        fn wants_events(&self) -> bool {
            false
        }
    }
    let options = MatchOptions {
        by_range: false,
        ..MatchOptions::default()
    };
    Ok(InputSet::open(files)?.for_each_message(&options, &mut Nothing, &mut |_| {})?)
}

/// Plots and a pcapng export of the corrected timeline, made by the analyzer's own commands.
fn artifacts(files: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    let analyzer = release_binary("tsync-analyze");
    let runs: [(&str, Vec<std::ffi::OsString>); 2] = [
        (
            "plots",
            vec![
                "sync".into(),
                "--reference".into(),
                "node-0".into(),
                "--plot".into(),
                out.join("plots").into(),
            ],
        ),
        (
            "pcapng export",
            vec![
                "export".into(),
                "--format".into(),
                "pcapng".into(),
                "-o".into(),
                out.join("timeline.pcapng").into(),
            ],
        ),
    ];
    for (what, args) in runs {
        let output = Command::new(&analyzer)
            .args(args)
            .args(files)
            .output()
            .with_context(|| format!("cannot run {}", analyzer.display()))?;
        if !output.status.success() {
            bail!(
                "{what} failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
    }
    Ok(())
}

/// The demo's report: setup, the per-node table, and the global checks.
fn summary(
    args: &DemoArgs,
    seed: u64,
    out: &Path,
    sync: &SyncResult,
    checks: &[NodeCheck],
    inversions: u64,
    by_digest: &tsync_analyze::MatchStats,
) -> String {
    let pairs: Vec<String> = sync
        .pairs
        .iter()
        .map(|p| {
            format!(
                "{}–{} {} ({} + {} messages)",
                sync.traces[p.a as usize].name,
                sync.traces[p.b as usize].name,
                p.quality.as_str(),
                p.messages_ab,
                p.messages_ba
            )
        })
        .collect();
    format!(
        "tsync demo: {} nodes, {} s of TCP traffic, seed {seed}\n\n{}\npairs: {}\n\
         matched messages: {} ({} by sequence range); events left unmatched: {} of {} \
         ({:.2} %); by digest alone: {} matched, {} left unmatched; offloads: {:?}; \
         inversions after correction: {inversions}\n\
         output: {} (traces, sync.json, plots/, timeline.pcapng, app-*.jsonl, report.md)\n",
        args.nodes,
        args.duration,
        table(checks),
        pairs.join("; "),
        sync.matching.matched,
        sync.matching.range_matched,
        sync.matching.unmatched,
        sync.matching.events,
        100.0 * sync.matching.unmatched as f64 / sync.matching.events.max(1) as f64,
        by_digest.matched,
        by_digest.unmatched,
        args.offloads,
        out.display()
    )
}

/// Fails unless the truth lies inside every interval, every pair is accurate, the error is
/// within bounds and nothing is inverted.
fn verdict(
    args: &DemoArgs,
    sync: &SyncResult,
    checks: &[NodeCheck],
    inversions: u64,
    logs: &AppLogs,
) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    for c in checks {
        if !c.truth_inside() {
            failures.push(format!("{}: truth outside the reported interval", c.node));
        }
        if c.mid_error_ns.is_nan() || c.mid_error_ns.abs() > args.max_error_us * 1e3 {
            failures.push(format!(
                "{}: error {:.3} µs exceeds {} µs",
                c.node,
                c.mid_error_ns * 1e-3,
                args.max_error_us
            ));
        }
    }
    for p in &sync.pairs {
        if p.quality.as_str() != "accurate" {
            failures.push(format!("pair {}–{} is {}", p.a, p.b, p.quality.as_str()));
        }
    }
    if inversions > 0 {
        failures.push(format!("{inversions} messages inverted after correction"));
    }
    if logs.exchanges == 0 {
        failures.push("no application-log exchange was logged on both sides".into());
    }
    if logs.out_of_order_after > 0 {
        failures.push(format!(
            "{} of {} logged exchanges out of causal order after apply",
            logs.out_of_order_after, logs.exchanges
        ));
    }
    if logs.wall_missed > 0 || logs.wall_bounded == 0 {
        failures.push(format!(
            "{} of {} applied wall_ns intervals miss the shared realtime clock",
            logs.wall_missed, logs.wall_bounded
        ));
    }
    if logs.wall_error_ns as f64 > args.max_error_us * 1e3 {
        failures.push(format!(
            "applied wall_ns off the realtime clock by {:.3} µs (more than {} µs)",
            logs.wall_error_ns as f64 * 1e-3,
            args.max_error_us
        ));
    }
    let checked = checks.len() * 2 + sync.pairs.len() + 1 + 4;
    println!(
        "demo: {} passed, {} failed",
        checked - failures.len(),
        failures.len()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("the demo's checks failed:\n  {}", failures.join("\n  "))
    }
}
