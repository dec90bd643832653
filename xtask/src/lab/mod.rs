//! `cargo xtask lab`: tsync on real, separate kernels with clocks of their own, and a ground truth.
//!
//! Three guests (Debian's 6.1 and 6.12 kernels, cached under `target/lab-cache/`) boot under
//! QEMU's TCG with virtme-ng, on one multicast hub. Each runs `cargo xtask lab-guest`
//! ([`guest`]): an agent records while the traffic generator talks TCP to the other guests, and
//! one guest's clock is slewed with `adjtimex` partway. The host serves a shared page
//! ([`tscpage`]) through which every guest measures its TSC against the host's — the ground
//! truth ([`truth`]) — and through which the guests start and stop together. Then the analyzer's
//! library synchronizes the traces and [`checks`] compares everything with the truth.
//!
//! Nothing is left behind: every guest runs in a process group of its own, killed on drop; the
//! shared page's file is removed on drop; Ctrl-C makes the run fail over to exactly that.
mod cache;
mod checks;
pub mod guest;
mod truth;
mod tscpage;
mod vm;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use rand::{Rng, SeedableRng};

use crate::util::{build_release, interrupted, release_binary, target_dir};
use tscpage::{GlobalWord, PAGE_BYTES, SlotWord, TscPage};
use vm::{Vm, VmSpec};

/// Options of the lab.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Kernel series (Debian's plain amd64 flavour), assigned to the guests in turn.
    #[arg(long, value_delimiter = ',', default_value = "6.1,6.12")]
    pub kernels: Vec<String>,
    /// Number of guests (guest-0 is the reference).
    #[arg(long, default_value_t = 3)]
    pub guests: usize,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 12.0)]
    pub duration: f64,
    /// Seed of the slew (which guest, how much, when); random when absent (printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default: target/lab/<seed>).
    #[arg(short, long)]
    pub out: Option<PathBuf>,
    /// Segmentation and receive offloads of the guests' NICs: `on` (TSO, GSO, GRO), `off`, or as
    /// the kernel sets them (`kernel`: virtio-net over QEMU's hub has TSO off, GSO and GRO on).
    #[arg(long, value_enum, default_value = "kernel")]
    pub offloads: crate::demo::Offloads,
}

/// The slew a seed picks: a guest other than the reference, ±200–500 ppm in whole ppm (exact in
/// adjtimex's 2⁻¹⁶ ppm units), applied 30–60 % into the traffic.
fn slew_plan(seed: u64, guests: usize, duration: f64) -> (usize, f64, f64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let guest = rng.random_range(1..guests);
    let ppm = rng.random_range(200..=500) as f64 * if rng.random() { 1.0 } else { -1.0 };
    let after = duration * rng.random_range(0.3..0.6);
    (guest, ppm, after)
}

impl Args {
    pub fn run(self) -> anyhow::Result<()> {
        crate::util::catch_interrupts()?;
        ensure!(
            cfg!(target_arch = "x86_64"),
            "the lab runs on x86_64 hosts only"
        );
        ensure!(
            tsync_lab::is_root(),
            "the lab needs root (the guests' agents do not, but installing QEMU does)"
        );
        ensure!(
            (2..=tscpage::MAX_GUESTS).contains(&self.guests),
            "--guests must be 2 to {}",
            tscpage::MAX_GUESTS
        );
        ensure!(!self.kernels.is_empty(), "--kernels names no kernel");
        ensure!(
            self.duration >= 2.0,
            "--duration must be at least 2 s (the slew happens partway)"
        );
        let started = Instant::now();
        crate::setup::ensure_packages(cache::DEBIAN_PACKAGES)?;
        let toolkit = cache::Toolkit::ensure()?;
        let mut kernels = Vec::new();
        for series in &self.kernels {
            kernels.push(cache::kernel(series)?);
        }
        // The same set as the demo builds, so that `cargo xtask test` builds the agent once.
        build_release(&["tsync-agent", "tsync-analyze"])?;
        let seed = self.seed.unwrap_or_else(rand::random);
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| target_dir().join(format!("lab/{seed}")));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        let out = out.canonicalize()?;
        let (slewed, slew_ppm, slew_after) = slew_plan(seed, self.guests, self.duration);
        let assigned: Vec<&cache::Kernel> = (0..self.guests)
            .map(|k| &kernels[k % kernels.len()])
            .collect();
        eprintln!(
            "lab: seed {seed}; {} guests ({}), {} s of traffic, guest-{slewed} slewed {slew_ppm:+} \
             ppm after {slew_after:.1} s; output in {}",
            self.guests,
            assigned
                .iter()
                .map(|k| k.package.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            self.duration,
            out.display()
        );
        let setup_s = started.elapsed().as_secs_f64();
        let (reports, leftovers) =
            self.boot_and_run(&toolkit, &assigned, &out, slewed, slew_ppm, slew_after)?;
        let run_s = started.elapsed().as_secs_f64() - setup_s;
        let outcome = checks::LabOutcome {
            out: &out,
            reports,
            kernels: assigned.iter().map(|k| k.series.clone()).collect(),
            slewed,
            slew_ppm,
            leftovers,
        };
        let (rows, checks, sync) = checks::evaluate(&outcome);
        let mut report = format!(
            "tsync lab: {} guests under QEMU/TCG, {} s of TCP traffic, seed {seed}\n\n{}\n",
            self.guests,
            self.duration,
            checks::table(&rows)
        );
        if let Some(s) = &sync {
            let m = &s.matching;
            let by_digest = crate::demo::digest_only(&outcome_files(&out, self.guests))?;
            report.push_str(&format!(
                "matched messages: {} ({} by sequence range) of {} events ({} unmatched, {} \
                 ambiguous); by digest alone: {} matched, {} unmatched; guest NICs' offloads: \
                 {:?} ({})\n",
                m.matched,
                m.range_matched,
                m.events,
                m.unmatched,
                m.ambiguous,
                by_digest.matched,
                by_digest.unmatched,
                self.offloads,
                outcome
                    .reports
                    .first()
                    .and_then(|r| r.as_ref().ok())
                    .map_or("—".into(), |r| r.offloads.join(", "))
            ));
            let json = serde_json::to_string_pretty(&tsync_analyze::output::report::to_json(s))?;
            std::fs::write(out.join("sync.json"), json + "\n")?;
        }
        report.push_str(&format!(
            "time: setup {setup_s:.0} s, guests {run_s:.0} s; output: {}\n\n",
            out.display()
        ));
        for c in &checks {
            report.push_str(&format!(
                "- {} {}: {}\n",
                if c.passed { "PASS" } else { "FAIL" },
                c.name,
                c.detail
            ));
        }
        std::fs::write(out.join("report.md"), &report)?;
        println!("{report}");
        let failed = checks.iter().filter(|c| !c.passed).count();
        println!("lab: {} passed, {failed} failed", checks.len() - failed);
        if failed > 0 {
            bail!(
                "{failed} lab check(s) failed; see {}",
                out.join("report.md").display()
            );
        }
        Ok(())
    }

    /// Boots the guests, serves the shared page until they power off, and collects their
    /// reports; then checks that nothing is left. Fails over (killing everything) on Ctrl-C or
    /// when a guest takes too long.
    #[allow(clippy::type_complexity)]
    fn boot_and_run(
        &self,
        toolkit: &cache::Toolkit,
        kernels: &[&cache::Kernel],
        out: &Path,
        slewed: usize,
        slew_ppm: f64,
        slew_after: f64,
    ) -> anyhow::Result<(Vec<Result<guest::GuestReport, String>>, Vec<String>)> {
        let page = HostPage::create(self.guests)?;
        let tmp = Scratch::create(out.join("vng-tmp"))?;
        let me = std::env::current_exe()?;
        let agent = release_binary("tsync-agent");
        let hub_port = 40_000 + (std::process::id() % 20_000) as u16;
        let mut vms = Vec::new();
        for (k, kernel) in kernels.iter().enumerate() {
            let slew = if k == slewed {
                format!(" --slew-ppm={slew_ppm} --slew-after={slew_after}")
            } else {
                String::new()
            };
            let offloads = match self.offloads {
                crate::demo::Offloads::On => " --offloads on",
                crate::demo::Offloads::Off => " --offloads off",
                crate::demo::Offloads::Kernel => "",
            };
            let exec = format!(
                "'{}' lab-guest --index {k} --guests {} --duration {}{slew}{offloads} --out '{}' \
                 --agent '{}' > '{}' 2>&1",
                me.display(),
                self.guests,
                self.duration,
                out.display(),
                agent.display(),
                out.join(format!("guest-{k}.log")).display()
            );
            vms.push(Vm::boot(
                toolkit,
                VmSpec {
                    name: format!("guest-{k}"),
                    kernel: &kernel.image,
                    hub_port,
                    mac: format!("52:54:00:77:00:{:02x}", k + 1),
                    page: &page.path,
                    out,
                    exec,
                    log: out.join(format!("vm-{k}.log")),
                    tmp: &tmp.0,
                },
            )?);
        }
        let patience = Duration::from_secs_f64(240.0 + 3.0 * self.duration);
        let deadline = Instant::now() + patience;
        loop {
            if interrupted() {
                bail!("interrupted: the guests were killed and the shared page removed");
            }
            let mut running = 0;
            for vm in &mut vms {
                if vm.poll()?.is_none() {
                    running += 1;
                }
            }
            if running == 0 {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the guests did not finish within {patience:?}; see the vm-K.log and \
                     guest-K.log files in {}",
                    out.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let reports = (0..self.guests).map(|k| read_report(out, k)).collect();
        let mut leftovers = Vec::new();
        for vm in &mut vms {
            if vm.group_alive() {
                leftovers.push(format!("processes of {}", vm.name));
                vm.kill();
            }
        }
        if std::fs::read_dir(&tmp.0).is_ok_and(|mut d| d.next().is_some()) {
            leftovers.push(format!("virtme-ng's files in {}", tmp.0.display()));
        }
        drop(tmp);
        let path = page.path.clone();
        let helper = page.close();
        if path.exists() {
            leftovers.push(path.display().to_string());
        }
        if !helper {
            leftovers.push("the shared page's helper thread".into());
        }
        Ok((reports, leftovers))
    }
}

/// The guests' trace files.
fn outcome_files(out: &Path, guests: usize) -> Vec<PathBuf> {
    (0..guests)
        .map(|k| out.join(format!("guest-{k}.tsync")))
        .collect()
}

/// A guest's report, or why there is none (its error file, or its log's end).
fn read_report(out: &Path, k: usize) -> Result<guest::GuestReport, String> {
    let path = out.join(format!("guest-{k}.json"));
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display())),
        Err(_) => {
            let why = std::fs::read_to_string(out.join(format!("guest-{k}.error"))).unwrap_or_else(
                |_| {
                    format!(
                        "no report; see {} and {}",
                        out.join(format!("guest-{k}.log")).display(),
                        out.join(format!("vm-{k}.log")).display()
                    )
                },
            );
            Err(why.trim().to_owned())
        }
    }
}

/// A folder removed with its contents on drop (virtme-ng's `$TMPDIR`: killed, it leaves files).
struct Scratch(PathBuf);

impl Scratch {
    fn create(path: PathBuf) -> anyhow::Result<Scratch> {
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The host's side of the shared page: the file in /dev/shm, its mapping and the helper thread
/// that answers the guests and runs the barriers. Removed on drop.
struct HostPage {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    helper: Option<std::thread::JoinHandle<()>>,
}

impl HostPage {
    fn create(guests: usize) -> anyhow::Result<HostPage> {
        let path = PathBuf::from(format!("/dev/shm/tsync-lab-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut host = HostPage {
            path,
            stop: Arc::new(AtomicBool::new(false)),
            helper: None,
        };
        file.set_len(PAGE_BYTES as u64)?;
        let page = TscPage::map(&file, PAGE_BYTES)?;
        let stop = host.stop.clone();
        host.helper = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                page.barrier(guests, SlotWord::Booted, GlobalWord::AllBooted);
                page.barrier(guests, SlotWord::Ready, GlobalWord::Go);
                page.barrier(guests, SlotWord::Done, GlobalWord::Stop);
                page.barrier(guests, SlotWord::Finished, GlobalWord::AllFinished);
                if !page.serve(guests) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }));
        Ok(host)
    }

    /// Stops the helper and removes the file; whether the helper ended cleanly.
    fn close(mut self) -> bool {
        self.shut()
    }

    fn shut(&mut self) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        let joined = self.helper.take().is_none_or(|h| h.join().is_ok());
        let _ = std::fs::remove_file(&self.path);
        joined
    }
}

impl Drop for HostPage {
    fn drop(&mut self) {
        self.shut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slew_plan_spares_the_reference_and_stays_in_range() {
        for seed in 0..200 {
            let (g, ppm, after) = slew_plan(seed, 3, 10.0);
            assert!((1..3).contains(&g));
            assert!((200.0..=500.0).contains(&ppm.abs()) && ppm.fract() == 0.0);
            assert!((3.0..6.0).contains(&after));
        }
        assert_eq!(slew_plan(7, 3, 10.0), slew_plan(7, 3, 10.0));
    }
}
