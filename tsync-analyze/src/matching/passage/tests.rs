use std::collections::HashMap;

use proptest::prelude::*;
use tsync_common::{direction, flag, netns_tag};

use super::*;

const US: i64 = 1_000;

/// Address ownership as a map; an address missing from it is owned by no trace.
struct Map(HashMap<[u8; 16], u32>);

impl Owners for Map {
    fn owner(&self, address: &[u8; 16]) -> Option<u32> {
        self.0.get(address).copied()
    }
}

const SRC: [u8; 16] = [10, 244, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
const DST: [u8; 16] = [10, 244, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

fn nobody() -> Map {
    Map(HashMap::new())
}

/// An event of trace `trace` at true time `t` (its local time: the trace's offset added), on
/// `ifindex`, with `ttl` and `flags`. Its position in the file is its true time: files are in time
/// order.
fn ev(trace: u32, send: bool, t: i64, ifindex: u32, ttl: u8, flags: u8) -> Seen {
    Seen {
        time: t + 1_000_000_000 * i64::from(trace),
        index: t as u64,
        trace,
        ifindex,
        cpu: 0,
        tcp_flags: 0,
        dir: if send {
            direction::SEND
        } else {
            direction::RECV
        },
        ttl,
        flags,
    }
}

fn hops(r: &Resolution) -> Vec<((u32, u32), (u32, u32))> {
    match r {
        Resolution::Path { hops, .. } => hops
            .iter()
            .map(|(s, r)| ((s.trace, s.ifindex), (r.trace, r.ifindex)))
            .collect(),
        other => panic!("no path: {other:?}"),
    }
}

#[test]
fn a_routed_packet_between_two_nodes_is_one_hop_from_wire_to_wire() {
    // Pod → node 0 (veth 4, routes: TTL 64 → 63) → eth0 2 → node 1 (eth0 2, routes: 63 → 62)
    // → veth 5 → pod. Nodes listed in either order, events in any order.
    for (a, b) in [(0, 1), (1, 0)] {
        let mut events = vec![
            ev(b, false, 30 * US, 2, 63, 0),
            ev(a, true, 11 * US, 2, 63, 0),
            ev(b, true, 32 * US, 5, 62, 0),
            ev(a, false, 10 * US, 4, 64, 0),
        ];
        let r = resolve(&mut events, &SRC, &DST, &nobody());
        assert_eq!(hops(&r), vec![((a, 2), (b, 2))]);
        let Resolution::Path { forwarded, .. } = r else {
            unreachable!()
        };
        assert_eq!(forwarded, 2);
    }
}

#[test]
fn a_bridged_packet_needs_the_owner_of_an_address() {
    // Flat network: both nodes bridge (TTL unchanged); nothing tells which came first.
    let events = || {
        vec![
            ev(0, false, 10 * US, 4, 64, 0),
            ev(0, true, 11 * US, 2, 64, 0),
            ev(1, false, 30 * US, 2, 64, 0),
            ev(1, true, 31 * US, 5, 64, 0),
        ]
    };
    assert_eq!(
        resolve(&mut events(), &SRC, &DST, &nobody()),
        Resolution::Ambiguous(Cause::Order)
    );
    // The source pod lives on node 0, or the destination pod on node 1: established.
    for owners in [Map([(SRC, 0)].into()), Map([(DST, 1)].into())] {
        let r = resolve(&mut events(), &SRC, &DST, &owners);
        assert_eq!(hops(&r), vec![((0, 2), (1, 2))]);
    }
    // Evidence that contradicts itself settles nothing.
    let both = Map([(SRC, 1), (DST, 1)].into());
    assert_eq!(
        resolve(&mut events(), &SRC, &DST, &both),
        Resolution::Ambiguous(Cause::Order)
    );
}

#[test]
fn a_tunnel_pairs_its_outer_packets() {
    // L2 overlay: node 0 bridges the pod's packet into a VXLAN device (7), whose outer packet
    // leaves by eth0 (2); node 1 receives the outer packet, then the inner one on its VXLAN
    // device, and bridges it to the pod. TTL unchanged: the order comes from the source pod's
    // node; the hop is the outer packet's, the tightest.
    let e = flag::ENCAPSULATED;
    let mut events = vec![
        ev(0, false, 10 * US, 4, 64, 0),
        ev(0, true, 11 * US, 7, 64, 0),
        ev(0, true, 12 * US, 2, 64, e),
        ev(1, false, 30 * US, 2, 64, e),
        ev(1, false, 31 * US, 7, 64, 0),
        ev(1, true, 32 * US, 5, 64, 0),
    ];
    assert_eq!(
        resolve(&mut events.clone(), &SRC, &DST, &nobody()),
        Resolution::Ambiguous(Cause::Order)
    );
    let r = resolve(&mut events, &SRC, &DST, &Map([(SRC, 0)].into()));
    assert_eq!(hops(&r), vec![((0, 2), (1, 2))]);
    let Resolution::Path { copies, .. } = r else {
        unreachable!()
    };
    assert_eq!(copies, 2);
}

#[test]
fn packets_created_or_delivered_on_a_traced_node_order_the_path() {
    // The pod's own namespace recorded too (node 0 records node and pods): the packet starts with
    // a send there. Three nodes: 0 (origin), 2 (bridges), 1 (delivers).
    let mut events = vec![
        ev(0, true, 9 * US, 2, 64, 0),
        ev(0, false, 10 * US, 4, 64, 0),
        ev(0, true, 11 * US, 2, 64, 0),
        ev(2, false, 20 * US, 3, 64, 0),
        ev(2, true, 21 * US, 6, 64, 0),
        ev(1, false, 30 * US, 2, 64, 0),
    ];
    // Node 0's two sends on ifindex 2 are on different namespaces' devices (the pod's eth0, the
    // node's): without the namespaces' tags (one namespace recorded, or files before format 6)
    // they are one interface seen twice: a repeat, ambiguous — the safe side.
    assert_eq!(
        resolve(&mut events.clone(), &SRC, &DST, &nobody()),
        Resolution::Ambiguous(Cause::Repeated)
    );
    // With the namespaces' tags (format 6, several recorded), two interfaces. Node 2 is between
    // them, but nothing orders it against... both: first and last are known, so it is the
    // middle.
    let (pod, node) = (netns_tag(4_026_532_999), netns_tag(4_026_531_840));
    assert_ne!(pod, node);
    events[0].flags = pod;
    events[1].flags = node;
    events[2].flags = node;
    let r = resolve(&mut events.clone(), &SRC, &DST, &nobody());
    assert_eq!(hops(&r), vec![((0, 2), (2, 3)), ((2, 6), (1, 2))]);
    // A tunnel's flag beside the tag changes nothing of it.
    events[2].flags |= flag::ENCAPSULATED;
    let r = resolve(&mut events.clone(), &SRC, &DST, &nobody());
    assert_eq!(hops(&r), vec![((0, 2), (2, 3)), ((2, 6), (1, 2))]);
    // The same namespace twice is still a repeat.
    events[0].flags = node;
    assert_eq!(
        resolve(&mut events, &SRC, &DST, &nobody()),
        Resolution::Ambiguous(Cause::Repeated)
    );
}

#[test]
fn a_node_that_sees_the_packet_twice_makes_it_ambiguous() {
    let base = vec![
        ev(0, false, 10 * US, 4, 64, 0),
        ev(0, true, 11 * US, 2, 63, 0),
        ev(1, false, 30 * US, 2, 63, 0),
        ev(1, true, 31 * US, 5, 62, 0),
    ];
    // Retransmitted 200 ms later through node 0, or 40 µs later (a fast retransmission:
    // the same interfaces again).
    for later in [200_000 * US, 40 * US] {
        let mut events = base.clone();
        events.push(ev(0, false, 10 * US + later, 4, 64, 0));
        events.push(ev(0, true, 11 * US + later, 2, 63, 0));
        assert_eq!(
            resolve(&mut events, &SRC, &DST, &nobody()),
            Resolution::Ambiguous(Cause::Repeated)
        );
    }
}

#[test]
fn copies_on_one_node_keep_the_last_send_and_the_first_receive() {
    let mut events = vec![
        ev(0, true, 10 * US, 5, 64, 0),
        ev(0, true, 10 * US + 3, 2, 64, 0),
    ];
    let r = resolve(&mut events, &SRC, &DST, &nobody());
    let Resolution::Local { send, recv, copies } = r else {
        panic!("{r:?}")
    };
    assert_eq!((send.map(|s| s.ifindex), recv, copies), (Some(2), None, 1));
}

/// One packet's way through a path of nodes, as the hooks of the traced ones would record it.
#[derive(Clone, Debug)]
struct Way {
    /// Per node on the path: routes (TTL − 1) or bridges, traced, tunnel to the next node.
    nodes: Vec<(bool, bool, bool)>,
    /// Whether the first and last nodes created and delivered the packet themselves (their own
    /// namespace or a recorded pod's), rather than forwarding it from and to untraced pods.
    ends_local: (bool, bool),
    /// Whether the owners of the source and destination addresses are known.
    owners_known: (bool, bool),
    /// A second transmission: (how much later, ns; through how many of the nodes).
    again: Option<(i64, usize)>,
    /// Stacked copies per node (0 or 1 extra device on each side).
    copies: Vec<bool>,
    /// Trace numbers of the nodes (a permutation).
    traces: Vec<u32>,
    latency_ns: i64,
}

fn way() -> impl Strategy<Value = Way> {
    (2usize..5).prop_flat_map(|n| {
        (
            proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), n),
            (any::<bool>(), any::<bool>()),
            (any::<bool>(), any::<bool>()),
            proptest::option::of((
                prop_oneof![1i64..2_000_000, Just(300_000_000i64)],
                1usize..=n,
            )),
            proptest::collection::vec(any::<bool>(), n),
            Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle(),
            1i64..100_000,
        )
            .prop_map(
                |(nodes, ends_local, owners_known, again, copies, traces, latency_ns)| Way {
                    nodes,
                    ends_local,
                    owners_known,
                    again,
                    copies,
                    traces,
                    latency_ns,
                },
            )
    })
}

/// The events of one transmission starting at true time `t0` through the first `through` nodes.
fn transmission(w: &Way, t0: i64, through: usize, out: &mut Vec<Seen>) {
    let n = w.nodes.len();
    let mut t = t0;
    let mut ttl = 64u8;
    for (k, &(routes, traced, tunnel)) in w.nodes.iter().enumerate().take(through) {
        let trace = w.traces[k];
        let mut push = |send: bool, ifindex: u32, ttl: u8, flags: u8, t: &mut i64| {
            if traced {
                out.push(ev(trace, send, *t, ifindex, ttl, flags));
            }
            *t += 1_000;
        };
        let tunnel_in = k > 0 && w.nodes[k - 1].2;
        let enc = |on: bool| if on { flag::ENCAPSULATED } else { 0 };
        if k == 0 && w.ends_local.0 {
            push(true, 10, ttl, 0, &mut t);
        }
        if k > 0 || w.ends_local.0 {
            push(false, 1, ttl, enc(tunnel_in), &mut t);
            if w.copies[k] {
                push(false, 11, ttl, 0, &mut t);
            }
        } else {
            // Forwarded from an untraced pod.
            push(false, 4, ttl, 0, &mut t);
        }
        if routes {
            ttl -= 1;
        }
        if k == n - 1 {
            if w.ends_local.1 {
                push(true, 12, ttl, 0, &mut t);
                push(false, 13, ttl, 0, &mut t);
            } else {
                push(true, 5, ttl, 0, &mut t);
            }
            break;
        }
        if w.copies[k] {
            push(true, 14, ttl, 0, &mut t);
        }
        push(true, 2, ttl, enc(tunnel), &mut t);
        t += w.latency_ns;
    }
}

proptest! {
    /// Whatever the path, the traced nodes, the evidence and the retransmissions: every hop
    /// found pairs a send with a later receive of the same transmission.
    #[test]
    fn no_hop_is_ever_non_causal(w in way()) {
        let mut events = Vec::new();
        let n = w.nodes.len();
        transmission(&w, 1_000_000, n, &mut events);
        if let Some((later, through)) = w.again {
            transmission(&w, 1_000_000 + later, through, &mut events);
        }
        let mut owners = HashMap::new();
        if w.owners_known.0 && w.nodes[0].1 {
            owners.insert(SRC, w.traces[0]);
        }
        if w.owners_known.1 && w.nodes[n - 1].1 {
            owners.insert(DST, w.traces[n - 1]);
        }
        let once = w.again.is_none();
        let traced = w.nodes.iter().filter(|x| x.1).count();
        match resolve(&mut events, &SRC, &DST, &Map(owners)) {
            Resolution::Path { hops, .. } => {
                for (s, r) in &hops {
                    prop_assert!(s.index < r.index, "non-causal hop {s:?} → {r:?}");
                    prop_assert!(s.dir == direction::SEND && r.dir == direction::RECV);
                    prop_assert!(s.trace != r.trace);
                }
                if once {
                    prop_assert_eq!(hops.len(), traced.saturating_sub(1));
                }
            }
            Resolution::Local { .. } => prop_assert!(traced <= 1 || !once),
            Resolution::Ambiguous(_) => {}
        }
    }

    /// A path whose every node routes is established by the TTL alone.
    #[test]
    fn routed_paths_are_always_resolved(mut w in way()) {
        for node in &mut w.nodes {
            *node = (true, true, false);
        }
        w.again = None;
        w.owners_known = (false, false);
        let mut events = Vec::new();
        transmission(&w, 1_000_000, w.nodes.len(), &mut events);
        let r = resolve(&mut events, &SRC, &DST, &nobody());
        prop_assert!(matches!(&r, Resolution::Path { hops, .. } if hops.len() == w.nodes.len() - 1), "{:?}", r);
    }
}
