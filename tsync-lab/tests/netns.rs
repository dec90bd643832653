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
