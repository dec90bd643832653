//! Decoding of event chunks ([`super::events`] describes the layout): the analyzer's hot path,
//! run for every event of every trace file it reads.
//!
//! Why it is built the way it is (instruction counts in docs/format.md#measurements): each flow
//! keeps its last decoded event whole ([`Last`]), so that an event is that copy with the columns'
//! few fields put in and is written out once, in one pass over the events; the time differences
//! are gathered from their byte planes in a pass of their own that has no dependency from one
//! event to the next (the compiler vectorizes it), leaving a single add per event in the main
//! pass; and the acknowledgment a flow expects is kept up to date by the events of its reverse
//! flow as they are decoded, so reading it costs a load, not a lookup and a test. The decoder's
//! buffers live from chunk to chunk.

use super::events::{FlagsTtl, Layout, TimeLayout, id_width};
use super::flows::{FlowKey, FxMap};
use super::{DecodeError, Section, unzigzag};
use crate::{PacketEvent, tcp_flag};

/// A flow's state while its chunk is decoded: what its next event is coded against.
#[derive(Clone, Copy, Default)]
struct Last {
    /// The flow's template: its fields, every other one zero; each event starts as a copy.
    template: PacketEvent,
    /// The sequence number after the last segment.
    next_seq: u32,
    /// The acknowledgment number expected next: the reverse flow's next sequence number once
    /// that flow was seen (it writes it here), else this flow's last acknowledgment.
    ack: u32,
    /// The last event's fields that the next one's are stored XOR.
    cpu: u16,
    tot_len: u16,
    ihl: u8,
    doff: u8,
    tcp_flags: u8,
    ttl: u8,
    /// How its segments move the sequence number ([`Advance`]).
    advance: Advance,
    /// Whether the reverse flow was seen (then `ack` is its to write).
    reverse_seen: bool,
    /// Index of the reverse flow, or of the spare slot after the chunk's flows when the chunk
    /// does not have it (writing there changes nothing that is read).
    reverse: u32,
}

/// Decodes event chunks, keeping its buffers from chunk to chunk.
pub struct EventDecoder {
    layout: Layout,
    keys: Vec<FlowKey>,
    index: FxMap<FlowKey, u32>,
    ids: Vec<u32>,
    /// The events' times.
    times: Vec<u64>,
    flows: Vec<Last>,
    /// Zeros standing in for the ttl section of versions before 5, which have none: the main
    /// pass then has one shape for every version.
    no_ttls: Vec<u8>,
}

impl EventDecoder {
    /// A decoder of chunks in `layout`.
    pub fn new(layout: Layout) -> Self {
        EventDecoder {
            layout,
            keys: Vec::new(),
            index: FxMap::default(),
            ids: Vec::new(),
            times: Vec::new(),
            flows: Vec::new(),
            no_ttls: Vec::new(),
        }
    }

    /// Decodes the `count` events of an encoded chunk into `out` (replacing its contents); on an
    /// error `out` holds nothing meaningful.
    pub fn decode(
        &mut self,
        bytes: &[u8],
        count: usize,
        out: &mut Vec<PacketEvent>,
    ) -> Result<(), DecodeError> {
        let mut chunk = Section::whole(bytes, "event chunk");
        self.read_flows(&mut chunk, count)?;
        flow_ids(
            chunk.section("flow")?,
            count,
            self.keys.len(),
            &mut self.ids,
        )?;
        let times = chunk.section("time")?;
        let cpus = fixed(chunk.section("cpu")?, count, &[1, 2])?;
        let lengths = fixed(chunk.section("length")?, count, &[2])?;
        let offsets = fixed(chunk.section("offsets")?, count, &[1, 2])?;
        let flags = fixed(chunk.section("flags")?, count, &[1])?;
        let ttls = match self.layout.flags_ttl {
            FlagsTtl::Columns => Some(fixed(chunk.section("ttl")?, count, &[1])?),
            FlagsTtl::InExtras => None,
        };
        let mut seqs = chunk.section("seq")?;
        let mut acks = chunk.section("ack")?;
        let extras = chunk.section("extras")?;
        chunk.finish()?;

        match self.layout.time {
            TimeLayout::Varints => time_varints(times, count, &mut self.times)?,
            TimeLayout::Planes => time_planes(times.bytes, count, &mut self.times)?,
        }
        self.link_flows();
        let ttls = match ttls {
            Some(ttls) => ttls,
            None => {
                self.no_ttls.resize(count, 0);
                &self.no_ttls[..count]
            }
        };
        let f = Fixed {
            cpus,
            lengths,
            offsets,
            flags,
            ttls,
        };
        let mut rows = Rows {
            ids: &self.ids,
            times: &self.times,
            flows: &mut self.flows,
            seqs: &mut seqs,
            acks: &mut acks,
        };
        let bad = match (cpus.len() == count, offsets.len() == count) {
            (true, true) => rows.decode::<1, 1>(&f, out),
            (true, false) => rows.decode::<1, 2>(&f, out),
            (false, true) => rows.decode::<2, 1>(&f, out),
            (false, false) => rows.decode::<2, 2>(&f, out),
        };
        // A section whose varint failed stays at it: it says why.
        match bad {
            Some(Varint::Seq) => return Err(seqs.varint_error()),
            Some(Varint::Ack) => return Err(acks.varint_error()),
            None => {}
        }
        seqs.finish()?;
        acks.finish()?;
        put_extras(extras, self.layout.flags_ttl, out)
    }

    /// Reads the flow table into `keys` and `index`.
    fn read_flows(&mut self, chunk: &mut Section<'_>, count: usize) -> Result<(), DecodeError> {
        let f = chunk.varint()?;
        if f > count as u64 || (f == 0 && count > 0) {
            return Err(format!("{f} flows for {count} events"));
        }
        self.keys.clear();
        self.index.clear();
        for i in 0..f as u32 {
            let key = FlowKey::get(chunk, self.layout.flow_flags())?;
            if self.index.insert(key, i).is_some() {
                return Err("a flow listed twice".into());
            }
            self.keys.push(key);
        }
        Ok(())
    }

    /// Sets up each flow's state: its template, and its reverse flow (else the spare slot).
    fn link_flows(&mut self) {
        let spare = self.keys.len() as u32;
        self.flows.clear();
        let index = &self.index;
        self.flows.extend(
            self.keys
                .iter()
                .chain(std::iter::once(&FlowKey::default()))
                .map(|k| Last {
                    template: k.template(),
                    advance: Advance::of(k.template().kind),
                    reverse: index.get(&k.reverse()).copied().unwrap_or(spare),
                    ..Last::default()
                }),
        );
    }
}

/// The fixed-width sections, checked for length.
struct Fixed<'a> {
    cpus: &'a [u8],
    lengths: &'a [u8],
    offsets: &'a [u8],
    flags: &'a [u8],
    ttls: &'a [u8],
}

/// Which varint of an event could not be read.
#[derive(Clone, Copy)]
enum Varint {
    Seq,
    Ack,
}

/// What the main pass reads and updates besides the fixed-width sections.
struct Rows<'a, 's> {
    ids: &'a [u32],
    /// Per event: its time.
    times: &'a [u64],
    flows: &'a mut [Last],
    seqs: &'a mut Section<'s>,
    acks: &'a mut Section<'s>,
}

impl Rows<'_, '_> {
    /// Fills `out` with the events in one pass, for cpu and offsets sections of `CPU` and
    /// `OFFSETS` bytes per event (one loop per width, without a branch per event on them).
    /// Returns the first varint that could not be read, if one could not (`out` then holds
    /// garbage; the loop goes on without a branch out of it).
    fn decode<const CPU: usize, const OFFSETS: usize>(
        &mut self,
        f: &Fixed<'_>,
        out: &mut Vec<PacketEvent>,
    ) -> Option<Varint> {
        let mut bad = None;
        let flows = &mut *self.flows;
        // The cursors are copied here and put back at the end, so that the loop keeps them in
        // registers instead of writing them back to memory after every varint.
        let (mut seqs, mut acks) = (*self.seqs, *self.acks);
        // Every field of every event is written below: no need to zero what is kept.
        let n = self.ids.len();
        out.resize(n, PacketEvent::default());
        // Every column cut to the events' count (as arrays of its width), so that the loop
        // indexes them all with one counter and no bounds check.
        let out = &mut out[..n];
        let (ids, times, flags) = (&self.ids[..n], &self.times[..n], &f.flags[..n]);
        let ttls = &f.ttls[..n];
        let cpus = &f.cpus.as_chunks::<CPU>().0[..n];
        let lengths = &f.lengths.as_chunks::<2>().0[..n];
        let offsets = &f.offsets.as_chunks::<OFFSETS>().0[..n];
        for i in 0..n {
            let (e, id, time, cpu, len) = (&mut out[i], ids[i], times[i], cpus[i], lengths[i]);
            let (offsets, flags, ttl) = (offsets[i], flags[i], ttls[i]);
            let last = &mut flows[id as usize];
            *e = last.template;
            e.ts_ns = time;
            e.cpu = last.cpu
                ^ if CPU == 1 {
                    u16::from(cpu[0])
                } else {
                    u16::from_le_bytes([cpu[0], cpu[1]])
                };
            e.tot_len = last.tot_len ^ u16::from_le_bytes([len[0], len[1]]);
            if OFFSETS == 1 {
                e.ihl = last.ihl ^ (offsets[0] & 0xf);
                e.doff = last.doff ^ (offsets[0] >> 4);
            } else {
                e.ihl = last.ihl ^ offsets[0];
                e.doff = last.doff ^ offsets[1];
            }
            e.tcp_flags = last.tcp_flags ^ flags;
            e.ttl = last.ttl ^ ttl;
            let dseq = seqs.try_signed().unwrap_or_else(|| {
                bad = bad.or(Some(Varint::Seq));
                0
            });
            let dack = acks.try_signed().unwrap_or_else(|| {
                bad = bad.or(Some(Varint::Ack));
                0
            });
            e.seq = last.next_seq.wrapping_add(dseq as u32);
            e.ack_seq = last.ack.wrapping_add(dack as u32);
            let next_seq = e.seq.wrapping_add(last.advance.of_segment(e));
            last.next_seq = next_seq;
            if !last.reverse_seen {
                last.ack = e.ack_seq;
            }
            (last.cpu, last.tot_len) = (e.cpu, e.tot_len);
            (last.ihl, last.doff, last.tcp_flags) = (e.ihl, e.doff, e.tcp_flags);
            last.ttl = e.ttl;
            let reverse = &mut flows[last.reverse as usize];
            reverse.ack = next_seq;
            reverse.reverse_seen = true;
        }
        (*self.seqs, *self.acks) = (seqs, acks);
        bad
    }
}

/// How far a segment moves its flow's sequence number: its payload
/// ([`PacketEvent::tcp_payload_len`]), plus one for SYN or FIN; nothing for anything but TCP.
/// The encoder's expectation ([`super::flows::Flows::saw`]), with what depends on the flow's kind
/// worked out once per flow: no branch per event.
#[derive(Clone, Copy, Default)]
struct Advance {
    /// All ones for TCP, else zero.
    tcp: u32,
    /// The IP header's fixed length: 40 for IPv6, else 0 (the header length field counts).
    fixed: u32,
    /// Bytes per unit of the header length field: 0 for IPv6, else 4.
    ihl_unit: u32,
}

impl Advance {
    fn of(kind: u8) -> Self {
        let tcp = kind == crate::kind::TCP4 || kind == crate::kind::TCP6;
        let v6 = kind == crate::kind::TCP6;
        Advance {
            tcp: if tcp { u32::MAX } else { 0 },
            fixed: if v6 { 40 } else { 0 },
            ihl_unit: if v6 { 0 } else { 4 },
        }
    }

    #[inline(always)]
    fn of_segment(self, e: &PacketEvent) -> u32 {
        let headers = self.fixed + self.ihl_unit * u32::from(e.ihl) + 4 * u32::from(e.doff);
        let payload = u32::from(e.tot_len).saturating_sub(headers);
        let syn_fin = u32::from(e.tcp_flags & (tcp_flag::SYN | tcp_flag::FIN) != 0);
        (payload + syn_fin) & self.tcp
    }
}

/// Sets the udp_data and udp_len fields of the events the extras section names, and where the
/// layout keeps them there (versions 3 and 4) their flags and ttl.
fn put_extras(
    mut extras: Section<'_>,
    flags_ttl: FlagsTtl,
    out: &mut [PacketEvent],
) -> Result<(), DecodeError> {
    let mut next = 0usize;
    while !extras.is_empty() {
        let at = usize::try_from(extras.varint()?)
            .ok()
            .and_then(|gap| next.checked_add(gap))
            .filter(|&at| at < out.len())
            .ok_or("extras for an event past the chunk's end")?;
        let e = &mut out[at];
        e.udp_data = extras.array()?;
        e.udp_len = extras.u16()?;
        if flags_ttl == FlagsTtl::InExtras {
            [e.flags, e.ttl] = extras.array()?;
        }
        next = at + 1;
    }
    Ok(())
}

/// The flow index of every event into `ids`, checked against the number of flows.
fn flow_ids(
    s: Section<'_>,
    count: usize,
    flows: usize,
    ids: &mut Vec<u32>,
) -> Result<(), DecodeError> {
    let width = id_width(flows);
    let bytes = fixed(s, count, &[width])?;
    ids.clear();
    match width {
        1 => ids.extend(bytes.iter().map(|&b| u32::from(b))),
        2 => ids.extend(
            bytes
                .chunks_exact(2)
                .map(|b| u32::from(u16::from_le_bytes([b[0], b[1]]))),
        ),
        _ => ids.extend(
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        ),
    }
    if ids.iter().any(|&id| id as usize >= flows) {
        return Err("flow index out of range".into());
    }
    Ok(())
}

/// Version 3's time section: one zigzag varint per event, into `out` as the times.
fn time_varints(
    mut times: Section<'_>,
    count: usize,
    out: &mut Vec<u64>,
) -> Result<(), DecodeError> {
    out.clear();
    let mut previous = 0u64;
    for _ in 0..count {
        let dt = times.try_signed().ok_or_else(|| times.varint_error())?;
        previous = previous.wrapping_add(dt as u64);
        out.push(previous);
    }
    times.finish()
}

/// Version 4's time section of byte planes, into `times` as the times.
pub(super) fn time_planes(
    bytes: &[u8],
    count: usize,
    times: &mut Vec<u64>,
) -> Result<(), DecodeError> {
    if count == 0 {
        times.clear();
        return match bytes.len() {
            0 => Ok(()),
            n => Err(format!("time section of {n} bytes for 0 events")),
        };
    }
    let width = bytes.len() / count;
    if !bytes.len().is_multiple_of(count) || !(1..=8).contains(&width) {
        return Err(format!(
            "time section of {} bytes for {count} events",
            bytes.len()
        ));
    }
    // Every time is written below: no need to zero what is kept.
    times.resize(count, 0);
    // The first difference is from 0: the whole time, which takes most planes. The others are
    // gaps between packets, which mostly fit a few: only the planes they use are read for them.
    let used = (1..width)
        .rev()
        .find(|&k| {
            bytes[k * count + 1..(k + 1) * count]
                .iter()
                .fold(0, |a, &b| a | b)
                != 0
        })
        .map_or(1, |k| k + 1);
    let first = (0..width).fold(0u64, |z, k| z | u64::from(bytes[k * count]) << (8 * k));
    times[0] = unzigzag(first) as u64;
    match used {
        1 => times_of::<1>(bytes, times),
        2 => times_of::<2>(bytes, times),
        3 => times_of::<3>(bytes, times),
        4 => times_of::<4>(bytes, times),
        5 => times_of::<5>(bytes, times),
        6 => times_of::<6>(bytes, times),
        7 => times_of::<7>(bytes, times),
        _ => times_of::<8>(bytes, times),
    }
    Ok(())
}

/// [`time_planes`] after the first event, for the `W` planes that the other events use: each
/// difference gathered from its `W` bytes and added up, in one pass without a bounds check
/// (every plane is cut to the events' count first).
fn times_of<const W: usize>(bytes: &[u8], times: &mut [u64]) {
    let count = times.len();
    let planes: [&[u8]; W] = std::array::from_fn(|k| &bytes[k * count..(k + 1) * count]);
    let mut previous = times[0];
    for (i, t) in times.iter_mut().enumerate().skip(1) {
        let mut z = 0u64;
        for (k, plane) in planes.iter().enumerate() {
            z |= u64::from(plane[..count][i]) << (8 * k);
        }
        previous = previous.wrapping_add(unzigzag(z) as u64);
        *t = previous;
    }
}

/// The bytes of a fixed-width column of `count` fields, whose width must be one of `widths`.
pub(super) fn fixed<'a>(
    s: Section<'a>,
    count: usize,
    widths: &[usize],
) -> Result<&'a [u8], DecodeError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_planes_of_the_wrong_size_are_errors() {
        let mut deltas = Vec::new();
        for len in [1, 3, 7, 18] {
            let err = time_planes(&vec![0; len], 2, &mut deltas).unwrap_err();
            assert!(err.contains("time section"), "{err}");
        }
        assert!(time_planes(&[1], 0, &mut deltas).is_err());
        time_planes(&[], 0, &mut deltas).unwrap();
        // Two planes: differences 2 (zigzag 4) and -1 (zigzag 1), high bytes zero.
        time_planes(&[4, 1, 0, 0], 2, &mut deltas).unwrap();
        assert_eq!(deltas, [2, 1]);
    }

    /// The first event's difference (its whole time) takes more planes than the gaps after
    /// it; each plane count of the gaps, with and without a large gap, round-trips.
    #[test]
    fn times_round_trip_whatever_planes_the_gaps_use() {
        use crate::format::columnar::events::EventEncoder;
        let layout = Layout::of_version(crate::format::VERSION);
        assert_eq!(layout.time, TimeLayout::Planes);
        let mut encoder = EventEncoder::new(layout);
        let mut decoder = EventDecoder::new(layout);
        for gap_bits in [0u32, 3, 9, 17, 30, 47, 62] {
            for start in [0u64, 1, 1_234_567_890_123, u64::MAX - 5] {
                let ts: Vec<u64> = (0..300u64)
                    .map(|i| start.wrapping_add(i.wrapping_mul((1u64 << gap_bits) - 1) / 3))
                    .chain([start ^ 0x55, 7])
                    .collect();
                let events: Vec<PacketEvent> = ts
                    .iter()
                    .map(|&ts_ns| PacketEvent {
                        ts_ns,
                        ..PacketEvent::default()
                    })
                    .collect();
                let mut bytes = Vec::new();
                encoder.encode(&events, &mut bytes);
                let mut out = vec![PacketEvent::default(); 7];
                decoder.decode(&bytes, events.len(), &mut out).unwrap();
                assert_eq!(out, events, "gaps of {gap_bits} bits from {start}");
            }
        }
    }
}
