//! `cargo xtask bench capture`: what recording costs under load.
//!
//! Two network namespaces joined by a veth pair; iperf3 blasts traffic across it, once with no
//! agent and once with one agent per namespace, for TCP (GSO super-packets) and small UDP datagrams
//! (many packets), and once with a single `--all-netns` agent, whose every hook run records (its
//! cost per run is the cost of one recorded event). Reported per run: packets/s and Gbit/s on the
//! link (veth counters), events/s written, events lost, and the in-kernel cost per hook run and per
//! written event from the kernel's own BPF statistics (`kernel.bpf_stats_enabled`: run_time_ns /
//! run_cnt). Ratios are against the no-agent baseline of the same traffic in the same run. Needs
//! root.
use std::{
    collections::BTreeSet,
    fmt::Write as _,
    fs,
    io::{BufRead, BufReader, Read},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;

use crate::setup::{output, run};

const HOOKS: [&str; 2] = ["net_dev_queue", "netif_receive_skb"];
const ADDR: [&str; 2] = ["10.78.0.1", "10.78.0.2"];

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of traffic per run.
    #[arg(long, default_value_t = 10)]
    duration: u32,
    /// Ring buffer size passed to the agents (default: the agent's default).
    #[arg(long)]
    ring_size: Option<u64>,
    /// Keep the trace files under target/bench/ instead of deleting them.
    #[arg(long)]
    keep_traces: bool,
}

/// One traffic pattern.
struct Scenario {
    name: &'static str,
    iperf_args: &'static [&'static str],
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "TCP (iperf3 default)",
        iperf_args: &[],
    },
    Scenario {
        name: "UDP 64-byte datagrams",
        iperf_args: &["-u", "-b", "0", "-l", "64"],
    },
];

/// Which agents record during a run.
#[derive(Clone, Copy, PartialEq)]
enum Agents {
    None,
    /// One agent in each namespace (the default filter): the deployment the demo uses.
    PerNamespace,
    /// One agent with `--all-netns` in the first namespace: every hook run records.
    OneAllNetns,
}

impl Agents {
    fn label(self) -> &'static str {
        match self {
            Agents::None => "none",
            Agents::PerNamespace => "2 (one per namespace)",
            Agents::OneAllNetns => "1 (`--all-netns`)",
        }
    }
}

/// What one run measured.
#[derive(Default, Clone)]
struct Measure {
    seconds: f64,
    link_packets: u64,
    link_bytes: u64,
    events: u64,
    lost: u64,
    /// CPU time the agents spent in user space and in system calls while recording.
    agent_cpu_s: f64,
    bpf_runs: u64,
    bpf_run_time_ns: u64,
}

impl Measure {
    fn pps(&self) -> f64 {
        self.link_packets as f64 / self.seconds
    }
    fn gbps(&self) -> f64 {
        self.link_bytes as f64 * 8.0 / self.seconds / 1e9
    }
}

impl Args {
    pub fn run(self) -> Result<()> {
        ensure!(
            output(Command::new("id").arg("-u")).is_some_and(|u| u.trim() == "0"),
            "the capture benchmark needs root (namespaces, eBPF)"
        );
        ensure!(self.duration > 0, "--duration must be at least 1 s");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .context("xtask has no parent directory")?
            .to_path_buf();
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        eprintln!("bench: building tsync-agent (release)");
        run(Command::new(&cargo).current_dir(&root).args([
            "build",
            "--release",
            "-p",
            "tsync-agent",
        ]))?;
        let agent = target.join("release/tsync-agent");
        let out_dir = target.join("bench");
        fs::create_dir_all(&out_dir)
            .with_context(|| format!("cannot create {}", out_dir.display()))?;

        let link = Link::new()?;
        let _stats = BpfStats::enable()?;
        let mut rows = Vec::new();
        for (i, scenario) in SCENARIOS.iter().enumerate() {
            let traces = [0, 1].map(|n| out_dir.join(format!("capture-{i}-{n}.trace")));
            let mut runs = Vec::new();
            for agents in [Agents::None, Agents::PerNamespace, Agents::OneAllNetns] {
                eprintln!("bench: {}, agents: {}", scenario.name, agents.label());
                runs.push((
                    agents,
                    self.measure(&link, scenario, agents, &agent, &traces)?,
                ));
            }
            if !self.keep_traces {
                for t in &traces {
                    let _ = fs::remove_file(t);
                }
            }
            rows.push((scenario.name, runs));
        }
        let table = self.table(&rows);
        println!("{table}");
        let path = out_dir.join("capture.md");
        fs::write(&path, &table).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("bench: table written to {}", path.display());
        Ok(())
    }

    /// One iperf3 run with the given agents (binary `bin`, writing to `traces`).
    fn measure(
        &self,
        link: &Link,
        scenario: &Scenario,
        agents: Agents,
        bin: &Path,
        traces: &[PathBuf; 2],
    ) -> Result<Measure> {
        let before_ids = our_program_ids()?;
        let mut running = Vec::new();
        match agents {
            Agents::None => {}
            Agents::PerNamespace => {
                for (ns, trace) in link.ns.iter().zip(traces) {
                    running.push(Agent::start(bin, ns, trace, self.ring_size, false)?);
                }
            }
            Agents::OneAllNetns => {
                running.push(Agent::start(
                    bin,
                    &link.ns[0],
                    &traces[0],
                    self.ring_size,
                    true,
                )?);
            }
        }
        let mut server = Command::new("ip")
            .args([
                "netns",
                "exec",
                &link.ns[0],
                "iperf3",
                "-s",
                "-1",
                "-p",
                "5201",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start iperf3 (cargo xtask setup installs it)")?;
        thread::sleep(Duration::from_millis(500));
        let counters_before = link.counters()?;
        let started = Instant::now();
        let client = Command::new("ip")
            .args([
                "netns",
                "exec",
                &link.ns[1],
                "iperf3",
                "-c",
                ADDR[0],
                "-p",
                "5201",
            ])
            .args(["-t", &self.duration.to_string()])
            .args(scenario.iperf_args)
            .output()
            .context("cannot run the iperf3 client")?;
        let seconds = started.elapsed().as_secs_f64();
        let counters_after = link.counters()?;
        let _ = server.wait();
        if !client.status.success() {
            bail!(
                "iperf3 client failed: {}",
                String::from_utf8_lossy(&client.stderr)
            );
        }
        let mut m = Measure {
            seconds,
            link_packets: counters_after.0 - counters_before.0,
            link_bytes: counters_after.1 - counters_before.1,
            ..Measure::default()
        };
        if agents != Agents::None {
            // The programs' statistics must be read while they are still loaded.
            for p in bpf_programs()? {
                if !before_ids.contains(&p.id) {
                    m.bpf_runs += p.run_cnt;
                    m.bpf_run_time_ns += p.run_time_ns;
                }
            }
            for agent in running {
                m.agent_cpu_s += agent.cpu_seconds()?;
                let (events, lost) = agent.stop()?;
                m.events += events;
                m.lost += lost;
            }
        }
        Ok(m)
    }

    fn table(&self, rows: &[(&str, Vec<(Agents, Measure)>)]) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "## Capture benchmark ({} s of iperf3 per run, {} CPUs, kernel {}, load average {})\n",
            self.duration,
            thread::available_parallelism().map_or(0, |n| n.get()),
            fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim(),
            fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        let _ = writeln!(
            t,
            "| traffic | agents | link packets/s | link Gbit/s | vs. no agent | events/s written | events lost | BPF ns per hook run | BPF ns per event | agent CPU ns per event |"
        );
        let _ = writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (name, runs) in rows {
            let base_pps = runs[0].1.pps().max(1.0);
            for (agents, m) in runs {
                let label = agents.label();
                if *agents == Agents::None {
                    let _ = writeln!(
                        t,
                        "| {name} | {label} | {:.0} | {:.2} | 1.00 | – | – | – | – | – |",
                        m.pps(),
                        m.gbps()
                    );
                    continue;
                }
                let per_run = m.bpf_run_time_ns as f64 / m.bpf_runs.max(1) as f64;
                let per_event = m.bpf_run_time_ns as f64 / m.events.max(1) as f64;
                let _ = writeln!(
                    t,
                    "| {name} | {label} | {:.0} | {:.2} | {:.2} | {:.0} | {} | {:.0} | {:.0} | {:.0} |",
                    m.pps(),
                    m.gbps(),
                    m.pps() / base_pps,
                    m.events as f64 / m.seconds,
                    m.lost,
                    per_run,
                    per_event,
                    m.agent_cpu_s * 1e9 / m.events.max(1) as f64
                );
            }
        }
        let _ = writeln!(
            t,
            "\nLink packets count both directions at one veth end. An agent's programs run for \
             every packet of the host (the namespace filter is in the program): with one agent \
             per namespace a packet costs 4 hook runs (send and receive, in two agents) of which \
             2 record; with one `--all-netns` agent, 2 hook runs that both record, so its \
             \"BPF ns per hook run\" is the cost of one recorded event. \"BPF ns per event\" \
             is all in-kernel time divided by the events written. The kernel's statistics add \
             their own clock reads to every run. \"Agent CPU ns per event\" is the agents' user \
             and system time while recording (draining the ring buffer, sorting, writing the \
             file) divided by the events written: one core drains 10⁹ / that many events per \
             second."
        );
        t
    }
}

/// Two namespaces with a veth pair; deleted on drop.
struct Link {
    ns: [String; 2],
    dev: [String; 2],
}

impl Link {
    fn new() -> Result<Self> {
        let id = std::process::id();
        let link = Link {
            ns: [format!("tsync-bench-{id}-a"), format!("tsync-bench-{id}-b")],
            dev: [format!("tb{id}a"), format!("tb{id}b")],
        };
        for ns in &link.ns {
            run(Command::new("ip").args(["netns", "add", ns]))?;
        }
        run(Command::new("ip").args([
            "link",
            "add",
            &link.dev[0],
            "netns",
            &link.ns[0],
            "type",
            "veth",
            "peer",
            "name",
            &link.dev[1],
            "netns",
            &link.ns[1],
        ]))?;
        for ((ns, dev), addr) in link.ns.iter().zip(&link.dev).zip(ADDR) {
            let addr = format!("{addr}/24");
            run(Command::new("ip").args(["-n", ns, "addr", "add", &addr, "dev", dev]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", dev, "up"]))?;
            run(Command::new("ip").args(["-n", ns, "link", "set", "lo", "up"]))?;
        }
        Ok(link)
    }

    /// (packets, bytes) through the first veth end, both directions.
    fn counters(&self) -> Result<(u64, u64)> {
        let json = output(Command::new("ip").args([
            "-n",
            &self.ns[0],
            "-s",
            "-j",
            "link",
            "show",
            "dev",
            &self.dev[0],
        ]))
        .context("cannot read the veth counters")?;
        let v: Value = serde_json::from_str(&json).context("ip -j printed no JSON")?;
        let stats = &v[0]["stats64"];
        let get = |dir: &str, what: &str| stats[dir][what].as_u64().unwrap_or(0);
        Ok((
            get("rx", "packets") + get("tx", "packets"),
            get("rx", "bytes") + get("tx", "bytes"),
        ))
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Turns the kernel's BPF run-time statistics on; restores the old setting on drop.
struct BpfStats(String);

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<Self> {
        let old =
            fs::read_to_string(BPF_STATS).with_context(|| format!("cannot read {BPF_STATS}"))?;
        fs::write(BPF_STATS, "1").with_context(|| format!("cannot write {BPF_STATS}"))?;
        Ok(Self(old.trim().to_string()))
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = fs::write(BPF_STATS, &self.0);
    }
}

/// A loaded program's identity and statistics, from `bpftool prog show --json`.
struct Prog {
    id: u32,
    run_time_ns: u64,
    run_cnt: u64,
}

/// Loaded tracing programs named like tsync's.
fn bpf_programs() -> Result<Vec<Prog>> {
    let json = output(Command::new("bpftool").args(["prog", "show", "--json"]))
        .context("bpftool prog show failed (cargo xtask setup installs bpftool)")?;
    let v: Value = serde_json::from_str(&json).context("bpftool printed no JSON")?;
    Ok(v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|p| HOOKS.iter().any(|h| p["name"].as_str() == Some(h)))
        .map(|p| Prog {
            id: p["id"].as_u64().unwrap_or(0) as u32,
            run_time_ns: p["run_time_ns"].as_u64().unwrap_or(0),
            run_cnt: p["run_cnt"].as_u64().unwrap_or(0),
        })
        .collect())
}

fn our_program_ids() -> Result<BTreeSet<u32>> {
    Ok(bpf_programs()?.into_iter().map(|p| p.id).collect())
}

/// An agent recording in one namespace.
struct Agent {
    child: Child,
}

impl Agent {
    fn start(
        bin: &Path,
        ns: &str,
        trace: &Path,
        ring_size: Option<u64>,
        all_netns: bool,
    ) -> Result<Self> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(bin)
            .args(["record", "--force", "-o"]);
        cmd.arg(trace);
        if all_netns {
            cmd.arg("--all-netns");
        }
        if let Some(size) = ring_size {
            cmd.args(["--ring-size", &size.to_string()]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start tsync-agent")?;
        let stderr = child.stderr.take().context("no agent stderr")?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let ready = line.contains("recording on");
                if tx.send(line).is_err() || ready {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.contains("recording on") => return Ok(Self { child }),
                Ok(line) => seen.push(line),
                Err(_) => {
                    let _ = child.kill();
                    bail!("tsync-agent did not start: {}", seen.join("\n"));
                }
            }
        }
    }

    /// User and system CPU time the agent has used so far (`/proc/PID/stat`; `ip netns exec`
    /// execs the agent in place, so the child's PID is the agent's).
    fn cpu_seconds(&self) -> Result<f64> {
        let path = format!("/proc/{}/stat", self.child.id());
        let stat = fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        cpu_seconds_of(&stat).with_context(|| format!("unexpected {path}: {stat}"))
    }

    /// SIGINT, wait, and parse "wrote N events ...; L lost" from the summary.
    fn stop(mut self) -> Result<(u64, u64)> {
        // SAFETY-free: plain kill(1) of our own child.
        run(Command::new("kill").args(["-INT", &self.child.id().to_string()]))?;
        let status = self.child.wait()?;
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            o.read_to_string(&mut out)?;
        }
        ensure!(status.success(), "tsync-agent failed: {status}\n{out}");
        parse_summary(&out).with_context(|| format!("no summary from tsync-agent: {out}"))
    }
}

/// (events written, events lost) from the agent's summary line
/// `tsync-agent: wrote N events to FILE in S s; L lost`.
fn parse_summary(out: &str) -> Option<(u64, u64)> {
    let line = out.lines().find(|l| l.contains(" events to "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let wrote = words.iter().position(|w| *w == "wrote")?;
    let events = words.get(wrote + 1)?.parse().ok()?;
    let lost = line
        .rsplit(';')
        .next()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((events, lost))
}

/// utime + stime of a `/proc/PID/stat` line, in seconds. The fields after the command name (which
/// may hold spaces and parentheses) are counted from its closing parenthesis.
fn cpu_seconds_of(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) as f64 / ticks)
}

#[cfg(test)]
mod tests {
    use super::{cpu_seconds_of, parse_summary};

    #[test]
    fn reads_cpu_time_from_proc_stat() {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let stat = "4242 (tsync (agent)) S 1 4242 4242 0 -1 4194560 1092 0 0 0 150 50 0 0 20 0 3 0";
        assert_eq!(cpu_seconds_of(stat), Some(200.0 / ticks));
        assert_eq!(cpu_seconds_of("garbage"), None);
    }

    #[test]
    fn reads_the_agent_summary() {
        let out = "tsync-agent: wrote 262485 events to /x/a b.trace in 10.3 s; 17 lost\n  send ...";
        assert_eq!(parse_summary(out), Some((262485, 17)));
        assert_eq!(parse_summary("nothing here"), None);
    }
}
