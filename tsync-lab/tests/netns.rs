//! `tsync-agent record --netns` and the node's address tables on the real kernel (root only,
//! `#[ignore]`d like the capture tests, which these extend; `cargo xtask test` runs them). In a
//! file of their own: capture.rs is long enough, and each test binary runs alone, so the two
//! never share the kernel's state at once.
use std::{
    net::{IpAddr, SocketAddr, UdpSocket},
    os::unix::fs::MetadataExt as _,
    path::Path,
    time::{Duration, Instant},
};

use tsync_common::{
    PacketEvent, direction,
    format::{AddressTable, IpPrefix, TraceReader, read_address_tables},
};
use tsync_lab::{Agent, Bridge, Netns, record_command, unique_name};

/// The inode number of a named namespace (what `--netns` resolves to).
fn inode(ns: &Netns) -> u64 {
    std::fs::metadata(format!("/run/netns/{}", ns.name()))
        .unwrap()
        .ino()
}

/// Sends `count` UDP datagrams from `from` (in `ns`) to `to`, port 7000 (nobody listens: the
/// sends and the receives are what the test looks at).
fn udp(ns: &Netns, from: &str, to: &str, count: usize) {
    let from: IpAddr = from.parse().unwrap();
    let to = SocketAddr::new(to.parse().unwrap(), 7000);
    ns.run_in(move || {
        let socket = UdpSocket::bind((from, 0)).unwrap();
        for i in 0..count {
            // ARP resolution holds the first datagrams back: space them a little.
            std::thread::sleep(Duration::from_millis(5));
            // An ICMP port unreachable may fail a later send: what went out is enough.
            let _ = socket.send_to(&[i as u8; 32], to);
        }
    });
}

fn v4(e: &[u8; 16]) -> IpAddr {
    IpAddr::from([e[0], e[1], e[2], e[3]])
}

fn prefix(s: &str) -> IpPrefix {
    let (ip, len) = s.split_once('/').unwrap();
    IpPrefix {
        ip: ip.parse().unwrap(),
        len: len.parse().unwrap(),
    }
}

/// Whether `table` lists `address` for the namespace `inode`, recorded or not as said.
fn lists(table: &AddressTable, inode: u64, recorded: bool, address: &str) -> bool {
    table.namespaces.iter().any(|ns| {
        ns.inode == inode && ns.recorded == recorded && ns.addresses.contains(&prefix(address))
    })
}

/// Reads the address tables of a file being written, until one satisfies `wanted`.
fn wait_for_table(path: &Path, wanted: impl Fn(&AddressTable) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(read) = read_address_tables(path)
            && read.tables.iter().any(&wanted)
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn netns_records_the_namespaces_named_and_the_address_tables_list_every_one() {
    assert!(
        tsync_lab::is_root(),
        "the namespace tests need root (network namespaces, eBPF); run them as root, as CI does"
    );
    let prefix_name = unique_name("nt");
    let bridge = Bridge::create(&prefix_name, 3).unwrap();
    let [n0, n1, n2] = bridge.nodes() else {
        unreachable!("three nodes")
    };
    let address = |k: usize| Bridge::address(k);
    // A pod-like namespace: an address of its own, no process in it (`ip netns add`).
    let pod = Netns::create(format!("{prefix_name}-pod")).unwrap();
    pod.ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "eth1",
    ])
    .unwrap();
    pod.ip(&["addr", "add", "10.201.0.5/24", "dev", "eth0"])
        .unwrap();
    pod.ip(&["addr", "add", "fd01::5/64", "dev", "eth0", "nodad"])
        .unwrap();
    for dev in ["eth0", "eth1"] {
        pod.ip(&["link", "set", dev, "up"]).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.tsync");

    // The agent in the host's namespace, which it does not record: n0 by name, n1 by inode.
    let bin = tsync_lab::agent_binary().expect("cannot build tsync-agent");
    let mut cmd = record_command(&bin, None, &file);
    cmd.args(["--netns", n0.name(), "--netns", &inode(n1).to_string()]);
    let agent = Agent::start(cmd).unwrap();
    udp(n0, &address(0), &address(2), 20);
    udp(n2, &address(2), &address(0), 20);
    udp(n1, &address(1), &address(0), 20);
    // A pod gets another address while the agent records: a later table lists it.
    pod.ip(&["addr", "add", "10.201.0.6/24", "dev", "eth0"])
        .unwrap();
    let seen = wait_for_table(&file, |t| lists(t, inode(&pod), false, "10.201.0.6/24"));
    let stopped = agent.stop_cleanly().unwrap();
    assert!(
        seen,
        "no table lists the added address; agent said: {}",
        stopped.stderr
    );
    let mut both = [inode(n0), inode(n1)];
    both.sort_unstable();
    assert!(
        stopped
            .stderr
            .contains(&format!("(network namespaces {}, {})", both[0], both[1])),
        "{}",
        stopped.stderr
    );

    let mut r = TraceReader::open(&file).unwrap();
    let mut events: Vec<PacketEvent> = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend_from_slice(chunk);
    }
    assert!(r.damage().is_none(), "{:?}", r.damage());
    let h = r.header();
    let recorded: Vec<u64> = h.options.recorded_netns.iter().map(|n| n.inode).collect();
    assert_eq!(recorded, both);
    assert_eq!(h.options.netns_inode, None, "several namespaces");
    // The header lists the interfaces of both, with the same ifindexes, each with its namespace.
    for ns in [n0, n1] {
        assert!(
            h.interfaces
                .iter()
                .any(|i| i.name == "eth0" && i.netns_inode == inode(ns)),
            "{:?}",
            h.interfaces
        );
    }
    assert!(h.interfaces.iter().all(|i| both.contains(&i.netns_inode)));

    let (a0, a1, a2): (IpAddr, IpAddr, IpAddr) = (
        address(0).parse().unwrap(),
        address(1).parse().unwrap(),
        address(2).parse().unwrap(),
    );
    let count = |dir: u8, from: IpAddr, to: IpAddr| {
        events
            .iter()
            .filter(|e| {
                e.direction == dir && v4(&e.saddr) == from && v4(&e.daddr) == to && e.dest == 7000
            })
            .count()
    };
    // n0 and n1 are recorded: their sends and receives are in the file.
    assert!(count(direction::SEND, a0, a2) > 0, "n0's sends");
    assert!(count(direction::RECV, a2, a0) > 0, "n0's receives");
    assert!(count(direction::SEND, a1, a0) > 0, "n1's sends");
    assert!(
        count(direction::RECV, a1, a0) > 0,
        "n1's sends, received by n0"
    );
    // n2 is not: neither what it sent nor what it received.
    assert_eq!(count(direction::SEND, a2, a0), 0, "n2's sends");
    assert_eq!(count(direction::RECV, a0, a2), 0, "n2's receives");

    let tables = r.address_tables();
    let first = &tables[0];
    assert!(lists(first, inode(n0), true, &format!("{}/24", address(0))));
    assert!(lists(first, inode(n1), true, &format!("{}/24", address(1))));
    assert!(lists(
        first,
        inode(n2),
        false,
        &format!("{}/24", address(2))
    ));
    assert!(
        lists(first, inode(&pod), false, "10.201.0.5/24"),
        "{first:?}"
    );
    assert!(lists(first, inode(&pod), false, "fd01::5/64"), "{first:?}");
    assert!(!lists(first, inode(&pod), false, "10.201.0.6/24"));
    assert!(
        tables.iter().all(|t| t.monotonic_ns >= first.monotonic_ns),
        "tables in time order"
    );
}

/// The interfaces of a node+pods agent's namespaces share indexes: a pod's `eth0`, created in
/// the pod's namespace as CNI plugins create it, is ifindex 2 there, and so is the node's
/// uplink in the node's. A datagram from the pod to another node is sent on both. Each event
/// carries its namespace's tag, so that is one passage through two interfaces, and every
/// datagram is matched with its reception on the other node; before the namespaces' tags, the two sends
/// looked like one interface's twice (a retransmission) and nothing matched.
#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn a_pods_interface_with_its_nodes_index_is_told_apart_by_the_namespace() {
    assert!(
        tsync_lab::is_root(),
        "the namespace tests need root (network namespaces, eBPF); run them as root, as CI does"
    );
    let name = unique_name("nx");
    let node = Netns::create(format!("{name}-node")).unwrap();
    let pod = Netns::create(format!("{name}-pod")).unwrap();
    let peer = Netns::create(format!("{name}-peer")).unwrap();
    // The node's uplink first (ifindex 2 in the node and in the peer), then the pod's veth,
    // created in the pod (ifindex 2 there; its node end 3).
    node.ip(&[
        "link",
        "add",
        "up0",
        "type",
        "veth",
        "peer",
        "name",
        "up0",
        "netns",
        peer.name(),
    ])
    .unwrap();
    pod.ip(&[
        "link",
        "add",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        "vpod",
        "netns",
        node.name(),
    ])
    .unwrap();
    for (ns, dev, addr) in [
        (&node, "up0", "10.203.0.1/24"),
        (&peer, "up0", "10.203.0.2/24"),
        (&node, "vpod", "10.203.1.1/24"),
        (&pod, "eth0", "10.203.1.2/24"),
    ] {
        ns.ip(&["addr", "add", addr, "dev", dev]).unwrap();
        ns.ip(&["link", "set", dev, "up"]).unwrap();
    }
    pod.ip(&["route", "add", "default", "via", "10.203.1.1"])
        .unwrap();
    peer.ip(&["route", "add", "10.203.1.0/24", "via", "10.203.0.1"])
        .unwrap();
    let forwarding = node
        .command("sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"])
        .status()
        .unwrap();
    assert!(forwarding.success());
    let index = |ns: &Netns, dev: &str| -> u32 {
        let out = ns
            .command("cat")
            .arg(format!("/sys/class/net/{dev}/ifindex"))
            .output();
        String::from_utf8(out.unwrap().stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        index(&pod, "eth0"),
        index(&node, "up0"),
        "the test needs the pod's eth0 and the node's uplink to share an index"
    );

    let dir = tempfile::tempdir().unwrap();
    let files = [dir.path().join("node.tsync"), dir.path().join("peer.tsync")];
    let bin = tsync_lab::agent_binary().expect("cannot build tsync-agent");
    let mut cmd = record_command(&bin, None, &files[0]);
    cmd.args([
        "--node",
        "node",
        "--netns",
        node.name(),
        "--netns",
        pod.name(),
    ]);
    let agents = [
        Agent::start(cmd).unwrap(),
        Agent::start(record_command(&bin, Some(&peer), &files[1])).unwrap(),
    ];
    udp(&pod, "10.203.1.2", "10.203.0.2", 40);
    for agent in agents {
        agent.stop_cleanly().unwrap();
    }

    // Both sends on ifindex 2, told apart by the tag.
    let mut r = TraceReader::open(&files[0]).unwrap();
    let mut events: Vec<PacketEvent> = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend_from_slice(chunk);
    }
    let tags: std::collections::BTreeSet<u8> = events
        .iter()
        .filter(|e| {
            e.direction == direction::SEND && e.dest == 7000 && e.ifindex == index(&node, "up0")
        })
        .map(|e| e.flags & tsync_common::flag::NETNS_TAG)
        .collect();
    assert_eq!(tags.len(), 2, "one tag per namespace: {tags:?}");
    assert!(!tags.contains(&0));

    let inputs = tsync_analyze::InputSet::open(&files).unwrap();
    let r = tsync_analyze::sync(&inputs, &Default::default(), &mut |_| {}).unwrap();
    let m = &r.matching;
    assert_eq!(m.ambiguous_repeated, 0, "{m:?}");
    // Every datagram the peer received, matched (ARP may hold the first back; none is lost
    // on a veth).
    assert!(m.matched >= 38, "{m:?}");
}
