//! What runs inside each guest (`tsync-lab guest`, started by virtme-ng's `--exec` from the
//! host's file system, which the guest mounts over 9p): bring the NIC up, measure the TSC offset on
//! the shared page, sample the guest's clocks against its TSC, record with `tsync-agent` while the
//! traffic generator talks to the other guests, slew the clock with `adjtimex` partway if asked,
//! and write what happened ([`GuestReport`]) into the output folder (the only place the guest may
//! write to).
//!
//! The guest never decides whether the lab passed: it reports, the host checks.
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::clocks::{HandshakeLoop, Sampler, slew};
use super::report::{AppliedSlew, GuestReport, address};
use super::tscpage::{GlobalWord, PAGE_BYTES, SlotWord, TscPage};
use crate::Offloads;
use crate::traffic::TrafficArgs;

/// Options of the guest program (the host passes them all).
#[derive(clap::Args, Debug, Clone)]
pub struct GuestArgs {
    /// This guest's index (0-based).
    #[arg(long)]
    pub index: usize,
    /// Number of guests.
    #[arg(long)]
    pub guests: usize,
    /// Seconds of traffic.
    #[arg(long)]
    pub duration: f64,
    /// Frequency change to apply with adjtimex, ppm (0: none).
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub slew_ppm: f64,
    /// When to apply it, seconds after the traffic started.
    #[arg(long, default_value_t = 0.0)]
    pub slew_after: f64,
    /// Folder shared with the host (read-write).
    #[arg(long)]
    pub out: PathBuf,
    /// The agent binary (on the host's file system).
    #[arg(long)]
    pub agent: PathBuf,
    /// The NIC's TSO, GSO and GRO: on, off, or as the kernel set them.
    #[arg(long, value_enum, default_value = "kernel")]
    pub offloads: Offloads,
}

impl GuestArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let result = self.run_inner();
        if let Err(e) = &result {
            // The host reads this when the report is missing.
            let _ = fs::write(
                self.out.join(format!("guest-{}.error", self.index)),
                format!("{e:#}\n"),
            );
        }
        result
    }

    fn run_inner(&self) -> anyhow::Result<()> {
        let k = self.index;
        let nic = bring_up_nic(k)?;
        if let Some(on) = self.offloads.wanted() {
            let missing = crate::offloads::set(&nic, on)?;
            if !missing.is_empty() {
                eprintln!(
                    "guest-{k}: {nic} cannot change {}: left {}",
                    missing.join(", "),
                    if on { "off" } else { "on" }
                );
            }
        }
        let page = Arc::new(map_ivshmem()?);
        let agent_check = self.agent_check()?;
        page.slot(k, SlotWord::Booted).store(1, Ordering::Release);
        page.wait_global(GlobalWord::AllBooted, Duration::from_secs(300))?;
        let patience = Duration::from_secs(30);
        let offset_start = page.measure_offset(k, 300, patience)?;
        // The host's TSC is this guest's counter plus a constant only on x86_64.
        let handshakes =
            (!cfg!(target_arch = "x86_64")).then(|| HandshakeLoop::start(page.clone(), k));
        let sampler = Sampler::start();
        let trace = self.out.join(format!("guest-{k}.tsync"));
        let log = self.out.join(format!("agent-{k}.log"));
        let mut cmd = crate::record_command(&self.agent, None, &trace);
        cmd.args(["--force", "--node", &format!("guest-{k}")]);
        let agent = crate::Agent::start_logged(cmd, &log)
            .with_context(|| format!("the agent did not start; see {}", log.display()))?;
        let programs = agent.program_ids()?;
        // The programs the kernel lists must include the agent's, or "none left" below would
        // prove nothing.
        let listed = crate::program_ids()?;
        if programs.is_empty() || !programs.is_subset(&listed) {
            let all: Vec<_> = crate::programs::loaded()?
                .into_iter()
                .filter(|p| programs.contains(&p.id))
                .map(|p| format!("{} {:?} type {}", p.id, p.name, p.prog_type))
                .collect();
            bail!(
                "the agent's BPF programs {programs:?} are not all listed as tsync's ({listed:?}); \
                 loaded: {}",
                all.join(", ")
            );
        }
        page.slot(k, SlotWord::Ready).store(1, Ordering::Release);
        page.wait_global(GlobalWord::Go, Duration::from_secs(300))?;
        let (slew, exchanges) = self.traffic_and_slew()?;
        page.slot(k, SlotWord::Done).store(1, Ordering::Release);
        page.wait_global(GlobalWord::Stop, Duration::from_secs(300))?;
        agent.signal(libc::SIGINT);
        let stopped = agent.wait()?;
        let (agent_events, agent_lost) = stopped.summary().unwrap_or((0, u64::MAX));
        let programs_left = crate::wait_unloaded(&programs)?.len();
        let pairs = sampler.stop();
        page.slot(k, SlotWord::Finished).store(1, Ordering::Release);
        page.wait_global(GlobalWord::AllFinished, Duration::from_secs(120))?;
        // One slot, one handshake at a time: the loop ends before the last measurement.
        let handshakes = match handshakes {
            Some(h) => h.stop()?,
            None => Vec::new(),
        };
        let offset_end = page.measure_offset(k, 300, patience)?;
        let (first, last) = (
            pairs.first().context("no clock pair")?,
            pairs.last().unwrap(),
        );
        let report = GuestReport {
            index: k,
            arch: std::env::consts::ARCH.into(),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            clocksource: read_trimmed(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            ),
            offset_start,
            offset_end,
            tsc_hz: (last.t2 - first.t2) as f64 / (last.raw - first.raw) as f64 * 1e9,
            handshakes,
            agent_check: Some(agent_check),
            pairs,
            slew,
            agent_events,
            agent_lost,
            agent_status: stopped.status.to_string(),
            programs_left,
            exchanges,
            offloads: offloads(&nic),
        };
        let path = self.out.join(format!("guest-{k}.json"));
        fs::write(&path, serde_json::to_vec(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }

    /// Runs `tsync-agent check` (what a user runs on a node first): its exit status and output,
    /// also written to `check-K.log` for the lab's log.
    fn agent_check(&self) -> anyhow::Result<(String, String)> {
        let out = Command::new(&self.agent)
            .arg("check")
            .arg("--output")
            .arg(&self.out)
            .output()
            .with_context(|| format!("cannot run {} check", self.agent.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let path = self.out.join(format!("check-{}.log", self.index));
        fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok((out.status.to_string(), text))
    }

    /// Runs the traffic generator towards every other guest; meanwhile, if asked, changes the
    /// clock's frequency `slew_after` seconds in.
    fn traffic_and_slew(&self) -> anyhow::Result<(Option<AppliedSlew>, u64)> {
        let k = self.index;
        let args = TrafficArgs {
            listen: format!("{}:7000", address(k)).parse()?,
            peers: (0..self.guests)
                .filter(|&p| p != k)
                .map(|p| format!("{}:7000", address(p)).parse())
                .collect::<Result<_, _>>()?,
            duration: self.duration,
            // Light enough for a TCG guest's one vCPU: at 100 exchanges/s and 500 kB/s per
            // peer the guests' clock samplers were starved for 130–180 ms at times (network
            // processing under emulation), too long a gap to undo slewing across.
            rate: 50.0,
            bulk_rate: 150_000,
            linger: 1.0,
            app_log: None,
            node_index: k as u32,
            clock_skew: None,
        };
        let traffic = std::thread::spawn(move || crate::traffic::run(&args));
        let slew = if self.slew_ppm != 0.0 {
            std::thread::sleep(Duration::from_secs_f64(self.slew_after));
            Some(slew(self.slew_ppm)?)
        } else {
            None
        };
        let exchanges = traffic
            .join()
            .map_err(|_| anyhow::anyhow!("the traffic generator panicked"))??;
        Ok((slew, exchanges))
    }
}

/// Loads virtio-net (virtme-ng's initramfs does not; the arm64 guest's `/init` did), names the
/// guest's address on the first NIC and brings it up; returns the NIC's name.
fn bring_up_nic(k: usize) -> anyhow::Result<String> {
    if !Path::new("/sys/module/virtio_net").exists() {
        let _ = Command::new("modprobe").arg("virtio_net").status();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let nic = loop {
        let found = fs::read_dir("/sys/class/net")?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n != "lo");
        match found {
            Some(n) => break n,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => bail!("no network interface appeared (virtio_net not loaded?)"),
        }
    };
    crate::ip(&["addr", "add", &format!("{}/24", address(k)), "dev", &nic])?;
    crate::ip(&["link", "set", &nic, "up"])?;
    Ok(nic)
}

/// Maps BAR 2 of the ivshmem device (vendor 0x1af4, device 0x1110): the host's page.
fn map_ivshmem() -> anyhow::Result<TscPage> {
    for entry in fs::read_dir("/sys/bus/pci/devices")? {
        let dir = entry?.path();
        let id = |f: &str| read_trimmed(dir.join(f));
        if id("vendor") != "0x1af4" || id("device") != "0x1110" {
            continue;
        }
        // Without a driver the device's memory decoding may be off until enabled.
        fs::write(dir.join("enable"), "1")
            .with_context(|| format!("cannot enable {}", dir.display()))?;
        let bar = dir.join("resource2");
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&bar)
            .with_context(|| format!("cannot open {}", bar.display()))?;
        return TscPage::map(&file, PAGE_BYTES);
    }
    bail!("no ivshmem device (1af4:1110) in this guest")
}

/// The NIC's segmentation and receive offloads that are on, or why they are unknown.
fn offloads(nic: &str) -> Vec<String> {
    match crate::offloads::enabled(nic) {
        Ok(on) => on.into_iter().map(String::from).collect(),
        Err(e) => vec![format!("(unknown: {e})")],
    }
}

fn read_trimmed(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
