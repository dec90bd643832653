//! Real captures (root only): network namespaces joined by a veth pair, one agent per namespace,
//! real traffic, checked down to every digest.
//!
//! They need root (they create namespaces and load eBPF programs) and are `#[ignore]`d, so that
//! `cargo test --workspace` passes for anyone; `cargo xtask test` (CI, as root) runs them with
//! `cargo test -p tsync-lab -- --ignored`. The agent under test is the workspace's, built by
//! [`tsync_lab::agent_binary`] (or `$TSYNC_AGENT`). They share kernel state (BPF program lists),
//! so they run one at a time.
use std::{
    collections::BTreeSet,
    fs::File,
    io::{BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Mutex, mpsc},
    thread,
    time::{Duration, Instant},
};

use tsync_common::{PacketEvent, direction, format::TraceReader, kind, tcp_flag, udp_hashed_data};
use tsync_lab::{
    Agent, Netns, Stopped, VethPair, program_ids, record_command, unique_name, wait_unloaded,
};

const V4: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
const V6: [&str; 2] = ["fd77::1", "fd77::2"];

/// Serializes the tests of this file: they count BPF programs and create namespaces.
static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the lock, after checking for root.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    assert!(
        tsync_lab::is_root(),
        "the capture tests need root (network namespaces, eBPF); run them as root, as CI does"
    );
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn agent_bin() -> PathBuf {
    tsync_lab::agent_binary().expect("cannot build tsync-agent")
}

/// Two namespaces joined by a veth pair, with IPv4 and IPv6 addresses.
fn link() -> VethPair {
    VethPair::new(&unique_name(""), V4, Some(V6)).unwrap()
}

/// Starts `tsync-agent record -o FILE ARGS...` (in namespace `ns` if given) and waits until it
/// says it is recording.
fn start(ns: Option<&Netns>, file: &Path, args: &[&str]) -> Agent {
    let mut cmd = record_command(&agent_bin(), ns, file);
    cmd.args(args);
    Agent::start(cmd).unwrap()
}

/// Stops an agent with SIGINT and checks that it exited cleanly; returns what it printed.
fn stop(agent: Agent) -> Stopped {
    agent.stop_cleanly().unwrap()
}

/// All events of a trace, its header's ifindexes, and its footer event count.
struct Trace {
    node: String,
    events: Vec<PacketEvent>,
    ifindexes: BTreeSet<u32>,
    footer_events: u64,
}

/// A cleanly stopped agent's trace, checked whole.
fn read_trace(path: &Path) -> Trace {
    let (events, r) = read_all(path);
    assert!(r.damage().is_none(), "damaged: {:?}", r.damage());
    assert!(r.clock_samples().len() >= 2, "start and end clock samples");
    let footer = r
        .footer()
        .expect("a cleanly stopped agent writes the footer");
    Trace {
        node: r.header().node.clone(),
        ifindexes: r.header().interfaces.iter().map(|i| i.ifindex).collect(),
        footer_events: footer.events,
        events,
    }
}

/// A trace file as far as it is readable (also when cut short): its events, and the reader at
/// its end (footer, damage, clock samples, header).
fn read_all(path: &Path) -> (Vec<PacketEvent>, TraceReader<BufReader<File>>) {
    let mut r = TraceReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut events = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend_from_slice(chunk);
    }
    (events, r)
}

/// The header digest, i.e. everything but where and when the packet was seen.
fn digest(e: &PacketEvent) -> PacketEvent {
    PacketEvent {
        ts_ns: 0,
        ifindex: 0,
        cpu: 0,
        direction: 0,
        ..*e
    }
}

fn v4(s: &str) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&s.parse::<std::net::Ipv4Addr>().unwrap().octets());
    a
}

/// One request/response TCP exchange from namespace 1 (client) to namespace 0 (server).
fn tcp_exchange(link: &VethPair, server: SocketAddr, request: usize, response: usize) {
    let (ready_tx, ready_rx) = mpsc::channel();
    thread::scope(|scope| {
        let srv = scope.spawn(|| {
            link.ns[0].run_in(move || {
                let listener = TcpListener::bind(server).unwrap();
                ready_tx.send(()).unwrap();
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = vec![0u8; request];
                s.read_exact(&mut buf).unwrap();
                s.write_all(&vec![b'r'; response]).unwrap();
                // Wait for the client's FIN, then close: both sides send a FIN.
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
            })
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        link.ns[1].run_in(move || {
            let mut c = TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap();
            c.write_all(&vec![b'q'; request]).unwrap();
            let mut buf = vec![0u8; response];
            c.read_exact(&mut buf).unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
        });
        srv.join().unwrap();
    });
}

/// The TCP segments namespace `ns` has retransmitted since it was created (`RetransSegs` of its
/// own `/proc/net/snmp`: the counters are per network namespace).
fn tcp_retransmissions(ns: &Netns) -> u64 {
    let out = ns
        .command("cat")
        .arg("/proc/net/snmp")
        .output()
        .expect("cat /proc/net/snmp");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (
        tcp.next().expect("Tcp header"),
        tcp.next().expect("Tcp values"),
    );
    let column = names
        .split_whitespace()
        .position(|n| n == "RetransSegs")
        .expect("RetransSegs column");
    values
        .split_whitespace()
        .nth(column)
        .expect("RetransSegs value")
        .parse()
        .unwrap()
}

/// Asserts that a packet matching `pick` was sent in `from` and received with the same digest in
/// `to`; returns the digest.
fn assert_crossed(what: &str, from: &Trace, to: &Trace, pick: impl Fn(&PacketEvent) -> bool) {
    let sent: Vec<PacketEvent> = from
        .events
        .iter()
        .filter(|e| e.direction == direction::SEND && pick(e))
        .map(digest)
        .collect();
    assert!(!sent.is_empty(), "{what}: not sent in {}", from.node);
    for d in &sent {
        assert!(
            to.events
                .iter()
                .any(|e| e.direction == direction::RECV && digest(e) == *d),
            "{what}: sent by {} as {d:?} but never received by {} with the same digest",
            from.node,
            to.node
        );
    }
}

fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn captures_matching_digests_in_each_namespace_and_detaches() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| dir.path().join(format!("{n}.trace")))
        .collect();
    let agent_a = start(Some(&link.ns[0]), &files[0], &["--node", "node-a"]);
    let agent_b = start(Some(&link.ns[1]), &files[1], &["--node", "node-b"]);
    let ours: BTreeSet<u32> = [&agent_a, &agent_b]
        .iter()
        .flat_map(|a| a.program_ids().unwrap())
        .collect();
    assert_eq!(
        ours.len(),
        6,
        "each agent loads 3 programs (2 hooks, 1 batch flush): {ours:?}"
    );
    assert!(ours.is_subset(&program_ids().unwrap()), "{ours:?}");

    // Traffic: TCP over IPv4 and IPv6, UDP over IPv4, and host-namespace traffic that neither
    // agent may record.
    let v4_server: SocketAddr = format!("{}:5555", V4[0]).parse().unwrap();
    tcp_exchange(&link, v4_server, 3000, 1000);
    let v6_server: SocketAddr = format!("[{}]:5556", V6[0]).parse().unwrap();
    tcp_exchange(&link, v6_server, 100, 100);
    let udp_dst: SocketAddr = format!("{}:5557", V4[0]).parse().unwrap();
    link.ns[1].run_in(move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(b"0123456789abcdef", udp_dst).unwrap();
        s.send_to(b"xyz", udp_dst).unwrap();
    });
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    let mut hc = TcpStream::connect(host.local_addr().unwrap()).unwrap();
    hc.write_all(b"host traffic").unwrap();
    drop(hc);
    thread::sleep(Duration::from_millis(300));

    let out_a = stop(agent_a).stdout;
    stop(agent_b);
    assert!(
        out_a.contains("send (net:net_dev_queue)"),
        "summary: {out_a}"
    );

    let left = wait_unloaded(&ours).unwrap();
    assert!(
        left.is_empty(),
        "programs left attached after the agents exited: {left:?}"
    );

    let a = read_trace(&files[0]);
    let b = read_trace(&files[1]);
    assert_eq!((a.node.as_str(), b.node.as_str()), ("node-a", "node-b"));
    for t in [&a, &b] {
        assert_eq!(t.footer_events, t.events.len() as u64);
        assert!(
            t.events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
            "{}: events not time-sorted",
            t.node
        );
        // Only its own namespace: every interface is one of the namespace's own, no host traffic.
        for e in &t.events {
            assert!(
                t.ifindexes.contains(&e.ifindex),
                "{}: foreign ifindex {e:?}",
                t.node
            );
            assert!(
                !(e.saddr == v4("127.0.0.1") && (e.source == host_port || e.dest == host_port)),
                "{}: recorded host-namespace traffic {e:?}",
                t.node
            );
        }
    }

    let (ca, cb) = (v4(V4[0]), v4(V4[1]));
    let flow = |e: &PacketEvent, src: [u8; 16], port_dst: bool| {
        e.kind == kind::TCP4 && e.saddr == src && (if port_dst { e.dest } else { e.source }) == 5555
    };
    let flags = |e: &PacketEvent| e.tcp_flags & (tcp_flag::SYN | tcp_flag::ACK | tcp_flag::FIN);
    assert_crossed("SYN", &b, &a, |e| {
        flow(e, cb, true) && flags(e) == tcp_flag::SYN
    });
    assert_crossed("SYN-ACK", &a, &b, |e| {
        flow(e, ca, false) && flags(e) == tcp_flag::SYN | tcp_flag::ACK
    });
    assert_crossed("request data", &b, &a, |e| {
        flow(e, cb, true) && e.tcp_payload_len() > 0
    });
    assert_crossed("response data", &a, &b, |e| {
        flow(e, ca, false) && e.tcp_payload_len() > 0
    });
    assert_crossed("client FIN", &b, &a, |e| {
        flow(e, cb, true) && e.tcp_flags & tcp_flag::FIN != 0
    });
    assert_crossed("server FIN", &a, &b, |e| {
        flow(e, ca, false) && e.tcp_flags & tcp_flag::FIN != 0
    });
    // The request's bytes all arrive: the payload lengths of the data segments add up.
    let request_bytes: u32 = b
        .events
        .iter()
        .filter(|e| e.direction == direction::SEND && flow(e, cb, true))
        .map(|e| e.tcp_payload_len())
        .sum();
    assert_eq!(request_bytes, 3000);

    assert_crossed("IPv6 SYN", &b, &a, |e| {
        e.kind == kind::TCP6 && e.dest == 5556 && e.tcp_flags & tcp_flag::SYN != 0
    });
    assert_crossed("IPv6 data", &a, &b, |e| {
        e.kind == kind::TCP6 && e.source == 5556 && e.tcp_payload_len() == 100
    });

    let udp: Vec<&PacketEvent> = a
        .events
        .iter()
        .filter(|e| e.kind == kind::UDP4_HASHED && e.direction == direction::RECV && e.dest == 5557)
        .collect();
    assert_eq!(udp.len(), 2, "both datagrams received: {udp:?}");
    // A hash of the payload, never the payload; never more than the datagram.
    assert_eq!(
        (udp[0].udp_len, udp[0].udp_data),
        (8 + 16, udp_hashed_data(b"0123456789abcdef"))
    );
    assert_eq!(
        (udp[1].udp_len, udp[1].udp_data),
        (8 + 3, udp_hashed_data(b"xyz"))
    );
    assert_crossed("UDP", &b, &a, |e| {
        e.kind == kind::UDP4_HASHED && e.dest == 5557
    });
    // A direct link: every packet arrives with the TTL (hop limit) it left with, Linux's 64.
    for t in [&a, &b] {
        assert!(
            t.events.iter().all(|e| e.ttl == 64 && e.flags == 0),
            "{}: {:?}",
            t.node,
            t.events.iter().find(|e| e.ttl != 64 || e.flags != 0)
        );
    }
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn a_node_whose_address_lives_on_a_bridge_is_synchronized() {
    let _serial = serial();
    // As on a container host: node a's address is on a bridge whose port is the veth, so each of
    // its packets crosses two devices and is recorded twice, with one digest.
    let link = VethPair::namespaces(&unique_name("")).unwrap();
    let bridge = format!("{}r", link.dev[0].trim_end_matches('a'));
    let [ns_a, ns_b] = &link.ns;
    let (dev_a, dev_b) = (link.dev[0].as_str(), link.dev[1].as_str());
    tsync_lab::ip(&[
        "link",
        "add",
        dev_a,
        "netns",
        ns_a.name(),
        "type",
        "veth",
        "peer",
        "name",
        dev_b,
        "netns",
        ns_b.name(),
    ])
    .unwrap();
    let addr = |i: usize| format!("{}/24", V4[i]);
    for (ns, args) in [
        (ns_a, &["link", "add", &bridge, "type", "bridge"][..]),
        (ns_a, &["link", "set", dev_a, "master", &bridge]),
        (ns_a, &["addr", "add", &addr(0), "dev", &bridge]),
        (ns_b, &["addr", "add", &addr(1), "dev", dev_b]),
        (ns_a, &["link", "set", dev_a, "up"]),
        (ns_a, &["link", "set", &bridge, "up"]),
        (ns_b, &["link", "set", dev_b, "up"]),
    ] {
        ns.ip(args).unwrap();
    }
    let dir = tmpdir();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| dir.path().join(format!("{n}.trace")))
        .collect();
    let agent_a = start(Some(ns_a), &files[0], &["--node", "bridged"]);
    let agent_b = start(Some(ns_b), &files[1], &["--node", "plain"]);
    // The bridge port may need a moment before it forwards; the first connection waits for it.
    for port in 5600..5606 {
        let server: SocketAddr = format!("{}:{port}", V4[0]).parse().unwrap();
        tcp_exchange(&link, server, 2000, 2000);
    }
    thread::sleep(Duration::from_millis(200));
    for agent in [agent_a, agent_b] {
        stop(agent);
    }
    let a = read_trace(&files[0]);
    let send_devices: BTreeSet<u32> = a
        .events
        .iter()
        .filter(|e| e.direction == direction::SEND)
        .map(|e| e.ifindex)
        .collect();
    assert_eq!(
        send_devices.len(),
        2,
        "node a records each packet it sends on the bridge and on its port"
    );

    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let inputs = tsync_analyze::InputSet::open(&paths).unwrap();
    let r = tsync_analyze::sync(&inputs, &Default::default(), &mut |_| {}).unwrap();
    let m = &r.matching;
    assert_eq!(
        m.ambiguous, 0,
        "bridge copies taken for retransmissions: {m:?}"
    );
    assert!(m.stacked_copies >= 6 * 6, "{m:?}");
    assert!(m.matched >= 6 * 8, "{m:?}");
    assert_eq!(
        r.pairs[0].quality,
        tsync_analyze::Quality::Accurate,
        "{m:?}"
    );
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn segments_cut_differently_by_offloads_are_paired_by_sequence_range() {
    let _serial = serial();
    // With TSO and GSO off on the veth, TCP still hands the send hook GSO super-packets (it
    // always builds them; the kernel segments them after the hook), while the receiver sees
    // the segments: by digest, the bulk transfer's data would not match at all.
    let link = link();
    for (ns, dev) in link.ns.iter().zip(&link.dev) {
        let dev = dev.clone();
        let on = ns.run_in(move || {
            let missing = tsync_lab::offloads::set(&dev, false)?;
            assert!(missing.is_empty(), "{missing:?}");
            tsync_lab::offloads::enabled(&dev).map_err(anyhow::Error::from)
        });
        assert_eq!(on.expect("offloads off through the ethtool ioctl"), [""; 0]);
    }
    let dir = tmpdir();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| dir.path().join(format!("{n}.trace")))
        .collect();
    let agent_a = start(Some(&link.ns[0]), &files[0], &["--node", "a"]);
    let agent_b = start(Some(&link.ns[1]), &files[1], &["--node", "b"]);
    for port in 5700..5720 {
        let server: SocketAddr = format!("{}:{port}", V4[0]).parse().unwrap();
        tcp_exchange(&link, server, 200_000, 100_000);
    }
    thread::sleep(Duration::from_millis(200));
    let lost: u64 = [agent_a, agent_b]
        .into_iter()
        .map(|agent| stop(agent).summary().map_or(0, |(_, lost)| lost))
        .sum();
    let retransmitted: u64 = link.ns.iter().map(tcp_retransmissions).sum();
    let a = read_trace(&files[0]);
    let b = read_trace(&files[1]);
    let large = |t: &Trace, dir| {
        t.events
            .iter()
            .filter(|e| e.direction == dir && e.tot_len > 1500)
            .count()
    };
    assert!(
        large(&b, direction::SEND) > 0 && large(&a, direction::RECV) == 0,
        "super-packets sent, segments received"
    );
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let inputs = tsync_analyze::InputSet::open(&paths).unwrap();
    let digest = tsync_lab::matching::digest_only(&files).unwrap();
    let r = tsync_analyze::sync(&inputs, &Default::default(), &mut |_| {}).unwrap();
    let m = &r.matching;
    assert!(digest.unmatched * 5 > digest.events, "{digest:?}");
    assert!(m.range_matched > 0, "{m:?}");
    // Without loss, every segment pairs. A segment the veth dropped (its backlog overflows when
    // the receiving namespace's softirq falls behind, as on a loaded CI host) is sent again: its
    // bytes are then covered twice, and the few events covering them cannot be paired (see
    // `matching::ranges`); an event the agent lost leaves its partner alone.
    let allowance = m.events / 100 + 20 * retransmitted + 2 * lost;
    assert!(
        m.unmatched <= allowance,
        "at most 1 % left unmatched, plus what {retransmitted} retransmitted segments and \
         {lost} lost events explain: {m:?}"
    );
    // The offload warning names retransmissions as the other cause of unpaired super-packets:
    // only a loss-free run must stay silent.
    if retransmitted == 0 {
        assert!(
            !r.warnings.iter().any(|w| w.contains("offloads")),
            "{:?}",
            r.warnings
        );
    }
    assert_eq!(
        r.pairs[0].quality,
        tsync_analyze::Quality::Accurate,
        "{m:?}"
    );
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn all_netns_sees_other_namespaces_and_clock_skew_is_applied() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let (plain, skewed) = (
        dir.path().join("plain.trace"),
        dir.path().join("skewed.trace"),
    );
    // Both agents run in the host namespace; only --all-netns sees the veth traffic.
    let agent_plain = start(None, &plain, &[]);
    let agent_skewed = start(
        None,
        &skewed,
        &["--all-netns", "--clock-skew", "5000000000,100"],
    );
    tcp_exchange(&link, format!("{}:5558", V4[0]).parse().unwrap(), 10, 10);
    thread::sleep(Duration::from_millis(200));
    stop(agent_plain);
    let s = agent_skewed.stop_with(libc::SIGTERM).unwrap();
    assert!(s.status.success(), "{}", s.stderr);
    let plain = read_trace(&plain);
    let skewed = read_trace(&skewed);
    let port = |e: &&PacketEvent| e.dest == 5558 || e.source == 5558;
    assert!(!plain.events.iter().any(|e| port(&e)), "own namespace only");
    let seen: Vec<&PacketEvent> = skewed.events.iter().filter(port).collect();
    // SYN, SYN-ACK, ACK, data both ways, FINs: sent and received on both veth ends.
    assert!(seen.len() >= 10, "{} events", seen.len());
    // The skew moved the timestamps 5 s (plus 100 ppm) ahead of the monotonic clock now.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
    assert!(seen.iter().all(|e| e.ts_ns > now_ns + 4_000_000_000));
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn unprivileged_run_names_the_missing_capabilities() {
    let _serial = serial();
    let dir = tmpdir();
    let file = dir.path().join("x.trace");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            agent_bin().to_str().unwrap(),
            "record",
            "-o",
        ])
        .arg(&file)
        .output()
        .expect("setpriv (util-linux) is needed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!file.exists(), "no file is left behind");
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn unwritable_output_is_a_clear_error() {
    let _serial = serial();
    let before = program_ids().unwrap();
    let out = Command::new(agent_bin())
        .args(["record", "-o", "/nonexistent-tsync-dir/x.trace"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/nonexistent-tsync-dir/x.trace"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "the OS error said once: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let new: BTreeSet<u32> = program_ids()
        .unwrap()
        .difference(&before)
        .copied()
        .collect();
    assert!(
        wait_unloaded(&new).unwrap().is_empty(),
        "nothing left attached"
    );
}

/// A tmpfs of a few pages, unmounted on drop.
struct TinyFs(tempfile::TempDir);

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn full_disk_is_reported_and_the_file_stays_readable() {
    let _serial = serial();
    let fs = TinyFs(tmpdir());
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tsync-test"])
        .arg(fs.0.path())
        .status()
        .unwrap();
    assert!(mounted.success(), "mount -t tmpfs: {mounted}");
    let link = link();
    let file = fs.0.path().join("full.trace");
    let mut agent = start(Some(&link.ns[0]), &file, &[]);
    // Far more than 64 KiB of events, even compressed (format version 3 stores these at a few
    // bytes each): 40000 datagrams make 40000 send + 40000 receive events.
    // A few first (they fit and get flushed), then far more than 64 KiB of events.
    let dst: SocketAddr = format!("{}:5559", V4[0]).parse().unwrap();
    let send = move |n: u32| {
        move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for i in 0..n {
                s.send_to(&i.to_be_bytes(), dst).unwrap();
            }
        }
    };
    link.ns[1].run_in(send(100));
    thread::sleep(Duration::from_millis(1200));
    link.ns[1].run_in(send(40_000));
    // The agent notices at its next flush (at most every 0.5 s) and exits on its own.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = agent.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not stop on a full disk"
        );
        thread::sleep(Duration::from_millis(100));
    };
    let stderr = agent.wait().unwrap().stderr;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is full"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // What made it to disk is still a readable trace.
    let (events, r) = read_all(&file);
    assert!(r.footer().is_none());
    assert!(
        !events.is_empty(),
        "events before the disk filled up are readable"
    );
}

/// Waits until every thread of process `pid` is stopped (SIGSTOP has been delivered to all).
fn wait_stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        let stopped = tasks.map(|t| t.unwrap().path().join("stat")).all(|stat| {
            let stat = std::fs::read_to_string(stat).unwrap_or_default();
            // The state follows the command name's closing parenthesis.
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            matches!(state, Some("T" | "t"))
        });
        if stopped {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} did not stop");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn a_full_ring_buffer_counts_lost_events() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let file = dir.path().join("lossy.trace");
    // One page of ring buffer holds 46 events (80 bytes and an 8-byte header each).
    let capacity = 4096 / 88;
    let agent = start(Some(&link.ns[0]), &file, &["--ring-size", "4096"]);
    // Neighbours resolved first: datagrams waiting for ARP could be dropped before any hook.
    tcp_exchange(&link, format!("{}:5565", V4[0]).parse().unwrap(), 1, 1);
    // Nothing drains the ring while the burst comes: the agent is stopped (as `kill -STOP` or a
    // debugger stops it), every thread of it. So at most `capacity` of the burst's events fit,
    // and the rest are lost, however fast the machine: no race with the drain.
    agent.signal(libc::SIGSTOP);
    wait_stopped(agent.pid());
    let dst: SocketAddr = format!("{}:5560", V4[0]).parse().unwrap();
    // At most the receive backlog's default length (netdev_max_backlog, 1000): none dropped
    // before the receive hook.
    let sent = 1000u32;
    link.ns[1].run_in(move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..sent {
            s.send_to(&i.to_be_bytes(), dst).unwrap();
        }
    });
    agent.signal(libc::SIGCONT);
    let Stopped {
        stdout: out,
        stderr: err,
        ..
    } = stop(agent);
    let (events, r) = read_all(&file);
    let received = events
        .iter()
        .filter(|e| e.direction == direction::RECV && e.dest == 5560)
        .count() as u64;
    let lost = r
        .footer()
        .expect("a cleanly stopped agent writes the footer")
        .lost
        .clone();
    assert!(
        received <= capacity,
        "{received} events from a {capacity}-event ring"
    );
    assert!(
        lost.recv >= u64::from(sent) - capacity,
        "a {capacity}-event ring cannot hold a burst of {sent}: {lost:?}"
    );
    assert!(
        received + lost.recv <= u64::from(sent),
        "{received} + {lost:?}"
    );
    assert_eq!(lost.disk, 0, "nothing is lost on the way to the file");
    let per_cpu_recv: u64 = lost.per_cpu.iter().map(|c| c[1]).sum();
    assert_eq!(per_cpu_recv, lost.recv);
    assert!(
        out.contains(&format!("{} lost", lost.total())),
        "summary: {out}"
    );
    assert!(
        err.contains("were lost in the kernel") && err.contains("--ring-size"),
        "a warning names the loss and its cause: {err}"
    );
    assert!(
        !err.contains("on the way to"),
        "not blamed on the disk: {err}"
    );
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn clock_samples_are_dense_and_tight_enough_to_undo_slewing_within_a_microsecond() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let file = dir.path().join("clock.trace");
    let agent = start(Some(&link.ns[0]), &file, &[]);
    // Some traffic, so that the recording loop drains while the sampler samples.
    tcp_exchange(
        &link,
        format!("{}:5566", V4[0]).parse().unwrap(),
        100_000,
        100_000,
    );
    thread::sleep(Duration::from_millis(2000));
    stop(agent);
    let (events, r) = read_all(&file);
    assert!(r.damage().is_none(), "{:?}", r.damage());
    assert_eq!(r.version(), tsync_common::format::VERSION);
    assert!(r.samples_bracketed());
    let samples = r.clock_samples();
    assert!(samples.len() >= 90, "{} samples in ~2 s", samples.len());
    let gaps: Vec<u64> = samples
        .windows(2)
        .map(|w| w[1].monotonic_raw_ns - w[0].monotonic_raw_ns)
        .collect();
    let widest_gap = gaps.iter().copied().max().unwrap();
    assert!(
        widest_gap <= 25_000_000,
        "samples up to {:.3} ms apart",
        widest_gap as f64 * 1e-6
    );
    let mut widths: Vec<u64> = samples.iter().map(|s| s.bracket_ns()).collect();
    widths.sort_unstable();
    let widest_bracket = widths[widths.len() - 1];
    assert!(widest_bracket < 10_000, "brackets {widths:?} ns");
    assert!(widths[widths.len() / 2] < 1000, "brackets {widths:?} ns");
    // The kernel's clock state, read at the start (just before the first sample).
    let kernel = r.kernel_clock();
    assert!(!kernel.is_empty(), "no kernel clock state");
    assert!(kernel[0].monotonic_ns <= samples[0].monotonic_ns);
    assert!(kernel[0].tick > 0, "{:?}", kernel[0]);
    // Every event lies between the first and the last sample: sampling starts before the
    // programs are loaded and stops after the last drain.
    let port = |e: &&PacketEvent| e.dest == 5566 || e.source == 5566;
    assert!(events.iter().filter(port).count() >= 8);
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    assert!(
        events
            .iter()
            .all(|e| e.ts_ns > first.monotonic_after_ns && e.ts_ns < last.monotonic_ns)
    );
    let slew = tsync_analyze::SlewCorrection::from_samples(samples, r.samples_bracketed())
        .unwrap_or_else(|e| panic!("{e}"));
    // Within a microsecond on an idle host. A sample preempted between its reads (a loaded
    // host: CI's other jobs, a hypervisor) pins the clock only to its bracket, and the bound
    // honestly widens by as much; it must not widen more.
    assert!(
        slew.bound_ns < 1000.0 + widest_bracket as f64,
        "bound {} ns, widest bracket {widest_bracket} ns",
        slew.bound_ns
    );
    for e in &events {
        assert!(slew.bound_at(e.ts_ns as f64) <= slew.bound_ns);
    }
    let summary = slew.summary();
    eprintln!(
        "{} samples, gaps up to {:.3} ms, brackets {}/{}/{} ns (min/median/max), kernel {:?}, \
         {} piece(s), rate {:+.3} ppm, bound {:.1} ns",
        samples.len(),
        widest_gap as f64 * 1e-6,
        widths[0],
        widths[widths.len() / 2],
        widths[widths.len() - 1],
        kernel[0],
        summary.pieces,
        summary.rate_mean_ppm,
        slew.bound_ns
    );
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn interfaces_created_while_recording_are_covered() {
    let _serial = serial();
    let link = VethPair::namespaces(&unique_name("")).unwrap();
    let dir = tmpdir();
    let file = dir.path().join("late.trace");
    let agent = start(Some(&link.ns[0]), &file, &[]);
    // The veth pair appears only now.
    link.connect(V4, Some(V6)).unwrap();
    tcp_exchange(&link, format!("{}:5561", V4[0]).parse().unwrap(), 10, 10);
    let ifindex = link.ns[0].run_in({
        let dev = link.dev[0].clone();
        move || {
            let name = std::ffi::CString::new(dev).unwrap();
            // SAFETY: valid C string; the thread is in the namespace of the device.
            unsafe { libc::if_nametoindex(name.as_ptr()) }
        }
    });
    assert_ne!(ifindex, 0);
    thread::sleep(Duration::from_millis(100));
    stop(agent);
    let seen: Vec<PacketEvent> = read_all(&file)
        .0
        .into_iter()
        .filter(|e| e.source == 5561 || e.dest == 5561)
        .collect();
    assert!(
        seen.iter()
            .any(|e| e.direction == direction::SEND && e.ifindex == ifindex),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| e.direction == direction::RECV && e.ifindex == ifindex)
    );
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn killed_agent_leaves_a_readable_file_and_nothing_attached() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let file = dir.path().join("killed.trace");
    let agent = start(Some(&link.ns[0]), &file, &[]);
    let ours = agent.program_ids().unwrap();
    assert_eq!(ours.len(), 3, "2 hooks and the batch flush: {ours:?}");
    tcp_exchange(&link, format!("{}:5562", V4[0]).parse().unwrap(), 500, 500);
    // The agent flushes every 0.5 s: wait for one flush, then kill it without warning.
    thread::sleep(Duration::from_millis(1200));
    agent.kill().unwrap();
    assert!(
        wait_unloaded(&ours).unwrap().is_empty(),
        "programs survived kill -9"
    );
    let (events, r) = read_all(&file);
    let n = events
        .iter()
        .filter(|e| e.dest == 5562 || e.source == 5562)
        .count();
    assert!(r.footer().is_none(), "no footer: the agent was killed");
    // SYN, SYN-ACK, ACK, data and FINs, sent and received by the server's namespace.
    assert!(n >= 8, "events flushed before the kill are readable: {n}");
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn duration_stops_the_agent_by_itself() {
    let _serial = serial();
    let dir = tmpdir();
    let file = dir.path().join("timed.trace");
    let started = Instant::now();
    let mut child = Command::new(agent_bin())
        .args(["record", "--duration", "0.5", "--node", "timed", "-o"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads the summary (as with `| head -0`): writing it must not crash the agent.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let (_, r) = read_all(&file);
    assert_eq!(r.header().node, "timed");
    assert_eq!(r.header().options.duration_s, Some(0.5));
    assert!(r.footer().is_some(), "a timed run ends with a footer");
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn ipv4_options_and_fragments_are_parsed() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let file = dir.path().join("v4.trace");
    let agent = start(Some(&link.ns[0]), &file, &[]);
    let with_options: SocketAddr = format!("{}:5563", V4[0]).parse().unwrap();
    let fragmented: SocketAddr = format!("{}:5564", V4[0]).parse().unwrap();
    link.ns[1].run_in(move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        s.send_to(&[7u8; 3000], fragmented).unwrap();
        // Four bytes of IP options (NOP, NOP, NOP, end): the header grows to ihl = 6, and the
        // transport header no longer sits where it usually does.
        let opts = [1u8, 1, 1, 0];
        // SAFETY: valid socket and option buffer.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_OPTIONS,
                opts.as_ptr().cast(),
                opts.len() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "IP_OPTIONS: {}", std::io::Error::last_os_error());
        s.send_to(b"options!", with_options).unwrap();
    });
    thread::sleep(Duration::from_millis(100));
    stop(agent);
    let (events, _) = read_all(&file);
    let recv: Vec<&PacketEvent> = events
        .iter()
        .filter(|e| e.direction == direction::RECV)
        .collect();
    // A 3000-byte datagram arrives in three fragments; only the first carries the UDP header.
    let frag: Vec<_> = recv.iter().filter(|e| e.dest == 5564).collect();
    assert_eq!(frag.len(), 1, "{frag:?}");
    // The first fragment holds the first 32 payload bytes: all of them are hashed.
    assert_eq!(
        (frag[0].udp_len, frag[0].udp_data),
        (3008, udp_hashed_data(&[7u8; 32]))
    );
    assert!(
        frag[0].tot_len <= 1500,
        "the first fragment's length: {}",
        frag[0].tot_len
    );
    let opt: Vec<_> = recv.iter().filter(|e| e.dest == 5563).collect();
    assert_eq!(opt.len(), 1, "{opt:?}");
    assert_eq!(opt[0].ihl, 6);
    assert_eq!(
        (opt[0].udp_len, opt[0].udp_data),
        (16, udp_hashed_data(b"options!"))
    );
    assert_eq!(opt[0].tot_len, 24 + 16);
}

/// Sends `count` frames of EtherType IPv4 whose "IP header" is all zeros out of `dev` in `ns`,
/// through a packet socket: the send hook sees an IPv4 packet whose network header is not one.
fn send_bogus_ipv4(ns: &Netns, dev: &str, count: usize) {
    let dev = std::ffi::CString::new(dev).unwrap();
    ns.run_in(move || {
        // SAFETY: valid C string; the thread is in the namespace of the device.
        let ifindex = unsafe { libc::if_nametoindex(dev.as_ptr()) };
        assert_ne!(ifindex, 0, "{dev:?}: {}", std::io::Error::last_os_error());
        let protocol = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: plain socket(2); the fd is owned right away.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM, i32::from(protocol)) };
        assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain old data.
        let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        to.sll_family = libc::AF_PACKET as u16;
        to.sll_protocol = protocol;
        to.sll_ifindex = ifindex as i32;
        to.sll_halen = 6;
        to.sll_addr[..6].fill(0xff);
        let frame = [0u8; 64];
        for _ in 0..count {
            // SAFETY: valid buffer and address of the given lengths.
            let sent = unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&raw const to).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                )
            };
            assert_eq!(sent, 64, "sendto: {}", std::io::Error::last_os_error());
        }
    });
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn the_programs_notices_reach_the_agents_log_with_v() {
    let _serial = serial();
    let link = link();
    let dir = tmpdir();
    let mut verbose = start(
        Some(&link.ns[0]),
        &dir.path().join("verbose.trace"),
        &["-v"],
    );
    let quiet = start(Some(&link.ns[0]), &dir.path().join("quiet.trace"), &[]);
    send_bogus_ipv4(&link.ns[0], &link.dev[0], 4);
    verbose.wait_for("not an IP header").unwrap();
    let verbose = stop(verbose);
    let quiet = stop(quiet);
    let notices: Vec<&str> = verbose
        .stderr
        .lines()
        .filter(|l| l.contains("not an IP header"))
        .collect();
    // tsync-agent: info: [tsync_ebpf] send hook: packet of EtherType 0x800 on ifindex N starts
    // with 0x0 at its network header, not an IP header of that version; not recorded (…)
    assert!(!notices.is_empty(), "{}", verbose.stderr);
    for notice in &notices {
        assert!(
            notice.starts_with(
                "tsync-agent: info: [tsync_ebpf] send hook: packet of EtherType 0x800"
            ) && notice.contains("starts with 0x0"),
            "{notice}"
        );
    }
    assert!(
        verbose.stderr.contains("attached net_dev_queue"),
        "-v shows the agent's own info too: {}",
        verbose.stderr
    );
    // Without -v the kernel does not even build the message.
    assert!(
        !quiet.stderr.contains("[tsync_ebpf]") && !quiet.stderr.contains("info:"),
        "{}",
        quiet.stderr
    );
    // The bogus frames are neither recorded nor counted as lost.
    let trace = read_trace(&dir.path().join("verbose.trace"));
    assert!(trace.events.iter().all(|e| e.saddr != [0; 16]), "recorded");
    assert!(verbose.stdout.contains("; 0 lost"), "{}", verbose.stdout);
}
