//! Event chunks as columns.
//!
//! ```text
//! flows    varint F, then F flows in order of first appearance:
//!          kind u8 | direction u8 | transport_protocol u8 | address length u8 (4 or 16)
//!          | ifindex u32 | network_protocol u16 | source u16 | dest u16 | saddr | daddr
//! flow     per event, its flow's index: u8 when F ≤ 256, u16 when F ≤ 65536, else u32
//! time     per event, ts_ns − the previous event's ts_ns (the first: − 0), zigzag varint
//! cpu      per event, cpu XOR its flow's last cpu: u8 if every cpu of the chunk is below 256,
//!          else u16
//! length   per event, tot_len XOR its flow's last tot_len, u16
//! offsets  per event, ihl and doff XOR its flow's last ones: (ihl | doff << 4) if every ihl and
//!          doff of the chunk is below 16, else ihl u8 | doff u8
//! flags    per event, tcp_flags XOR its flow's last tcp_flags, u8
//! seq      per event, seq − its flow's expected next seq, zigzag varint (i32 difference)
//! ack      per event, ack_seq − its flow's expected ack, zigzag varint (i32 difference)
//! extras   for the events whose udp_data, udp_len or reserved is not zero: varint index gap,
//!          udp_data 8 | udp_len u16 | reserved 2
//! ```
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

use super::flows::{Expect, FlowKey, FlowTable, Flows, FxMap};
use super::{Column, DecodeError, Section, put_section, put_varint, zigzag};
use crate::PacketEvent;

/// Largest number of columnar bytes one event can take: flow index 4, time 10, cpu 2, length 2,
/// offsets 2, flags 1, seq 5, ack 5, extras 5 + 12; plus its flow's entry if it is the first of
/// it (4 + 10 + 32). The reader refuses a chunk that claims to decompress to more than this per
/// event before allocating anything.
pub const MAX_BYTES_PER_EVENT: usize = 4 + 10 + 2 + 2 + 2 + 1 + 5 + 5 + 17 + 46;
/// Bytes of an encoded chunk besides its events: the flow count and ten section lengths.
pub const MAX_FIXED_BYTES: usize = 11 * 10;

/// The per-event sections.
#[derive(Default)]
struct Columns {
    ids: Column,
    times: Column,
    cpus: Column,
    lengths: Column,
    offsets: Column,
    flags: Column,
    seqs: Column,
    acks: Column,
    extras: Column,
}

impl Columns {
    fn all(&self) -> [&Column; 9] {
        [
            &self.ids,
            &self.times,
            &self.cpus,
            &self.lengths,
            &self.offsets,
            &self.flags,
            &self.seqs,
            &self.acks,
            &self.extras,
        ]
    }
}

/// Encodes event chunks; keeps its buffers from chunk to chunk.
#[derive(Default)]
pub struct EventEncoder {
    flows: FlowTable,
    ids: Vec<u32>,
    columns: Columns,
}

impl EventEncoder {
    /// Appends the columnar encoding of `events` to `out`.
    pub fn encode(&mut self, events: &[PacketEvent], out: &mut Vec<u8>) {
        let n = events.len();
        self.flows.clear();
        self.ids.clear();
        self.ids.extend(events.iter().map(|e| self.flows.id(e)));
        let flow_count = self.flows.keys.len();
        let narrow_cpu = events.iter().all(|e| e.cpu < 256);
        let packed_offsets = events.iter().all(|e| e.ihl < 16 && e.doff < 16);
        let mut flows = Flows::new(&self.flows.keys, &self.flows.index);

        let mut c = std::mem::take(&mut self.columns);
        let width = id_width(flow_count);
        c.ids.start(width * n);
        for &id in &self.ids {
            match width {
                1 => c.ids.byte(id as u8),
                2 => c.ids.bytes((id as u16).to_le_bytes()),
                _ => c.ids.bytes(id.to_le_bytes()),
            }
        }
        c.times.start(10 * n);
        let mut previous = 0u64;
        for e in events {
            c.times
                .varint(zigzag(e.ts_ns.wrapping_sub(previous) as i64));
            previous = e.ts_ns;
        }
        for (column, max) in [
            (&mut c.cpus, 2),
            (&mut c.lengths, 2),
            (&mut c.offsets, 2),
            (&mut c.flags, 1),
            (&mut c.seqs, 5),
            (&mut c.acks, 5),
            (&mut c.extras, 22),
        ] {
            column.start(max * n);
        }
        let mut extras_next = 0;
        for (i, (e, &id)) in events.iter().zip(&self.ids).enumerate() {
            let x = flows.expected(id as usize);
            let cpu = e.cpu ^ x.cpu;
            if narrow_cpu {
                c.cpus.byte(cpu as u8);
            } else {
                c.cpus.bytes(cpu.to_le_bytes());
            }
            c.lengths.bytes((e.tot_len ^ x.tot_len).to_le_bytes());
            let (ihl, doff) = (e.ihl ^ x.ihl, e.doff ^ x.doff);
            if packed_offsets {
                c.offsets.byte(ihl | doff << 4);
            } else {
                c.offsets.bytes([ihl, doff]);
            }
            c.flags.byte(e.tcp_flags ^ x.tcp_flags);
            c.seqs
                .varint(zigzag(i64::from(e.seq.wrapping_sub(x.next_seq) as i32)));
            c.acks
                .varint(zigzag(i64::from(e.ack_seq.wrapping_sub(x.ack) as i32)));
            flows.saw(id as usize, e);
            if e.udp_data != [0; 8] || e.udp_len != 0 || e.reserved != [0; 2] {
                c.extras.varint((i - extras_next) as u64);
                extras_next = i + 1;
                c.extras.bytes(e.udp_data);
                c.extras.bytes(e.udp_len.to_le_bytes());
                c.extras.bytes(e.reserved);
            }
        }
        put_varint(out, flow_count as u64);
        for key in &self.flows.keys {
            key.put(out);
        }
        for column in c.all() {
            put_section(out, column.as_slice());
        }
        self.columns = c;
    }
}

/// Bytes of a flow index in a chunk of `flows` flows.
fn id_width(flows: usize) -> usize {
    match flows {
        0..=256 => 1,
        257..=65536 => 2,
        _ => 4,
    }
}

/// Decodes the `count` events of an encoded chunk into `out` (replacing its contents).
pub fn decode(bytes: &[u8], count: usize, out: &mut Vec<PacketEvent>) -> Result<(), DecodeError> {
    let mut chunk = Section::whole(bytes, "event chunk");
    let f = chunk.varint()?;
    if f > count as u64 || (f == 0 && count > 0) {
        return Err(format!("{f} flows for {count} events"));
    }
    let mut keys = Vec::with_capacity(f as usize);
    let mut index = FxMap::default();
    for i in 0..f as u32 {
        let key = FlowKey::get(&mut chunk)?;
        if index.insert(key, i).is_some() {
            return Err("a flow listed twice".into());
        }
        keys.push(key);
    }
    let ids = flow_ids(chunk.section("flow")?, count, keys.len())?;
    let mut times = chunk.section("time")?;
    let cpus = fixed(chunk.section("cpu")?, count, &[1, 2])?;
    let lengths = fixed(chunk.section("length")?, count, &[2])?;
    let offsets = fixed(chunk.section("offsets")?, count, &[1, 2])?;
    let flags = fixed(chunk.section("flags")?, count, &[1])?;
    let mut seqs = chunk.section("seq")?;
    let mut acks = chunk.section("ack")?;
    let mut extras = chunk.section("extras")?;
    chunk.finish()?;

    out.clear();
    let templates: Vec<PacketEvent> = keys.iter().map(FlowKey::template).collect();
    out.extend(ids.iter().map(|&id| templates[id as usize]));
    let mut previous = 0u64;
    for e in out.iter_mut() {
        let dt = times.try_signed().ok_or_else(|| times.varint_error())?;
        previous = previous.wrapping_add(dt as u64);
        e.ts_ns = previous;
    }
    times.finish()?;
    let fields = Fixed {
        cpus,
        lengths,
        offsets,
        flags,
    };
    let mut flows = Flows::new(&keys, &index);
    match (cpus.len() == count, offsets.len() == count) {
        (true, true) => decode_fields::<1, 1>(out, &ids, &fields, &mut flows, &mut seqs, &mut acks),
        (true, false) => {
            decode_fields::<1, 2>(out, &ids, &fields, &mut flows, &mut seqs, &mut acks)
        }
        (false, true) => {
            decode_fields::<2, 1>(out, &ids, &fields, &mut flows, &mut seqs, &mut acks)
        }
        (false, false) => {
            decode_fields::<2, 2>(out, &ids, &fields, &mut flows, &mut seqs, &mut acks)
        }
    }?;
    seqs.finish()?;
    acks.finish()?;

    let mut next = 0usize;
    while !extras.is_empty() {
        let at = usize::try_from(extras.varint()?)
            .ok()
            .and_then(|gap| next.checked_add(gap))
            .filter(|&at| at < count)
            .ok_or("extras for an event past the chunk's end")?;
        let e = &mut out[at];
        e.udp_data = extras.array()?;
        e.udp_len = extras.u16()?;
        e.reserved = extras.array()?;
        next = at + 1;
    }
    Ok(())
}

/// The fixed-width sections, checked for length.
struct Fixed<'a> {
    cpus: &'a [u8],
    lengths: &'a [u8],
    offsets: &'a [u8],
    flags: &'a [u8],
}

/// Fills in the fields that depend on the flow's last event, for cpu and offsets sections of
/// `CPU` and `OFFSETS` bytes per event (one loop per width, without a branch per event).
fn decode_fields<const CPU: usize, const OFFSETS: usize>(
    out: &mut [PacketEvent],
    ids: &[u32],
    f: &Fixed<'_>,
    flows: &mut Flows,
    seqs: &mut Section<'_>,
    acks: &mut Section<'_>,
) -> Result<(), DecodeError> {
    let rows = out
        .iter_mut()
        .zip(ids)
        .zip(f.cpus.chunks_exact(CPU))
        .zip(f.lengths.chunks_exact(2))
        .zip(f.offsets.chunks_exact(OFFSETS))
        .zip(f.flags);
    for (((((e, &id), cpu), len), offsets), &flags) in rows {
        let x: Expect = flows.expected(id as usize);
        e.cpu = x.cpu
            ^ if CPU == 1 {
                u16::from(cpu[0])
            } else {
                u16::from_le_bytes([cpu[0], cpu[1]])
            };
        e.tot_len = x.tot_len ^ u16::from_le_bytes([len[0], len[1]]);
        let (ihl, doff) = if OFFSETS == 1 {
            (offsets[0] & 0xf, offsets[0] >> 4)
        } else {
            (offsets[0], offsets[1])
        };
        (e.ihl, e.doff) = (x.ihl ^ ihl, x.doff ^ doff);
        e.tcp_flags = x.tcp_flags ^ flags;
        let dseq = seqs.try_signed().ok_or_else(|| seqs.varint_error())?;
        let dack = acks.try_signed().ok_or_else(|| acks.varint_error())?;
        e.seq = x.next_seq.wrapping_add(dseq as u32);
        e.ack_seq = x.ack.wrapping_add(dack as u32);
        flows.saw(id as usize, e);
    }
    Ok(())
}

/// The flow index of every event, checked against the number of flows.
fn flow_ids(s: Section<'_>, count: usize, flows: usize) -> Result<Vec<u32>, DecodeError> {
    let width = id_width(flows);
    let bytes = fixed(s, count, &[width])?;
    let ids: Vec<u32> = match width {
        1 => bytes.iter().map(|&b| u32::from(b)).collect(),
        2 => bytes
            .chunks_exact(2)
            .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]])))
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    };
    if ids.iter().any(|&id| id as usize >= flows) {
        return Err("flow index out of range".into());
    }
    Ok(ids)
}

/// The bytes of a fixed-width column of `count` fields, whose width must be one of `widths`.
fn fixed<'a>(s: Section<'a>, count: usize, widths: &[usize]) -> Result<&'a [u8], DecodeError> {
    if widths.iter().any(|&w| s.bytes.len() == count * w) {
        Ok(s.bytes)
    } else {
        Err(format!(
            "{} section of {} bytes for {count} events",
            s.what,
            s.bytes.len()
        ))
    }
}
