//! Each node's machine: its own processes and its own mounts, as a real node has.
//!
//! A node of the cluster is a network namespace, but on a real cluster it is also a machine: the
//! agent (a DaemonSet with `hostNetwork` and `hostPID`) sees that node's processes only, and that
//! node's `/run/netns` only. The agent lists every network namespace it can see (the distinct
//! `/proc/*/ns/net` of the processes it sees, and `/run/netns/*`) as its node's, and the analyzer
//! takes an address as evidence of a packet's first node only when exactly one trace lists it. Were
//! every node's agent to share the lab machine's PID and mount namespaces, it would list every
//! pod of every node, no address would belong to one node, and the bridged topologies could not
//! be matched at all.
//!
//! So each node gets a PID namespace and a mount namespace of its own, held by an init process
//! (PID 1 there, `sleep infinity`) started on the node: its `/proc` is its PID namespace's, its
//! `/sys` its network namespace's (as `ip netns exec` mounts it), and its `/run/netns` an empty
//! tmpfs hiding the lab's named namespaces. Every process "on" the node — its agent, one pause
//! process per pod (as Kubernetes keeps a pod's network namespace alive), the pods' applications —
//! is started inside those namespaces ([`Machine::spawn`]). The mounts are private to the node
//! (made so before anything is mounted), so nothing reaches the lab machine's own mounts.
//!
//! Killing the init kills every process left in its PID namespace; [`Machine`]'s drop does that
//! and reaps it, after the pause processes.
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::Netns;

/// A node's PID and mount namespaces, held by their init process, and its pods' pause processes.
pub struct Machine {
    /// PID 1 of the node's PID namespace (its PID here is the lab's view of it).
    init: Child,
    /// One per pod, in the pod's network namespace.
    pauses: Vec<Child>,
}

/// The result of a system call that returns -1 on failure, as an error naming `what`.
fn check(rc: libc::c_int, what: &str) -> Result<()> {
    if rc == -1 {
        bail!("{what}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// The path of `ns`'s namespace file on the lab machine.
fn netns_path(ns: &Netns) -> String {
    format!("/run/netns/{}", ns.name())
}

/// The inode number of `ns`: how an agent on its node names it (`--netns INODE`), since the
/// node's `/run/netns` does not show it.
pub fn inode(ns: &Netns) -> Result<u64> {
    let path = netns_path(ns);
    Ok(std::fs::metadata(&path)
        .with_context(|| format!("cannot stat {path}"))?
        .ino())
}

impl Machine {
    /// Starts node `node`'s init: new PID and mount namespaces, entered from a thread of its
    /// own (`unshare` of the mount namespace unshares that thread's filesystem context only).
    pub fn boot(node: &Netns) -> Result<Machine> {
        let path = netns_path(node);
        let net = File::open(&path).with_context(|| format!("cannot open {path}"))?;
        let init = std::thread::spawn(move || -> Result<Child> {
            // SAFETY: these calls change the namespaces and mounts of this thread (which ends
            // here) and of the mount namespace it has just made its own.
            unsafe {
                check(
                    libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID),
                    "unshare (mount, PID)",
                )?;
                // Before anything is mounted: nothing propagates to the lab machine's mounts.
                check(
                    libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ),
                    "making the node's mounts private",
                )?;
                check(
                    libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET),
                    "entering the node's network namespace",
                )?;
                // sysfs shows the devices of the network namespace that mounts it.
                check(
                    libc::umount2(c"/sys".as_ptr(), libc::MNT_DETACH),
                    "unmounting /sys",
                )?;
                check(
                    libc::mount(
                        c"sysfs".as_ptr(),
                        c"/sys".as_ptr(),
                        c"sysfs".as_ptr(),
                        0,
                        std::ptr::null(),
                    ),
                    "mounting the node's /sys",
                )?;
                check(
                    libc::mount(
                        c"tsync-node".as_ptr(),
                        c"/run/netns".as_ptr(),
                        c"tmpfs".as_ptr(),
                        0,
                        c"mode=755".as_ptr().cast(),
                    ),
                    "covering /run/netns",
                )?;
            }
            let mut cmd = Command::new("sleep");
            cmd.arg("infinity")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: the closure makes one system call (async-signal-safe) between fork and
            // exec. The child is PID 1 of the new PID namespace, whose /proc it mounts.
            unsafe {
                cmd.pre_exec(|| {
                    let rc = libc::mount(
                        c"proc".as_ptr(),
                        c"/proc".as_ptr(),
                        c"proc".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        std::ptr::null(),
                    );
                    if rc == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn().context("cannot start the node's init (sleep)")
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .with_context(|| format!("cannot make the machine of {}", node.name()))?;
        Ok(Machine {
            init,
            pauses: Vec::new(),
        })
    }

    /// Spawns `cmd` on the node, inside the network namespace `netns` (the node's or one of its
    /// pods'); the child's PID is the lab's view of it.
    ///
    /// A process enters a PID namespace only at its birth, as the child of a thread whose
    /// children's PID namespace it is: a thread of its own sets that, forks, and ends (no thread
    /// can be created while the two differ, so it creates none). The child enters the node's
    /// mount namespace and `netns` itself, before it executes the program (a single-threaded
    /// process may), and then returns to the lab's working directory.
    pub fn spawn(&self, netns: &Netns, cmd: &mut Command) -> Result<Child> {
        let pid = self.init.id();
        let open = |path: String| File::open(&path).with_context(|| format!("cannot open {path}"));
        // Opened from the lab's mounts, before anyone enters the node's.
        let (mnt, pidns, net) = (
            open(format!("/proc/{pid}/ns/mnt"))?,
            open(format!("/proc/{pid}/ns/pid"))?,
            open(netns_path(netns))?,
        );
        let cwd = std::env::current_dir()?;
        let cwd = CString::new(cwd.as_os_str().as_bytes())?;
        let (mnt_fd, net_fd) = (mnt.as_raw_fd(), net.as_raw_fd());
        // SAFETY: between fork and exec the closure makes system calls only (async-signal-safe),
        // on descriptors the parent keeps open until the child is spawned.
        unsafe {
            cmd.pre_exec(move || {
                for (rc, _) in [
                    (libc::setns(mnt_fd, libc::CLONE_NEWNS), "mount"),
                    (libc::setns(net_fd, libc::CLONE_NEWNET), "network"),
                    (libc::chdir(cwd.as_ptr()), "cwd"),
                ] {
                    if rc == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<Child> {
                    // SAFETY: changes the PID namespace of this thread's children only.
                    check(
                        unsafe { libc::setns(pidns.as_raw_fd(), libc::CLONE_NEWPID) },
                        "entering the node's PID namespace",
                    )?;
                    Ok(cmd.spawn()?)
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        drop((mnt, net));
        child.with_context(|| format!("cannot start a process in {} on its node", netns.name()))
    }

    /// Starts pod `pod`'s pause process on the node: the process that holds the pod's network
    /// namespace, as Kubernetes' pause container does, by which the node's agent sees the pod.
    pub fn start_pod(&mut self, pod: &Netns) -> Result<()> {
        let pause = self.spawn(
            pod,
            Command::new("sleep")
                .arg("infinity")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        self.pauses.push(pause);
        Ok(())
    }
}

/// How long a killed process may take to be reaped: the init's exit waits for every process of
/// its PID namespace, which the kernel kills with it.
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let deadline = Instant::now() + REAP_TIMEOUT;
    while let Ok(None) = child.try_wait() {
        if Instant::now() > deadline {
            eprintln!(
                "cluster: process {} of a node's machine not reaped after {REAP_TIMEOUT:?}",
                child.id()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        for pause in &mut self.pauses {
            kill_and_reap(pause);
        }
        kill_and_reap(&mut self.init);
    }
}
