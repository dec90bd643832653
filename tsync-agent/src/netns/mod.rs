//! Network namespaces: which ones the agent records (`--netns`), which ones it can see, and what
//! addresses and interfaces they have.
//!
//! A namespace is known by the inode number of its nsfs file, which is what the kernel programs
//! compare (`net.ns.inum`). Pods and containers live in namespaces of their own; the agent of a
//! Kubernetes DaemonSet (hostNetwork, hostPID) sees them as the namespaces of the node's
//! processes (`/proc/PID/ns/net`) and, for those made with `ip netns add`, under `/run/netns`.
pub mod addresses;
mod watch;

use std::{
    collections::BTreeMap,
    fs, io,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use tsync_common::format::{Interface, RecordedNetns};

pub use self::watch::{SCAN_PERIOD, Watcher};
use crate::node;

/// Where `ip netns add` mounts the namespaces it names.
pub const RUN_NETNS: &str = "/run/netns";
/// The agent's own namespace, the default.
pub const OWN: &str = "/proc/self/ns/net";

/// `ioctl(fd, NS_GET_NSTYPE)` (`_IO(0xb7, 0x3)`, Linux 4.11): the `CLONE_NEW*` type of the
/// namespace an nsfs file stands for. A file that is not one fails with ENOTTY.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Which namespaces are recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// Every one (`--all-netns`).
    All,
    /// These (by default the agent's own; `--netns`), sorted, each once.
    Only(Vec<RecordedNetns>),
}

impl Selection {
    pub fn records(&self, inode: u64) -> bool {
        match self {
            Selection::All => true,
            Selection::Only(list) => list.iter().any(|ns| ns.inode == inode),
        }
    }

    /// The inode numbers recorded; None for all.
    pub fn inodes(&self) -> Option<Vec<u64>> {
        match self {
            Selection::All => None,
            Selection::Only(list) => Some(list.iter().map(|ns| ns.inode).collect()),
        }
    }
}

/// A network namespace the agent can see, and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub inode: u64,
    /// A process in it: `/proc/PID/net` shows the namespace without entering it.
    pub pid: Option<u32>,
    /// Its name under [`RUN_NETNS`], if it has one.
    pub run_netns: Option<PathBuf>,
}

impl Namespace {
    /// A namespace file to open (and enter) it by.
    pub fn path(&self) -> PathBuf {
        match (&self.run_netns, self.pid) {
            (Some(path), _) => path.clone(),
            (None, Some(pid)) => PathBuf::from(format!("/proc/{pid}/ns/net")),
            (None, None) => PathBuf::from(OWN),
        }
    }

    /// Its addresses, read from a process's `/proc/PID/net` if it has one, else from a thread
    /// that entered it.
    pub fn addresses(&self) -> io::Result<Vec<tsync_common::format::IpPrefix>> {
        if let Some(pid) = self.pid {
            match addresses::read(Path::new(&format!("/proc/{pid}/net"))) {
                // The process may have exited since the scan: another way, if there is one.
                Err(e) if self.run_netns.is_none() => return Err(e),
                Err(_) => {}
                ok => return ok,
            }
        }
        enter(&self.path(), || {
            addresses::read(Path::new("/proc/thread-self/net"))
        })?
    }
}

/// The inode number of the network namespace file `path` stands for; fails, saying why, when
/// it is not one (a `/run/netns` entry whose namespace is gone is an empty file).
pub fn inode_of(path: &Path) -> Result<u64> {
    let file = fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: an ioctl without argument on a file descriptor we own.
    let kind = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE as _) };
    if kind < 0 {
        bail!(
            "{} is not a namespace file (nsfs): {}",
            path.display(),
            io::Error::last_os_error()
        );
    }
    if kind != libc::CLONE_NEWNET {
        bail!(
            "{} is a namespace of another type, not a network namespace",
            path.display()
        );
    }
    use std::os::unix::fs::MetadataExt as _;
    Ok(file
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .ino())
}

/// The network namespace of process `pid`, from its `/proc/PID/ns/net` link (`net:[INODE]`);
/// None when the process is gone or not ours to inspect.
fn inode_of_process(pid: u32) -> Option<u64> {
    let link = fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    link.to_str()?
        .strip_prefix("net:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Every network namespace the agent can see: those of the processes in `/proc` (all of them
/// with root or CAP_SYS_PTRACE, otherwise the agent's user's) and those under `/run/netns`,
/// sorted by inode. A thread in a namespace of its own, unnamed, is not seen.
pub fn scan() -> Vec<Namespace> {
    let mut found: BTreeMap<u64, Namespace> = BTreeMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(inode) = inode_of_process(pid) {
                found.entry(inode).or_insert(Namespace {
                    inode,
                    pid: Some(pid),
                    run_netns: None,
                });
            }
        }
    }
    if let Ok(dir) = fs::read_dir(RUN_NETNS) {
        for entry in dir.flatten() {
            let path = entry.path();
            if let Ok(inode) = inode_of(&path) {
                found
                    .entry(inode)
                    .or_insert(Namespace {
                        inode,
                        pid: None,
                        run_netns: None,
                    })
                    .run_netns
                    .get_or_insert(path);
            }
        }
    }
    found.into_values().collect()
}

/// Resolves the arguments of `--netns` (each `/run/netns/NAME`, a bare `NAME` under
/// `/run/netns`, `/proc/PID/ns/net` or any nsfs file, or an inode number) to the namespaces to
/// record, sorted by inode, each once.
pub fn resolve(args: &[String]) -> Result<Vec<RecordedNetns>> {
    let mut seen: Option<Vec<Namespace>> = None;
    let mut chosen: BTreeMap<u64, RecordedNetns> = BTreeMap::new();
    for arg in args {
        let ns = if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) {
            let inode: u64 = arg
                .parse()
                .with_context(|| format!("--netns {arg}: not an inode number"))?;
            let ns = seen
                .get_or_insert_with(scan)
                .iter()
                .find(|ns| ns.inode == inode)
                .with_context(|| {
                    format!(
                        "--netns {arg}: no network namespace with that inode number: no process \
                         is in one and none is under {RUN_NETNS} (`ls -iL {RUN_NETNS}` and \
                         `readlink /proc/PID/ns/net` show them)"
                    )
                })?;
            RecordedNetns {
                inode,
                path: ns.path().display().to_string(),
            }
        } else {
            let path = if arg.contains('/') {
                PathBuf::from(arg)
            } else if arg.is_empty() || arg == "." || arg == ".." {
                bail!("--netns {arg:?}: not a namespace name");
            } else {
                Path::new(RUN_NETNS).join(arg)
            };
            let inode = inode_of(&path).with_context(|| format!("--netns {arg}"))?;
            RecordedNetns {
                inode,
                path: path.display().to_string(),
            }
        };
        chosen.entry(ns.inode).or_insert(ns);
    }
    if chosen.len() > tsync_common::MAX_NETNS {
        bail!(
            "--netns names {} network namespaces; at most {} can be recorded by name (the \
             programs compare each packet's with each): record them all with --all-netns",
            chosen.len(),
            tsync_common::MAX_NETNS
        );
    }
    Ok(chosen.into_values().collect())
}

/// Runs `f` on a short-lived thread that entered the network namespace of `path`
/// (`setns(2)`, CAP_SYS_ADMIN): sockets it opens (netlink included) and `/proc/thread-self/net`
/// are that namespace's, while the agent's other threads stay where they are.
pub fn enter<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let file = fs::File::open(path)?;
    std::thread::Builder::new()
        .name("tsync-netns".into())
        .spawn(move || {
            // SAFETY: setns on a namespace file we own; it changes this thread only.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })?
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
}

/// The interfaces of the recorded namespaces, each with its namespace's inode: the agent's own
/// read directly, the others from a thread that entered them. A namespace that cannot be
/// entered (no CAP_SYS_ADMIN) is left out with a warning: the header is informative, the
/// recording goes on.
pub fn interfaces(selection: &Selection, own: u64) -> Result<Vec<Interface>> {
    let namespaces: Vec<(u64, PathBuf)> = match selection {
        Selection::All => scan().into_iter().map(|ns| (ns.inode, ns.path())).collect(),
        Selection::Only(list) => list
            .iter()
            .map(|ns| (ns.inode, PathBuf::from(&ns.path)))
            .collect(),
    };
    let mut all = Vec::new();
    let mut missed = Vec::new();
    for (inode, path) in namespaces {
        let listed = if inode == own {
            node::interfaces().context("cannot list the network interfaces")
        } else {
            enter(&path, node::interfaces)
                .and_then(|r| r)
                .with_context(|| format!("cannot list the interfaces in {}", path.display()))
        };
        match listed {
            Ok(list) => all.extend(list.into_iter().map(|i| Interface {
                netns_inode: inode,
                ..i
            })),
            Err(e) if inode == own => return Err(e),
            Err(e) => missed.push((inode, e)),
        }
    }
    // Once, however many: with --all-netns and no CAP_SYS_ADMIN that is every pod's namespace.
    if let Some((_, first)) = missed.first() {
        log::warn!(
            "the header lists no interface of {} network namespace(s) ({}): {first:#} (entering \
             a namespace needs CAP_SYS_ADMIN); the recording goes on",
            missed.len(),
            missed
                .iter()
                .map(|(inode, _)| inode.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_own_namespace_resolves_by_path_and_by_inode() {
        let own = node::netns_inode().unwrap();
        let by_path = resolve(&[OWN.to_owned(), "/proc/self/ns/net".to_owned()]).unwrap();
        assert_eq!(
            by_path.len(),
            1,
            "the same namespace twice is recorded once"
        );
        assert_eq!(by_path[0].inode, own);
        let by_inode = resolve(&[own.to_string()]).unwrap();
        assert_eq!(by_inode[0].inode, own);
        assert!(scan().iter().any(|ns| ns.inode == own));
    }

    #[test]
    fn unknown_namespaces_are_refused_with_the_reason() {
        let err = |arg: &str| format!("{:#}", resolve(&[arg.to_owned()]).unwrap_err());
        assert!(
            err("12").contains("no network namespace with that inode"),
            "{}",
            err("12")
        );
        assert!(err("tsync-no-such-namespace").contains("cannot open /run/netns/"));
        assert!(err("/proc/self/status").contains("not a namespace file"));
        assert!(err("/proc/self/ns/uts").contains("not a network namespace"));
        assert!(err("..").contains("not a namespace name"));
    }

    #[test]
    fn own_namespace_addresses_read_through_its_process() {
        let own = Namespace {
            inode: node::netns_inode().unwrap(),
            pid: Some(std::process::id()),
            run_netns: None,
        };
        assert_eq!(
            own.path(),
            PathBuf::from(format!("/proc/{}/ns/net", std::process::id()))
        );
        own.addresses().unwrap();
    }
}
