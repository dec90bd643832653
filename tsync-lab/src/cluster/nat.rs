//! The `nat` topology's nftables rules, as kube-proxy (nftables mode) and Docker install them:
//! - **services**: on every node, each service address (one per backend node,
//!   [`Plan::service_v4`]) is DNAT'ed to its backend pod and marked, and marked packets are
//!   masqueraded as they leave: a client pod's packet crosses the wire from its node's address
//!   to the backend pod;
//! - **host ports**: node k's own address and [`port::HOST_PORT_OFFSET`] + port is DNAT'ed to its
//!   [`Plan::host_port_pod`] (Docker's `-p`), without masquerade: the backend sees the client
//!   pod's address.
//!
//! Both over IPv4 and IPv6 (one `inet` table). The table lives in the node's namespace and goes
//! with it.
use std::io::Write as _;
use std::process::Stdio;

use anyhow::{Context as _, Result, bail};

use super::topology::{Plan, port};
use crate::Netns;

/// The mark kube-proxy sets on packets to masquerade (its `KUBE-MARK-MASQ` bit).
const MASQUERADE_MARK: u32 = 0x4000;

/// Node k's ruleset, for `nft -f -`.
pub fn ruleset(plan: &Plan, k: usize) -> String {
    let mut pre = Vec::new();
    let tcp = port::TCP;
    let (udp_lo, udp_hi) = (port::UDP_CONNECTED, port::QUIC);
    for j in 0..plan.nodes {
        let (v4, v6) = (plan.pod_v4(j, 0).0, plan.pod_v6(j, 0).0);
        let (s4, s6) = (plan.service_v4(j), plan.service_v6(j));
        let mark = format!("meta mark set meta mark or {MASQUERADE_MARK:#x}");
        pre.push(format!(
            "ip daddr {s4} tcp dport {tcp} {mark} dnat ip to {v4}"
        ));
        pre.push(format!(
            "ip daddr {s4} udp dport {udp_lo}-{udp_hi} {mark} dnat ip to {v4}"
        ));
        pre.push(format!(
            "ip6 daddr {s6} tcp dport {tcp} {mark} dnat ip6 to {v6}"
        ));
        pre.push(format!(
            "ip6 daddr {s6} udp dport {udp_lo}-{udp_hi} {mark} dnat ip6 to {v6}"
        ));
    }
    let p = plan.host_port_pod();
    let (v4, v6) = (plan.pod_v4(k, p).0, plan.pod_v6(k, p).0);
    for target in port::ALL {
        let proto = if target == port::TCP { "tcp" } else { "udp" };
        let published = target + port::HOST_PORT_OFFSET;
        pre.push(format!(
            "ip daddr {} {proto} dport {published} dnat ip to {v4}:{target}",
            plan.node_v4(k)
        ));
        pre.push(format!(
            "ip6 daddr {} {proto} dport {published} dnat ip6 to [{v6}]:{target}",
            plan.node_v6(k)
        ));
    }
    let rules = |rules: &[String]| {
        rules
            .iter()
            .map(|r| format!("    {r}\n"))
            .collect::<String>()
    };
    format!(
        "table inet tsync_lab {{\n  chain prerouting {{\n    type nat hook prerouting priority \
         dstnat; policy accept;\n{}  }}\n  chain postrouting {{\n    type nat hook postrouting \
         priority srcnat; policy accept;\n    meta mark & {MASQUERADE_MARK:#x} == \
         {MASQUERADE_MARK:#x} masquerade\n  }}\n}}\n",
        rules(&pre)
    )
}

/// Loads `ruleset` into `node`'s namespace with `nft -f -`.
pub fn apply(node: &Netns, ruleset: &str) -> Result<()> {
    let mut child = node
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run `nft` (install nftables: cargo xtask setup)")?;
    child
        .stdin
        .take()
        .context("no stdin")?
        .write_all(ruleset.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft refused the NAT rules in {}: {}\nrules:\n{ruleset}",
            node.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The rules `nft` holds in `node`'s namespace (`nft list ruleset`), to show in reports.
pub fn listed(node: &Netns) -> Option<String> {
    crate::command::output(node.command("nft").args(["list", "ruleset"]))
}

#[cfg(test)]
mod tests {
    use super::super::topology::Topology;
    use super::*;

    #[test]
    fn every_node_translates_every_service_and_only_its_own_host_ports() {
        let plan = Plan::new(Topology::Nat, 3, 2).unwrap();
        let rules = ruleset(&plan, 1);
        for j in 0..3 {
            assert!(rules.contains(&format!(
                "ip daddr {} tcp dport 7000 meta mark set meta mark or 0x4000 dnat ip to {}\n",
                plan.service_v4(j),
                plan.pod_v4(j, 0).0
            )));
            assert!(rules.contains(&format!(
                "ip6 daddr {} udp dport 7001-7003",
                plan.service_v6(j)
            )));
        }
        assert!(rules.contains(&format!(
            "ip daddr {} udp dport 30003 dnat ip to {}:7003",
            plan.node_v4(1),
            plan.pod_v4(1, 1).0
        )));
        assert!(rules.contains(&format!(
            "ip6 daddr {} tcp dport 30000 dnat ip6 to [{}]:7000",
            plan.node_v6(1),
            plan.pod_v6(1, 1).0
        )));
        assert!(!rules.contains(&plan.node_v4(0).to_string()));
        assert!(rules.contains("meta mark & 0x4000 == 0x4000 masquerade"));
    }
}
