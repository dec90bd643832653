//! One guest: virtme-ng booting a cached kernel under QEMU's TCG with the host's root file system
//! over 9p, a NIC on the lab's multicast hub and the shared TSC page, running one command — or,
//! for the arm64 guest, `qemu-system-aarch64` booting Debian's arm64 kernel with an initramfs of
//! its own ([`super::initramfs`]), the same NIC and page, and the output folder over 9p.
//!
//! virtme-ng, its shell and QEMU run in a process group of their own, so that the whole guest can
//! be killed at once — on drop, whether the lab failed, panicked or was interrupted — and checked
//! to be gone afterwards.
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::cache::Toolkit;

/// The guests' nice value: well ahead of ordinary processes (0), not real-time.
const GUEST_NICE: libc::c_int = -10;

/// How to boot one guest.
pub struct VmSpec<'a> {
    pub name: String,
    pub kernel: &'a Path,
    /// The multicast group port of the lab's hub (unique per run).
    pub hub_port: u16,
    pub mac: String,
    /// The shared TSC page (a file in /dev/shm).
    pub page: &'a Path,
    /// The read-write folder shared with the guest.
    pub out: &'a Path,
    /// Shell command the guest runs, then powers off.
    pub exec: String,
    /// Where virtme-ng's and QEMU's output goes.
    pub log: PathBuf,
    /// virtme-ng's temporary folder (it leaves files in `$TMPDIR` when killed).
    pub tmp: &'a Path,
}

impl VmSpec<'_> {
    /// QEMU's options for the NIC on the hub and the shared page, as every guest has them.
    fn hub_and_page(&self) -> String {
        format!(
            "-netdev socket,id=hub,mcast=230.0.0.1:{port},localaddr=127.0.0.1 \
             -device virtio-net-pci,netdev=hub,mac={mac} \
             -object memory-backend-file,id=tscpage,share=on,mem-path={page},size={size} \
             -device ivshmem-plain,memdev=tscpage -overcommit mem-lock=on",
            port = self.hub_port,
            mac = self.mac,
            page = self.page.display(),
            size = super::tscpage::PAGE_BYTES,
        )
    }
}

/// A booted guest; killed with its whole process group on drop unless it has exited.
pub struct Vm {
    pub name: String,
    child: Child,
    pgid: i32,
    status: Option<ExitStatus>,
}

impl Vm {
    /// An x86_64 guest: virtme-ng with the host's root file system.
    pub fn boot(toolkit: &Toolkit, spec: VmSpec<'_>) -> anyhow::Result<Vm> {
        let qemu_opts = format!("--qemu-opts={}", spec.hub_and_page());
        let mut cmd = toolkit.vng();
        cmd.arg("-r")
            .arg(spec.kernel)
            // The host's /dev/kvm cannot run stock kernels here (see docs/lab.md): TCG.
            .args(["--disable-kvm", "--force-9p", "--cpus", "1", "-m", "768M"])
            .args(["--name", &spec.name])
            .arg(format!("--rwdir={}", spec.out.display()))
            .arg(qemu_opts)
            .arg("--exec")
            .arg(&spec.exec)
            .env("TMPDIR", spec.tmp);
        Vm::spawn(cmd, spec.name, &spec.log, "virtme-ng")
    }

    /// An arm64 guest: `qemu-system-aarch64` (TCG, `virt` machine) with `initrd` as its whole
    /// system ([`super::initramfs`], which runs `spec.exec`) and the output folder over 9p.
    pub fn boot_arm64(spec: VmSpec<'_>, initrd: &Path) -> anyhow::Result<Vm> {
        let mut cmd = Command::new("qemu-system-aarch64");
        // cortex-a57: `-cpu max` adds pointer authentication, which TCG emulates slowly.
        cmd.args([
            "-M",
            "virt",
            "-cpu",
            "cortex-a57",
            "-smp",
            "1",
            "-m",
            "768M",
        ])
        .args(["-display", "none", "-serial", "stdio", "-monitor", "none"])
        .args(["-no-reboot", "-name", &spec.name])
        .arg("-kernel")
        .arg(spec.kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", "console=ttyAMA0 panic=-1 quiet"])
        .args(spec.hub_and_page().split_whitespace())
        .arg("-fsdev")
        .arg(format!(
            "local,id=out,path={},security_model=none",
            spec.out.display()
        ))
        .arg("-device")
        .arg(format!(
            "virtio-9p-pci,fsdev=out,mount_tag={}",
            super::initramfs::OUT_TAG
        ));
        Vm::spawn(cmd, spec.name, &spec.log, "qemu-system-aarch64")
    }

    /// Starts `cmd` (output into `log`) in a process group of its own, ahead of the host's
    /// other work.
    fn spawn(mut cmd: Command, name: String, log: &Path, what: &str) -> anyhow::Result<Vm> {
        let log = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // SAFETY: setpriority is a plain system call, safe between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                // The guests stand for machines with CPUs of their own: ahead of whatever else
                // the host runs (builds), a stalled vCPU would leave gaps in the guests' clock
                // samples (140–180 ms seen with the host's two cores busy) that no real node has.
                libc::setpriority(libc::PRIO_PROCESS, 0, GUEST_NICE);
                Ok(())
            })
        };
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {what} for {name}"))?;
        let pgid = child.id() as i32;
        Ok(Vm {
            name,
            child,
            pgid,
            status: None,
        })
    }

    /// The exit status once the guest has powered off (virtme-ng returns).
    pub fn poll(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Whether any process of the guest's group (virtme-ng, QEMU) is still alive.
    pub fn group_alive(&self) -> bool {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(-self.pgid, 0) == 0 }
    }

    /// Kills the whole group and reaps virtme-ng; waits up to 5 s for the group to be gone.
    pub fn kill(&mut self) {
        // SAFETY: signals our own child's process group.
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.group_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.status.is_none() || self.group_alive() {
            self.kill();
        }
    }
}
