//! A small lab of network namespaces joined by a bridge: several "nodes" on one machine.
//!
//! All namespaces share the machine's clock, which is what makes the truth known in the demo.
//! The bridge lives in a namespace of its own, so the lab never touches the host's network, and
//! tearing it down is deleting the namespaces (their veths go with them). Teardown runs on drop,
//! so a failing or interrupted run leaves nothing behind.

use std::process::Command;

use anyhow::{Context, bail};

/// A set of node namespaces on one bridge; deleted when dropped.
pub struct Lab {
    /// Namespace holding the bridge.
    switch: String,
    nodes: Vec<String>,
}

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
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

impl Lab {
    /// Creates `n` nodes named `{prefix}-n{k}` with addresses `10.200.0.{k+1}/24`.
    pub fn create(prefix: &str, n: usize) -> anyhow::Result<Lab> {
        let mut lab = Lab {
            switch: format!("{prefix}-sw"),
            nodes: Vec::new(),
        };
        ip(&["netns", "add", &lab.switch])
            .context("cannot create network namespaces (run as root)")?;
        let sw = lab.switch.clone();
        ip(&["-n", &sw, "link", "set", "lo", "up"])?;
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for k in 0..n {
            let node = format!("{prefix}-n{k}");
            ip(&["netns", "add", &node])?;
            lab.nodes.push(node.clone());
            let port = format!("p{k}");
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &node,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
            ip(&[
                "-n",
                &node,
                "addr",
                "add",
                &format!("{}/24", Lab::address(k)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &node, "link", "set", "eth0", "up"])?;
            ip(&["-n", &node, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }

    /// IPv4 address of node `k`.
    pub fn address(k: usize) -> String {
        format!("10.200.0.{}", k + 1)
    }

    /// Namespace names of the nodes.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// A command that runs `program` inside node `k`'s namespace.
    pub fn command(&self, k: usize, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.nodes[k]]).arg(program);
        cmd
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain(std::iter::once(&self.switch)) {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// Namespaces whose name starts with `prefix` (to check that nothing was left behind).
pub fn leftovers(prefix: &str) -> anyhow::Result<Vec<String>> {
    let out = Command::new("ip").args(["netns", "list"]).output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect())
}
