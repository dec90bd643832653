//! Real captures: network namespaces joined by a veth pair, one agent per namespace, real traffic.
//!
//! These tests need root (they create namespaces and load eBPF programs), as in CI. They share
//! kernel state (BPF program lists), so they run one at a time.
use std::{
    collections::BTreeSet,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicU32, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant},
};

use tsync_common::{PacketEvent, direction, format::TraceReader, kind, tcp_flag};

const AGENT: &str = env!("CARGO_BIN_EXE_tsync-agent");
const HOOKS: [&str; 2] = ["net_dev_queue", "netif_receive_skb"];

/// Serializes the tests of this file: they count BPF programs and create namespaces.
static SERIAL: Mutex<()> = Mutex::new(());
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the capture tests need root (network namespaces, eBPF); run them as root, as CI does"
    );
}

/// Runs a command and fails the test with its output if it fails.
fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two network namespaces joined by a veth pair, with IPv4 and IPv6 addresses; removed on drop
/// (also when the test fails), which also removes the veth pair.
struct Link {
    ns: [String; 2],
    dev: [String; 2],
}

impl Link {
    const V4: [&'static str; 2] = ["10.77.0.1", "10.77.0.2"];
    const V6: [&'static str; 2] = ["fd77::1", "fd77::2"];

    /// Two empty namespaces (the veth pair comes with [`Link::connect`]).
    fn namespaces() -> Self {
        let id = format!(
            "{}x{}",
            std::process::id(),
            NEXT_ID.fetch_add(1, Ordering::SeqCst)
        );
        let link = Link {
            ns: [format!("tsync-{id}-a"), format!("tsync-{id}-b")],
            // Interface names are at most 15 bytes.
            dev: [format!("tv{id}a"), format!("tv{id}b")],
        };
        for ns in &link.ns {
            sh(&["ip", "netns", "add", ns]);
        }
        link
    }

    /// Two namespaces joined by the veth pair.
    fn new() -> Self {
        let link = Self::namespaces();
        link.connect();
        link
    }

    /// Creates the veth pair between the namespaces, with addresses, up.
    fn connect(&self) {
        let link = self;
        sh(&[
            "ip",
            "link",
            "add",
            &link.dev[0],
            "netns",
            &link.ns[0],
            "type",
            "veth",
            "peer",
            "name",
            &link.dev[1],
            "netns",
            &link.ns[1],
        ]);
        for i in 0..2 {
            let (ns, dev) = (&link.ns[i], &link.dev[i]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", Self::V4[i]),
                "dev",
                dev,
            ]);
            sh(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/64", Self::V6[i]),
                "dev",
                dev,
                "nodad",
            ]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
    }

    /// Runs `f` on a thread that has entered namespace `i` (sockets it opens live there).
    fn run_in<T: Send + 'static>(&self, i: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.ns[i]);
        thread::spawn(move || {
            let ns = fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: setns on a valid namespace fd affects only this (fresh) thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("traffic thread panicked")
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A running agent; killed on drop if the test did not stop it.
struct Agent {
    child: Option<Child>,
    stderr: mpsc::Receiver<String>,
    stderr_seen: Vec<String>,
}

impl Agent {
    /// Starts `tsync-agent record -o FILE ARGS...` (in namespace `ns` if given) and waits until it
    /// says it is recording.
    fn start(ns: Option<&str>, file: &Path, args: &[&str]) -> Agent {
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, AGENT]);
                c
            }
            None => Command::new(AGENT),
        };
        cmd.args(["record", "-o"]).arg(file).args(args);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start tsync-agent");
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut agent = Agent {
            child: Some(child),
            stderr: rx,
            stderr_seen: Vec::new(),
        };
        agent.wait_for("recording on");
        agent
    }

    fn wait_for(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let found = line.contains(what);
                    self.stderr_seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let out = self.child.take().unwrap().wait_with_output().unwrap();
        panic!(
            "agent never said {what:?} ({}); stderr: {}",
            out.status,
            self.stderr_seen.join("\n")
        );
    }

    /// Sends SIGINT (Ctrl-C) and waits for the exit; returns status, stdout and stderr.
    fn stop(self) -> (ExitStatus, String, String) {
        self.stop_with(libc::SIGINT)
    }

    /// Sends `signal` and waits for the exit; returns status, stdout and stderr.
    fn stop_with(self, signal: i32) -> (ExitStatus, String, String) {
        let pid = self.child.as_ref().unwrap().id();
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid as i32, signal) };
        self.stop_exited()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Ids of loaded BPF programs named like ours.
fn our_program_ids() -> BTreeSet<u32> {
    let out = Command::new("bpftool")
        .args(["prog", "show"])
        .output()
        .expect("bpftool is needed (cargo xtask setup installs it)");
    assert!(out.status.success(), "bpftool prog show failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.contains(" tracing ") && HOOKS.iter().any(|h| l.contains(&format!("name {h} ")))
        })
        .filter_map(|l| l.split(':').next()?.trim().parse().ok())
        .collect()
}

/// Waits (up to 10 s) until none of `ids` is loaded: the kernel frees programs asynchronously
/// (RCU, workqueue) after their last reference goes, so they may linger a moment after exit.
fn wait_until_unloaded(ids: &BTreeSet<u32>) -> BTreeSet<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: BTreeSet<u32> = our_program_ids().intersection(ids).copied().collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// All events of a trace, its header's ifindexes, and its footer event count.
struct Trace {
    node: String,
    events: Vec<PacketEvent>,
    ifindexes: BTreeSet<u32>,
    footer_events: u64,
}

fn read_trace(path: &Path) -> Trace {
    let mut r = TraceReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut events = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        events.extend_from_slice(chunk);
    }
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
fn tcp_exchange(link: &Link, server: SocketAddr, request: usize, response: usize) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let srv = {
        let path = format!("/run/netns/{}", link.ns[0]);
        thread::spawn(move || {
            let ns = fs::File::open(&path).unwrap();
            // SAFETY: setns on a valid fd, this thread only.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
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
    };
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    link.run_in(1, move || {
        let mut c = TcpStream::connect_timeout(&server, Duration::from_secs(5)).unwrap();
        c.write_all(&vec![b'q'; request]).unwrap();
        let mut buf = vec![0u8; response];
        c.read_exact(&mut buf).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
    });
    srv.join().unwrap();
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
fn captures_matching_digests_in_each_namespace_and_detaches() {
    let _serial = serial();
    require_root();
    let link = Link::new();
    let dir = tmpdir();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| dir.path().join(format!("{n}.trace")))
        .collect();
    let before = our_program_ids();
    let agent_a = Agent::start(Some(&link.ns[0]), &files[0], &["--node", "node-a"]);
    let agent_b = Agent::start(Some(&link.ns[1]), &files[1], &["--node", "node-b"]);
    let during = our_program_ids();
    let ours: BTreeSet<u32> = during.difference(&before).copied().collect();
    assert!(ours.len() >= 4, "each agent attaches 2 programs: {ours:?}");

    // Traffic: TCP over IPv4 and IPv6, UDP over IPv4, and host-namespace traffic that neither
    // agent may record.
    let v4_server: SocketAddr = format!("{}:5555", Link::V4[0]).parse().unwrap();
    tcp_exchange(&link, v4_server, 3000, 1000);
    let v6_server: SocketAddr = format!("[{}]:5556", Link::V6[0]).parse().unwrap();
    tcp_exchange(&link, v6_server, 100, 100);
    let udp_dst: SocketAddr = format!("{}:5557", Link::V4[0]).parse().unwrap();
    link.run_in(1, move || {
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

    let (status_a, out_a, err_a) = agent_a.stop();
    let (status_b, out_b, err_b) = agent_b.stop();
    assert!(status_a.success(), "agent a: {status_a}\n{out_a}\n{err_a}");
    assert!(status_b.success(), "agent b: {status_b}\n{out_b}\n{err_b}");
    assert!(
        out_a.contains("send (net:net_dev_queue)"),
        "summary: {out_a}"
    );
    assert!(!err_a.contains("panicked") && !err_b.contains("panicked"));

    let left = wait_until_unloaded(&ours);
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

    let (ca, cb) = (v4(Link::V4[0]), v4(Link::V4[1]));
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
        .filter(|e| e.kind == kind::UDP4 && e.direction == direction::RECV && e.dest == 5557)
        .collect();
    assert_eq!(udp.len(), 2, "both datagrams received: {udp:?}");
    assert_eq!((udp[0].udp_len, &udp[0].udp_data), (8 + 16, b"01234567"));
    // Never more than the datagram: a 3-byte payload leaves the rest zero.
    assert_eq!(
        (udp[1].udp_len, &udp[1].udp_data),
        (8 + 3, b"xyz\0\0\0\0\0")
    );
    assert_crossed("UDP", &b, &a, |e| e.kind == kind::UDP4 && e.dest == 5557);
}

#[test]
fn a_node_whose_address_lives_on_a_bridge_is_synchronized() {
    let _serial = serial();
    require_root();
    // As on a container host: node a's address is on a bridge whose port is the veth, so each of
    // its packets crosses two devices and is recorded twice, with one digest.
    let link = Link::namespaces();
    let bridge = format!("{}r", link.dev[0].trim_end_matches('a'));
    let (ns_a, ns_b) = (link.ns[0].as_str(), link.ns[1].as_str());
    let (dev_a, dev_b) = (link.dev[0].as_str(), link.dev[1].as_str());
    sh(&[
        "ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns",
        ns_b,
    ]);
    sh(&["ip", "-n", ns_a, "link", "add", &bridge, "type", "bridge"]);
    sh(&["ip", "-n", ns_a, "link", "set", dev_a, "master", &bridge]);
    let addr = |i: usize| format!("{}/24", Link::V4[i]);
    sh(&["ip", "-n", ns_a, "addr", "add", &addr(0), "dev", &bridge]);
    sh(&["ip", "-n", ns_b, "addr", "add", &addr(1), "dev", dev_b]);
    for (ns, dev) in [(ns_a, dev_a), (ns_a, bridge.as_str()), (ns_b, dev_b)] {
        sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
    let dir = tmpdir();
    let files: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| dir.path().join(format!("{n}.trace")))
        .collect();
    let agent_a = Agent::start(Some(ns_a), &files[0], &["--node", "bridged"]);
    let agent_b = Agent::start(Some(ns_b), &files[1], &["--node", "plain"]);
    // The bridge port may need a moment before it forwards; the first connection waits for it.
    for port in 5600..5606 {
        let server: SocketAddr = format!("{}:{port}", Link::V4[0]).parse().unwrap();
        tcp_exchange(&link, server, 2000, 2000);
    }
    thread::sleep(Duration::from_millis(200));
    for agent in [agent_a, agent_b] {
        let (status, out, err) = agent.stop();
        assert!(status.success(), "{status}\n{out}\n{err}");
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
    let inputs = tsync_analyze::input::InputSet::open(&paths).unwrap();
    let r = tsync_analyze::sync::run(&inputs, &Default::default(), &mut |_| {}).unwrap();
    let m = &r.matching;
    assert_eq!(
        m.ambiguous, 0,
        "bridge copies taken for retransmissions: {m:?}"
    );
    assert!(m.stacked_copies >= 6 * 6, "{m:?}");
    assert!(m.matched >= 6 * 8, "{m:?}");
    assert_eq!(
        r.pairs[0].quality,
        tsync_analyze::corridor::Quality::Accurate,
        "{m:?}"
    );
}

#[test]
fn all_netns_sees_other_namespaces_and_clock_skew_is_applied() {
    let _serial = serial();
    require_root();
    let link = Link::new();
    let dir = tmpdir();
    let (plain, skewed) = (
        dir.path().join("plain.trace"),
        dir.path().join("skewed.trace"),
    );
    // Both agents run in the host namespace; only --all-netns sees the veth traffic.
    let agent_plain = Agent::start(None, &plain, &[]);
    let agent_skewed = Agent::start(
        None,
        &skewed,
        &["--all-netns", "--clock-skew", "5000000000,100"],
    );
    tcp_exchange(
        &link,
        format!("{}:5558", Link::V4[0]).parse().unwrap(),
        10,
        10,
    );
    thread::sleep(Duration::from_millis(200));
    let (s1, _, e1) = agent_plain.stop();
    let (s2, _, e2) = agent_skewed.stop_with(libc::SIGTERM);
    assert!(s1.success() && s2.success(), "{e1}\n{e2}");
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
fn unprivileged_run_names_the_missing_capabilities() {
    let _serial = serial();
    require_root();
    let dir = tmpdir();
    let file = dir.path().join("x.trace");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            AGENT,
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
fn unwritable_output_is_a_clear_error() {
    let _serial = serial();
    require_root();
    let before = our_program_ids();
    let out = Command::new(AGENT)
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
    let new: BTreeSet<u32> = our_program_ids().difference(&before).copied().collect();
    assert!(
        wait_until_unloaded(&new).is_empty(),
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
fn full_disk_is_reported_and_the_file_stays_readable() {
    let _serial = serial();
    require_root();
    let fs = TinyFs(tmpdir());
    sh(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=64k",
        "tsync-test",
        fs.0.path().to_str().unwrap(),
    ]);
    let link = Link::new();
    let file = fs.0.path().join("full.trace");
    let mut agent = Agent::start(Some(&link.ns[0]), &file, &[]);
    // Far more than 64 KiB of events: 4000 datagrams make 4000 send + 4000 receive events.
    // A few first (they fit and get flushed), then far more than 64 KiB of events.
    let dst: SocketAddr = format!("{}:5559", Link::V4[0]).parse().unwrap();
    let send = move |n: u32| {
        move || {
            let s = UdpSocket::bind("0.0.0.0:0").unwrap();
            for i in 0..n {
                s.send_to(&i.to_be_bytes(), dst).unwrap();
            }
        }
    };
    link.run_in(1, send(100));
    thread::sleep(Duration::from_millis(1200));
    link.run_in(1, send(4000));
    // The agent notices at its next flush (at most every 0.5 s) and exits on its own.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = agent.child.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the agent did not stop on a full disk"
        );
        thread::sleep(Duration::from_millis(100));
    };
    let (_, _, stderr) = agent.stop_exited();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is full"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // What made it to disk is still a readable trace.
    let mut r = TraceReader::open(&file).unwrap();
    let mut n = 0;
    while let Some(chunk) = r.next_events().unwrap() {
        n += chunk.len();
    }
    assert!(r.footer().is_none());
    assert!(n > 0, "events before the disk filled up are readable");
}

impl Agent {
    /// Waits for the agent to exit (by itself, or signalled by `stop_with`) and collects its output.
    fn stop_exited(mut self) -> (ExitStatus, String, String) {
        let mut child = self.child.take().unwrap();
        let status = child.wait().unwrap();
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(200)) {
            self.stderr_seen.push(line);
        }
        (status, out, self.stderr_seen.join("\n"))
    }
}

#[test]
fn a_full_ring_buffer_counts_lost_events() {
    let _serial = serial();
    require_root();
    let link = Link::new();
    let dir = tmpdir();
    let file = dir.path().join("lossy.trace");
    // One page of ring buffer holds about 46 events; the agent drains every 10 ms.
    let agent = Agent::start(Some(&link.ns[0]), &file, &["--ring-size", "4096"]);
    let dst: SocketAddr = format!("{}:5560", Link::V4[0]).parse().unwrap();
    let sent = 20_000u32;
    link.run_in(1, move || {
        let s = UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..sent {
            s.send_to(&i.to_be_bytes(), dst).unwrap();
        }
    });
    thread::sleep(Duration::from_millis(200));
    let (status, out, err) = agent.stop();
    assert!(status.success(), "{err}");
    let mut r = TraceReader::open(&file).unwrap();
    let mut received = 0u64;
    while let Some(chunk) = r.next_events().unwrap() {
        received += chunk
            .iter()
            .filter(|e| e.direction == direction::RECV && e.dest == 5560)
            .count() as u64;
    }
    let footer = r.footer().unwrap().clone();
    let lost = footer.lost.clone();
    assert!(
        lost.recv > 0,
        "a 4 KiB ring cannot keep up with {sent} datagrams: {lost:?}"
    );
    assert!(
        received + lost.recv <= u64::from(sent),
        "{received} + {lost:?}"
    );
    let per_cpu_recv: u64 = lost.per_cpu.iter().map(|c| c[1]).sum();
    assert_eq!(per_cpu_recv, lost.recv);
    assert!(
        out.contains(&format!("{} lost", lost.total())),
        "summary: {out}"
    );
    assert!(err.contains("were lost"), "a warning names the loss: {err}");
}

#[test]
fn interfaces_created_while_recording_are_covered() {
    let _serial = serial();
    require_root();
    let link = Link::namespaces();
    let dir = tmpdir();
    let file = dir.path().join("late.trace");
    let agent = Agent::start(Some(&link.ns[0]), &file, &[]);
    // The veth pair appears only now.
    link.connect();
    tcp_exchange(
        &link,
        format!("{}:5561", Link::V4[0]).parse().unwrap(),
        10,
        10,
    );
    let ifindex = link.run_in(0, {
        let dev = link.dev[0].clone();
        move || {
            let name = std::ffi::CString::new(dev).unwrap();
            // SAFETY: valid C string; the thread is in the namespace of the device.
            unsafe { libc::if_nametoindex(name.as_ptr()) }
        }
    });
    assert_ne!(ifindex, 0);
    thread::sleep(Duration::from_millis(100));
    let (status, _, err) = agent.stop();
    assert!(status.success(), "{err}");
    let mut r = TraceReader::open(&file).unwrap();
    let mut seen = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        seen.extend(
            chunk
                .iter()
                .filter(|e| e.source == 5561 || e.dest == 5561)
                .copied(),
        );
    }
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
fn killed_agent_leaves_a_readable_file_and_nothing_attached() {
    let _serial = serial();
    require_root();
    let link = Link::new();
    let dir = tmpdir();
    let file = dir.path().join("killed.trace");
    let before = our_program_ids();
    let mut agent = Agent::start(Some(&link.ns[0]), &file, &[]);
    let ours: BTreeSet<u32> = our_program_ids().difference(&before).copied().collect();
    assert!(ours.len() >= 2, "{ours:?}");
    tcp_exchange(
        &link,
        format!("{}:5562", Link::V4[0]).parse().unwrap(),
        500,
        500,
    );
    // The agent flushes every 0.5 s: wait for one flush, then kill it without warning.
    thread::sleep(Duration::from_millis(1200));
    let mut child = agent.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_until_unloaded(&ours).is_empty(),
        "programs survived kill -9"
    );
    let mut r = TraceReader::open(&file).unwrap();
    let mut n = 0;
    while let Some(chunk) = r.next_events().unwrap() {
        n += chunk
            .iter()
            .filter(|e| e.dest == 5562 || e.source == 5562)
            .count();
    }
    assert!(r.footer().is_none(), "no footer: the agent was killed");
    // SYN, SYN-ACK, ACK, data and FINs, sent and received by the server's namespace.
    assert!(n >= 8, "events flushed before the kill are readable: {n}");
}

#[test]
fn duration_stops_the_agent_by_itself() {
    let _serial = serial();
    require_root();
    let dir = tmpdir();
    let file = dir.path().join("timed.trace");
    let started = Instant::now();
    let mut child = Command::new(AGENT)
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
    let r = TraceReader::open(&file).unwrap();
    assert_eq!(r.header().node, "timed");
    assert_eq!(r.header().options.duration_s, Some(0.5));
    let mut r = r;
    while r.next_events().unwrap().is_some() {}
    assert!(r.footer().is_some(), "a timed run ends with a footer");
}

#[test]
fn an_existing_output_is_kept_unless_forced() {
    let dir = tmpdir();
    let file = dir.path().join("earlier.trace");
    std::fs::write(&file, "an earlier recording").unwrap();
    let out = Command::new(AGENT)
        .args(["record", "--duration", "1", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "an earlier recording"
    );
}

#[test]
fn bad_options_are_rejected_with_usage_errors() {
    for (args, expect) in [
        (&["--ring-size", "1000"][..], "power of two"),
        (&["--duration", "-3"][..], "duration"),
        (&["--clock-skew", "12"][..], "OFFSET_NS,DRIFT_PPM"),
        (&["--clock-skew", "0,-2000000"][..], "DRIFT_PPM"),
    ] {
        let out = Command::new(AGENT)
            .args(["record", "-o", "/nonexistent/never-written.trace"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

#[test]
fn ipv4_options_and_fragments_are_parsed() {
    let _serial = serial();
    require_root();
    let link = Link::new();
    let dir = tmpdir();
    let file = dir.path().join("v4.trace");
    let agent = Agent::start(Some(&link.ns[0]), &file, &[]);
    let with_options: SocketAddr = format!("{}:5563", Link::V4[0]).parse().unwrap();
    let fragmented: SocketAddr = format!("{}:5564", Link::V4[0]).parse().unwrap();
    link.run_in(1, move || {
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
    let (status, _, err) = agent.stop();
    assert!(status.success(), "{err}");
    let mut r = TraceReader::open(&file).unwrap();
    let mut recv = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        recv.extend(
            chunk
                .iter()
                .filter(|e| e.direction == direction::RECV)
                .copied(),
        );
    }
    // A 3000-byte datagram arrives in three fragments; only the first carries the UDP header.
    let frag: Vec<_> = recv.iter().filter(|e| e.dest == 5564).collect();
    assert_eq!(frag.len(), 1, "{frag:?}");
    assert_eq!((frag[0].udp_len, frag[0].udp_data), (3008, [7u8; 8]));
    assert!(
        frag[0].tot_len <= 1500,
        "the first fragment's length: {}",
        frag[0].tot_len
    );
    let opt: Vec<_> = recv.iter().filter(|e| e.dest == 5563).collect();
    assert_eq!(opt.len(), 1, "{opt:?}");
    assert_eq!(opt[0].ihl, 6);
    assert_eq!((opt[0].udp_len, &opt[0].udp_data), (16, b"options!"));
    assert_eq!(opt[0].tot_len, 24 + 16);
}
