//! The flows of an event chunk: what an event shares with the events before it in the same
//! flow (interned once per chunk), and what the flow's last event predicts of its next one.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use rustc_hash::FxHasher;

use super::{DecodeError, Section};
use crate::{PacketEvent, tcp_flag};

pub(super) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Everything an event shares with the other events of its flow, packed into six words so that
/// hashing and comparing it costs a few instructions (the encoder does both for every event):
/// the source and destination addresses (two words each), then `ifindex | network_protocol <<
/// 32 | source << 48`, then `dest | direction << 16 | kind << 24 | transport_protocol << 32 |
/// flags << 40` (the flags from format version 5 on; [`FlowTable`] clears them for older ones).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FlowKey([u64; 6]);

impl PartialEq for FlowKey {
    /// Branch-free: the derived comparison of arrays calls `memcmp`.
    #[inline(always)]
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.0, &other.0);
        (a[0] ^ b[0])
            | (a[1] ^ b[1])
            | (a[2] ^ b[2])
            | (a[3] ^ b[3])
            | (a[4] ^ b[4])
            | (a[5] ^ b[5])
            == 0
    }
}

impl Eq for FlowKey {}

impl Hash for FlowKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.mix());
    }
}

/// Where a flow's `flags` sit in the key's last word.
const FLAGS_SHIFT: u32 = 40;

fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
}

impl FlowKey {
    /// The six words mixed into one (for the hash map and the cache in front of it).
    #[inline(always)]
    fn mix(&self) -> u64 {
        let w = &self.0;
        let a = (w[0] ^ w[2].rotate_left(17) ^ w[4].rotate_left(31))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let b = (w[1] ^ w[3].rotate_left(23) ^ w[5].rotate_left(41))
            .wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        a ^ b ^ (a >> 29)
    }

    #[inline(always)]
    pub(super) fn of(e: &PacketEvent) -> Self {
        FlowKey([
            word(&e.saddr[..8]),
            word(&e.saddr[8..]),
            word(&e.daddr[..8]),
            word(&e.daddr[8..]),
            u64::from(e.ifindex) | u64::from(e.network_protocol) << 32 | u64::from(e.source) << 48,
            u64::from(e.dest)
                | u64::from(e.direction) << 16
                | u64::from(e.kind) << 24
                | u64::from(e.transport_protocol) << 32
                | u64::from(e.flags) << FLAGS_SHIFT,
        ])
    }

    /// The flow the other way: what this node saw of the peer's packets on the same interface.
    pub(super) fn reverse(&self) -> Self {
        let mut e = self.template();
        std::mem::swap(&mut e.saddr, &mut e.daddr);
        std::mem::swap(&mut e.source, &mut e.dest);
        e.direction ^= 1;
        FlowKey::of(&e)
    }

    /// An event of this flow with every other field zero.
    pub(super) fn template(&self) -> PacketEvent {
        let w = &self.0;
        let mut saddr = [0u8; 16];
        saddr[..8].copy_from_slice(&w[0].to_le_bytes());
        saddr[8..].copy_from_slice(&w[1].to_le_bytes());
        let mut daddr = [0u8; 16];
        daddr[..8].copy_from_slice(&w[2].to_le_bytes());
        daddr[8..].copy_from_slice(&w[3].to_le_bytes());
        PacketEvent {
            saddr,
            daddr,
            ifindex: w[4] as u32,
            network_protocol: (w[4] >> 32) as u16,
            source: (w[4] >> 48) as u16,
            dest: w[5] as u16,
            direction: (w[5] >> 16) as u8,
            kind: (w[5] >> 24) as u8,
            transport_protocol: (w[5] >> 32) as u8,
            flags: (w[5] >> FLAGS_SHIFT) as u8,
            ..PacketEvent::default()
        }
    }

    /// Writes the flow's entry of the flow table; with `flags` (version 5 on) the flow's flags
    /// after the address length.
    pub(super) fn put(&self, out: &mut Vec<u8>, flags: bool) {
        let e = self.template();
        let short = e.saddr[4..] == [0; 12] && e.daddr[4..] == [0; 12];
        let len = if short { 4 } else { 16 };
        out.extend_from_slice(&[e.kind, e.direction, e.transport_protocol, len as u8]);
        if flags {
            out.push(e.flags);
        }
        out.extend_from_slice(&e.ifindex.to_le_bytes());
        out.extend_from_slice(&e.network_protocol.to_le_bytes());
        out.extend_from_slice(&e.source.to_le_bytes());
        out.extend_from_slice(&e.dest.to_le_bytes());
        out.extend_from_slice(&e.saddr[..len]);
        out.extend_from_slice(&e.daddr[..len]);
    }

    /// Reads an entry [`put`](Self::put) wrote, with or without `flags`.
    pub(super) fn get(s: &mut Section<'_>, flags: bool) -> Result<Self, DecodeError> {
        let [kind, direction, transport_protocol, len] = s.array()?;
        let flags = if flags { s.array::<1>()?[0] } else { 0 };
        let ifindex = s.u32()?;
        let network_protocol = s.u16()?;
        let (source, dest) = (s.u16()?, s.u16()?);
        let len = match len {
            4 | 16 => len as usize,
            other => return Err(format!("flow with an address length of {other}")),
        };
        let mut e = PacketEvent {
            ifindex,
            network_protocol,
            source,
            dest,
            direction,
            kind,
            transport_protocol,
            flags,
            ..PacketEvent::default()
        };
        e.saddr[..len].copy_from_slice(s.bytes(len)?);
        e.daddr[..len].copy_from_slice(s.bytes(len)?);
        Ok(FlowKey::of(&e))
    }
}

/// What the next event of a flow is expected to carry: the fields of the flow's last event,
/// and the sequence number after it.
#[derive(Clone, Copy, Default)]
pub(super) struct Expect {
    /// The sequence number after the last segment.
    pub(super) next_seq: u32,
    pub(super) ack: u32,
    pub(super) cpu: u16,
    pub(super) tot_len: u16,
    pub(super) ihl: u8,
    pub(super) doff: u8,
    pub(super) tcp_flags: u8,
    pub(super) ttl: u8,
    /// Whether an event of the flow was seen (before, the reverse flow predicts nothing).
    seen: bool,
    /// Index of the reverse flow, if the chunk has it.
    reverse: Option<u32>,
}

/// The flows of a chunk and what each expects next; the same for encoder and decoder.
pub(super) struct Flows {
    expect: Vec<Expect>,
}

impl Flows {
    /// The flows of `keys`, each linked to its reverse flow if `index` has it.
    pub(super) fn new(keys: &[FlowKey], index: &FxMap<FlowKey, u32>) -> Self {
        Flows {
            expect: keys
                .iter()
                .map(|k| Expect {
                    reverse: index.get(&k.reverse()).copied(),
                    ..Expect::default()
                })
                .collect(),
        }
    }

    /// What the next event of `flow` is expected to carry; its `ack` is the reverse flow's
    /// next sequence number once that flow was seen.
    #[inline(always)]
    pub(super) fn expected(&self, flow: usize) -> Expect {
        let mut own = self.expect[flow];
        if let Some(r) = own.reverse {
            let reverse = &self.expect[r as usize];
            if reverse.seen {
                own.ack = reverse.next_seq;
            }
        }
        own
    }

    /// Takes in the event just coded.
    #[inline(always)]
    pub(super) fn saw(&mut self, flow: usize, e: &PacketEvent) {
        let advance = if e.is_tcp() {
            e.tcp_payload_len().wrapping_add(u32::from(
                e.tcp_flags & (tcp_flag::SYN | tcp_flag::FIN) != 0,
            ))
        } else {
            0
        };
        let x = &mut self.expect[flow];
        x.next_seq = e.seq.wrapping_add(advance);
        x.ack = e.ack_seq;
        x.cpu = e.cpu;
        x.tot_len = e.tot_len;
        x.ihl = e.ihl;
        x.doff = e.doff;
        x.tcp_flags = e.tcp_flags;
        x.ttl = e.ttl;
        x.seen = true;
    }
}

/// Numbers the flows of a chunk in order of first appearance. A direct-mapped cache of recent
/// flows sits in front of the hash map: most events belong to one of a few flows, and a cache
/// hit costs a mix of six words and one comparison.
pub(super) struct FlowTable {
    pub(super) index: FxMap<FlowKey, u32>,
    pub(super) keys: Vec<FlowKey>,
    /// Cached (key, index, chunk number); an entry of an earlier chunk is stale.
    cache: Vec<(FlowKey, u32, u64)>,
    chunk: u64,
    /// Applied to each key's last word: clears the flags where the flow table does not hold
    /// them (versions 3 and 4 store them per event), so that two events differing only in them
    /// are one flow, as those versions' readers expect.
    last_word_mask: u64,
}

const CACHE_SLOTS: usize = 256;

impl FlowTable {
    /// A table of flows that include their flags if `flags` (version 5 on).
    pub(super) fn new(flags: bool) -> Self {
        FlowTable {
            index: FxMap::default(),
            keys: Vec::new(),
            cache: Vec::new(),
            chunk: 0,
            last_word_mask: if flags {
                u64::MAX
            } else {
                !(0xff << FLAGS_SHIFT)
            },
        }
    }

    /// Forgets the flows of the last chunk.
    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.keys.clear();
        self.chunk += 1;
        if self.cache.is_empty() {
            self.cache = vec![(FlowKey::default(), 0, 0); CACHE_SLOTS];
        }
    }

    /// The index of `e`'s flow, numbering it if it is new.
    #[inline(always)]
    pub(super) fn id(&mut self, e: &PacketEvent) -> u32 {
        let mut key = FlowKey::of(e);
        key.0[5] &= self.last_word_mask;
        let slot = (key.mix() >> 56) as usize % CACHE_SLOTS;
        let (cached, id, chunk) = self.cache[slot];
        if chunk == self.chunk && cached == key {
            return id;
        }
        let next = self.keys.len() as u32;
        let id = *self.index.entry(key).or_insert(next);
        if id == next {
            self.keys.push(key);
        }
        self.cache[slot] = (key, id, self.chunk);
        id
    }
}
