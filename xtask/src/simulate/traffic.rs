//! Simulated TCP traffic: one connection per pair of nodes carrying request/response exchanges,
//! with real header digests so the analyzer matches and pairs them as it does captured packets.

use std::net::Ipv4Addr;

use rand::Rng;
use rand_distr::{Distribution, Exp};
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, kind, tcp_flag};

use super::SimConfig;
use super::network::Delay;

/// IPv4 address of simulated node `k`.
pub fn address(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, (k / 250) as u8, (k % 250 + 1) as u8)
}

/// A TCP connection from `client` to `server`.
pub struct Connection {
    client: usize,
    server: usize,
    client_port: u16,
    client_seq: u32,
    server_seq: u32,
    to_server: Delay,
    to_client: Delay,
    gaps: Exp<f64>,
}

/// One packet of an exchange: its digest, who sent it when and who received it when (true ns).
pub struct SimPacket {
    pub from: usize,
    pub to: usize,
    pub sent: f64,
    pub received: f64,
    pub event: PacketEvent,
}

/// A connection between every pair of nodes, each direction with its own minimum delay.
pub fn connections(config: &SimConfig, rng: &mut impl Rng) -> Vec<Connection> {
    let delay = |rng: &mut _| Delay {
        min_ns: (config.min_delay_us + rand::Rng::random_range(rng, 0.0..=config.asymmetry_us))
            * 1e3,
        mean_extra_ns: config.mean_extra_us * 1e3,
        tail_share: 0.02,
        max_ns: 20e6,
    };
    let mut out = Vec::new();
    for client in 0..config.nodes {
        for server in client + 1..config.nodes {
            out.push(Connection {
                client,
                server,
                client_port: 40_000 + (out.len() % 20_000) as u16,
                client_seq: rng.random(),
                server_seq: rng.random(),
                to_server: delay(rng),
                to_client: delay(rng),
                gaps: Exp::new(config.rate * 1e-9).expect("positive rate"),
            });
        }
    }
    out
}

impl Connection {
    /// Time until the next exchange starts (a Poisson process), in ns.
    pub fn next_start(&mut self, rng: &mut impl Rng) -> f64 {
        self.gaps.sample(rng).max(1.0)
    }

    /// A request (client → server), its response (server → client, acknowledging the request)
    /// and the client's ACK of the response, starting at true time `start`.
    pub fn exchange(&mut self, start: f64, rng: &mut impl Rng) -> [SimPacket; 3] {
        let request_len = rng.random_range(64..1400u16);
        let response_len = rng.random_range(64..1400u16);
        let request_at = start + self.to_server.sample(rng);
        let response_sent = request_at + rng.random_range(10e3..100e3);
        let response_at = response_sent + self.to_client.sample(rng);
        let ack_sent = response_at + rng.random_range(5e3..40e3);
        let ack_at = ack_sent + self.to_server.sample(rng);
        let (c, s) = (self.client, self.server);
        let request = self.segment(true, request_len, tcp_flag::ACK | tcp_flag::PSH);
        self.client_seq = self.client_seq.wrapping_add(u32::from(request_len));
        let response = self.segment(false, response_len, tcp_flag::ACK | tcp_flag::PSH);
        self.server_seq = self.server_seq.wrapping_add(u32::from(response_len));
        let ack = self.segment(true, 0, tcp_flag::ACK);
        [
            SimPacket {
                from: c,
                to: s,
                sent: start,
                received: request_at,
                event: request,
            },
            SimPacket {
                from: s,
                to: c,
                sent: response_sent,
                received: response_at,
                event: response,
            },
            SimPacket {
                from: c,
                to: s,
                sent: ack_sent,
                received: ack_at,
                event: ack,
            },
        ]
    }

    /// The digest of a segment with `payload` bytes, from the client or the server.
    fn segment(&self, from_client: bool, payload: u16, flags: u8) -> PacketEvent {
        let (from, to) = if from_client {
            (self.client, self.server)
        } else {
            (self.server, self.client)
        };
        let (source, dest) = if from_client {
            (self.client_port, 7000)
        } else {
            (7000, self.client_port)
        };
        let (seq, ack_seq) = if from_client {
            (self.client_seq, self.server_seq)
        } else {
            (self.server_seq, self.client_seq)
        };
        let mut saddr = [0u8; 16];
        let mut daddr = [0u8; 16];
        saddr[..4].copy_from_slice(&address(from).octets());
        daddr[..4].copy_from_slice(&address(to).octets());
        PacketEvent {
            kind: kind::TCP4,
            saddr,
            daddr,
            network_protocol: ETH_P_IP,
            tot_len: 20 + 32 + payload,
            source,
            dest,
            seq,
            ack_seq,
            transport_protocol: IPPROTO_TCP,
            ihl: 5,
            doff: 8,
            tcp_flags: flags,
            ..Default::default()
        }
    }
}
