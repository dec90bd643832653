//! `tsync-lab datagrams`: UDP request/response traffic as the applications of a cluster send it,
//! run in each pod of the cluster lab ([`crate::cluster`]) beside `tsync-lab traffic` (TCP).
//!
//! Three kinds of clients, because each defeats a different UDP digest:
//! - **connected** (`connect` + `send`/`recv`), DNS-like: the kernel gives each datagram its own IP
//!   ID, and the first payload bytes start with a random 16-bit query ID;
//! - **unconnected** (`sendto`/`recvfrom`), DNS-like: Linux sends such a datagram with IP ID 0 when
//!   it sets DF, so only the payload tells two of one flow apart;
//! - **QUIC-like** (connected): every datagram starts with the same flags byte and the
//!   connection's 8-byte connection ID, then random bytes, so its first 9 bytes are the same for
//!   the whole connection.
//!
//! The servers answer from one unconnected socket each (`recvfrom`/`sendto`, as DNS and QUIC
//! servers do): a DNS-like answer repeats the query and adds a random answer; a QUIC-like one
//! repeats the flags and connection ID, then random bytes. Every client sends one request at a
//! time at `--rate` per second, waits [`ANSWER_TIMEOUT`] for its answer, and stops at the deadline
//! or after `rate × duration` requests, whichever comes first: the traffic is bounded in time and
//! count. A client first retries until its peer answers once (servers start with it), failing
//! after [`WARMUP`] with the peer's address: a network that drops everything is an error, not a
//! quiet run.
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rand::{Rng, RngCore};

/// Options of one datagram process.
#[derive(clap::Args, Debug, Clone)]
pub struct DatagramArgs {
    /// Addresses to serve DNS-like requests on (one unconnected socket each).
    #[arg(long, value_delimiter = ',')]
    pub dns_listen: Vec<SocketAddr>,
    /// Addresses to serve QUIC-like datagrams on.
    #[arg(long, value_delimiter = ',')]
    pub quic_listen: Vec<SocketAddr>,
    /// DNS-like servers to query from connected sockets (one per peer).
    #[arg(long, value_delimiter = ',')]
    pub connected_peers: Vec<SocketAddr>,
    /// DNS-like servers to query from unconnected sockets (`sendto`/`recvfrom`, one per peer).
    #[arg(long, value_delimiter = ',')]
    pub unconnected_peers: Vec<SocketAddr>,
    /// QUIC-like servers to talk to (one connection, one connection ID, per peer).
    #[arg(long, value_delimiter = ',')]
    pub quic_peers: Vec<SocketAddr>,
    /// Requests per second to each peer.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds to keep serving after our own traffic ends.
    #[arg(long, default_value_t = 2.0)]
    pub linger: f64,
}

/// How long a client waits for each answer before it counts the request as unanswered.
pub const ANSWER_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a client retries its first request while its peer's server starts.
pub const WARMUP: Duration = Duration::from_secs(10);
/// The QUIC-like flags byte: a short header (fixed bit set, key phase 0, 4-byte packet number).
pub const QUIC_FLAGS: u8 = 0x43;
/// Largest datagram sent: below every tunnel's MTU in the lab (1450 bytes under VXLAN).
pub const MAX_DATAGRAM: usize = 1200;

/// The DNS-like query's fixed header after its ID: flags (recursion desired), one question, no
/// answer, authority or additional records.
const DNS_QUERY_FLAGS: [u8; 10] = [0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0];

/// What a client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Connected,
    Unconnected,
    Quic,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Connected => "connected",
            Mode::Unconnected => "unconnected",
            Mode::Quic => "QUIC-like",
        }
    }
}

/// Requests sent and answered, per mode.
#[derive(Default)]
struct Counts {
    sent: [AtomicU64; 3],
    answered: [AtomicU64; 3],
}

impl DatagramArgs {
    pub fn run(self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.rate > 0.0 && self.rate.is_finite(),
            "--rate must be a positive number of requests per second"
        );
        for addr in &self.dns_listen {
            let socket = UdpSocket::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
            thread::spawn(move || serve(socket, answer_dns));
        }
        for addr in &self.quic_listen {
            let socket = UdpSocket::bind(addr).with_context(|| format!("cannot bind {addr}"))?;
            thread::spawn(move || serve(socket, answer_quic));
        }
        let counts = Arc::new(Counts::default());
        let deadline = Instant::now() + Duration::from_secs_f64(self.duration);
        let most = (self.rate * self.duration).ceil() as u64 + 1;
        let flows = (self.connected_peers.iter().map(|&p| (p, Mode::Connected)))
            .chain(
                self.unconnected_peers
                    .iter()
                    .map(|&p| (p, Mode::Unconnected)),
            )
            .chain(self.quic_peers.iter().map(|&p| (p, Mode::Quic)));
        let mut clients = Vec::new();
        for (peer, mode) in flows {
            let (counts, rate) = (counts.clone(), self.rate);
            clients.push(thread::spawn(move || {
                client(peer, mode, rate, deadline, most, &counts)
                    .with_context(|| format!("{} client of {peer}", mode.name()))
            }));
        }
        for c in clients {
            c.join().expect("datagram client panicked")?;
        }
        thread::sleep(Duration::from_secs_f64(self.linger));
        for mode in [Mode::Connected, Mode::Unconnected, Mode::Quic] {
            let i = mode as usize;
            println!(
                "{}: {} requests, {} answered",
                mode.name(),
                counts.sent[i].load(Ordering::Relaxed),
                counts.answered[i].load(Ordering::Relaxed)
            );
        }
        Ok(())
    }
}

/// Answers every datagram on `socket` with `answer(request)`, sent back to its source.
fn serve(socket: UdpSocket, answer: fn(&[u8], &mut rand::rngs::ThreadRng) -> Vec<u8>) {
    let mut rng = rand::rng();
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let reply = answer(&buf[..len], &mut rng);
        // A reply the network drops is the client's to count.
        let _ = socket.send_to(&reply, from);
    }
}

/// A DNS-like query: random ID, the fixed header, a random name, type A class IN.
pub fn dns_query(rng: &mut impl Rng) -> Vec<u8> {
    let mut q = Vec::with_capacity(80);
    q.extend_from_slice(&rng.random::<u16>().to_be_bytes());
    q.extend_from_slice(&DNS_QUERY_FLAGS);
    for _ in 0..rng.random_range(1..=4) {
        let label = rng.random_range(3..=15);
        q.push(label as u8);
        q.extend((0..label).map(|_| rng.random_range(b'a'..=b'z')));
    }
    q.push(0);
    q.extend_from_slice(&[0, 1, 0, 1]);
    q
}

/// The answer to a DNS-like query: the query with the response bit and one answer record set,
/// then random answer bytes (a response's size varies as real ones do).
pub fn answer_dns(query: &[u8], rng: &mut rand::rngs::ThreadRng) -> Vec<u8> {
    let mut a = query.to_vec();
    if a.len() >= 12 {
        a[2] |= 0x80;
        a[7] = 1;
    }
    let extra = rng
        .random_range(16..=400)
        .min(MAX_DATAGRAM.saturating_sub(a.len()));
    let start = a.len();
    a.resize(start + extra, 0);
    rng.fill_bytes(&mut a[start..]);
    a
}

/// A QUIC-like datagram of connection `cid`: the flags byte, the connection ID, random bytes.
pub fn quic_datagram(cid: &[u8; 8], rng: &mut impl Rng) -> Vec<u8> {
    let len = rng.random_range(60..=MAX_DATAGRAM);
    let mut d = vec![0u8; len];
    d[0] = QUIC_FLAGS;
    d[1..9].copy_from_slice(cid);
    rng.fill_bytes(&mut d[9..]);
    d
}

/// The answer to a QUIC-like datagram: another one of the same connection.
pub fn answer_quic(request: &[u8], rng: &mut rand::rngs::ThreadRng) -> Vec<u8> {
    let mut cid = [0u8; 8];
    if request.len() >= 9 {
        cid.copy_from_slice(&request[1..9]);
    }
    quic_datagram(&cid, rng)
}

/// True when `reply` answers `request` in `mode`.
fn answers(mode: Mode, request: &[u8], reply: &[u8]) -> bool {
    match mode {
        Mode::Connected | Mode::Unconnected => {
            reply.len() >= 12 && reply[..2] == request[..2] && reply[2] & 0x80 != 0
        }
        Mode::Quic => reply.len() >= 9 && reply[..9] == request[..9],
    }
}

/// The unspecified address of `peer`'s family, port 0: where a client socket binds.
fn any_of(peer: SocketAddr) -> SocketAddr {
    match peer.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// One client: requests to `peer` at `rate` per second until `deadline` or `most` requests.
fn client(
    peer: SocketAddr,
    mode: Mode,
    rate: f64,
    deadline: Instant,
    most: u64,
    counts: &Counts,
) -> anyhow::Result<()> {
    let socket = UdpSocket::bind(any_of(peer))?;
    if mode != Mode::Unconnected {
        socket.connect(peer)?;
    }
    socket.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    let mut rng = rand::rng();
    let cid: [u8; 8] = rng.random();
    let mut buf = vec![0u8; 65536];
    let mut exchange = |rng: &mut rand::rngs::ThreadRng| -> anyhow::Result<bool> {
        let request = match mode {
            Mode::Quic => quic_datagram(&cid, rng),
            _ => dns_query(rng),
        };
        match mode {
            Mode::Unconnected => socket.send_to(&request, peer),
            _ => socket.send(&request),
        }?;
        let until = Instant::now() + ANSWER_TIMEOUT;
        while Instant::now() < until {
            let got = match mode {
                Mode::Unconnected => socket
                    .recv_from(&mut buf)
                    .map(|(n, from)| (from == peer).then_some(n)),
                _ => socket.recv(&mut buf).map(Some),
            };
            match got {
                Ok(Some(n)) if answers(mode, &request, &buf[..n]) => return Ok(true),
                Ok(_) => {}
                // No answer in time, or the port unreachable while the server starts.
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(false);
                }
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    };
    let start = Instant::now();
    while !exchange(&mut rng)? {
        if start.elapsed() > WARMUP {
            bail!("no answer from {peer} within {WARMUP:?}");
        }
        thread::sleep(Duration::from_millis(50));
    }
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut next = Instant::now();
    let (sent, answered) = (&counts.sent[mode as usize], &counts.answered[mode as usize]);
    for _ in 0..most {
        if Instant::now() >= deadline {
            break;
        }
        sent.fetch_add(1, Ordering::Relaxed);
        if exchange(&mut rng)? {
            answered.fetch_add(1, Ordering::Relaxed);
        }
        next += period;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quic_like_datagrams_share_their_first_nine_bytes_and_nothing_else() {
        let mut rng = rand::rng();
        let cid = [1, 2, 3, 4, 5, 6, 7, 8];
        let (a, b) = (quic_datagram(&cid, &mut rng), quic_datagram(&cid, &mut rng));
        assert_eq!(a[..9], b[..9]);
        assert_eq!(a[0], QUIC_FLAGS);
        assert!(a.len() >= 60 && a.len() <= MAX_DATAGRAM);
        assert_ne!(a[9..60], b[9..60]);
        let reply = answer_quic(&a, &mut rng);
        assert!(answers(Mode::Quic, &a, &reply));
        assert!(!answers(Mode::Quic, &a, &quic_datagram(&[9; 8], &mut rng)));
    }

    #[test]
    fn a_dns_like_answer_carries_the_query_id_and_the_response_bit() {
        let mut rng = rand::rng();
        let q = dns_query(&mut rng);
        assert_eq!(q[2..12], DNS_QUERY_FLAGS);
        let a = answer_dns(&q, &mut rng);
        assert!(answers(Mode::Unconnected, &q, &a));
        assert!(a.len() > q.len() && a.len() <= MAX_DATAGRAM);
        // A query is not its own answer, nor is another query's answer.
        assert!(!answers(Mode::Connected, &q, &q));
        let mut other = a.clone();
        other[0] ^= 0xff;
        assert!(!answers(Mode::Connected, &q, &other));
    }

    #[test]
    fn clients_of_every_mode_get_answers_over_loopback() {
        let dns = UdpSocket::bind("127.0.0.1:0").unwrap();
        let quic = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (dns_addr, quic_addr) = (dns.local_addr().unwrap(), quic.local_addr().unwrap());
        thread::spawn(move || serve(dns, answer_dns));
        thread::spawn(move || serve(quic, answer_quic));
        let counts = Counts::default();
        let deadline = Instant::now() + Duration::from_secs(5);
        for (peer, mode) in [
            (dns_addr, Mode::Connected),
            (dns_addr, Mode::Unconnected),
            (quic_addr, Mode::Quic),
        ] {
            client(peer, mode, 1000.0, deadline, 5, &counts).unwrap();
            let i = mode as usize;
            // Bounded by count: five requests, each answered.
            assert_eq!(counts.sent[i].load(Ordering::Relaxed), 5);
            assert_eq!(counts.answered[i].load(Ordering::Relaxed), 5);
        }
    }
}
