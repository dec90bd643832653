//! **Text message inputs** have no events of their own, only messages. As the LTTV tool did,
//! each message is turned into two events of a TCP segment: a send on the sender's trace and a
//! receive on the receiver's, with addresses `10.0.0.(trace + 1)`, port 5000 on both sides, the
//! SYN flag and a per-sender sequence number (the sender's message count, in file order). These
//! synthesized events are numbered in each trace's time order (a send before a receive at the
//! same instant) and behave like recorded ones everywhere: CLC, evaluation and every export
//! format. They are held in memory (text inputs are small test cases); trace files are streamed.

use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, direction, kind, tcp_flag};

use crate::model::{EventRef, Message, MessageRef};

/// One synthesized event of a text-input trace.
#[derive(Clone, Copy, Debug)]
pub struct SyntheticEvent {
    /// The event, `ts_ns` = its local time.
    pub event: PacketEvent,
}

/// Port of both ends of a synthesized segment.
const SYNTHETIC_PORT: u16 = 5000;

/// The IPv4 address of a text-input trace: 10.0.0.0 + trace + 1 (10.0.0.1 for trace 0).
fn synthetic_addr(trace: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&(0x0a00_0000u32 + trace + 1).to_be_bytes());
    a
}

/// The synthesized segment of a text message (see the module doc), with the send direction.
fn synthetic_segment(m: &Message, seq: u32) -> PacketEvent {
    PacketEvent {
        ts_ns: m.send_ns.max(0) as u64,
        ifindex: 0,
        cpu: 0,
        direction: direction::SEND,
        kind: kind::TCP4,
        saddr: synthetic_addr(m.send_trace),
        daddr: synthetic_addr(m.recv_trace),
        network_protocol: ETH_P_IP,
        tot_len: 40,
        source: SYNTHETIC_PORT,
        dest: SYNTHETIC_PORT,
        seq,
        ack_seq: 0,
        transport_protocol: IPPROTO_TCP,
        ihl: 5,
        doff: 5,
        tcp_flags: tcp_flag::SYN,
        ..PacketEvent::default()
    }
}

/// Turns the text messages into per-trace events (time order, sends first at equal times) and
/// the messages into references to them.
pub(crate) fn synthesize_text_events(
    traces: usize,
    messages: &[Message],
) -> (Vec<Option<Vec<SyntheticEvent>>>, Vec<MessageRef>) {
    let mut synthetic: Vec<Option<Vec<SyntheticEvent>>> = vec![None; traces];
    // (local time, receive?, message) per trace, sorted below.
    let mut slots: Vec<Vec<(i64, bool, u32)>> = vec![Vec::new(); traces];
    for (k, m) in messages.iter().enumerate() {
        slots[m.send_trace as usize].push((m.send_ns, false, k as u32));
        slots[m.recv_trace as usize].push((m.recv_ns, true, k as u32));
    }
    let mut seq_of = vec![0u32; messages.len()];
    let mut next_seq = vec![0u32; traces];
    for (k, m) in messages.iter().enumerate() {
        let s = &mut next_seq[m.send_trace as usize];
        seq_of[k] = *s;
        *s = s.wrapping_add(1);
    }
    let mut send_ref = vec![0usize; messages.len()];
    let mut recv_ref = vec![0usize; messages.len()];
    for (trace, list) in slots.iter_mut().enumerate() {
        if list.is_empty() {
            continue;
        }
        list.sort_unstable();
        let mut events = Vec::with_capacity(list.len());
        for (index, &(t, is_recv, k)) in list.iter().enumerate() {
            let k = k as usize;
            let mut event = synthetic_segment(&messages[k], seq_of[k]);
            event.ts_ns = t.max(0) as u64;
            if is_recv {
                event.direction = direction::RECV;
                recv_ref[k] = index;
            } else {
                send_ref[k] = index;
            }
            events.push(SyntheticEvent { event });
        }
        synthetic[trace] = Some(events);
    }
    let refs = messages
        .iter()
        .enumerate()
        .map(|(k, m)| MessageRef {
            send: EventRef {
                trace: m.send_trace as usize,
                index: send_ref[k],
            },
            recv: EventRef {
                trace: m.recv_trace as usize,
                index: recv_ref[k],
            },
        })
        .collect();
    (synthetic, refs)
}
