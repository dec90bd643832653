//! The packet key: the fields of a [`PacketEvent`] record that identify a packet on both of its
//! ends, as eight words (built, hashed and compared in a handful of word operations).

use tsync_common::{PacketEvent, kind, tcp_flag};

use crate::matching::keys::Seen;
use crate::matching::live::KeyEq;

/// The hash of `e`'s packet key (both ends of a packet hash alike): for sampling keys.
#[inline]
pub(crate) fn key_hash(e: &PacketEvent) -> u64 {
    Key::of(e).hash()
}

/// The fields that identify a packet (LTTV's segment key, plus the UDP fields and the kind).
///
/// They are bytes 16..80 of the [`PacketEvent`] record — addresses, EtherType, IP total length,
/// ports, sequence and acknowledgment numbers, IP protocol, header lengths, TCP flags, UDP data and
/// length — read as eight words, with the TCP flags reduced to ACK, RST, SYN and FIN (PSH/URG may
/// differ between what is sent and what arrives after offloads, and the digest of the reference
/// never held them; LTTng's add-on digests, [`kind::TCP_ADDON`], keep them all) and the kind
/// stored in place of the record's flags and TTL. Those two are no part of the packet's identity:
/// a router lowers the TTL of the packet it forwards, and a tunnel's outer event carries the
/// inner packet's digest with the encapsulation flag; they are evidence of the packet's path
/// ([`super::passage`]). Building, hashing and
/// comparing a key is then a handful of word operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Key([u64; 8]);

pub(super) const KEY_FLAGS: u8 = tcp_flag::ACK | tcp_flag::RST | tcp_flag::SYN | tcp_flag::FIN;
/// Byte offset of the key in the record.
const KEY_START: usize = 16;
/// Word 6 holds bytes 64..72: protocol, ihl, doff, flags (byte 3), udp_data[..4].
const FLAGS_MASK: u64 = !((!KEY_FLAGS as u64) << 24);
/// Word 7 holds bytes 72..80: udp_data[4..], udp_len, flags and ttl (bytes 6, 7).
const RESERVED_MASK: u64 = 0x0000_FFFF_FFFF_FFFF;

const _: () = assert!(std::mem::offset_of!(PacketEvent, saddr) == KEY_START);
const _: () = assert!(std::mem::offset_of!(PacketEvent, tcp_flags) == 67);
const _: () = assert!(std::mem::offset_of!(PacketEvent, flags) == 78);
const _: () = assert!(std::mem::offset_of!(PacketEvent, ttl) == 79);

impl Key {
    #[inline]
    pub(super) fn of(e: &PacketEvent) -> Key {
        let b: &[u8] = bytemuck::bytes_of(e);
        let mut w = [0u64; 8];
        for (i, x) in w.iter_mut().enumerate() {
            let o = KEY_START + 8 * i;
            *x = u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        }
        // LTTng's add-on events carry no lengths: their PSH flag is what tells a data segment
        // from the pure ACK before it with the same numbers, and no offload sits between their
        // socket-level hooks, so they keep every flag (Trace Compass's key).
        w[6] &= if e.kind == kind::TCP_ADDON {
            u64::MAX
        } else {
            FLAGS_MASK
        };
        w[7] = (w[7] & RESERVED_MASK) | u64::from(e.kind) << 48;
        Key(w)
    }

    /// A fast multiplicative hash over the key's words.
    #[inline]
    pub(super) fn hash(&self) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let w = &self.0;
        // Two lanes for instruction-level parallelism, folded at the end.
        let mut h1 = w[0] ^ K;
        let mut h2 = w[4] ^ K.rotate_left(32);
        for i in 1..4 {
            h1 = (h1.rotate_left(23) ^ w[i]).wrapping_mul(K);
            h2 = (h2.rotate_left(23) ^ w[i + 4]).wrapping_mul(K);
        }
        let h = (h1 ^ h2.rotate_left(29)).wrapping_mul(K);
        h ^ (h >> 29)
    }

    fn kind(&self) -> u8 {
        (self.0[7] >> 48) as u8
    }

    /// Rebuilds the event record of one side.
    pub(super) fn event(&self, s: &Seen, dir: u8) -> PacketEvent {
        let mut e = PacketEvent::default();
        {
            let b: &mut [u8] = bytemuck::bytes_of_mut(&mut e);
            for (i, x) in self.0.iter().enumerate() {
                let o = KEY_START + 8 * i;
                b[o..o + 8].copy_from_slice(&x.to_le_bytes());
            }
        }
        e.kind = self.kind();
        e.flags = s.flags;
        e.ttl = s.ttl;
        e.tcp_flags = s.tcp_flags;
        e.ts_ns = s.time as u64;
        e.ifindex = s.ifindex;
        e.cpu = s.cpu;
        e.direction = dir;
        e
    }
}

impl Key {
    /// The key of `e` as [`KeyLanes`] build it.
    #[cfg(test)]
    pub(super) fn lanes_of(e: &PacketEvent) -> Key {
        KeyLanes::of(e).key()
    }

    /// The key with bit `bit` (of 512) flipped.
    #[cfg(test)]
    pub(super) fn with_bit_flipped(mut self, bit: usize) -> Key {
        self.0[bit / 64] ^= 1 << (bit % 64);
        self
    }
}

/// A key while its event is looked up: [`Key::of`] built in vector registers (four of SSE2's
/// 128-bit ones on x86_64). Eight 64-bit words do not fit beside the matcher's other state in
/// the general registers, so a key built there is spilled to the stack, then reloaded word by
/// word to be compared with the table's and again to be copied into it; in four vector registers
/// it is loaded from the record in four instructions, compared in a few more and stored in four.
#[derive(Clone, Copy)]
pub(super) struct KeyLanes(Lanes);

#[cfg(target_arch = "x86_64")]
type Lanes = [std::arch::x86_64::__m128i; 4];
#[cfg(not(target_arch = "x86_64"))]
type Lanes = Key;

#[cfg(target_arch = "x86_64")]
impl KeyLanes {
    #[inline(always)]
    pub(super) fn of(e: &PacketEvent) -> KeyLanes {
        use std::arch::x86_64::{__m128i, _mm_and_si128, _mm_insert_epi16, _mm_loadu_si128};
        let p = std::ptr::from_ref(e).cast::<u8>();
        // Words 6 and 7 as in `Key::of`: the TCP flags masked, flags and TTL replaced by the
        // kind (bytes 78 and 79 of the record are the last 16-bit lane).
        let masks = if e.kind == kind::TCP_ADDON {
            ADDON_MASKS
        } else {
            MASKS
        };
        // SAFETY: bytes KEY_START..KEY_START + 64 lie inside the record (asserted below), the
        // loads are unaligned ones, any 128 bits are a valid vector, and SSE2 (every intrinsic
        // here) is part of the x86_64 baseline.
        unsafe {
            let [a, b, c, d] =
                [0, 16, 32, 48].map(|o| _mm_loadu_si128(p.add(KEY_START + o).cast::<__m128i>()));
            let mask = std::mem::transmute::<[u64; 2], __m128i>(masks);
            let d = _mm_insert_epi16::<7>(_mm_and_si128(d, mask), i32::from(e.kind));
            KeyLanes([a, b, c, d])
        }
    }

    /// The key, to store.
    #[inline(always)]
    pub(super) fn key(&self) -> Key {
        // SAFETY: four 128-bit vectors are eight 64-bit words, any bits valid in both.
        Key(unsafe { std::mem::transmute::<Lanes, [u64; 8]>(self.0) })
    }
}

/// The masks of words 6 and 7 (see [`Key::of`]).
#[cfg(target_arch = "x86_64")]
const MASKS: [u64; 2] = [FLAGS_MASK, RESERVED_MASK];
#[cfg(target_arch = "x86_64")]
const ADDON_MASKS: [u64; 2] = [u64::MAX, RESERVED_MASK];
const _: () = assert!(KEY_START + 64 <= std::mem::size_of::<PacketEvent>());

#[cfg(target_arch = "x86_64")]
impl KeyEq<KeyLanes> for Key {
    #[inline(always)]
    fn key_eq(&self, other: &KeyLanes) -> bool {
        use std::arch::x86_64::{
            __m128i, _mm_and_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8,
        };
        let p = self.0.as_ptr().cast::<__m128i>();
        // SAFETY: unaligned loads of the key's 64 bytes; SSE2 is part of the x86_64 baseline.
        unsafe {
            let eq = |i: usize| _mm_cmpeq_epi8(_mm_loadu_si128(p.add(i)), other.0[i]);
            let all = _mm_and_si128(_mm_and_si128(eq(0), eq(1)), _mm_and_si128(eq(2), eq(3)));
            _mm_movemask_epi8(all) == 0xFFFF
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl KeyLanes {
    #[inline(always)]
    pub(super) fn of(e: &PacketEvent) -> KeyLanes {
        KeyLanes(Key::of(e))
    }

    #[inline(always)]
    pub(super) fn key(&self) -> Key {
        self.0
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl KeyEq<KeyLanes> for Key {
    #[inline(always)]
    fn key_eq(&self, other: &KeyLanes) -> bool {
        self.key_eq(&other.0)
    }
}

impl KeyEq for Key {
    #[inline]
    fn key_eq(&self, other: &Self) -> bool {
        // Branch-free: all eight words are compared (no call to memcmp).
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}
