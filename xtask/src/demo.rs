//! `cargo xtask demo`: tsync end to end on real kernels, with known truth.
//!
//! Three "nodes" (network namespaces on one bridge) share the machine's clock. Each node's agent
//! is given a known `--clock-skew`, so the exact mapping between any two traces is known. Real TCP
//! traffic flows among the nodes while the agents record; then the analyzer synchronizes the
//! traces without ever reading the skews, and the demo checks every figure it reports against
//! the truth: the recovered offset and drift, the error in the middle of the trace, and whether
//! the truth lies inside the accuracy interval the analyzer guarantees.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::{Rng, SeedableRng};
use tsync_common::format::ClockSkew;

use crate::netns::Lab;

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

/// Where the project's binaries are, built in release mode by [`build`].
pub fn release_binary(name: &str) -> PathBuf {
    crate::workspace_root().join("target/release").join(name)
}

/// Builds the agent and the analyzer in release mode.
pub fn build() -> anyhow::Result<()> {
    let status = Command::new(env!("CARGO"))
        .current_dir(crate::workspace_root())
        .args([
            "build",
            "--release",
            "-p",
            "tsync-agent",
            "-p",
            "tsync-analyze",
        ])
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("building tsync-agent and tsync-analyze failed");
    }
    Ok(())
}

/// Starts an agent in node `k`'s namespace and waits until it says it is recording.
fn start_agent(lab: &Lab, k: usize, skew: ClockSkew, out: &Path) -> anyhow::Result<Guarded> {
    let file = out.join(format!("node-{k}.tsync"));
    let log = out.join(format!("agent-{k}.log"));
    let mut child = lab
        .command(k, &release_binary("tsync-agent"))
        .args(["record", "-o"])
        .arg(&file)
        .args(["--node", &format!("node-{k}")])
        .arg(format!(
            "--clock-skew={},{}",
            skew.offset_ns, skew.drift_ppm
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start tsync-agent")?;
    let stderr = child.stderr.take().expect("piped");
    let guarded = Guarded(child);
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || copy_log(stderr, &log, ready_tx));
    match ready_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => Ok(guarded),
        Err(_) => bail!(
            "agent of node {k} did not start recording within 60 s; see {}",
            out.join(format!("agent-{k}.log")).display()
        ),
    }
}

/// Copies an agent's stderr into its log file; signals `ready` at its "recording" line.
fn copy_log(stderr: impl std::io::Read, log: &Path, ready: mpsc::Sender<()>) {
    use std::io::Write;
    let Ok(mut file) = std::fs::File::create(log) else {
        return;
    };
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        let _ = writeln!(file, "{line}");
        if line.contains("recording") {
            let _ = ready.send(());
        }
    }
}

/// Stops the agents with SIGINT, as a user would, and checks that they exit cleanly.
fn stop_agents(agents: &mut [Guarded]) -> anyhow::Result<()> {
    for agent in agents.iter() {
        // SAFETY: kill(2) on the pid of a child we own and have not reaped.
        unsafe { libc::kill(agent.0.id() as i32, libc::SIGINT) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for (k, agent) in agents.iter_mut().enumerate() {
        loop {
            if let Some(status) = agent.0.try_wait()? {
                if !status.success() {
                    bail!("agent of node {k} exited with {status}");
                }
                break;
            }
            if Instant::now() > deadline {
                bail!("agent of node {k} did not stop within 30 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// Runs the traffic generator in every node, all talking to all, and waits for them.
fn run_traffic(lab: &Lab, duration: f64, out: &Path) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let n = lab.nodes().len();
    let mut generators = Vec::new();
    for k in 0..n {
        let peers: Vec<String> = (0..n)
            .filter(|&p| p != k)
            .map(|p| format!("{}:7000", Lab::address(p)))
            .collect();
        let log = std::fs::File::create(out.join(format!("traffic-{k}.log")))?;
        let child = lab
            .command(k, &me)
            .args(["traffic", "--listen", &format!("{}:7000", Lab::address(k))])
            .arg(format!("--peers={}", peers.join(",")))
            .arg(format!("--duration={duration}"))
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

/// Records the nodes' traffic with known skews; returns the trace files.
pub fn record(args: &DemoArgs, skews: &[ClockSkew], out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let prefix = format!("tsd{}", std::process::id());
    let lab = Lab::create(&prefix, args.nodes)?;
    let mut agents = Vec::new();
    for (k, &skew) in skews.iter().enumerate() {
        agents.push(start_agent(&lab, k, skew, out)?);
    }
    eprintln!(
        "agents recording; {} s of traffic among {} nodes",
        args.duration, args.nodes
    );
    run_traffic(&lab, args.duration, out)?;
    stop_agents(&mut agents)?;
    drop(agents);
    drop(lab);
    let left = crate::netns::leftovers(&prefix)?;
    if !left.is_empty() {
        bail!("namespaces left behind: {}", left.join(", "));
    }
    Ok((0..args.nodes)
        .map(|k| out.join(format!("node-{k}.tsync")))
        .collect())
}
