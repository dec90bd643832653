//! Network namespaces as nodes: one machine, one clock, several network stacks.
use std::{
    ffi::OsStr,
    fs,
    os::fd::AsRawFd as _,
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
    thread,
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run `ip` (install iproute2; `cargo xtask setup` does)")?;
    if !out.status.success() {
        bail!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `{tag}{pid}x{n}`: a name no other process and no earlier call uses, short enough to build
/// interface names from (at most 15 bytes).
pub fn unique_name(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{tag}{}x{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Namespaces whose name starts with `prefix` (to check that nothing was left behind).
pub fn leftovers(prefix: &str) -> Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .context("cannot run `ip netns list`")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect())
}

/// A named network namespace with its loopback up; deleted on drop, also when a test fails or a
/// run is interrupted, and its devices with it.
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates the namespace `name`.
    pub fn create(name: impl Into<String>) -> Result<Self> {
        let ns = Netns { name: name.into() };
        ip(&["netns", "add", &ns.name]).context("cannot create a network namespace (root?)")?;
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`, which execs it in
    /// place: the child's PID is the program's).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `f` on a thread that has entered the namespace: the sockets it opens live there.
    pub fn run_in<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        thread::spawn(move || {
            let ns = fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns on a valid namespace fd affects only this (fresh) thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// (packets, bytes) through device `dev`, both directions (`ip -s -j link`).
    pub fn counters(&self, dev: &str) -> Result<(u64, u64)> {
        let out = Command::new("ip")
            .args(["-n", &self.name, "-s", "-j", "link", "show", "dev", dev])
            .output()
            .context("cannot read the device counters")?;
        let v: Value = serde_json::from_slice(&out.stdout).context("ip -j printed no JSON")?;
        let stats = &v[0]["stats64"];
        let get = |dir: &str, what: &str| stats[dir][what].as_u64().unwrap_or(0);
        Ok((
            get("rx", "packets") + get("tx", "packets"),
            get("rx", "bytes") + get("tx", "bytes"),
        ))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("warning: {e}");
        }
    }
}

/// Two namespaces (`{name}-a`, `{name}-b`) and, once [`connect`](Self::connect)ed, a veth pair
/// between them; removed on drop.
pub struct VethPair {
    pub ns: [Netns; 2],
    /// The veth ends, in `ns[0]` and `ns[1]`.
    pub dev: [String; 2],
}

impl VethPair {
    /// Two empty namespaces named after `name` (e.g. a [`unique_name`]); the veth pair comes with
    /// [`connect`](Self::connect).
    pub fn namespaces(name: &str) -> Result<Self> {
        Ok(VethPair {
            ns: [
                Netns::create(format!("tsync-{name}-a"))?,
                Netns::create(format!("tsync-{name}-b"))?,
            ],
            dev: [format!("tv{name}a"), format!("tv{name}b")],
        })
    }

    /// Two namespaces joined by the veth pair with IPv4 addresses `v4` (/24) and, if given, IPv6
    /// addresses `v6` (/64).
    pub fn new(name: &str, v4: [&str; 2], v6: Option<[&str; 2]>) -> Result<Self> {
        let pair = Self::namespaces(name)?;
        pair.connect(v4, v6)?;
        Ok(pair)
    }

    /// Creates the veth pair between the namespaces, with addresses, up.
    pub fn connect(&self, v4: [&str; 2], v6: Option<[&str; 2]>) -> Result<()> {
        let [ns0, ns1] = [self.ns[0].name(), self.ns[1].name()];
        let [dev0, dev1] = [self.dev[0].as_str(), self.dev[1].as_str()];
        ip(&[
            "link", "add", dev0, "netns", ns0, "type", "veth", "peer", "name", dev1, "netns", ns1,
        ])?;
        for i in 0..2 {
            let (ns, dev) = (&self.ns[i], self.dev[i].as_str());
            ns.ip(&["addr", "add", &format!("{}/24", v4[i]), "dev", dev])?;
            if let Some(v6) = v6 {
                let addr = format!("{}/64", v6[i]);
                ns.ip(&["addr", "add", &addr, "dev", dev, "nodad"])?;
            }
            ns.ip(&["link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// (packets, bytes) through the first veth end, both directions.
    pub fn counters(&self) -> Result<(u64, u64)> {
        self.ns[0].counters(&self.dev[0])
    }
}

/// Node namespaces `{prefix}-n{k}`, each with an `eth0` whose peer is a port of bridge `br0` in
/// namespace `{prefix}-sw`; removed on drop.
pub struct Bridge {
    nodes: Vec<Netns>,
    /// Dropped last, as it was created first.
    _switch: Netns,
}

impl Bridge {
    /// Creates `n` nodes with addresses [`Bridge::address`]`(k)/24`.
    pub fn create(prefix: &str, n: usize) -> Result<Self> {
        let switch = Netns::create(format!("{prefix}-sw"))?;
        switch.ip(&["link", "add", "br0", "type", "bridge"])?;
        switch.ip(&["link", "set", "br0", "up"])?;
        let mut nodes = Vec::new();
        for k in 0..n {
            let node = Netns::create(format!("{prefix}-n{k}"))?;
            let port = format!("p{k}");
            switch.ip(&[
                "link",
                "add",
                &port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                node.name(),
            ])?;
            switch.ip(&["link", "set", &port, "master", "br0", "up"])?;
            let addr = format!("{}/24", Self::address(k));
            node.ip(&["addr", "add", &addr, "dev", "eth0"])?;
            node.ip(&["link", "set", "eth0", "up"])?;
            nodes.push(node);
        }
        Ok(Bridge {
            nodes,
            _switch: switch,
        })
    }

    /// IPv4 address of node `k`.
    pub fn address(k: usize) -> String {
        format!("10.200.0.{}", k + 1)
    }

    /// The nodes' namespaces.
    pub fn nodes(&self) -> &[Netns] {
        &self.nodes
    }

    /// Turns segmentation (TSO, GSO) and receive (GRO) offloads on or off on every veth end:
    /// the nodes' `eth0` and the bridge's ports. Linux's veth defaults are TSO and GSO on, GRO
    /// off.
    pub fn set_offloads(&self, on: bool) -> Result<()> {
        let ends = self
            .nodes
            .iter()
            .map(|n| (n, "eth0".to_owned()))
            .chain((0..self.nodes.len()).map(|k| (&self._switch, format!("p{k}"))));
        for (ns, dev) in ends {
            let name = dev.clone();
            let missing = ns
                .run_in(move || crate::offloads::set(&dev, on))
                .with_context(|| format!("in namespace {}", ns.name()))?;
            if !missing.is_empty() {
                eprintln!(
                    "note: {name} in {} cannot change {}: left {}",
                    ns.name(),
                    missing.join(", "),
                    if on { "off" } else { "on" }
                );
            }
        }
        Ok(())
    }
}
