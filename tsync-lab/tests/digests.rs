//! What the hooks put in a digest beyond the headers of plain TCP (root only; `#[ignore]`d like
//! `capture.rs`, run by `cargo xtask test`): the TTL and hop limit, UDP over IPv4 and IPv6 with
//! a hash of the payload, and tunnels — a VXLAN device between two namespaces, and Geneve and
//! VXLAN datagrams built byte by byte (this host's kernel has no Geneve device), whose outer
//! events carry the digest of the packet inside, flagged.
use std::{
    collections::BTreeMap,
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::{Mutex, mpsc},
    thread,
    time::Duration,
};

use tsync_common::{
    ETH_P_IP, ETH_P_IPV6, IPPROTO_TCP, IPPROTO_UDP, PacketEvent, direction, flag,
    format::TraceReader, kind, tcp_flag, udp_hashed_data,
};
use tsync_lab::{Agent, Netns, VethPair, record_command, unique_name};

const V4: [&str; 2] = ["10.78.0.1", "10.78.0.2"];
const V6: [&str; 2] = ["fd78::1", "fd78::2"];

/// Serializes the tests of this file: they load programs and create namespaces.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    assert!(
        tsync_lab::is_root(),
        "these tests need root (network namespaces, eBPF); run them as root, as CI does"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An agent recording namespace `ns` into `file`.
fn start(ns: &Netns, file: &Path) -> Agent {
    let bin = tsync_lab::agent_binary().expect("cannot build tsync-agent");
    Agent::start(record_command(&bin, Some(ns), file)).unwrap()
}

/// A cleanly stopped agent's trace: its events and its interfaces' indexes by name.
struct Trace {
    events: Vec<PacketEvent>,
    ifindex: BTreeMap<String, u32>,
}

fn stop_and_read(agent: Agent, file: &Path) -> Trace {
    agent.stop_cleanly().unwrap();
    let mut r = TraceReader::open(file).unwrap();
    let mut events = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend_from_slice(chunk);
    }
    assert!(r.damage().is_none() && r.footer().is_some(), "{file:?}");
    let ifindex = r
        .header()
        .interfaces
        .iter()
        .map(|i| (i.name.clone(), i.ifindex))
        .collect();
    Trace { events, ifindex }
}

/// The digest: everything but where, when and how (flags) the packet was seen.
fn digest(e: &PacketEvent) -> PacketEvent {
    PacketEvent {
        ts_ns: 0,
        ifindex: 0,
        cpu: 0,
        direction: 0,
        flags: 0,
        ..*e
    }
}

fn addr(s: &str) -> [u8; 16] {
    match s.parse::<std::net::IpAddr>().unwrap() {
        std::net::IpAddr::V4(a) => {
            let mut out = [0; 16];
            out[..4].copy_from_slice(&a.octets());
            out
        }
        std::net::IpAddr::V6(a) => a.octets(),
    }
}

fn setsockopt(s: &UdpSocket, level: i32, name: i32, value: i32) {
    // SAFETY: a valid socket and an int option.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

/// UDP from unconnected sockets over IPv4 and IPv6, datagrams alike in their first bytes (a
/// QUIC-like connection ID, and none of IPv4's ID: Linux sends 0 for DF datagrams of an
/// unconnected socket): each gets a digest of its own, the hash of its payload, the same at
/// both ends; and the TTL or hop limit it was sent with.
#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn udp_over_ipv4_and_ipv6_is_hashed_with_its_ttl() {
    let _serial = serial();
    let link = VethPair::new(&unique_name(""), V4, Some(V6)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.path().join(n)).collect();
    let agents = [start(&link.ns[0], &files[0]), start(&link.ns[1], &files[1])];
    let payload = |i: u8| {
        let mut d = vec![0x41, 9, 9, 9, 9, 9, 9, 9, 9];
        d.extend((0..100).map(|k| k ^ i));
        d
    };
    let (to4, to6): (SocketAddr, SocketAddr) = (
        format!("{}:5701", V4[0]).parse().unwrap(),
        format!("[{}]:5702", V6[0]).parse().unwrap(),
    );
    link.ns[1].run_in(move || {
        let s4 = UdpSocket::bind("0.0.0.0:0").unwrap();
        setsockopt(&s4, libc::IPPROTO_IP, libc::IP_TTL, 17);
        let s6 = UdpSocket::bind("[::]:0").unwrap();
        setsockopt(&s6, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, 9);
        for i in 0..20 {
            s4.send_to(&payload(i), to4).unwrap();
            s6.send_to(&payload(i), to6).unwrap();
        }
        s6.send_to(b"", to6).unwrap();
    });
    thread::sleep(Duration::from_millis(200));
    let [a, b] = agents;
    let a = stop_and_read(a, &files[0]);
    let b = stop_and_read(b, &files[1]);

    for (port, kind, ttl, tot_len) in [
        (5701, kind::UDP4_HASHED, 17, 20 + 8 + 109),
        (5702, kind::UDP6_HASHED, 9, 40 + 8 + 109),
    ] {
        let received: Vec<&PacketEvent> = a
            .events
            .iter()
            .filter(|e| e.direction == direction::RECV && e.dest == port && e.udp_len == 117)
            .collect();
        assert_eq!(received.len(), 20, "port {port}: {received:?}");
        for (i, e) in received.iter().enumerate() {
            assert_eq!(e.kind, kind, "{e:?}");
            assert_eq!((e.ttl, e.flags, e.tot_len), (ttl, 0, tot_len), "{e:?}");
            assert_eq!(e.udp_data, udp_hashed_data(&payload(i as u8)), "{e:?}");
            assert_eq!(e.transport_protocol, IPPROTO_UDP);
            let sent = b
                .events
                .iter()
                .filter(|s| s.direction == direction::SEND && digest(s) == digest(e))
                .count();
            assert_eq!(
                sent, 1,
                "datagram {i} to port {port}: one send with its digest"
            );
        }
    }
    let empty: Vec<&PacketEvent> = a
        .events
        .iter()
        .filter(|e| e.direction == direction::RECV && e.dest == 5702 && e.udp_len == 8)
        .collect();
    assert_eq!(empty.len(), 1, "{empty:?}");
    assert_eq!(empty[0].udp_data, udp_hashed_data(b""));
    assert_eq!(
        (empty[0].network_protocol, empty[0].saddr, empty[0].daddr),
        (ETH_P_IPV6, addr(V6[1]), addr(V6[0]))
    );
}

/// Every payload length around the hashed prefix, over IPv4 (whose payload the hook takes from
/// the headers' copy, masked past the datagram's end) and IPv6 (a copy of its own): each
/// datagram's digest is the hash of its first 32 bytes, whatever lies after them in the buffer.
#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn udp_payloads_of_every_length_are_hashed_at_both_ends() {
    let _serial = serial();
    let link = VethPair::new(&unique_name(""), V4, Some(V6)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.path().join(n)).collect();
    let agents = [start(&link.ns[0], &files[0]), start(&link.ns[1], &files[1])];
    // Lengths 0 to 40, bytes that differ from one datagram to the next and from the bytes of
    // the headers before them.
    let payload = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|k| (k as u8).wrapping_mul(37) ^ len as u8 ^ 0x5a)
            .collect()
    };
    let (to4, to6): (SocketAddr, SocketAddr) = (
        format!("{}:5711", V4[0]).parse().unwrap(),
        format!("[{}]:5712", V6[0]).parse().unwrap(),
    );
    link.ns[1].run_in(move || {
        let s4 = UdpSocket::bind("0.0.0.0:0").unwrap();
        let s6 = UdpSocket::bind("[::]:0").unwrap();
        for len in 0..=40 {
            s4.send_to(&payload(len), to4).unwrap();
            s6.send_to(&payload(len), to6).unwrap();
        }
    });
    thread::sleep(Duration::from_millis(200));
    let [a, b] = agents;
    let a = stop_and_read(a, &files[0]);
    let b = stop_and_read(b, &files[1]);
    for (trace, dir) in [(&a, direction::RECV), (&b, direction::SEND)] {
        for port in [5711, 5712] {
            let mut seen: Vec<&PacketEvent> = trace
                .events
                .iter()
                .filter(|e| e.direction == dir && e.dest == port)
                .collect();
            seen.sort_by_key(|e| e.udp_len);
            let lengths: Vec<u16> = seen.iter().map(|e| e.udp_len - 8).collect();
            assert_eq!(lengths, (0..=40).collect::<Vec<u16>>(), "port {port}");
            for e in seen {
                let len = usize::from(e.udp_len - 8);
                assert_eq!(
                    e.udp_data,
                    udp_hashed_data(&payload(len)),
                    "port {port}, {len} bytes, direction {dir}"
                );
            }
        }
    }
}

/// One request/response over TCP from `client` to `server` at `to`.
fn tcp_exchange(server: &Netns, client: &Netns, to: SocketAddr) {
    let (ready_tx, ready_rx) = mpsc::channel();
    thread::scope(|scope| {
        let srv = scope.spawn(|| {
            server.run_in(move || {
                let listener = TcpListener::bind(to).unwrap();
                ready_tx.send(()).unwrap();
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 300];
                std::io::Read::read_exact(&mut s, &mut buf).unwrap();
                std::io::Write::write_all(&mut s, &[b'r'; 300]).unwrap();
            })
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        client.run_in(move || {
            let mut c = TcpStream::connect_timeout(&to, Duration::from_secs(10)).unwrap();
            std::io::Write::write_all(&mut c, &[b'q'; 300]).unwrap();
            let mut buf = [0u8; 300];
            std::io::Read::read_exact(&mut c, &mut buf).unwrap();
        });
        srv.join().unwrap();
    });
}

/// A VXLAN overlay between two namespaces (as Flannel builds one): the outer packets on the
/// veth carry the digest of the packet inside, flagged, on both nodes; the inner packet's own
/// events on the VXLAN device have the same digest, unflagged. Two devices: the IANA port and
/// Linux's (Flannel's). Packets inside that are not TCP or UDP (ARP, ICMPv6) keep the outer
/// datagram's own digest, with the outer TTL (5 here, the inner packets' 64).
#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn vxlan_outer_packets_carry_the_inner_digest() {
    let _serial = serial();
    let link = VethPair::new(&unique_name(""), V4, None).unwrap();
    let overlays = [
        (
            "vx0",
            "42",
            "4789",
            ["10.98.0.1", "10.98.0.2"],
            ["fd98::1", "fd98::2"],
        ),
        (
            "vx1",
            "43",
            "8472",
            ["10.97.0.1", "10.97.0.2"],
            ["fd97::1", "fd97::2"],
        ),
    ];
    for k in 0..2 {
        let ns = &link.ns[k];
        for (dev, id, port, v4, v6) in &overlays {
            ns.ip(&[
                "link",
                "add",
                dev,
                "type",
                "vxlan",
                "id",
                id,
                "dstport",
                port,
                "local",
                V4[k],
                "remote",
                V4[1 - k],
                "dev",
                &link.dev[k],
                "ttl",
                "5",
            ])
            .unwrap();
            ns.ip(&["addr", "add", &format!("{}/24", v4[k]), "dev", dev])
                .unwrap();
            ns.ip(&["addr", "add", &format!("{}/64", v6[k]), "dev", dev, "nodad"])
                .unwrap();
            ns.ip(&["link", "set", dev, "up"]).unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = ["a", "b"].iter().map(|n| dir.path().join(n)).collect();
    let agents = [start(&link.ns[0], &files[0]), start(&link.ns[1], &files[1])];
    for (i, (_, _, _, v4, v6)) in overlays.iter().enumerate() {
        tcp_exchange(
            &link.ns[0],
            &link.ns[1],
            format!("{}:{}", v4[0], 5710 + i).parse().unwrap(),
        );
        tcp_exchange(
            &link.ns[0],
            &link.ns[1],
            format!("[{}]:{}", v6[0], 5720 + i).parse().unwrap(),
        );
        let (to4, to6): (SocketAddr, SocketAddr) = (
            format!("{}:5730", v4[0]).parse().unwrap(),
            format!("[{}]:5731", v6[0]).parse().unwrap(),
        );
        link.ns[1].run_in(move || {
            let s4 = UdpSocket::bind("0.0.0.0:0").unwrap();
            let s6 = UdpSocket::bind("[::]:0").unwrap();
            for n in 0..5u8 {
                s4.send_to(&[n; 70], to4).unwrap();
                s6.send_to(&[n; 30], to6).unwrap();
            }
        });
    }
    thread::sleep(Duration::from_millis(200));
    let [a, b] = agents;
    let a = stop_and_read(a, &files[0]);
    let b = stop_and_read(b, &files[1]);

    for (node, t) in [("a", &a), ("b", &b)] {
        let veth = t.ifindex[&link.dev[usize::from(node == "b")]];
        let tunnels = [t.ifindex["vx0"], t.ifindex["vx1"]];
        let outer: Vec<&PacketEvent> = t.events.iter().filter(|e| e.ifindex == veth).collect();
        let inner: Vec<&PacketEvent> = t
            .events
            .iter()
            .filter(|e| tunnels.contains(&e.ifindex))
            .collect();
        // Every outer event is a tunnel's, flagged or (not TCP/UDP inside) UDP with the outer
        // TTL; every inner packet, unflagged, with the TTL it was sent with.
        for e in &outer {
            if e.flags == flag::ENCAPSULATED {
                assert_eq!(e.ttl, 64, "{node}: {e:?}");
            } else {
                assert_eq!(
                    (e.flags, e.kind, e.ttl),
                    (0, kind::UDP4_HASHED, 5),
                    "{node}: {e:?}"
                );
                assert!([4789, 8472].contains(&e.dest), "{node}: {e:?}");
            }
        }
        assert!(
            outer.iter().any(|e| e.flags == 0),
            "{node}: no outer datagram kept its own digest (ARP, neighbour discovery)"
        );
        assert!(inner.iter().all(|e| e.flags == 0 && e.ttl == 64), "{node}");
        // The packets sent into the tunnel leave on the veth with their digest, flagged.
        let sent_inside: Vec<&&PacketEvent> = inner
            .iter()
            .filter(|e| e.direction == direction::SEND)
            .collect();
        // (Node a serves; b also sends the datagrams.)
        let kinds: &[u8] = if node == "a" {
            &[kind::TCP4, kind::TCP6]
        } else {
            &[kind::TCP4, kind::TCP6, kind::UDP4_HASHED, kind::UDP6_HASHED]
        };
        for k in kinds {
            assert!(
                sent_inside.iter().any(|e| e.kind == *k),
                "{node}: nothing of kind {k} sent into the tunnels"
            );
        }
        // As often as each digest went into a tunnel, it left on the wire.
        for e in &sent_inside {
            let count = |events: &[&PacketEvent], flags: u8| {
                events
                    .iter()
                    .filter(|o| {
                        o.direction == direction::SEND && o.flags == flags && digest(o) == digest(e)
                    })
                    .count()
            };
            let (into, out) = (count(&inner, 0), count(&outer, flag::ENCAPSULATED));
            assert_eq!(
                into, out,
                "{node}: {e:?} went in {into} times, out {out} times"
            );
        }
    }
    // Node to node, the outer events match by the packets inside: the tightest pair.
    let flagged = |t: &Trace, dir: u8| -> Vec<PacketEvent> {
        t.events
            .iter()
            .filter(|e| e.direction == dir && e.flags == flag::ENCAPSULATED)
            .map(digest)
            .collect()
    };
    for (from, to) in [(&a, &b), (&b, &a)] {
        let (sent, received) = (flagged(from, direction::SEND), flagged(to, direction::RECV));
        assert!(sent.len() >= 2 * 2 * 3, "{}", sent.len());
        for d in &sent {
            assert!(received.contains(d), "sent but not received: {d:?}");
        }
    }
    let tcp4 = flagged(&b, direction::SEND)
        .into_iter()
        .find(|e| e.kind == kind::TCP4 && e.tcp_flags == tcp_flag::SYN)
        .expect("b's SYN over vx0 or vx1");
    assert_eq!(
        (tcp4.network_protocol, tcp4.transport_protocol, tcp4.ttl),
        (ETH_P_IP, IPPROTO_TCP, 64)
    );
    assert!([5710, 5711].contains(&tcp4.dest), "{tcp4:?}");
}

/// Bytes of an IPv4 header (no options) with a TTL of `ttl`, then `l4` (a transport header and
/// payload).
fn ipv4(ttl: u8, protocol: u8, from: [u8; 4], to: [u8; 4], l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34, 0x40, 0, ttl, protocol, 0, 0]);
    h.extend_from_slice(&from);
    h.extend_from_slice(&to);
    h.extend_from_slice(l4);
    h
}

fn ipv6(hops: u8, next: u8, from: [u8; 16], to: [u8; 16], l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, hops]);
    h.extend_from_slice(&from);
    h.extend_from_slice(&to);
    h.extend_from_slice(l4);
    h
}

fn tcp_header(source: u16, dest: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&source.to_be_bytes());
    h.extend_from_slice(&dest.to_be_bytes());
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&ack.to_be_bytes());
    h.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    h
}

fn udp_header(source: u16, dest: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&source.to_be_bytes());
    h.extend_from_slice(&dest.to_be_bytes());
    h.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(payload);
    h
}

/// An Ethernet frame of EtherType `ethertype` around `payload`.
fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A Geneve header with `options` (a multiple of 4 bytes) and protocol type `protocol`.
fn geneve(options: &[u8], protocol: u16, payload: &[u8]) -> Vec<u8> {
    let mut g = vec![(options.len() / 4) as u8, 0];
    g.extend_from_slice(&protocol.to_be_bytes());
    g.extend_from_slice(&[0, 0, 7, 0]);
    g.extend_from_slice(options);
    g.extend_from_slice(payload);
    g
}

fn vxlan(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![flags, 0, 0, 0, 0, 0, 9, 0];
    v.extend_from_slice(payload);
    v
}

/// Tunnel datagrams built byte by byte, sent as the payload of plain UDP datagrams to the
/// tunnels' ports (no tunnel device needed, and this kernel has none for Geneve): each inner
/// header field the digest holds is checked against what was built; malformed or non-IP
/// tunnels keep the outer digest.
#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn tunnel_headers_built_by_hand_are_read_as_built() {
    let _serial = serial();
    let link = VethPair::new(&unique_name(""), V4, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a");
    let agent = start(&link.ns[0], &file);
    let (p4, q4) = ([192, 0, 2, 1], [192, 0, 2, 2]);
    let (p6, q6) = (addr("2001:db8::1"), addr("2001:db8::2"));
    let tcp = tcp_header(1111, 2222, 7, 9, tcp_flag::ACK | tcp_flag::PSH);
    let quic = b"\x40QUIC-like connection id, then the rest";
    let inner_udp = udp_header(3333, 4444, quic);
    let udp_len = inner_udp.len() as u16;
    // (destination port, datagram payload, what the hook makes of it)
    let cases: Vec<(u16, Vec<u8>, Option<PacketEvent>)> = vec![
        (
            6081,
            geneve(&[], 0x6558, &ethernet(0x0800, &ipv4(33, 6, p4, q4, &tcp))),
            Some(inner(kind::TCP4, 33, 40, (1111, 2222), (p4, q4))),
        ),
        (
            6081,
            geneve(
                &[1; 8],
                0x6558,
                &ethernet(0x86dd, &ipv6(7, 17, p6, q6, &inner_udp)),
            ),
            Some(inner(
                kind::UDP6_HASHED,
                7,
                40 + udp_len,
                (3333, 4444),
                (p6, q6),
            )),
        ),
        (
            6081,
            geneve(&[2; 4], 0x0800, &ipv4(3, 17, p4, q4, &inner_udp)),
            Some(inner(
                kind::UDP4_HASHED,
                3,
                20 + udp_len,
                (3333, 4444),
                (p4, q4),
            )),
        ),
        (
            4789,
            vxlan(0x08, &ethernet(0x0800, &ipv4(12, 6, q4, p4, &tcp))),
            Some(inner(kind::TCP4, 12, 40, (1111, 2222), (q4, p4))),
        ),
        (
            8472,
            vxlan(0x08, &ethernet(0x86dd, &ipv6(200, 6, q6, p6, &tcp))),
            Some(inner(kind::TCP6, 200, 40 + 20, (1111, 2222), (q6, p6))),
        ),
        // Not a tunnel of a recorded kind, or not TCP/UDP inside: the outer digest.
        (
            4789,
            vxlan(0x00, &ethernet(0x0800, &ipv4(12, 6, q4, p4, &tcp))),
            None,
        ),
        (6081, geneve(&[], 0x6558, &ethernet(0x0806, &[0; 28])), None),
        (
            6081,
            geneve(&[], 0x6558, &ethernet(0x0800, &ipv4(9, 1, p4, q4, &[8; 8]))),
            None,
        ),
        (6081, geneve(&[], 0x1234, &ipv4(9, 6, p4, q4, &tcp)), None),
        // Cut inside the inner TCP header: its bytes are not there to read.
        (
            6081,
            geneve(&[], 0x0800, &ipv4(9, 6, p4, q4, &tcp)[..30]),
            None,
        ),
    ];
    let datagrams: Vec<(u16, Vec<u8>)> = cases.iter().map(|c| (c.0, c.1.clone())).collect();
    link.ns[1].run_in(move || {
        let s = UdpSocket::bind(format!("{}:40000", V4[1])).unwrap();
        for (port, d) in datagrams {
            s.send_to(&d, format!("{}:{port}", V4[0])).unwrap();
        }
    });
    thread::sleep(Duration::from_millis(200));
    let a = stop_and_read(agent, &file);
    let received: Vec<&PacketEvent> = a
        .events
        .iter()
        .filter(|e| e.direction == direction::RECV && (e.flags != 0 || e.source == 40000))
        .collect();
    assert_eq!(received.len(), cases.len(), "{received:?}");
    for (e, (port, datagram, expected)) in received.iter().zip(&cases) {
        match expected {
            Some(x) => {
                let mut x = *x;
                if x.kind == kind::UDP4_HASHED || x.kind == kind::UDP6_HASHED {
                    (x.udp_len, x.udp_data) = (udp_len, udp_hashed_data(quic));
                }
                assert_eq!(digest(e), digest(&x), "to port {port}");
                assert_eq!(e.flags, flag::ENCAPSULATED);
            }
            None => {
                assert_eq!(
                    (e.kind, e.flags, e.dest, e.udp_len, e.udp_data, e.ttl),
                    (
                        kind::UDP4_HASHED,
                        0,
                        *port,
                        8 + datagram.len() as u16,
                        udp_hashed_data(datagram),
                        64
                    ),
                    "to port {port}"
                );
            }
        }
    }
}

/// The digest a packet of `kind` inside a tunnel should get, as built by the test (TCP: the
/// test's segment; UDP: its datagram, whose length and hash the caller puts in).
fn inner<const N: usize>(
    kind: u8,
    ttl: u8,
    tot_len: u16,
    (source, dest): (u16, u16),
    (from, to): ([u8; N], [u8; N]),
) -> PacketEvent {
    let v6 = N == 16;
    let tcp = kind == tsync_common::kind::TCP4 || kind == tsync_common::kind::TCP6;
    let mut e = PacketEvent {
        kind,
        network_protocol: if v6 { ETH_P_IPV6 } else { ETH_P_IP },
        tot_len,
        source,
        dest,
        transport_protocol: if tcp { IPPROTO_TCP } else { IPPROTO_UDP },
        ihl: if v6 { 0 } else { 5 },
        ttl,
        flags: flag::ENCAPSULATED,
        ..PacketEvent::default()
    };
    e.saddr[..N].copy_from_slice(&from);
    e.daddr[..N].copy_from_slice(&to);
    if tcp {
        (e.seq, e.ack_seq, e.doff) = (7, 9, 5);
        e.tcp_flags = tcp_flag::ACK | tcp_flag::PSH;
    }
    e
}
