//! The host's part of a lab run: boot the guests, serve the shared page until they power off,
//! collect their reports, and check that nothing is left behind.
//!
//! Nothing is left behind: every guest runs in a process group of its own, killed on drop; the
//! shared page's file and virtme-ng's scratch folder are removed on drop; Ctrl-C makes the run
//! fail over to exactly that.
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::cache::{GuestArch, Kernel, Toolkit};
use super::initramfs;
use super::lab::{GuestBinaries, LabBinaries};
use super::qemu::{Vm, VmSpec};
use super::report::GuestReport;
use super::tscpage::{GlobalWord, PAGE_BYTES, SlotWord, TscPage};
use super::{LabOptions, SlewPlan};
use crate::interrupt::interrupted;

/// What the host collected once the guests powered off.
pub struct Collected {
    /// Per guest: its report, or why there is none.
    pub reports: Vec<Result<GuestReport, String>>,
    /// What was left behind (empty: nothing).
    pub leftovers: Vec<String>,
}

/// Boots one guest per kernel, serves the shared page until they power off, and collects their
/// reports; then checks that nothing is left. Fails over (killing everything) on Ctrl-C or when
/// a guest takes too long.
pub fn boot_and_run(
    options: &LabOptions,
    binaries: &LabBinaries,
    toolkit: &Toolkit,
    kernels: &[&Kernel],
    out: &Path,
    plan: SlewPlan,
) -> anyhow::Result<Collected> {
    let page = HostPage::create(options.guests)?;
    let tmp = Scratch::create(out.join("vng-tmp"))?;
    // The arm64 guests' initramfs files, removed with the folder.
    let initrds = Scratch::create(out.join("initramfs"))?;
    let hub_port = 40_000 + (std::process::id() % 20_000) as u16;
    let mut vms = Vec::new();
    for (k, kernel) in kernels.iter().enumerate() {
        let inside = binaries.inside(kernel.arch)?;
        let spec = VmSpec {
            name: format!("guest-{k}"),
            kernel: &kernel.image,
            hub_port,
            mac: format!("52:54:00:77:00:{:02x}", k + 1),
            page: &page.path,
            out,
            exec: guest_command(options, &inside, k, plan, out),
            log: out.join(format!("vm-{k}.log")),
            tmp: &tmp.0,
        };
        vms.push(match kernel.arch {
            GuestArch::Amd64 => Vm::boot(toolkit, spec)?,
            GuestArch::Arm64 => {
                let built = binaries.of(GuestArch::Arm64)?;
                let initrd = initrds.0.join(format!("guest-{k}.cpio"));
                initramfs::write(
                    &initrd,
                    &initramfs::Contents {
                        busybox: binaries
                            .arm64_busybox
                            .as_deref()
                            .context("no busybox for the arm64 guest")?,
                        kernel,
                        agent: &built.agent,
                        lab: &built.lab,
                        out,
                        exec: &spec.exec,
                    },
                )?;
                Vm::boot_arm64(spec, &initrd)?
            }
        });
    }
    let patience = Duration::from_secs_f64(240.0 + 3.0 * options.duration);
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
    let reports = (0..options.guests).map(|k| read_report(out, k)).collect();
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
    drop(initrds);
    let path = page.path.clone();
    let helper = page.close();
    if path.exists() {
        leftovers.push(path.display().to_string());
    }
    if !helper {
        leftovers.push("the shared page's helper thread".into());
    }
    Ok(Collected { reports, leftovers })
}

/// The shell command guest `k` runs (virtme-ng's `--exec`, the arm64 guest's `/exec.sh`):
/// `tsync-lab guest` (from the host's file system or the initramfs), its output into
/// `guest-K.log`.
pub fn guest_command(
    options: &LabOptions,
    binaries: &GuestBinaries,
    k: usize,
    plan: SlewPlan,
    out: &Path,
) -> String {
    let slew = if k == plan.guest {
        format!(" --slew-ppm={} --slew-after={}", plan.ppm, plan.after)
    } else {
        String::new()
    };
    let offloads = match options.offloads.wanted() {
        Some(_) => format!(" --offloads {}", options.offloads.name()),
        None => String::new(),
    };
    format!(
        "'{}' guest --index {k} --guests {} --duration {}{slew}{offloads} --out '{}' \
         --agent '{}' > '{}' 2>&1",
        binaries.lab.display(),
        options.guests,
        options.duration,
        out.display(),
        binaries.agent.display(),
        out.join(format!("guest-{k}.log")).display()
    )
}

/// A guest's report, or why there is none (its error file, or its log's end).
pub fn read_report(out: &Path, k: usize) -> Result<GuestReport, String> {
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
pub struct HostPage {
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
    helper: Option<std::thread::JoinHandle<()>>,
}

impl HostPage {
    /// The page of this run, in /dev/shm (QEMU maps it for every guest).
    fn create(guests: usize) -> anyhow::Result<HostPage> {
        let path = PathBuf::from(format!("/dev/shm/tsync-lab-{}", std::process::id()));
        HostPage::create_at(path, guests)
    }

    /// Creates the page's file at `path` (which must not exist), maps it and starts the helper.
    pub fn create_at(path: PathBuf, guests: usize) -> anyhow::Result<HostPage> {
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
    pub fn close(mut self) -> bool {
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
