//! Simulated TCP traffic with real header digests, so that the analyzer matches and pairs the
//! packets as it does captured ones: the simulator's request/response exchanges
//! ([`Connection`]), and the fast workloads' one-way data segments with cumulative ACKs
//! ([`Flows`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::net::Ipv4Addr;

use rand::Rng;
use rand_distr::{Distribution, Exp};
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, kind, tcp_flag};

use crate::network::{Delay, DelayTail};
use crate::simulation::SimConfig;

/// IPv4 address of simulated node (or trace) `k`.
pub fn address(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, (k / 250) as u8, (k % 250 + 1) as u8)
}

/// The digest of an IPv4 TCP segment from node `from` to node `to` with `payload` bytes and a
/// header of `doff` 32-bit words (5 without options). Nodes are one hop apart: the segment
/// arrives with the TTL it was sent with, Linux's default.
#[allow(clippy::too_many_arguments)]
fn segment(
    from: usize,
    to: usize,
    ports: (u16, u16),
    seq: u32,
    ack_seq: u32,
    payload: u16,
    doff: u8,
    flags: u8,
) -> PacketEvent {
    let mut saddr = [0u8; 16];
    let mut daddr = [0u8; 16];
    saddr[..4].copy_from_slice(&address(from).octets());
    daddr[..4].copy_from_slice(&address(to).octets());
    PacketEvent {
        kind: kind::TCP4,
        saddr,
        daddr,
        network_protocol: ETH_P_IP,
        tot_len: 20 + 4 * u16::from(doff) + payload,
        source: ports.0,
        dest: ports.1,
        seq,
        ack_seq,
        transport_protocol: IPPROTO_TCP,
        ihl: 5,
        doff,
        tcp_flags: flags,
        ttl: DEFAULT_TTL,
        ..Default::default()
    }
}

/// Linux's default IPv4 TTL (`net.ipv4.ip_default_ttl`).
const DEFAULT_TTL: u8 = 64;

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
    /// Sending node.
    pub from: usize,
    /// Receiving node.
    pub to: usize,
    /// True send time, ns.
    pub sent: f64,
    /// True arrival time, ns.
    pub received: f64,
    /// The digest (time, direction, interface and CPU filled in per event).
    pub event: PacketEvent,
}

/// A connection between every pair of nodes, each direction with its own minimum delay.
pub fn connections(config: &SimConfig, rng: &mut impl Rng) -> Vec<Connection> {
    let delay = |rng: &mut _| Delay {
        min_ns: (config.min_delay_us + rand::Rng::random_range(rng, 0.0..=config.asymmetry_us))
            * 1e3,
        tail: DelayTail::Mixed {
            mean_ns: config.mean_extra_us * 1e3,
            heavy_share: 0.02,
            shape: 1.5,
        },
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
        let (c, s) = (self.client, self.server);
        let (c_seq, s_seq) = (self.client_seq, self.server_seq);
        if from_client {
            segment(
                c,
                s,
                (self.client_port, 7000),
                c_seq,
                s_seq,
                payload,
                8,
                flags,
            )
        } else {
            segment(
                s,
                c,
                (7000, self.client_port),
                s_seq,
                c_seq,
                payload,
                8,
                flags,
            )
        }
    }
}

/// One TCP connection per linked pair of traces carrying 100-byte data segments both ways, each
/// acknowledging what the sender has received of the other direction by then: cumulative ACKs,
/// so that the matcher's ACK rule finds exchanges.
#[derive(Default)]
pub struct Flows(HashMap<(u32, u32), Flow>);

#[derive(Default)]
struct Flow {
    /// Next sequence number per direction (0: low→high trace, 1: high→low).
    next_seq: [u32; 2],
    /// Bytes of each direction delivered so far, and arrivals not yet delivered (min-heap of
    /// true arrival time and the sequence number they complete).
    delivered: [u32; 2],
    arrivals: [BinaryHeap<Reverse<(u64, u32)>>; 2],
}

impl Flows {
    /// The segment trace `s` sends to trace `r` at true time `sent`, arriving at `arrives`.
    pub fn segment(&mut self, s: u32, r: u32, sent: f64, arrives: f64) -> PacketEvent {
        const PAYLOAD: u16 = 100;
        let key = (s.min(r), s.max(r));
        let dir = usize::from(s > r);
        let back = 1 - dir;
        let flow = self.0.entry(key).or_default();
        // Deliver what the sender has received of the other direction by now.
        while flow.arrivals[back]
            .peek()
            .is_some_and(|a| a.0.0 <= sent as u64)
        {
            let Reverse((_, end)) = flow.arrivals[back].pop().expect("peeked");
            if end.wrapping_sub(flow.delivered[back]) as i32 > 0 {
                flow.delivered[back] = end;
            }
        }
        let port = |d: usize| 40000 + (key.0 as u16) * 2 + d as u16;
        let event = segment(
            s as usize,
            r as usize,
            (port(dir), port(back)),
            flow.next_seq[dir],
            flow.delivered[back],
            PAYLOAD,
            5,
            tcp_flag::ACK | tcp_flag::PSH,
        );
        flow.next_seq[dir] = flow.next_seq[dir].wrapping_add(u32::from(PAYLOAD));
        flow.arrivals[dir].push(Reverse((arrives as u64, flow.next_seq[dir])));
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn an_exchange_is_request_response_ack_in_time_and_sequence_order() {
        let config = SimConfig::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut conns = connections(&config, &mut rng);
        assert_eq!(conns.len(), config.nodes * (config.nodes - 1) / 2);
        let c = &mut conns[0];
        let mut start = 1e9;
        for _ in 0..1000 {
            let [req, resp, ack] = c.exchange(start, &mut rng);
            for p in [&req, &resp, &ack] {
                let floor = config.min_delay_us * 1e3;
                assert!(p.received - p.sent >= floor && p.received - p.sent <= 20e6);
            }
            // The response leaves after the request arrived, the ACK after the response did.
            assert!(resp.sent > req.received && ack.sent > resp.received);
            assert_eq!((req.from, req.to, resp.from, resp.to), (0, 1, 1, 0));
            // The response acknowledges the whole request; the ACK the whole response.
            let req_len = u32::from(req.event.tot_len - 52);
            assert_eq!(resp.event.ack_seq, req.event.seq.wrapping_add(req_len));
            let resp_len = u32::from(resp.event.tot_len - 52);
            assert_eq!(ack.event.ack_seq, resp.event.seq.wrapping_add(resp_len));
            assert_eq!(ack.event.seq, resp.event.ack_seq);
            start = ack.received + c.next_start(&mut rng);
        }
    }

    #[test]
    fn flows_acknowledge_only_what_has_arrived() {
        let mut flows = Flows::default();
        // 0 → 1 at t = 0 arriving at 10; 1 → 0 at 5 (nothing arrived yet) and at 20 (it has).
        let a = flows.segment(0, 1, 0.0, 10.0);
        let b = flows.segment(1, 0, 5.0, 15.0);
        let c = flows.segment(1, 0, 20.0, 30.0);
        assert_eq!((a.seq, b.ack_seq, c.ack_seq), (0, 0, 100));
        assert_eq!((b.seq, c.seq), (0, 100));
        assert_eq!((a.source, a.dest), (b.dest, b.source));
        assert_eq!(&a.saddr[..4], &address(0).octets());
    }
}
