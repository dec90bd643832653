//! `tsync-lab traffic`: the traffic generator, run inside each node — a namespace of the demo, a
//! guest of the VM lab (there as a thread of `tsync-lab guest`). `cargo xtask traffic` runs it too.
//!
//! Synchronization needs messages both ways between every pair of nodes, spread over the whole
//! recording: request/response exchanges at a steady rate (small segments, many ACKs) plus one
//! bulk flow per peer (large segments, as real workloads have). Each process serves its own port
//! and talks to every peer, then lingers briefly so peers finishing late still get answers.
//!
//! With `--app-log`, it also writes what an application would: a small JSON Lines log of its own
//! events (every [`LOGGED_EVERY`]th exchange: request sent, request received, response sent,
//! response received), each stamped with the node's CLOCK_MONOTONIC as its agent records it
//! (`ts_ns`, the `--clock-skew` applied) and with CLOCK_REALTIME (`wall_ns`). The demo puts the
//! nodes' logs on one timeline with `tsync-analyze apply` and checks that every exchange reads in
//! causal order.

use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::vm::clocks::clock;

/// Options of one traffic process.
#[derive(clap::Args, Debug, Clone)]
pub struct TrafficArgs {
    /// Address to serve on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Peers to talk to (their --listen addresses).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<SocketAddr>,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 20.0)]
    pub duration: f64,
    /// Request/response exchanges per second to each peer.
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// Bulk-flow bytes per second to each peer (0: no bulk flow).
    #[arg(long, default_value_t = 2_000_000)]
    pub bulk_rate: u64,
    /// Seconds to keep serving after our own traffic ends.
    #[arg(long, default_value_t = 2.0)]
    pub linger: f64,
    /// Write a JSON Lines log of some exchanges' events to this file (see the module doc).
    #[arg(long, value_name = "FILE")]
    pub app_log: Option<PathBuf>,
    /// This node's number: names it (`node-K`) in the log and in the exchanges it starts.
    #[arg(long, default_value_t = 0)]
    pub node_index: u32,
    /// The node's clock as its agent records it: `OFFSET_NS,DRIFT_PPM` (as `tsync-agent
    /// --clock-skew`), applied to the log's `ts_ns`.
    #[arg(long, value_name = "OFFSET_NS,DRIFT_PPM", allow_hyphen_values = true)]
    pub clock_skew: Option<String>,
}

/// One exchange in this many (per peer) is logged: at the default rate, two a second.
pub const LOGGED_EVERY: u32 = 100;

/// The application log: events stamped with the node's (skewed) monotonic clock and realtime.
struct AppLog {
    out: Mutex<BufWriter<std::fs::File>>,
    node: String,
    skew: Option<tsync_common::format::ClockSkew>,
}

impl AppLog {
    fn open(args: &TrafficArgs) -> anyhow::Result<Option<Arc<AppLog>>> {
        let Some(path) = &args.app_log else {
            return Ok(None);
        };
        let skew = match &args.clock_skew {
            None => None,
            Some(s) => {
                let (o, p) = s
                    .split_once(',')
                    .context("--clock-skew is OFFSET_NS,DRIFT_PPM")?;
                Some(tsync_common::format::ClockSkew {
                    offset_ns: o.trim().parse().context("--clock-skew offset")?,
                    drift_ppm: p.trim().parse().context("--clock-skew drift")?,
                })
            }
        };
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Some(Arc::new(AppLog {
            out: Mutex::new(BufWriter::new(file)),
            node: format!("node-{}", args.node_index),
            skew,
        })))
    }

    /// Logs one event of exchange `id` (`node-K→node-J#N`: client, server, the client's number).
    fn event(&self, event: &str, id: &str, peer: &str) {
        let mono = clock(libc::CLOCK_MONOTONIC);
        let wall = clock(libc::CLOCK_REALTIME) as i64;
        let ts = self.skew.as_ref().map_or(mono, |s| s.apply(mono));
        let line = serde_json::json!({
            "ts_ns": ts, "wall_ns": wall, "node": self.node, "event": event,
            "exchange": id, "peer": peer,
        });
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{line}");
    }

    fn flush(&self) {
        let _ = self.out.lock().unwrap_or_else(|e| e.into_inner()).flush();
    }
}

/// Kind of connection, sent as the first byte by the client.
const REQUEST_RESPONSE: u8 = 1;
const BULK: u8 = 2;

impl TrafficArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let exchanges = run(&self)?;
        println!("{exchanges} request/response exchanges completed");
        Ok(())
    }
}

/// Runs the generator; returns the number of completed exchanges.
pub fn run(args: &TrafficArgs) -> anyhow::Result<u64> {
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let log = AppLog::open(args)?;
    let server_log = log.clone();
    thread::spawn(move || serve(listener, server_log));
    let exchanges = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(args.duration);
    let mut workers = Vec::new();
    for &peer in &args.peers {
        let (count, rate, log) = (exchanges.clone(), args.rate, log.clone());
        let me = args.node_index;
        workers.push(thread::spawn(move || {
            request_response(peer, rate, deadline, &count, log.as_deref(), me)
        }));
        if args.bulk_rate > 0 {
            let rate = args.bulk_rate;
            workers.push(thread::spawn(move || bulk(peer, rate, deadline)));
        }
    }
    for worker in workers {
        worker.join().expect("traffic worker panicked")?;
    }
    thread::sleep(Duration::from_secs_f64(args.linger));
    if let Some(log) = &log {
        log.flush();
    }
    Ok(exchanges.load(Ordering::Relaxed))
}

/// Connects to `peer`, retrying while its server starts.
fn connect(peer: SocketAddr, kind: u8) -> anyhow::Result<TcpStream> {
    let start = Instant::now();
    loop {
        match TcpStream::connect_timeout(&peer, Duration::from_secs(1)) {
            Ok(mut stream) => {
                stream.set_nodelay(true)?;
                stream.write_all(&[kind])?;
                return Ok(stream);
            }
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot connect to {peer}")),
        }
    }
}

/// The demo's nodes listen on 10.x.y.(k + 1): the node behind an address.
fn node_of(addr: SocketAddr) -> String {
    match addr.ip() {
        std::net::IpAddr::V4(v4) => format!("node-{}", v4.octets()[3].saturating_sub(1)),
        other => other.to_string(),
    }
}

/// Sends requests of varying size at `rate` per second; each asks for a response of some size.
/// Bytes 8..16 of a request carry the exchange's log id (0: not logged): the starting node's
/// number + 1 in the high half, the exchange's number in the low half.
fn request_response(
    peer: SocketAddr,
    rate: f64,
    deadline: Instant,
    count: &AtomicU64,
    log: Option<&AppLog>,
    me: u32,
) -> anyhow::Result<()> {
    let mut stream = connect(peer, REQUEST_RESPONSE)?;
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut next = Instant::now();
    let mut buf = vec![0u8; 4096];
    let mut i: u32 = 0;
    while Instant::now() < deadline {
        i = i.wrapping_add(1);
        let request_len = 16 + (i.wrapping_mul(2_654_435_761) % 1200);
        let response_len = 16 + (i.wrapping_mul(40_503) % 2000);
        buf[..4].copy_from_slice(&request_len.to_le_bytes());
        buf[4..8].copy_from_slice(&response_len.to_le_bytes());
        let logged = log.filter(|_| i.is_multiple_of(LOGGED_EVERY));
        let id = logged.map_or(0u64, |_| (u64::from(me) + 1) << 32 | u64::from(i));
        buf[8..16].copy_from_slice(&id.to_le_bytes());
        let name = format!("node-{me}→{}#{i}", node_of(peer));
        if let Some(l) = logged {
            l.event("request sent", &name, &node_of(peer));
        }
        stream.write_all(&buf[..request_len as usize])?;
        stream.read_exact(&mut buf[..response_len as usize])?;
        if let Some(l) = logged {
            l.event("response received", &name, &node_of(peer));
        }
        count.fetch_add(1, Ordering::Relaxed);
        next += period;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    Ok(())
}

/// Streams 64 KiB writes at about `rate` bytes per second.
fn bulk(peer: SocketAddr, rate: u64, deadline: Instant) -> anyhow::Result<()> {
    let mut stream = connect(peer, BULK)?;
    let block = vec![0x5au8; 64 * 1024];
    let start = Instant::now();
    let mut sent = 0u64;
    while Instant::now() < deadline {
        stream.write_all(&block)?;
        sent += block.len() as u64;
        let due = Duration::from_secs_f64(sent as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            thread::sleep(wait);
        }
    }
    Ok(())
}

fn serve(listener: TcpListener, log: Option<Arc<AppLog>>) {
    for stream in listener.incoming().flatten() {
        let log = log.clone();
        thread::spawn(move || {
            let _ = handle(stream, log.as_deref());
        });
    }
}

/// Answers one connection until the client closes it.
fn handle(mut stream: TcpStream, log: Option<&AppLog>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut kind = [0u8];
    stream.read_exact(&mut kind)?;
    let mut buf = vec![0u8; 64 * 1024];
    if kind[0] == BULK {
        while stream.read(&mut buf)? > 0 {}
        return Ok(());
    }
    loop {
        if let Err(e) = stream.read_exact(&mut buf[..8]) {
            return if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Ok(())
            } else {
                Err(e)
            };
        }
        let request_len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        let response_len = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
        if !(8..=buf.len()).contains(&request_len) || response_len > buf.len() {
            return Ok(());
        }
        stream.read_exact(&mut buf[8..request_len])?;
        let id = u64::from_le_bytes(buf[8..16].try_into().unwrap());
        let logged = log.filter(|_| id != 0).map(|l| {
            let peer = format!("node-{}", (id >> 32) - 1);
            let name = format!("{peer}→{}#{}", l.node, id as u32);
            l.event("request received", &name, &peer);
            (l, name, peer)
        });
        if let Some((l, name, peer)) = &logged {
            l.event("response sent", name, peer);
        }
        stream.write_all(&buf[..response_len])?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(app_log: Option<PathBuf>, clock_skew: Option<&str>) -> TrafficArgs {
        TrafficArgs {
            listen: "127.0.0.1:0".parse().unwrap(),
            peers: Vec::new(),
            duration: 0.0,
            rate: 1.0,
            bulk_rate: 0,
            linger: 0.0,
            app_log,
            node_index: 2,
            clock_skew: clock_skew.map(str::to_owned),
        }
    }

    #[test]
    fn a_server_answers_each_request_with_the_size_asked_and_logs_the_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.jsonl");
        let log = AppLog::open(&args(Some(path.clone()), Some("1000,-2.5")))
            .unwrap()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = listener.local_addr().unwrap();
        let server_log = Some(log.clone());
        thread::spawn(move || serve(listener, server_log));
        let mut stream = connect(peer, REQUEST_RESPONSE).unwrap();
        let mut buf = vec![0u8; 4096];
        for (request_len, response_len, id) in [(100u32, 333u32, 0u64), (16, 2000, 1 << 32 | 7)] {
            buf[..4].copy_from_slice(&request_len.to_le_bytes());
            buf[4..8].copy_from_slice(&response_len.to_le_bytes());
            buf[8..16].copy_from_slice(&id.to_le_bytes());
            stream.write_all(&buf[..request_len as usize]).unwrap();
            stream
                .read_exact(&mut buf[..response_len as usize])
                .unwrap();
        }
        drop(stream);
        // The server logs before it answers: both events are in the log once answered.
        log.flush();
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
        assert_eq!(events, ["request received", "response sent"]);
        for l in &lines {
            assert_eq!(l["exchange"], "node-0→node-2#7");
            assert_eq!(
                (l["node"].as_str(), l["peer"].as_str()),
                (Some("node-2"), Some("node-0"))
            );
            assert!(l["ts_ns"].as_u64().is_some() && l["wall_ns"].as_i64().is_some());
        }
    }

    #[test]
    fn a_malformed_clock_skew_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let log = Some(dir.path().join("app.jsonl"));
        let err = AppLog::open(&args(log.clone(), Some("1000")))
            .err()
            .unwrap();
        assert!(err.to_string().contains("OFFSET_NS,DRIFT_PPM"), "{err}");
        let err = AppLog::open(&args(log, Some("1000,fast"))).err().unwrap();
        assert!(format!("{err:#}").contains("drift"), "{err:#}");
        assert!(AppLog::open(&args(None, Some("x"))).unwrap().is_none());
    }

    #[test]
    fn the_node_behind_an_address_is_its_last_octet_minus_one() {
        assert_eq!(node_of("10.200.0.3:7000".parse().unwrap()), "node-2");
        assert_eq!(node_of("[::1]:7000".parse().unwrap()), "::1");
    }
}
