//! The cluster's networks, as address plans: which topology, which address every node and pod
//! has, which device carries a node's traffic to the others, and whom each pod talks to. Pure
//! data (the namespaces are built from it by [`super::network`]), so that the unit tests check it.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// How pods reach pods on other nodes (the CNI plugin's choice, or Docker's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Topology {
    /// Pods bridged onto the wire: the node's bridge holds its `eth0` and the pods' veths, one
    /// L2 subnet for nodes and pods; the node bridges (TTL unchanged).
    Flat,
    /// Each node routes its pods' addresses (Calico-like: a veth per pod, a /32 and /128 route to
    /// it, a gateway address on the node's end) and the other nodes' pod subnets through their
    /// node address; no encapsulation, the node forwards (TTL − 1).
    Routed,
    /// Flannel-like: pods on a `cni0` bridge with a gateway address, routed into a VXLAN device
    /// (`flannel.1`, UDP port 8472, static FDB and neighbour entries, no learning), then the
    /// underlay `eth0` (IPv4).
    Vxlan,
    /// Pods bridged into a VXLAN device (port 4789) on the node's bridge: one L2 overlay subnet
    /// (TTL unchanged), the underlay `eth0` separate.
    VxlanL2,
    /// `routed` with NAT: service addresses DNAT'ed to a pod on another node plus masquerade (as
    /// kube-proxy does with nftables), and a published host port (Docker-style DNAT of the node's
    /// address and port to a pod), each used by client pods on the other nodes; and each node's
    /// service used by its own other pods (hairpin: [`Plan::hairpin_targets`]).
    Nat,
}

impl Topology {
    pub const ALL: [Topology; 5] = [
        Topology::Flat,
        Topology::Routed,
        Topology::Vxlan,
        Topology::VxlanL2,
        Topology::Nat,
    ];

    /// The name `--topology` takes.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Flat => "flat",
            Topology::Routed => "routed",
            Topology::Vxlan => "vxlan",
            Topology::VxlanL2 => "vxlan-l2",
            Topology::Nat => "nat",
        }
    }

    /// The device by which a node's traffic to the other nodes leaves it: every packet between
    /// two nodes is sent on it exactly once (for the overlays the tunnel device, whose packets
    /// are the pods' own; the underlay's are those packets wrapped).
    pub fn egress_device(self) -> &'static str {
        match self {
            Topology::Flat | Topology::Routed | Topology::Nat => "eth0",
            Topology::Vxlan => "flannel.1",
            Topology::VxlanL2 => "vxlan0",
        }
    }

    /// Whether pod traffic crosses the wire inside a tunnel.
    pub fn encapsulated(self) -> bool {
        matches!(self, Topology::Vxlan | Topology::VxlanL2)
    }

    /// The pods' MTU: VXLAN's 50 bytes of headers come off the wire's 1500.
    pub fn pod_mtu(self) -> u32 {
        if self.encapsulated() { 1450 } else { 1500 }
    }
}

/// The ports every pod serves (the servers of `tsync-lab traffic` and `tsync-lab datagrams`).
pub mod port {
    /// TCP: request/response and bulk.
    pub const TCP: u16 = 7000;
    /// UDP, DNS-like, queried from connected sockets.
    pub const UDP_CONNECTED: u16 = 7001;
    /// UDP, DNS-like, queried from unconnected sockets (`sendto`/`recvfrom`).
    pub const UDP_UNCONNECTED: u16 = 7002;
    /// UDP, QUIC-like.
    pub const QUIC: u16 = 7003;
    /// A node's published host ports (the `nat` topology) are these plus [`HOST_PORT_OFFSET`].
    pub const HOST_PORT_OFFSET: u16 = 23000;
    /// Every served port.
    pub const ALL: [u16; 4] = [TCP, UDP_CONNECTED, UDP_UNCONNECTED, QUIC];
}

/// Where a pod sends one kind of traffic: an address and the port of each service on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub addr: IpAddr,
    /// Added to every [`port`] (0, or the host ports' offset).
    pub port_offset: u16,
}

impl Target {
    pub fn at(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr, port + self.port_offset)
    }
}

/// The cluster's addresses: `nodes` nodes of `pods` pods each, wired as `topology` says.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub topology: Topology,
    pub nodes: usize,
    pub pods: usize,
}

/// Largest number of nodes and of pods per node (one address byte each, with room to spare).
pub const MAX_NODES: usize = 50;
pub const MAX_PODS: usize = 50;

impl Plan {
    pub fn new(topology: Topology, nodes: usize, pods: usize) -> anyhow::Result<Plan> {
        anyhow::ensure!(
            (2..=MAX_NODES).contains(&nodes),
            "--nodes must be 2 to {MAX_NODES} (pods talk to pods on other nodes)"
        );
        anyhow::ensure!(
            (1..=MAX_PODS).contains(&pods),
            "--pods must be 1 to {MAX_PODS}"
        );
        Ok(Plan {
            topology,
            nodes,
            pods,
        })
    }

    /// Node k's address on the wire: its `eth0` (for `flat` its bridge, which holds `eth0`).
    pub fn node_v4(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, 0, k as u8 + 1)
    }

    pub fn node_v6(&self, k: usize) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, 0, k as u16 + 1)
    }

    /// Prefix length of the wire's subnet: `flat` puts the pods in it.
    pub fn wire_prefix_v4(&self) -> u8 {
        if self.topology == Topology::Flat {
            16
        } else {
            24
        }
    }

    /// Pod p of node k's IPv4 address and the prefix length it is configured with.
    pub fn pod_v4(&self, k: usize, p: usize) -> (Ipv4Addr, u8) {
        let (k, p) = (k as u8, p as u8);
        match self.topology {
            Topology::Flat => (Ipv4Addr::new(10, 200, k + 1, p + 1), 16),
            Topology::Routed | Topology::Nat => (Ipv4Addr::new(10, 244, k, p + 2), 32),
            Topology::Vxlan => (Ipv4Addr::new(10, 244, k, p + 2), 24),
            Topology::VxlanL2 => (Ipv4Addr::new(10, 244, k, p + 2), 16),
        }
    }

    /// Pod p of node k's IPv6 address and prefix length.
    pub fn pod_v6(&self, k: usize, p: usize) -> (Ipv6Addr, u8) {
        let (k, p) = (k as u16, p as u16);
        match self.topology {
            Topology::Flat => (Ipv6Addr::new(0xfd00, 0x200, 0, 0, 0, 0, k + 1, p + 1), 64),
            Topology::Routed | Topology::Nat => {
                (Ipv6Addr::new(0xfd00, 0x244, 0, k, 0, 0, 0, p + 2), 128)
            }
            Topology::Vxlan => (Ipv6Addr::new(0xfd00, 0x244, 0, k, 0, 0, 0, p + 2), 64),
            Topology::VxlanL2 => (Ipv6Addr::new(0xfd00, 0x244, 0, 0, 0, 0, k, p + 2), 64),
        }
    }

    /// Node k's pod subnets, routed to it by the others (`routed`, `nat`, `vxlan`).
    pub fn pod_subnet_v4(&self, k: usize) -> String {
        format!("10.244.{k}.0/24")
    }

    pub fn pod_subnet_v6(&self, k: usize) -> String {
        format!("fd00:244:0:{k:x}::/64")
    }

    /// The gateway address of node k's pods on `cni0` (`vxlan`).
    pub fn gateway_v4(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, k as u8, 1)
    }

    pub fn gateway_v6(&self, k: usize) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x244, 0, k as u16, 0, 0, 0, 1)
    }

    /// A fixed MAC address: `role` 0x0a for a node's tunnel device, else a pod's `eth0`.
    pub fn mac(role: u8, k: usize, p: usize) -> String {
        format!("02:{role:02x}:00:00:{:02x}:{:02x}", k + 1, p + 1)
    }

    /// The MAC of node k's `flannel.1`, named in the other nodes' static entries.
    pub fn tunnel_mac(k: usize) -> String {
        Self::mac(0x0a, k, 0)
    }

    /// The MAC of pod p of node k's `eth0` (`vxlan-l2`: named in the other nodes' VXLAN FDBs).
    pub fn pod_mac(k: usize, p: usize) -> String {
        Self::mac(0x0b, k, p)
    }

    /// Node k's `flannel.1` addresses: the next hop the other nodes route its pod subnet to.
    pub fn tunnel_v4(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 244, k as u8, 0)
    }

    pub fn tunnel_v6(&self, k: usize) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x244, 0xffff, 0, 0, 0, 0, k as u16 + 1)
    }

    /// The service address whose backend is pod 0 of node k (`nat`).
    pub fn service_v4(&self, k: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 96, 0, k as u8 + 10)
    }

    pub fn service_v6(&self, k: usize) -> Ipv6Addr {
        Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, k as u16 + 10)
    }

    /// The pod behind node k's published host ports (`nat`): its last pod.
    pub fn host_port_pod(&self) -> usize {
        self.pods - 1
    }

    /// Whom each pod of node k talks to: every pod on the other nodes, over IPv4 and IPv6; with
    /// `nat` instead every other node's service address and host ports, over both.
    pub fn targets(&self, k: usize) -> Vec<Target> {
        let direct = |addr: IpAddr| Target {
            addr,
            port_offset: 0,
        };
        let mut out = Vec::new();
        for j in (0..self.nodes).filter(|&j| j != k) {
            if self.topology == Topology::Nat {
                out.push(direct(self.service_v4(j).into()));
                out.push(direct(self.service_v6(j).into()));
                for addr in [IpAddr::from(self.node_v4(j)), self.node_v6(j).into()] {
                    out.push(Target {
                        addr,
                        port_offset: port::HOST_PORT_OFFSET,
                    });
                }
            } else {
                for q in 0..self.pods {
                    out.push(direct(self.pod_v4(j, q).0.into()));
                    out.push(direct(self.pod_v6(j, q).0.into()));
                }
            }
        }
        out
    }
}

impl Plan {
    /// Whom pod p of node k reaches through its own node's NAT (`nat`): its node's service
    /// address, over both families, when the service's backend (pod 0) is another pod of the
    /// node. This is kube-proxy's hairpin: the node DNATs the packet to a pod behind itself and
    /// masquerades it, so the answer comes back through the node too and is un-NATed there. The
    /// packets never reach the wire; they are there to show that traffic a node translates
    /// twice never makes a non-causal message.
    pub fn hairpin_targets(&self, k: usize, p: usize) -> Vec<Target> {
        if self.topology != Topology::Nat || p == 0 {
            return Vec::new();
        }
        [IpAddr::from(self.service_v4(k)), self.service_v6(k).into()]
            .into_iter()
            .map(|addr| Target {
                addr,
                port_offset: 0,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_address_is_unique_and_pods_never_take_a_node_or_gateway_address() {
        for topology in Topology::ALL {
            let plan = Plan::new(topology, MAX_NODES, MAX_PODS).unwrap();
            let mut seen = HashSet::new();
            for k in 0..plan.nodes {
                assert!(seen.insert(IpAddr::from(plan.node_v4(k))));
                assert!(seen.insert(IpAddr::from(plan.node_v6(k))));
                if topology == Topology::Vxlan {
                    for a in [plan.gateway_v4(k).into(), plan.gateway_v6(k).into()] {
                        assert!(seen.insert(a), "{a}");
                    }
                    for a in [plan.tunnel_v4(k).into(), plan.tunnel_v6(k).into()] {
                        assert!(seen.insert(a), "{a}");
                    }
                }
                for p in 0..plan.pods {
                    assert!(seen.insert(plan.pod_v4(k, p).0.into()), "{topology:?}");
                    assert!(seen.insert(plan.pod_v6(k, p).0.into()), "{topology:?}");
                }
            }
        }
    }

    #[test]
    fn pods_of_a_routed_node_lie_in_its_pod_subnet_and_flat_pods_in_the_wire_subnet() {
        let plan = Plan::new(Topology::Routed, 3, 2).unwrap();
        assert_eq!(plan.pod_v4(2, 1), (Ipv4Addr::new(10, 244, 2, 3), 32));
        assert!(plan.pod_subnet_v4(2).starts_with("10.244.2."));
        assert_eq!(plan.pod_v6(2, 1).0.segments()[..4], [0xfd00, 0x244, 0, 2]);
        assert_eq!(plan.pod_subnet_v6(2), "fd00:244:0:2::/64");
        let flat = Plan::new(Topology::Flat, 3, 2).unwrap();
        assert_eq!(flat.wire_prefix_v4(), 16);
        assert_eq!(
            flat.pod_v4(0, 0).0.octets()[..2],
            flat.node_v4(0).octets()[..2]
        );
        assert_eq!(
            flat.pod_v6(0, 0).0.segments()[..4],
            flat.node_v6(0).segments()[..4]
        );
    }

    #[test]
    fn pods_talk_only_to_other_nodes_over_both_families() {
        let plan = Plan::new(Topology::VxlanL2, 3, 2).unwrap();
        let targets = plan.targets(1);
        // Two other nodes, two pods each, two families.
        assert_eq!(targets.len(), 8);
        for t in &targets {
            assert_eq!(t.port_offset, 0);
            let on_node_1 = [0, 1].iter().any(|&p| {
                t.addr == IpAddr::from(plan.pod_v4(1, p).0)
                    || t.addr == IpAddr::from(plan.pod_v6(1, p).0)
            });
            assert!(!on_node_1, "{t:?}");
        }
        assert_eq!(targets.iter().filter(|t| t.addr.is_ipv6()).count(), 4);
    }

    #[test]
    fn nat_clients_use_the_other_nodes_services_and_host_ports() {
        let plan = Plan::new(Topology::Nat, 3, 2).unwrap();
        let targets = plan.targets(0);
        assert_eq!(targets.len(), 8);
        assert!(targets.contains(&Target {
            addr: plan.service_v6(2).into(),
            port_offset: 0
        }));
        let host = Target {
            addr: plan.node_v4(1).into(),
            port_offset: port::HOST_PORT_OFFSET,
        };
        assert!(targets.contains(&host));
        assert_eq!(host.at(port::QUIC).port(), 30003);
        assert!(
            !targets
                .iter()
                .any(|t| t.addr == IpAddr::from(plan.service_v4(0)))
        );
    }

    #[test]
    fn only_nat_pods_other_than_the_backend_reach_their_own_nodes_service() {
        let plan = Plan::new(Topology::Nat, 3, 2).unwrap();
        assert!(plan.hairpin_targets(1, 0).is_empty());
        let hairpin = plan.hairpin_targets(1, 1);
        assert_eq!(hairpin.len(), 2);
        assert!(
            hairpin
                .iter()
                .any(|t| t.addr == IpAddr::from(plan.service_v4(1)))
        );
        assert!(
            hairpin
                .iter()
                .any(|t| t.addr == IpAddr::from(plan.service_v6(1)))
        );
        let routed = Plan::new(Topology::Routed, 3, 2).unwrap();
        assert!(routed.hairpin_targets(1, 1).is_empty());
    }

    #[test]
    fn sizes_outside_the_address_plan_are_refused() {
        assert!(Plan::new(Topology::Flat, 1, 2).is_err());
        assert!(Plan::new(Topology::Flat, MAX_NODES + 1, 2).is_err());
        assert!(Plan::new(Topology::Flat, 3, 0).is_err());
        assert!(Plan::new(Topology::Flat, 3, MAX_PODS + 1).is_err());
    }
}
