//! The cluster built from its [`Plan`]: a switch namespace whose bridge is the wire, a namespace
//! per node with its `eth0` on that wire, a namespace per pod behind its node, wired as the
//! topology says (bridges, routes, VXLAN devices with static entries, nftables NAT). Everything
//! lives in namespaces named after one prefix and is deleted on drop (pods, then nodes, then the
//! switch), also when a run fails or is interrupted; the host's network is never touched.
use std::io::Write as _;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use super::machine::Machine;
use super::nat;
use super::topology::{Plan, Topology};
use crate::Netns;

/// The built cluster. Fields drop in order: the nodes' machines (every process on them killed),
/// pods, nodes, switch.
pub struct ClusterNet {
    /// `machines[k]`: node k's PID and mount namespaces ([`Machine`]).
    machines: Vec<Machine>,
    /// `pods[k][p]`: pod p of node k.
    pods: Vec<Vec<Netns>>,
    nodes: Vec<Netns>,
    _switch: Netns,
    /// Interface index of each node's [`Topology::egress_device`].
    egress: Vec<u32>,
}

/// Interface indexes, unique over the whole cluster (each namespace numbers its own, so two
/// namespaces' devices could share one): an agent recording a node and its pods tells their
/// devices apart by index.
struct Indexes(u32);

impl Indexes {
    fn take(&mut self) -> u32 {
        self.0 += 1;
        self.0
    }
}

/// Runs `tool -n NS -batch -` (`ip` or `bridge`) with `lines` as its commands; fails naming the
/// namespace, the tool's message and the commands.
fn batch(tool: &str, ns: &Netns, lines: &[String]) -> Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut child = Command::new(tool)
        .args(["-n", ns.name(), "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run `{tool}` (install iproute2: cargo xtask setup)"))?;
    let input = lines.join("\n") + "\n";
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "`{tool} -n {} -batch` failed: {}\ncommands:\n{input}",
            ns.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Writes `value` to `/proc/sys/{key}` inside `ns` (a thread that entered it sees its sysctls).
fn sysctl(ns: &Netns, key: &str, value: &str) -> Result<()> {
    let (path, value) = (format!("/proc/sys/{key}"), value.to_owned());
    let shown = path.clone();
    ns.run_in(move || std::fs::write(&path, value))
        .with_context(|| format!("cannot write {shown} in {}", ns.name()))
}

/// A fresh namespace without IPv6 duplicate address detection: addresses are usable at once, not
/// after a second of tentative state (devices take the `default` settings when created).
fn namespace(name: String, ipv6: bool) -> Result<Netns> {
    let ns = Netns::create(name)?;
    for scope in ["all", "default"] {
        if ipv6 {
            sysctl(&ns, &format!("net/ipv6/conf/{scope}/accept_dad"), "0")?;
        } else {
            sysctl(&ns, &format!("net/ipv6/conf/{scope}/disable_ipv6"), "1")?;
        }
    }
    Ok(ns)
}

impl ClusterNet {
    /// Builds the cluster of `plan` in namespaces `{prefix}-sw`, `{prefix}-n{k}` and
    /// `{prefix}-n{k}p{p}`.
    pub fn build(plan: &Plan, prefix: &str) -> Result<ClusterNet> {
        let switch = namespace(format!("{prefix}-sw"), false)?;
        batch(
            "ip",
            &switch,
            &["link add br0 type bridge".into(), "link set br0 up".into()],
        )?;
        let mut net = ClusterNet {
            machines: Vec::new(),
            pods: Vec::new(),
            nodes: Vec::new(),
            _switch: switch,
            egress: Vec::new(),
        };
        let mut index = Indexes(100);
        for k in 0..plan.nodes {
            let node = namespace(format!("{prefix}-n{k}"), true)?;
            let eth0 = index.take();
            let switch_end = index.take();
            batch(
                "ip",
                &net._switch,
                &[
                    format!(
                        "link add name p{k} index {switch_end} type veth peer name eth0 \
                         index {eth0} netns {}",
                        node.name()
                    ),
                    format!("link set p{k} master br0 up"),
                ],
            )?;
            let pods = (0..plan.pods)
                .map(|p| namespace(format!("{prefix}-n{k}p{p}"), true))
                .collect::<Result<Vec<_>>>()?;
            let egress = wire_node(plan, k, &node, &pods, eth0, &mut index)
                .with_context(|| format!("cannot wire node {k} ({})", plan.topology.name()))?;
            let mut machine = Machine::boot(&node)?;
            for pod in &pods {
                machine.start_pod(pod)?;
            }
            net.machines.push(machine);
            net.nodes.push(node);
            net.pods.push(pods);
            net.egress.push(egress);
        }
        Ok(net)
    }

    pub fn nodes(&self) -> &[Netns] {
        &self.nodes
    }

    /// Node k's pods.
    pub fn pods(&self, k: usize) -> &[Netns] {
        &self.pods[k]
    }

    /// Node k's machine: where its agent and its pods' applications run.
    pub fn machine(&self, k: usize) -> &Machine {
        &self.machines[k]
    }

    /// Interface index of node k's egress device.
    pub fn egress_ifindex(&self, k: usize) -> u32 {
        self.egress[k]
    }
}

/// Wires node k and its pods as the topology says; returns the egress device's index.
fn wire_node(
    plan: &Plan,
    k: usize,
    node: &Netns,
    pods: &[Netns],
    eth0: u32,
    index: &mut Indexes,
) -> Result<u32> {
    let topology = plan.topology;
    let mtu = topology.pod_mtu();
    let mut cmds: Vec<String> = Vec::new();
    let mut fdb: Vec<String> = Vec::new();
    let mut egress = eth0;
    // The node's side of the wire.
    if topology == Topology::Flat {
        cmds.push(format!(
            "link add name br0 index {} type bridge",
            index.take()
        ));
        cmds.push("link set eth0 master br0 up".into());
        cmds.push(format!(
            "addr add {}/{} dev br0",
            plan.node_v4(k),
            plan.wire_prefix_v4()
        ));
        cmds.push(format!("addr add {}/64 dev br0", plan.node_v6(k)));
        cmds.push("link set br0 up".into());
    } else {
        cmds.push(format!(
            "addr add {}/{} dev eth0",
            plan.node_v4(k),
            plan.wire_prefix_v4()
        ));
        cmds.push(format!("addr add {}/64 dev eth0", plan.node_v6(k)));
        cmds.push("link set eth0 up".into());
    }
    let others = || (0..plan.nodes).filter(move |&j| j != k);
    match topology {
        Topology::Flat => {}
        Topology::Routed | Topology::Nat => {
            for j in others() {
                cmds.push(format!(
                    "route add {} via {}",
                    plan.pod_subnet_v4(j),
                    plan.node_v4(j)
                ));
                cmds.push(format!(
                    "route add {} via {}",
                    plan.pod_subnet_v6(j),
                    plan.node_v6(j)
                ));
            }
        }
        Topology::Vxlan => {
            cmds.push(format!(
                "link add name cni0 index {} type bridge",
                index.take()
            ));
            cmds.push(format!("addr add {}/24 dev cni0", plan.gateway_v4(k)));
            cmds.push(format!("addr add {}/64 dev cni0", plan.gateway_v6(k)));
            cmds.push(format!("link set cni0 mtu {mtu} up"));
            egress = index.take();
            cmds.push(format!(
                "link add name flannel.1 index {egress} address {} type vxlan id 1 \
                 dstport 8472 local {} dev eth0 nolearning",
                Plan::tunnel_mac(k),
                plan.node_v4(k)
            ));
            cmds.push(format!("addr add {}/32 dev flannel.1", plan.tunnel_v4(k)));
            cmds.push(format!("addr add {}/128 dev flannel.1", plan.tunnel_v6(k)));
            cmds.push("link set flannel.1 up".into());
            for j in others() {
                let mac = Plan::tunnel_mac(j);
                for (hop, subnet) in [
                    (plan.tunnel_v4(j).to_string(), plan.pod_subnet_v4(j)),
                    (plan.tunnel_v6(j).to_string(), plan.pod_subnet_v6(j)),
                ] {
                    cmds.push(format!(
                        "neigh add {hop} lladdr {mac} dev flannel.1 nud permanent"
                    ));
                    cmds.push(format!("route add {subnet} via {hop} dev flannel.1 onlink"));
                }
                fdb.push(format!(
                    "fdb append {mac} dev flannel.1 dst {} self permanent",
                    plan.node_v4(j)
                ));
            }
        }
        Topology::VxlanL2 => {
            cmds.push(format!(
                "link add name br0 index {} type bridge",
                index.take()
            ));
            cmds.push(format!("link set br0 mtu {mtu} up"));
            egress = index.take();
            cmds.push(format!(
                "link add name vxlan0 index {egress} type vxlan id 42 dstport 4789 local {} \
                 dev eth0 nolearning",
                plan.node_v4(k)
            ));
            cmds.push("link set vxlan0 master br0 up".into());
            for j in others() {
                // Broadcast and multicast (ARP, neighbour discovery) to every other node,
                // unicast to the node of the pod that owns the address.
                fdb.push(format!(
                    "fdb append 00:00:00:00:00:00 dev vxlan0 dst {} self permanent",
                    plan.node_v4(j)
                ));
                for q in 0..plan.pods {
                    fdb.push(format!(
                        "fdb append {} dev vxlan0 dst {} self permanent",
                        Plan::pod_mac(j, q),
                        plan.node_v4(j)
                    ));
                }
            }
        }
    }
    // The pods: a veth each, the node's end bridged or routed.
    let mut pod_cmds = Vec::new();
    for (p, pod) in pods.iter().enumerate() {
        let host_end = match topology {
            Topology::Routed | Topology::Nat => format!("cali{p}"),
            _ => format!("veth{p}"),
        };
        cmds.push(format!(
            "link add name {host_end} index {} mtu {mtu} type veth peer name eth0 index {} \
             mtu {mtu} netns {}",
            index.take(),
            index.take(),
            pod.name()
        ));
        let (v4, len4) = plan.pod_v4(k, p);
        let (v6, len6) = plan.pod_v6(k, p);
        let mut lines = Vec::new();
        if topology == Topology::VxlanL2 {
            lines.push(format!("link set eth0 address {}", Plan::pod_mac(k, p)));
        }
        lines.push(format!("addr add {v4}/{len4} dev eth0"));
        lines.push(format!("addr add {v6}/{len6} dev eth0"));
        lines.push("link set eth0 up".into());
        match topology {
            Topology::Flat => cmds.push(format!("link set {host_end} master br0 up")),
            Topology::VxlanL2 => cmds.push(format!("link set {host_end} master br0 up")),
            Topology::Vxlan => {
                cmds.push(format!("link set {host_end} master cni0 up"));
                lines.push(format!("route add default via {}", plan.gateway_v4(k)));
                lines.push(format!("route add ::/0 via {}", plan.gateway_v6(k)));
            }
            Topology::Routed | Topology::Nat => {
                // Calico's way: the node's end answers for a link-local gateway, and a host
                // route per pod points at its veth.
                cmds.push(format!("addr add 169.254.1.1/32 dev {host_end}"));
                cmds.push(format!("addr add fe80::1/64 dev {host_end}"));
                cmds.push(format!("link set {host_end} up"));
                cmds.push(format!("route add {v4}/32 dev {host_end}"));
                cmds.push(format!("route add {v6}/128 dev {host_end}"));
                lines.push("route add 169.254.1.1/32 dev eth0 scope link".into());
                lines.push("route add default via 169.254.1.1 dev eth0".into());
                lines.push("route add ::/0 via fe80::1 dev eth0".into());
            }
        }
        pod_cmds.push((pod, lines));
    }
    if !matches!(topology, Topology::Flat | Topology::VxlanL2) {
        sysctl(node, "net/ipv4/ip_forward", "1")?;
        sysctl(node, "net/ipv6/conf/all/forwarding", "1")?;
    }
    batch("ip", node, &cmds)?;
    batch("bridge", node, &fdb)?;
    for (pod, lines) in pod_cmds {
        batch("ip", pod, &lines)?;
    }
    if topology == Topology::Nat {
        nat::apply(node, &nat::ruleset(plan, k))?;
    }
    Ok(egress)
}
