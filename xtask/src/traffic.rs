//! `cargo xtask traffic`: the demo's traffic generator, run inside each node's namespace.
//!
//! Synchronization needs messages both ways between every pair of nodes, spread over the whole
//! recording: request/response exchanges at a steady rate (small segments, many ACKs) plus one
//! bulk flow per peer (large segments, as real workloads have). Each process serves its own port
//! and talks to every peer, then lingers briefly so peers finishing late still get answers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;

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
    thread::spawn(move || serve(listener));
    let exchanges = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(args.duration);
    let mut workers = Vec::new();
    for &peer in &args.peers {
        let (count, rate) = (exchanges.clone(), args.rate);
        workers.push(thread::spawn(move || {
            request_response(peer, rate, deadline, &count)
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

/// Sends requests of varying size at `rate` per second; each asks for a response of some size.
fn request_response(
    peer: SocketAddr,
    rate: f64,
    deadline: Instant,
    count: &AtomicU64,
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
        stream.write_all(&buf[..request_len as usize])?;
        stream.read_exact(&mut buf[..response_len as usize])?;
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

fn serve(listener: TcpListener) {
    for stream in listener.incoming().flatten() {
        thread::spawn(move || {
            let _ = handle(stream);
        });
    }
}

/// Answers one connection until the client closes it.
fn handle(mut stream: TcpStream) -> std::io::Result<()> {
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
        stream.write_all(&buf[..response_len])?;
    }
}
