//! The packets one trace's node forwarded: received, then sent on within [`STACKED_COPY_NS`],
//! with one digest (a router, a bridge, a NAT, a tunnel endpoint between its pods and the
//! wire). `info` shows how many there were, so that a user sees at once that a node forwards
//! its pods' traffic (what the matcher then follows from node to node).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tsync_common::{PacketEvent, direction};

use crate::matching::{STACKED_COPY_NS, key_hash};

/// Receives of the last [`STACKED_COPY_NS`], by key hash, to pair each send with a receive of
/// the same packet just before it. Bounded by the receives of that span.
#[derive(Default)]
pub struct Passages {
    /// Key hash → time of its latest receive not yet paired.
    recent: FxHashMap<u64, u64>,
    /// The same receives in time order, to forget them.
    order: VecDeque<(u64, u64)>,
    /// Packets received and sent on.
    pub forwarded: u64,
}

impl Passages {
    /// Takes the file's next event (in file order).
    pub fn add(&mut self, e: &PacketEvent) {
        let t = e.ts_ns;
        while let Some(&(old, hash)) = self.order.front() {
            if t.saturating_sub(old) <= STACKED_COPY_NS {
                break;
            }
            self.order.pop_front();
            if self.recent.get(&hash) == Some(&old) {
                self.recent.remove(&hash);
            }
        }
        let hash = key_hash(e);
        if e.direction == direction::RECV {
            self.recent.insert(hash, t);
            self.order.push_back((t, hash));
        } else if self.recent.remove(&hash).is_some() {
            // Once per packet: its further sends (copies on stacked devices) find no receive.
            self.forwarded += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: u64, dir: u8, seq: u32) -> PacketEvent {
        PacketEvent {
            ts_ns: t,
            direction: dir,
            kind: tsync_common::kind::TCP4,
            seq,
            ..PacketEvent::default()
        }
    }

    #[test]
    fn a_send_right_after_the_receive_of_the_same_packet_is_a_forward() {
        let mut p = Passages::default();
        for e in [
            ev(1_000, direction::RECV, 1),
            ev(4_000, direction::SEND, 1), // forwarded
            ev(5_000, direction::SEND, 1), // a copy of it on another device
            ev(6_000, direction::SEND, 2), // sent, never received
            ev(7_000, direction::RECV, 3),
            ev(7_000 + 2 * STACKED_COPY_NS, direction::SEND, 3), // too late: sent again
        ] {
            p.add(&e);
        }
        assert_eq!(p.forwarded, 1);
        assert!(p.recent.is_empty() && p.order.is_empty());
    }
}
