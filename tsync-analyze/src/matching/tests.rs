use super::*;

fn sample() -> PacketEvent {
    PacketEvent {
        ts_ns: 123_456_789,
        ifindex: 7,
        cpu: 3,
        direction: direction::RECV,
        kind: tsync_common::kind::UDP4,
        saddr: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
        network_protocol: tsync_common::ETH_P_IP,
        tot_len: 1500,
        source: 4000,
        dest: 5000,
        seq: 0xDEAD_BEEF,
        ack_seq: 0x0102_0304,
        transport_protocol: tsync_common::IPPROTO_UDP,
        ihl: 5,
        doff: 8,
        tcp_flags: tcp_flag::ACK | tcp_flag::PSH,
        udp_data: [1, 2, 3, 4, 5, 6, 7, 8],
        udp_len: 1480,
        flags: 0,
        ttl: 64,
    }
}

#[test]
fn key_rebuilds_the_event() {
    let e = sample();
    let s = Seen::of(&e, e.ts_ns as i64, 0, 0);
    assert_eq!(Key::of(&e).event(&s, e.direction), e);
}

#[test]
fn key_ignores_psh_and_urg_but_nothing_else() {
    let e = sample();
    let mut f = e;
    f.tcp_flags = tcp_flag::ACK | tcp_flag::URG;
    f.ts_ns += 5;
    f.direction = direction::SEND;
    f.cpu = 0;
    assert_eq!(Key::of(&e), Key::of(&f));
    assert_eq!(Key::of(&e).hash(), Key::of(&f).hash());
    let changes: [fn(&mut PacketEvent); 12] = [
        |e| e.saddr[15] = 1,
        |e| e.daddr[0] = 11,
        |e| e.tot_len += 1,
        |e| e.source += 1,
        |e| e.dest += 1,
        |e| e.seq += 1,
        |e| e.ack_seq += 1,
        |e| e.doff += 1,
        |e| e.tcp_flags |= tcp_flag::SYN,
        |e| e.udp_data[7] = 0,
        |e| e.udp_len += 1,
        |e| e.kind = tsync_common::kind::TCP4,
    ];
    for (i, change) in changes.iter().enumerate() {
        let mut g = e;
        change(&mut g);
        assert_ne!(Key::of(&e), Key::of(&g), "change {i}");
    }
}

#[test]
fn keys_built_in_vector_registers_are_the_plain_ones() {
    use crate::matching::live::KeyEq;
    let e = sample();
    let variants: [fn(&mut PacketEvent); 6] = [
        |_| {},
        |e| e.tcp_flags = 0xFF,
        |e| {
            e.flags = 0xAB;
            e.ttl = 0xCD;
        },
        |e| e.kind = tsync_common::kind::TCP_ADDON,
        |e| (e.kind, e.tcp_flags) = (tsync_common::kind::TCP_ADDON, 0xFF),
        |e| (e.udp_data, e.udp_len) = ([0xFF; 8], u16::MAX),
    ];
    for (i, vary) in variants.iter().enumerate() {
        let mut f = e;
        vary(&mut f);
        assert_eq!(Key::lanes_of(&f), Key::of(&f), "variant {i}");
        let lanes = KeyLanes::of(&f);
        assert!(Key::of(&f).key_eq(&lanes), "variant {i}");
        // Every byte of the key counts in the comparison.
        for byte in 0..64 {
            let k = Key::of(&f).with_bit_flipped(8 * byte);
            assert!(!k.key_eq(&lanes), "variant {i}, byte {byte}");
        }
    }
}

#[test]
fn copies_on_stacked_devices_are_merged_and_retransmissions_stay_ambiguous() {
    const US: i64 = 1_000;
    // Node 0 sends through a bridge (ifindex 5) and its port (2); node 1 receives on its NIC
    // (3) and then on a VLAN device on top of it (7). Key `seq` per packet.
    let ev = |seq: u32, trace: u32, send: bool, t: i64, ifindex: u32| {
        let (tr, mut e) = event(3 * u64::from(seq), trace, send, t as u64, 0);
        e.ifindex = ifindex;
        (tr, e, t)
    };
    let inputs = vec![
        // Packet 1: two copies on each side, all within microseconds: one message.
        ev(1, 0, true, 1_000 * US, 5),
        ev(1, 0, true, 1_000 * US + 3, 2),
        ev(1, 1, false, 1_050 * US, 3),
        ev(1, 1, false, 1_050 * US + 4, 7),
        // Packet 2: sent, then retransmitted through the same stack 200 µs later: ambiguous.
        ev(2, 0, true, 2_000 * US, 5),
        ev(2, 0, true, 2_000 * US + 3, 2),
        ev(2, 0, true, 2_200 * US, 5),
        ev(2, 0, true, 2_200 * US + 3, 2),
        ev(2, 1, false, 2_250 * US, 3),
        // Packet 3: another interface, but 5 ms later: a second transmission, ambiguous.
        ev(3, 0, true, 3_000 * US, 5),
        ev(3, 0, true, 8_000 * US, 2),
        ev(3, 1, false, 8_050 * US, 3),
        // Packet 4: the same digest sent by two nodes is no stacked copy: ambiguous.
        ev(4, 0, true, 9_000 * US, 5),
        ev(4, 2, true, 9_000 * US + 1, 6),
        ev(4, 1, false, 9_050 * US, 3),
    ];
    let window = 1_000_000_000;
    let (msgs, st) = optimized(&inputs, window);
    assert_eq!(reference(&inputs, window), (msgs.clone(), st.clone()));
    assert_eq!(st.matched, 1);
    assert_eq!(st.ambiguous, 3);
    // Packets 2 and 3 repeated on node 0; packet 4 has two first nodes.
    assert_eq!((st.ambiguous_repeated, st.ambiguous_order), (2, 1));
    // Packet 1's second copies.
    assert_eq!(st.stacked_copies, 2);
    // The last send (nearest the wire) and the earliest receive are kept.
    let (m, _, s, r) = &msgs[0];
    assert_eq!((m.send_ns, m.recv_ns), (1_000 * US + 3, 1_050 * US));
    assert_eq!((s.ifindex, r.ifindex), (2, 3));
}

/// What a sink saw, in order.
#[derive(Default)]
struct Recorder {
    seen: Vec<(Message, Origin, PacketEvent, PacketEvent)>,
}

impl MessageSink for Recorder {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        let (s, r) = (
            m.send_event.expect("events wanted"),
            m.recv_event.expect("wanted"),
        );
        self.seen.push((m.message, m.origin, *s, *r));
    }
}

/// One input event: trace, record, aligned time.
type Input = (u32, PacketEvent, i64);

type Outcome = (Vec<(Message, Origin, PacketEvent, PacketEvent)>, MatchStats);

/// The matching rules written as plainly as possible: live keys in a list searched linearly,
/// the key being the record without time, interface, CPU, direction, PSH/URG, flags and TTL, all
/// of a key's events kept. The optimized matcher must do exactly the same. (Keys seen more than
/// once on a side are resolved by the same [`passage::resolve`], tested on its own.)
fn reference(inputs: &[Input], window: i64) -> Outcome {
    struct Live {
        key: PacketEvent,
        first_seen: i64,
        events: Vec<(u32, PacketEvent, u64)>,
    }
    fn key_of(e: &PacketEvent) -> PacketEvent {
        PacketEvent {
            ts_ns: 0,
            ifindex: 0,
            cpu: 0,
            direction: 0,
            tcp_flags: e.tcp_flags & KEY_FLAGS,
            flags: 0,
            ttl: 0,
            ..*e
        }
    }
    let mut out = Vec::new();
    let mut stats = MatchStats::default();
    let decide = |l: Live, out: &mut Vec<_>, stats: &mut MatchStats| {
        let side = |dir: u8| {
            l.events
                .iter()
                .filter(move |(_, e, _)| e.direction == dir)
                .copied()
        };
        let (sends, recvs): (Vec<_>, Vec<_>) = (
            side(direction::SEND).collect(),
            side(direction::RECV).collect(),
        );
        let mut message = |(st, se, si): (u32, PacketEvent, u64),
                           (rt, re, ri): (u32, PacketEvent, u64),
                           stats: &mut MatchStats| {
            stats.matched += 1;
            out.push((
                Message {
                    send_trace: st,
                    recv_trace: rt,
                    send_ns: se.ts_ns as i64,
                    recv_ns: re.ts_ns as i64,
                },
                Origin::Events {
                    send_index: si,
                    recv_index: ri,
                },
                se,
                re,
            ));
        };
        if sends.len() <= 1 && recvs.len() <= 1 {
            if sends.is_empty() || recvs.is_empty() {
                stats.unmatched += 1;
            } else if sends[0].0 == recvs[0].0 {
                stats.same_trace += 1;
            } else {
                message(sends[0], recvs[0], stats);
            }
            return;
        }
        let original = |s: &Seen| {
            *l.events
                .iter()
                .find(|(t, _, i)| *t == s.trace && *i == s.index)
                .expect("an event of the key")
        };
        let mut seen: Vec<Seen> = l
            .events
            .iter()
            .map(|&(trace, e, index)| Seen::of(&e, e.ts_ns as i64, index, trace))
            .collect();
        let resolution = passage::resolve(
            &mut seen,
            &l.key.saddr,
            &l.key.daddr,
            &keys::Recordings::default(),
        );
        match resolution {
            passage::Resolution::Local { send, recv, copies } => {
                stats.stacked_copies += u64::from(copies);
                match (send, recv) {
                    (Some(s), Some(r)) if s.trace == r.trace => stats.same_trace += 1,
                    (Some(s), Some(r)) => message(original(&s), original(&r), stats),
                    _ => stats.unmatched += 1,
                }
            }
            passage::Resolution::Path {
                hops,
                copies,
                forwarded,
            } => {
                stats.stacked_copies += u64::from(copies);
                stats.forwarded += u64::from(forwarded);
                for (s, r) in &hops {
                    message(original(s), original(r), stats);
                }
            }
            passage::Resolution::Ambiguous(cause) => {
                stats.ambiguous += 1;
                match cause {
                    passage::Cause::Repeated => stats.ambiguous_repeated += 1,
                    passage::Cause::Order => stats.ambiguous_order += 1,
                }
                stats.unmatched += l.events.len() as u64;
            }
        }
    };
    let mut live: Vec<Live> = Vec::new();
    let mut counts = [0u64; 4];
    for &(trace, e, aligned) in inputs {
        stats.events += 1;
        while !live.is_empty() && live[0].first_seen + window < aligned {
            decide(live.remove(0), &mut out, &mut stats);
        }
        let index = counts[trace as usize];
        counts[trace as usize] += 1;
        let k = key_of(&e);
        match live.iter_mut().position(|l| l.key == k) {
            Some(i) => live[i].events.push((trace, e, index)),
            None => live.push(Live {
                key: k,
                first_seen: aligned,
                events: vec![(trace, e, index)],
            }),
        }
    }
    for l in live {
        decide(l, &mut out, &mut stats);
    }
    (out, stats)
}

fn optimized(inputs: &[Input], window: i64) -> Outcome {
    // The reference knows the exact rules only: no pairing by sequence range.
    let mut m = Matcher::new(&MatchOptions {
        window_ns: window,
        exchanges: false,
        by_range: false,
        threads: 1,
    });
    let mut sink = Recorder::default();
    let mut counts = [0u64; 4];
    for &(trace, e, aligned) in inputs {
        let index = counts[trace as usize];
        counts[trace as usize] += 1;
        m.event(trace, &e, e.ts_ns as i64, aligned, index, &mut sink);
    }
    let stats = m.finish(&mut sink);
    (sink.seen, stats)
}

/// A packet from a small pool (so that keys repeat), seen on a trace in a direction.
fn event(packet: u64, trace: u32, send: bool, ts: u64, noise: u64) -> (u32, PacketEvent) {
    let mut e = sample();
    e.kind = if packet.is_multiple_of(3) {
        tsync_common::kind::TCP4
    } else {
        tsync_common::kind::UDP4
    };
    e.seq = (packet / 3) as u32;
    e.source = 4000 + (packet % 7) as u16;
    // What the key ignores varies freely.
    e.tcp_flags = tcp_flag::ACK | if noise & 1 != 0 { tcp_flag::PSH } else { 0 };
    e.cpu = (noise >> 1) as u16 & 3;
    e.ifindex = (noise >> 3) as u32 & 3;
    // The encapsulation flag and the namespace's tag vary freely too; the TTL falls by one per
    // trace, as if each trace's node routed: evidence that orders passages.
    e.flags = (noise >> 5) as u8 & 1 | ((noise >> 6) as u8 & 1) << 1;
    e.ttl = 64 - trace as u8;
    e.ts_ns = ts;
    e.direction = if send {
        direction::SEND
    } else {
        direction::RECV
    };
    (trace, e)
}

proptest::proptest! {
    #[test]
    fn optimized_matcher_equals_the_reference(
        window in 1i64..60,
        raw in proptest::collection::vec(
            (0u64..40, 0u32..3, proptest::bool::ANY, 0i64..8, -3i64..4, 0u64..64), 0..400),
    ) {
        // Aligned times mostly increase (steps 0..8) with occasional steps back (reordering
        // across files); local times are the aligned ones plus a per-trace offset. Two traces
        // alike make loopback; a pool of 40 packets makes duplicates and retransmissions.
        let mut t = 1000i64;
        let inputs: Vec<Input> = raw
            .iter()
            .map(|&(packet, trace, send, step, back, noise)| {
                t += if back < 0 { back } else { step };
                let (tr, e) = event(packet, trace, send, (t + 77 * trace as i64) as u64, noise);
                (tr, e, t)
            })
            .collect();
        let (a, sa) = optimized(&inputs, window);
        let (b, sb) = reference(&inputs, window);
        proptest::prop_assert_eq!(sa, sb);
        proptest::prop_assert_eq!(a, b);
    }
}

#[test]
fn optimized_matcher_equals_the_reference_with_many_live_keys() {
    // Thousands of live keys: the index grows several times and wraps around.
    let mut rng = tsync_sim::SplitMix64::new(11);
    let mut t = 0i64;
    let inputs: Vec<Input> = (0..12_000)
        .map(|_| {
            t += rng.below(3) as i64;
            let (tr, e) = event(
                rng.below(9_000),
                rng.below(3) as u32,
                rng.below(2) == 0,
                t as u64,
                rng.below(64),
            );
            (tr, e, t)
        })
        .collect();
    for window in [50, 2_000, 20_000] {
        let (a, sa) = optimized(&inputs, window);
        let (b, sb) = reference(&inputs, window);
        assert_eq!(sa, sb, "window {window}");
        assert_eq!(a, b, "window {window}");
        if window == 20_000 {
            // Everything in one window: every outcome occurs.
            assert!(
                sa.matched > 100
                    && sa.ambiguous > 100
                    && sa.same_trace > 100
                    && sa.stacked_copies > 100,
                "{sa:?}"
            );
        }
    }
}

/// A TCP/IPv4 segment of the flow 10.0.0.1:4000 → 10.0.0.2:5000 (or back), `len` payload bytes
/// from `seq`, seen at `ts` on `trace`.
fn segment(trace: u32, send: bool, forward: bool, seq: u32, len: u16, ts: u64) -> Input {
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let mut e = PacketEvent {
        ts_ns: ts,
        direction: if send {
            direction::SEND
        } else {
            direction::RECV
        },
        kind: tsync_common::kind::TCP4,
        network_protocol: tsync_common::ETH_P_IP,
        transport_protocol: tsync_common::IPPROTO_TCP,
        tot_len: 40 + len,
        ihl: 5,
        doff: 5,
        seq,
        ack_seq: 77,
        tcp_flags: tcp_flag::ACK,
        source: 4000,
        dest: 5000,
        ..PacketEvent::default()
    };
    let (s, d) = if forward { (a, b) } else { (b, a) };
    e.saddr[..4].copy_from_slice(&s);
    e.daddr[..4].copy_from_slice(&d);
    if !forward {
        (e.source, e.dest) = (5000, 4000);
    }
    (trace, e, ts as i64)
}

fn by_range(inputs: &[Input], on: bool) -> Outcome {
    let mut m = Matcher::new(&MatchOptions {
        window_ns: 1_000_000,
        exchanges: false,
        by_range: on,
        threads: 1,
    });
    let mut sink = Recorder::default();
    let mut counts = [0u64; 4];
    for &(trace, e, aligned) in inputs {
        let index = counts[trace as usize];
        counts[trace as usize] += 1;
        m.event(trace, &e, e.ts_ns as i64, aligned, index, &mut sink);
    }
    let stats = m.finish(&mut sink);
    (sink.seen, stats)
}

fn times(o: &Outcome) -> Vec<(i64, i64)> {
    let mut t: Vec<_> = o.0.iter().map(|m| (m.0.send_ns, m.0.recv_ns)).collect();
    t.sort();
    t
}

#[test]
fn a_tso_super_packet_pairs_with_each_segment_received() {
    // One 2896-byte send (TSO/GSO), received as two 1448-byte segments, and an exact pair.
    let inputs = [
        segment(0, true, true, 1000, 2896, 100),
        segment(0, true, true, 3896, 100, 110),
        segment(1, false, true, 1000, 1448, 150),
        segment(1, false, true, 2448, 1448, 160),
        segment(1, false, true, 3896, 100, 170),
    ];
    let on = by_range(&inputs, true);
    assert_eq!(times(&on), [(100, 150), (100, 160), (110, 170)]);
    assert_eq!(
        (on.1.matched, on.1.range_matched, on.1.unmatched),
        (3, 2, 0)
    );
    // The events rebuilt are the ones recorded.
    let (m, o, s, r) = on.0.iter().find(|m| m.0.recv_ns == 160).unwrap();
    assert_eq!((m.send_trace, m.recv_trace), (0, 1));
    assert_eq!(
        *o,
        Origin::Events {
            send_index: 0,
            recv_index: 1
        }
    );
    assert_eq!(
        (s.seq, s.tot_len, r.seq, r.tot_len),
        (1000, 2936, 2448, 1488)
    );
    let off = by_range(&inputs, false);
    assert_eq!(times(&off), [(110, 170)]);
    assert_eq!(
        (off.1.matched, off.1.range_matched, off.1.unmatched),
        (1, 0, 3)
    );
}

#[test]
fn a_gro_merged_receive_pairs_with_each_segment_sent() {
    let inputs = [
        segment(2, true, false, 50, 1448, 100),
        segment(2, true, false, 1498, 1448, 101),
        segment(0, false, false, 50, 2896, 200),
    ];
    let o = by_range(&inputs, true);
    assert_eq!(times(&o), [(100, 200), (101, 200)]);
    assert_eq!((o.1.matched, o.1.range_matched, o.1.unmatched), (2, 2, 0));
    assert!(
        o.0.iter()
            .all(|m| m.0.send_trace == 2 && m.0.recv_trace == 0)
    );
}

#[test]
fn bytes_sent_or_received_twice_are_never_paired() {
    // A super-packet and a later retransmission of its second half (cut otherwise), received
    // merged: the reception may come from either send, so nothing is paired.
    let mut merged = segment(1, false, true, 0, 2896, 250);
    // GRO keeps the last segment's acknowledgment: not the super-packet's digest.
    merged.1.ack_seq += 1;
    let resent = [
        segment(0, true, true, 0, 2896, 100),
        segment(0, true, true, 1448, 1448, 300),
        merged,
    ];
    let o = by_range(&resent, true);
    assert!(o.0.is_empty());
    assert_eq!((o.1.matched, o.1.unmatched), (0, 3));
    // The same send received twice (a duplicate, cut two ways).
    let duplicated = [
        segment(0, true, true, 0, 2896, 100),
        segment(1, false, true, 0, 1448, 150),
        segment(1, false, true, 0, 2000, 190),
    ];
    let o = by_range(&duplicated, true);
    assert!(o.0.is_empty());
    // An exact duplicate on one side (an ambiguous key) covers its bytes twice: the super-packet
    // that overlaps them is not paired with it, nor with anything else there.
    let ambiguous = [
        segment(0, true, true, 0, 1448, 100),
        segment(0, true, true, 0, 1448, 120),
        segment(1, false, true, 0, 2896, 200),
        segment(0, true, true, 1448, 1448, 101),
    ];
    let o = by_range(&ambiguous, true);
    assert_eq!(times(&o), [(101, 200)]);
    assert_eq!((o.1.ambiguous, o.1.unmatched), (1, 2));
}

#[test]
fn range_pairs_need_two_traces_one_window_and_the_same_flow() {
    let inputs = [
        // Loopback: both sides on trace 0.
        segment(0, true, true, 0, 2896, 100),
        segment(0, false, true, 0, 1448, 150),
        // The reverse flow's bytes are other bytes.
        segment(1, false, false, 0, 1448, 160),
        // Too late: more than a window after the send.
        segment(1, false, true, 1448, 1448, 5_000_000),
    ];
    let o = by_range(&inputs, true);
    assert!(o.0.is_empty());
    assert_eq!(o.1.unmatched, 4);
}

#[test]
fn ranges_follow_the_sequence_number_around_its_wrap() {
    let start = u32::MAX - 99;
    let inputs = [
        segment(0, true, true, start, 1448, 100),
        segment(0, true, true, start.wrapping_add(1448), 1448, 101),
        segment(1, false, true, start, 2896, 200),
    ];
    let o = by_range(&inputs, true);
    assert_eq!(times(&o), [(100, 200), (101, 200)]);
}
