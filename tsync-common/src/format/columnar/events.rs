//! Event chunks as columns.
//!
//! ```text
//! flows    varint F, then F flows in order of first appearance:
//!          kind u8 | direction u8 | transport_protocol u8 | address length u8 (4 or 16)
//!          | [version 5 on: flags u8] | ifindex u32 | network_protocol u16 | source u16
//!          | dest u16 | saddr | daddr
//! flow     per event, its flow's index: u8 when F ≤ 256, u16 when F ≤ 65536, else u32
//! time     per event, ts_ns − the previous event's ts_ns (the first: − 0), zigzag; version 3:
//!          varints, version 4 on: byte planes ([`TimeLayout`])
//! cpu      per event, cpu XOR its flow's last cpu: u8 if every cpu of the chunk is below 256,
//!          else u16
//! length   per event, tot_len XOR its flow's last tot_len, u16
//! offsets  per event, ihl and doff XOR its flow's last ones: (ihl | doff << 4) if every ihl and
//!          doff of the chunk is below 16, else ihl u8 | doff u8
//! flags    per event, tcp_flags XOR its flow's last tcp_flags, u8
//! ttl      version 5 on: per event, ttl XOR its flow's last ttl, u8
//! seq      per event, seq − its flow's expected next seq, zigzag varint (i32 difference)
//! ack      per event, ack_seq − its flow's expected ack, zigzag varint (i32 difference)
//! extras   version 5 on: for the events whose udp_data or udp_len is not zero: varint index
//!          gap, udp_data 8 | udp_len u16; versions 3 and 4: for those whose udp_data, udp_len,
//!          flags or ttl is not zero: varint index gap, udp_data 8 | udp_len u16 | flags u8
//!          | ttl u8 (the record's two `reserved` bytes then, zero as those agents wrote them)
//! ```
//!
//! Why version 5 stores `flags` in the flow table and `ttl` as a column of its own: the flags
//! (a tunnel's outer packet, [`crate::flag`]) are the same for every event of a flow in practice,
//! so they cost a byte per flow instead of a byte per event; a flow's TTL changes only when its
//! route does, so the XOR with the flow's last is zero but for a flow's first event in a chunk,
//! and the column compresses to almost nothing. In the extras, as versions 3 and 4 would have
//! them, every TCP event would carry 12 bytes of extras.
//!
//! Each part after the flow table is a section (its byte length, then its bytes); the length of
//! the cpu and offsets sections (one or two bytes per event) tells their width. Differences wrap
//! (`wrapping_sub`), so any event round-trips exactly, whatever its fields hold.
//!
//! The expectations follow TCP: a flow's next sequence number is its previous one plus the
//! previous segment's payload (plus one for SYN or FIN); its next acknowledgment is what the
//! node last saw of the reverse flow (same interface, addresses and ports swapped, the other
//! direction), which is what a receiver acknowledges, else the flow's previous acknowledgment.
//! Both only need events decoded before, so encoder and decoder compute the same expectation.
//! Anything not TCP expects the previous values unchanged. The other per-event fields are stored
//! XOR the flow's last value: mostly zero, which zstd compresses at little cost.
//!
//! Both sides go through the events once or twice, with the columns in separate buffers sized
//! beforehand: the agent pays this per event, the analyzer too (docs/format.md has the
//! instruction counts).

use super::flows::{FlowTable, Flows};
use super::{Column, put_section, put_varint, zigzag};
use crate::PacketEvent;

/// Largest number of columnar bytes one event can take: flow index 4, time 10, cpu 2, length 2,
/// offsets 2, flags 1, seq 5, ack 5, extras 5 + 12; plus its flow's entry if it is the first of
/// it (4 + 10 + 32). The reader refuses a chunk that claims to decompress to more than this per
/// event before allocating anything. Version 5 takes no more: time 8 (planes), ttl 1, extras
/// 5 + 10, its flow's entry 47.
pub const MAX_BYTES_PER_EVENT: usize = 4 + 10 + 2 + 2 + 2 + 1 + 5 + 5 + 17 + 46;
const _: () = assert!(4 + 8 + 2 + 2 + 2 + 1 + 1 + 5 + 5 + 15 + 47 <= MAX_BYTES_PER_EVENT);
/// Bytes of an encoded chunk besides its events: the flow count and eleven section lengths.
pub const MAX_FIXED_BYTES: usize = 12 * 10;

/// The sections of a chunk being encoded: fixed-width ones sized exactly beforehand (written
/// through iterators, without a length check per byte), varint ones sized for the worst case.
#[derive(Default)]
struct Columns {
    ids: Vec<u8>,
    /// Time differences as varints (version 3).
    times: Column,
    /// Time differences as byte planes (version 4 on).
    time_planes: Vec<u8>,
    cpus: Vec<u8>,
    lengths: Vec<u8>,
    offsets: Vec<u8>,
    flags: Vec<u8>,
    /// TTLs XOR the flow's last (written in every version, stored from version 5 on).
    ttls: Vec<u8>,
    seqs: Column,
    acks: Column,
    extras: Column,
}

impl Columns {
    /// The sections in the order of `layout`.
    fn all(&self, layout: Layout) -> impl Iterator<Item = &[u8]> {
        let time = match layout.time {
            TimeLayout::Varints => self.times.as_slice(),
            TimeLayout::Planes => &self.time_planes,
        };
        let ttls = match layout.flags_ttl {
            FlagsTtl::InExtras => None,
            FlagsTtl::Columns => Some(self.ttls.as_slice()),
        };
        [
            &self.ids[..],
            time,
            &self.cpus,
            &self.lengths,
            &self.offsets,
            &self.flags,
        ]
        .into_iter()
        .chain(ttls)
        .chain([
            self.seqs.as_slice(),
            self.acks.as_slice(),
            self.extras.as_slice(),
        ])
    }
}

/// Empties `column` and fills it with `len` zero bytes, keeping its allocation.
fn sized(column: &mut Vec<u8>, len: usize) {
    column.clear();
    column.resize(len, 0);
}

/// How the time differences of a chunk are stored: what the file's format version says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeLayout {
    /// Version 3: one zigzag varint per event.
    Varints,
    /// Version 4 on: the zigzag differences as W byte planes (every event's lowest byte, then
    /// every event's second byte, ...), W the fewest bytes that hold the chunk's largest. Both
    /// sides handle a plane as a run of bytes (vectorized), with no branch per event; zstd
    /// sees each byte position's values together (the high planes are mostly zero).
    Planes,
}

/// Where an event's `flags` and `ttl` are stored: what the file's format version says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagsTtl {
    /// Versions 3 and 4: in the extras, as the two bytes after `udp_len` (the record's
    /// `reserved` bytes then; every agent of those versions wrote zeros, and they read back as
    /// stored).
    InExtras,
    /// Version 5 on: `flags` in the flow table (one flow, one value: a flow whose events differ
    /// in it is two flows), `ttl` in a section of its own, XOR the flow's last.
    Columns,
}

/// What an event chunk's columns hold, by the file's format version (3 or later).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub time: TimeLayout,
    pub flags_ttl: FlagsTtl,
}

impl Layout {
    /// The layout of format `version` (3 or later).
    pub fn of_version(version: u32) -> Self {
        Layout {
            time: if version >= 4 {
                TimeLayout::Planes
            } else {
                TimeLayout::Varints
            },
            flags_ttl: if version >= 5 {
                FlagsTtl::Columns
            } else {
                FlagsTtl::InExtras
            },
        }
    }

    /// Whether the flow table holds each flow's `flags`.
    pub(super) fn flow_flags(self) -> bool {
        self.flags_ttl == FlagsTtl::Columns
    }
}

/// Encodes event chunks; keeps its buffers from chunk to chunk.
pub struct EventEncoder {
    layout: Layout,
    flows: FlowTable,
    ids: Vec<u32>,
    /// The zigzag time differences of the chunk (planes layout).
    deltas: Vec<u64>,
    columns: Columns,
}

impl EventEncoder {
    /// An encoder writing chunks in `layout`.
    pub fn new(layout: Layout) -> Self {
        EventEncoder {
            layout,
            flows: FlowTable::new(layout.flow_flags()),
            ids: Vec::new(),
            deltas: Vec::new(),
            columns: Columns::default(),
        }
    }

    /// Appends the columnar encoding of `events` to `out`.
    pub fn encode(&mut self, events: &[PacketEvent], out: &mut Vec<u8>) {
        let n = events.len();
        self.flows.clear();
        // Sized first and written in place: a push per event checked the capacity each time.
        self.ids.clear();
        self.ids.resize(n, 0);
        // One pass: the flows, and whether cpus and offsets fit their narrow widths.
        let (mut cpus, mut offsets) = (0u16, 0u8);
        for (id, e) in self.ids.iter_mut().zip(events) {
            *id = self.flows.id(e);
            cpus |= e.cpu;
            offsets |= e.ihl | e.doff;
        }
        let flow_count = self.flows.keys.len();
        let mut c = std::mem::take(&mut self.columns);
        let width = id_width(flow_count);
        match width {
            1 => c.ids.extend(self.ids.iter().map(|&id| id as u8)),
            2 => c
                .ids
                .extend(self.ids.iter().flat_map(|&id| (id as u16).to_le_bytes())),
            _ => c
                .ids
                .extend(self.ids.iter().flat_map(|&id| id.to_le_bytes())),
        }
        match self.layout.time {
            TimeLayout::Varints => time_varints(events, &mut c.times),
            TimeLayout::Planes => time_planes(events, &mut self.deltas, &mut c.time_planes),
        }
        let mut flows = Flows::new(&self.flows.keys, &self.flows.index);
        match (cpus < 256, offsets < 16) {
            (true, true) => self.rows::<1, 1>(events, &mut flows, &mut c),
            (true, false) => self.rows::<1, 2>(events, &mut flows, &mut c),
            (false, true) => self.rows::<2, 1>(events, &mut flows, &mut c),
            (false, false) => self.rows::<2, 2>(events, &mut flows, &mut c),
        }
        debug_assert_eq!(c.flags.len(), n);
        put_varint(out, flow_count as u64);
        for key in &self.flows.keys {
            key.put(out, self.layout.flow_flags());
        }
        for column in c.all(self.layout) {
            put_section(out, column);
        }
        c.ids.clear();
        self.columns = c;
    }

    /// Writes every per-event section but the flow index, for cpu and offsets sections of
    /// `CPU` and `OFFSETS` bytes per event: one pass over the events.
    fn rows<const CPU: usize, const OFFSETS: usize>(
        &self,
        events: &[PacketEvent],
        flows: &mut Flows,
        c: &mut Columns,
    ) {
        let n = events.len();
        sized(&mut c.cpus, CPU * n);
        sized(&mut c.lengths, 2 * n);
        sized(&mut c.offsets, OFFSETS * n);
        sized(&mut c.flags, n);
        sized(&mut c.ttls, n);
        c.seqs.start(5 * n);
        c.acks.start(5 * n);
        c.extras.start(22 * n);
        let rows = events
            .iter()
            .zip(&self.ids)
            .zip(c.cpus.chunks_exact_mut(CPU))
            .zip(c.lengths.chunks_exact_mut(2))
            .zip(c.offsets.chunks_exact_mut(OFFSETS))
            .zip(c.flags.iter_mut())
            .zip(c.ttls.iter_mut())
            .enumerate();
        let in_extras = self.layout.flags_ttl == FlagsTtl::InExtras;
        let mut extras_next = 0;
        for (i, ((((((e, &id), cpu), len), off), flag), ttl)) in rows {
            let id = id as usize;
            let x = flows.expected(id);
            let cpu_bits = (e.cpu ^ x.cpu).to_le_bytes();
            cpu.copy_from_slice(&cpu_bits[..CPU]);
            len.copy_from_slice(&(e.tot_len ^ x.tot_len).to_le_bytes());
            let (ihl, doff) = (e.ihl ^ x.ihl, e.doff ^ x.doff);
            if OFFSETS == 1 {
                off[0] = ihl | doff << 4;
            } else {
                off.copy_from_slice(&[ihl, doff][..OFFSETS]);
            }
            *flag = e.tcp_flags ^ x.tcp_flags;
            *ttl = e.ttl ^ x.ttl;
            c.seqs
                .varint(zigzag(i64::from(e.seq.wrapping_sub(x.next_seq) as i32)));
            c.acks
                .varint(zigzag(i64::from(e.ack_seq.wrapping_sub(x.ack) as i32)));
            flows.saw(id, e);
            let udp = e.udp_data != [0; 8] || e.udp_len != 0;
            if in_extras {
                if udp || e.flags != 0 || e.ttl != 0 {
                    c.extras.varint((i - extras_next) as u64);
                    extras_next = i + 1;
                    c.extras.bytes(extras_with_flags_ttl(e));
                }
            } else if udp {
                c.extras.varint((i - extras_next) as u64);
                extras_next = i + 1;
                c.extras.bytes(extras(e));
            }
        }
    }
}

/// An event's extras as version 5 stores them (udp_data, udp_len), built in registers and
/// written with one length check.
#[inline(always)]
fn extras(e: &PacketEvent) -> [u8; 10] {
    let mut b = [0u8; 10];
    b[..8].copy_from_slice(&e.udp_data);
    b[8..10].copy_from_slice(&e.udp_len.to_le_bytes());
    b
}

/// An event's extras as versions 3 and 4 store them: version 5's, then flags and ttl where the
/// record had its two reserved bytes.
#[inline(always)]
fn extras_with_flags_ttl(e: &PacketEvent) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..10].copy_from_slice(&extras(e));
    b[10] = e.flags;
    b[11] = e.ttl;
    b
}

/// The zigzag difference of each event's time from the one before (the first: from 0).
fn time_deltas(events: &[PacketEvent]) -> impl Iterator<Item = u64> + '_ {
    let previous = std::iter::once(0).chain(events.iter().map(|e| e.ts_ns));
    events
        .iter()
        .zip(previous)
        .map(|(e, p)| zigzag(e.ts_ns.wrapping_sub(p) as i64))
}

/// The time section of version 3: one varint per event.
fn time_varints(events: &[PacketEvent], out: &mut Column) {
    out.start(10 * events.len());
    for d in time_deltas(events) {
        out.varint(d);
    }
}

/// The time section of version 4: the differences as byte planes, as few as hold the largest.
fn time_planes(events: &[PacketEvent], deltas: &mut Vec<u64>, out: &mut Vec<u8>) {
    deltas.clear();
    deltas.extend(time_deltas(events));
    let largest = deltas.iter().fold(0, |a, &d| a | d);
    let width = (64 - (largest | 1).leading_zeros()).div_ceil(8);
    out.clear();
    for plane in 0..width {
        out.extend(deltas.iter().map(|&d| (d >> (8 * plane)) as u8));
    }
}

/// Bytes of a flow index in a chunk of `flows` flows.
pub(super) fn id_width(flows: usize) -> usize {
    match flows {
        0..=256 => 1,
        257..=65536 => 2,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_planes_are_as_few_as_the_largest_difference_needs() {
        let mut deltas = Vec::new();
        let mut out = Vec::new();
        let at = |ts: &[u64]| -> Vec<PacketEvent> {
            ts.iter()
                .map(|&ts_ns| PacketEvent {
                    ts_ns,
                    ..PacketEvent::default()
                })
                .collect()
        };
        time_planes(&at(&[0, 0, 0]), &mut deltas, &mut out);
        assert_eq!(out.len(), 3, "one plane even when all are zero");
        time_planes(&at(&[100, 40_000]), &mut deltas, &mut out);
        assert_eq!(out.len(), 2 * 3, "zigzag 79800 needs three bytes");
        time_planes(&at(&[1 << 62, 0]), &mut deltas, &mut out);
        assert_eq!(out.len(), 2 * 8);
    }
}
