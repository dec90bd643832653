//! The capture benchmark (`cargo xtask bench capture`): what recording costs under load.
//!
//! Two network namespaces joined by a veth pair; traffic crosses it, once with no agent and once
//! with one agent per namespace, for TCP (iperf3, GSO super-packets), small UDP datagrams (iperf3,
//! many packets; from one and two clients) and the smallest from a `sendmmsg` blaster on every
//! CPU ([`super::blast`], the only one that offers well over 1 M events/s on two vCPUs), and once
//! with a single `--all-netns` agent, whose every hook run records (its
//! cost per run is the cost of one recorded event). Reported per run: packets/s and Gbit/s on the
//! link (veth counters), events/s written, events lost, and the in-kernel cost per hook run and per
//! written event from the kernel's own BPF statistics (`kernel.bpf_stats_enabled`: run_time_ns /
//! run_cnt). Ratios are against the no-agent baseline of the same traffic in the same run. Another
//! agent binary (`--baseline-agent`) is measured right after the current one, or at the same time
//! on the same packets (`--side-by-side`). Then the stalling-output scenario
//! ([`CaptureOptions::stalling_output`]): the trace on a FUSE file system whose writes block 4 s
//! of every 6 s, as a saturated disk's do, under iperf3 TCP: events lost in the kernel and to the
//! disk, per binary. Needs root.
use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use crate::{Agent, Netns, VethPair, record_command, unique_name};
use anyhow::{Context as _, Result, bail, ensure};

const ADDR: [&str; 2] = ["10.78.0.1", "10.78.0.2"];

/// Options of the capture benchmark.
#[derive(clap::Args, Debug, Clone)]
pub struct CaptureOptions {
    /// Seconds of traffic per run.
    #[arg(long, default_value_t = 10)]
    pub duration: u32,
    /// Ring buffer size passed to the agents (default: the agent's default).
    #[arg(long)]
    pub ring_size: Option<u64>,
    /// Keep the trace files under target/bench/ instead of deleting them.
    #[arg(long)]
    pub keep_traces: bool,
    /// Another `tsync-agent` binary (e.g. built from an older commit) to measure right after the
    /// current one in every run with agents: before/after figures from the same conditions,
    /// which matter on a shared machine. Its rows say "baseline".
    #[arg(long, value_name = "BINARY")]
    pub baseline_agent: Option<PathBuf>,
    /// With --baseline-agent: run both agents at the same time instead of one after the other,
    /// so that they record the very same packets (every run differs in what iperf3 achieves,
    /// and an agent's cost per event depends on the event rate). Compares the agents' own CPU
    /// per event; the link and BPF figures are then those of two sets of programs.
    #[arg(long, requires = "baseline_agent")]
    pub side_by_side: bool,
    /// Skip the stalling-output scenario (a FUSE file system that blocks writes 4 s of every
    /// 6 s; needs fuse3 and python3-fusepy, which `cargo xtask setup` installs).
    #[arg(long)]
    pub no_stalling_output: bool,
    /// Run only the traffic patterns whose name contains this text (case-insensitive), e.g.
    /// "TCP" or "64-byte writes".
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
}

/// One traffic pattern.
struct Scenario {
    name: &'static str,
    traffic: Traffic,
}

/// What makes the packets of a scenario.
enum Traffic {
    /// iperf3, with these client arguments, from this many clients at once, each with a server
    /// of its own; with more than one, client k is pinned to CPU k (iperf3 before 3.16 runs one
    /// thread, which alone cannot offer the agent 1 M events/s on this class of machine).
    Iperf {
        args: &'static [&'static str],
        clients: u32,
    },
    /// 18-byte UDP datagrams from [`blast`](super::blast), one `sendmmsg` loop per CPU.
    Blast,
}

const UDP_64: &[&str] = &["-u", "-b", "0", "-l", "64"];

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "TCP (iperf3 default)",
        traffic: Traffic::Iperf {
            args: &[],
            clients: 1,
        },
    },
    Scenario {
        name: "UDP 64-byte datagrams",
        traffic: Traffic::Iperf {
            args: UDP_64,
            clients: 1,
        },
    },
    Scenario {
        name: "UDP 64-byte datagrams, 2 clients (one per CPU)",
        traffic: Traffic::Iperf {
            args: UDP_64,
            clients: 2,
        },
    },
    Scenario {
        name: "UDP 18-byte datagrams, sendmmsg blaster (one per CPU)",
        traffic: Traffic::Blast,
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

/// One row of the table: who recorded, and what it cost.
struct Run {
    agents: Agents,
    /// The agents' label, with the binary's ("baseline") if not the current one.
    label: String,
    measure: Measure,
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
    /// Of that, what they spent before they said they record (BTF, loading, the verifier).
    agent_startup_cpu_s: f64,
    /// Agents measured.
    agents: u32,
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

impl CaptureOptions {
    /// Checks the options and the host (root); to be called before building anything.
    pub fn check(&self) -> Result<()> {
        ensure!(
            crate::is_root(),
            "the capture benchmark needs root (namespaces, eBPF)"
        );
        ensure!(self.duration > 0, "--duration must be at least 1 s");
        ensure!(
            self.scenarios().next().is_some(),
            "--only {:?} matches no traffic pattern; the patterns are: {}",
            self.only.as_deref().unwrap_or(""),
            SCENARIOS
                .iter()
                .map(|s| s.name)
                .collect::<Vec<_>>()
                .join("; ")
        );
        if let Some(b) = &self.baseline_agent {
            ensure!(
                b.is_file(),
                "--baseline-agent {}: no such file",
                b.display()
            );
        }
        Ok(())
    }

    /// The traffic patterns to run (`--only`).
    fn scenarios(&self) -> impl Iterator<Item = &'static Scenario> + '_ {
        let only = self.only.as_deref().map(str::to_lowercase);
        SCENARIOS.iter().filter(move |s| {
            only.as_deref()
                .is_none_or(|o| s.name.to_lowercase().contains(o))
        })
    }

    /// Runs the benchmark with the agent binary `agent` (and the baseline's, if any); prints the
    /// table and writes it to `out_dir/capture.md` (the traces go there too while measured).
    pub fn run(&self, agent: &Path, out_dir: &Path) -> Result<()> {
        self.check()?;
        fs::create_dir_all(out_dir)
            .with_context(|| format!("cannot create {}", out_dir.display()))?;
        let mut binaries = vec![(agent, "")];
        if let Some(b) = &self.baseline_agent {
            binaries.push((b.as_path(), ", baseline"));
        }

        let link = VethPair::new(&unique_name("b"), ADDR, None)?;
        let _stats = BpfStats::enable()?;
        let mut rows = Vec::new();
        for (i, scenario) in self.scenarios().enumerate() {
            let traces: Vec<[PathBuf; 2]> = (0..binaries.len())
                .map(|b| [0, 1].map(|n| out_dir.join(format!("capture-{i}-{n}-{b}.trace"))))
                .collect();
            let mut runs = Vec::new();
            for (j, agents) in [Agents::None, Agents::PerNamespace, Agents::OneAllNetns]
                .into_iter()
                .enumerate()
            {
                // Without agents there is nothing to compare; with agents, each binary in turn,
                // which one first alternating from one run to the next (rows keep their order),
                // or all of them at once.
                let bins = if agents == Agents::None {
                    &binaries[..1]
                } else {
                    &binaries[..]
                };
                let order: Vec<usize> = (0..bins.len()).map(|k| (k + i + j) % bins.len()).collect();
                let groups: Vec<Vec<usize>> = if self.side_by_side {
                    vec![order]
                } else {
                    order.into_iter().map(|b| vec![b]).collect()
                };
                let mut measured = Vec::new();
                for group in groups {
                    let label = |b: usize| format!("{}{}", agents.label(), bins[b].1);
                    let names: Vec<String> = group.iter().map(|&b| label(b)).collect();
                    eprintln!("bench: {}, agents: {}", scenario.name, names.join(" + "));
                    let started: Vec<(&Path, &[PathBuf; 2])> =
                        group.iter().map(|&b| (bins[b].0, &traces[b])).collect();
                    let measures = self.measure(&link, scenario, agents, &started)?;
                    for (b, measure) in group.into_iter().zip(measures) {
                        let run = Run {
                            agents,
                            label: label(b),
                            measure,
                        };
                        measured.push((b, run));
                    }
                }
                measured.sort_by_key(|&(b, _)| b);
                runs.extend(measured.into_iter().map(|(_, run)| run));
            }
            if !self.keep_traces {
                for t in traces.iter().flatten() {
                    let _ = fs::remove_file(t);
                }
            }
            rows.push((scenario.name, runs));
        }
        let mut table = self.table(&rows);
        if !self.no_stalling_output {
            table.push_str(&self.stalling_output(&link, &binaries, out_dir)?);
        }
        println!("{table}");
        let path = out_dir.join("capture.md");
        fs::write(&path, &table).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("bench: table written to {}", path.display());
        Ok(())
    }

    /// One iperf3 run with the given agents of each binary in `bins` (writing to its traces),
    /// all recording at once; what each binary's agents measured.
    fn measure(
        &self,
        link: &VethPair,
        scenario: &Scenario,
        agents: Agents,
        bins: &[(&Path, &[PathBuf; 2])],
    ) -> Result<Vec<Measure>> {
        // An agent replacing the previous run's file would pay for freeing its pages.
        for t in bins.iter().flat_map(|(_, traces)| traces.iter()) {
            let _ = fs::remove_file(t);
        }
        let start = |bin: &Path, ns: &Netns, trace: &Path, all_netns: bool| {
            let mut cmd = record_command(bin, Some(ns), trace);
            cmd.arg("--force");
            if all_netns {
                cmd.arg("--all-netns");
            }
            if let Some(size) = self.ring_size {
                cmd.args(["--ring-size", &size.to_string()]);
            }
            // Its CPU time once it records: what starting cost it.
            let agent = Agent::start(cmd)?;
            let startup = agent.cpu_seconds()?;
            Ok::<_, anyhow::Error>((agent, startup))
        };
        let mut running: Vec<Vec<(Agent, f64)>> = Vec::new();
        for &(bin, traces) in bins {
            let mut these = Vec::new();
            match agents {
                Agents::None => {}
                Agents::PerNamespace => {
                    for (ns, trace) in link.ns.iter().zip(traces) {
                        these.push(start(bin, ns, trace, false)?);
                    }
                }
                Agents::OneAllNetns => these.push(start(bin, &link.ns[0], &traces[0], true)?),
            }
            running.push(these);
        }
        let run = traffic(link, scenario, self.duration)?;
        // The programs' statistics must be read while they are still loaded.
        let programs = crate::programs()?;
        let mut measures = Vec::new();
        for these in running {
            let mut m = Measure {
                seconds: run.seconds,
                link_packets: run.after.0 - run.before.0,
                link_bytes: run.after.1 - run.before.1,
                ..Measure::default()
            };
            let mut ours = std::collections::BTreeSet::new();
            for (agent, startup) in &these {
                ours.extend(agent.program_ids()?);
                m.agent_startup_cpu_s += startup;
                m.agents += 1;
            }
            for p in &programs {
                if ours.contains(&p.id) {
                    m.bpf_runs += p.run_cnt;
                    m.bpf_run_time_ns += p.run_time_ns;
                }
            }
            measures.push((m, these));
        }
        // Every agent's CPU time before any stops (stopping one costs the others nothing).
        for (m, these) in &mut measures {
            for (agent, _) in these.iter() {
                m.agent_cpu_s += agent.cpu_seconds()?;
            }
        }
        let mut out = Vec::new();
        for (mut m, these) in measures {
            for (agent, _) in these {
                let stopped = agent.stop_cleanly()?;
                let (events, lost) = stopped
                    .summary()
                    .with_context(|| format!("no summary from tsync-agent: {}", stopped.stdout))?;
                m.events += events;
                m.lost += lost;
            }
            out.push(m);
        }
        Ok(out)
    }

    fn table(&self, rows: &[(&str, Vec<Run>)]) -> String {
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
            "| traffic | agents | link packets/s | link Gbit/s | vs. no agent | events/s written | events lost | BPF ns per hook run | BPF ns per event | agent CPU ns per event | agent start-up CPU ms |"
        );
        let _ = writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (name, runs) in rows {
            let base_pps = runs[0].measure.pps().max(1.0);
            for Run {
                agents,
                label,
                measure: m,
            } in runs
            {
                if *agents == Agents::None {
                    let _ = writeln!(
                        t,
                        "| {name} | {label} | {:.0} | {:.2} | 1.00 | – | – | – | – | – | – |",
                        m.pps(),
                        m.gbps()
                    );
                    continue;
                }
                let per_run = m.bpf_run_time_ns as f64 / m.bpf_runs.max(1) as f64;
                let per_event = m.bpf_run_time_ns as f64 / m.events.max(1) as f64;
                let _ = writeln!(
                    t,
                    "| {name} | {label} | {:.0} | {:.2} | {:.2} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    m.pps(),
                    m.gbps(),
                    m.pps() / base_pps,
                    m.events as f64 / m.seconds,
                    m.lost,
                    per_run,
                    per_event,
                    m.agent_cpu_s * 1e9 / m.events.max(1) as f64,
                    m.agent_startup_cpu_s * 1e3 / f64::from(m.agents.max(1))
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
             second. It includes each agent's start-up (reading the kernel's BTF, loading and \
             verifying the programs), which \"agent start-up CPU ms\" gives alone, per agent: \
             CPU time until the agent said it records."
        );
        if let Some(b) = &self.baseline_agent {
            let when = if self.side_by_side {
                "at the same time as the current agent, both recording the same packets (so the \
                 link and BPF figures of these rows are those of both agents' programs)"
            } else {
                "right before or after the current agent (the order alternates), in the same \
                 conditions"
            };
            let _ = writeln!(
                t,
                "\nRows marked \"baseline\" ran `{}` {when}.",
                b.display()
            );
        }
        t
    }
}

/// The stalling-output scenario: seconds of iperf3 TCP, its cycle and stall.
const STALL_TRAFFIC_S: u32 = 12;
const STALL_PERIOD: Duration = Duration::from_secs(6);
const STALL: Duration = Duration::from_secs(4);

/// What one agent did in the stalling-output scenario.
struct StallRun {
    label: &'static str,
    events: u64,
    kernel_lost: u64,
    disk_lost: u64,
    /// The summary's output line (buffer peak, longest write), if the agent prints one.
    output: Option<String>,
}

impl CaptureOptions {
    /// The output stalls as a saturated disk does: the trace goes to a FUSE file system whose
    /// writes block 4 s of every 6 s, while iperf3 TCP runs for 12 s and one `--all-netns` agent
    /// records (~130 000 events/s on the development host). Each binary in turn; returns the
    /// Markdown section.
    fn stalling_output(
        &self,
        link: &VethPair,
        binaries: &[(&Path, &'static str)],
        out_dir: &Path,
    ) -> Result<String> {
        let scenario = Scenario {
            name: "TCP, output stalling",
            traffic: Traffic::Iperf {
                args: &[],
                clients: 1,
            },
        };
        let mut runs = Vec::new();
        for &(bin, which) in binaries {
            eprintln!("bench: {}, agent{which}", scenario.name);
            let fs = crate::StallingFs::mount(crate::Stall::Periodic {
                period: STALL_PERIOD,
                stall: STALL,
            })?;
            let trace = fs.path().join("stalled.trace");
            let mut cmd = record_command(bin, Some(&link.ns[0]), &trace);
            cmd.arg("--all-netns");
            let agent = Agent::start(cmd)?;
            traffic(link, &scenario, STALL_TRAFFIC_S)?;
            let stopped = agent.stop_cleanly()?;
            let lost = footer_lost(&trace)?;
            let (events, _) = stopped
                .summary()
                .with_context(|| format!("no summary from tsync-agent: {}", stopped.stdout))?;
            runs.push(StallRun {
                label: if which.is_empty() {
                    "current"
                } else {
                    "baseline"
                },
                events,
                kernel_lost: lost.send + lost.recv,
                disk_lost: lost.disk,
                output: stopped
                    .stdout
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("output: "))
                    .map(str::to_owned),
            });
            if self.keep_traces {
                let kept = out_dir.join(format!("stalled{}.trace", which.replace(", ", "-")));
                fs::copy(&trace, &kept)
                    .with_context(|| format!("cannot keep {}", kept.display()))?;
            }
        }
        let mut t = format!(
            "\n## Stalling output ({STALL_TRAFFIC_S} s of iperf3 TCP, one `--all-netns` agent, \
             the trace on a FUSE file system whose writes block {} s of every {} s)\n\n\
             | agent | events written | lost in the kernel | lost to the disk | lost | output |\n\
             |---|---:|---:|---:|---:|---|\n",
            STALL.as_secs(),
            STALL_PERIOD.as_secs()
        );
        for r in &runs {
            let total = r.events + r.kernel_lost + r.disk_lost;
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {:.1} % | {} |",
                r.label,
                r.events,
                r.kernel_lost,
                r.disk_lost,
                100.0 * (r.kernel_lost + r.disk_lost) as f64 / total.max(1) as f64,
                r.output.as_deref().unwrap_or("–")
            );
        }
        Ok(t)
    }
}

/// How a traffic run went: its time, and the link's (packets, bytes) counters around it.
struct TrafficRun {
    seconds: f64,
    before: (u64, u64),
    after: (u64, u64),
}

/// Runs the scenario's traffic for `seconds`, from namespace 1 to namespace 0.
fn traffic(link: &VethPair, scenario: &Scenario, seconds: u32) -> Result<TrafficRun> {
    match scenario.traffic {
        Traffic::Iperf { args, clients } => iperf(link, args, clients, seconds),
        Traffic::Blast => {
            let before = link.counters()?;
            let started = Instant::now();
            let to = std::net::SocketAddr::from((ADDR[0].parse::<std::net::Ipv4Addr>()?, 5301));
            super::blast::blast(
                &link.ns[1],
                &link.ns[0],
                to,
                Duration::from_secs(seconds.into()),
            )?;
            Ok(TrafficRun {
                seconds: started.elapsed().as_secs_f64(),
                before,
                after: link.counters()?,
            })
        }
    }
}

/// Runs `clients` iperf3 servers in namespace 0 and as many clients (with `args`) in namespace 1
/// for `seconds`.
fn iperf(link: &VethPair, args: &[&str], clients: u32, seconds: u32) -> Result<TrafficRun> {
    let ports: Vec<String> = (0..clients).map(|k| (5201 + k).to_string()).collect();
    let mut servers = Vec::new();
    for port in &ports {
        servers.push(
            link.ns[0]
                .command("iperf3")
                .args(["-s", "-1", "-p", port])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot start iperf3 (cargo xtask setup installs it)")?,
        );
    }
    thread::sleep(Duration::from_millis(500));
    let before = link.counters()?;
    let started = Instant::now();
    let mut running = Vec::new();
    for (k, port) in ports.iter().enumerate() {
        let mut cmd = link.ns[1].command("iperf3");
        cmd.args(["-c", ADDR[0], "-p", port])
            .args(["-t", &seconds.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if clients > 1 {
            pin_to_cpu(&mut cmd, k);
        }
        running.push(cmd.spawn().context("cannot run the iperf3 client")?);
    }
    let outputs: Vec<_> = running
        .into_iter()
        .map(|c| c.wait_with_output().context("cannot run the iperf3 client"))
        .collect::<Result<_>>()?;
    let seconds = started.elapsed().as_secs_f64();
    let after = link.counters()?;
    for mut server in servers {
        let _ = server.wait();
    }
    for client in outputs {
        if !client.status.success() {
            bail!(
                "iperf3 client failed: {}",
                String::from_utf8_lossy(&client.stderr)
            );
        }
    }
    Ok(TrafficRun {
        seconds,
        before,
        after,
    })
}

/// Runs the command on CPU `k` modulo the CPUs there are (the affinity passes through `ip netns
/// exec` to iperf3).
fn pin_to_cpu(cmd: &mut std::process::Command, k: usize) {
    use std::os::unix::process::CommandExt as _;
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = k % cpus;
    // SAFETY: only an async-signal-safe system call between fork and exec.
    unsafe {
        cmd.pre_exec(move || super::set_affinity(cpu));
    }
}

/// The lost counters of a trace's footer (0 lost to the disk for files before format 3).
fn footer_lost(trace: &Path) -> Result<tsync_common::format::LostCounts> {
    let mut r = tsync_common::format::TraceReader::open(trace)?;
    while r.next_events()?.is_some() {}
    Ok(r.footer()
        .with_context(|| format!("{} has no footer", trace.display()))?
        .lost
        .clone())
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
