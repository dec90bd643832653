//! One stream file of a CTF trace (LTTng writes one per channel and CPU), read packet by
//! packet: memory holds one packet (and the start of the next), whatever the file's size.
//!
//! Each packet's header and context give its stream class, sizes, first timestamp, CPU and the
//! tracer's running count of discarded events; its events follow until its content size. Events
//! that are not network events are jumped over (their header decoded, their payload skipped in
//! one step when its size is fixed); network events are decoded into a [`NetSink`].
//!
//! The first packet that cannot be read stops the stream: what came before is kept, and
//! [`StreamReader::damage`] says where and why (a trace cut short by a crash ends that way).

use std::io::Read;

use tsync_common::format::Damage;

use super::decode::{Cursor, DecodeError, Ignore, Sink, decode};
use super::layout::{Node, Role};
use super::network::{NetEvent, NetSink};
use super::program::Program;

/// The packet header magic of CTF data streams.
pub const PACKET_MAGIC: u64 = 0xC1FC_1FC1;
/// Largest packet read (LTTng's sub-buffers are at most a few MiB): what a corrupt size field
/// can make the reader hold.
pub const MAX_PACKET_LEN: u64 = 256 << 20;
/// Bytes read first to decode a packet's header and context.
const PREFIX: usize = 4096;
/// Most bytes a packet's header and context may take.
const MAX_PREFIX: usize = 1 << 20;
/// Bytes read at once while filling a packet.
const READ_STEP: usize = 1 << 20;

/// A network event met in a stream.
#[derive(Clone, Debug)]
pub struct NetHit {
    /// Clock value (cycles).
    pub cycles: u64,
    /// CPU (the packet context's `cpu_id`).
    pub cpu: u16,
    /// Which network event.
    pub event: NetEvent,
    /// Its decoded fields.
    pub fields: NetSink,
}

/// What a stream held, counted while it was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Packets read.
    pub packets: u64,
    /// Events read, of every class.
    pub events: u64,
    /// Events per class (indexed as the trace's event classes).
    pub per_class: Vec<u64>,
    /// The tracer's count of events it discarded (ring buffer full), from the last packet.
    pub discarded: u64,
    /// Packets missing from `packet_seq_num`'s sequence (LTTng ≥ 2.8).
    pub lost_packets: u64,
    /// First and last event clock values (cycles).
    pub span: Option<(u64, u64)>,
    /// Bytes of the file consumed.
    pub bytes: u64,
}

/// The packet being read.
struct Packet {
    /// Its length in bytes (up to the end of the file when it has no `packet_size`).
    len: usize,
    /// End of its content, bits.
    content_end: u64,
    stream: usize,
    cpu: u16,
    /// The packet was cut short: the damage to report once its complete events are read.
    cut: Option<String>,
}

/// A stream file being read.
pub struct StreamReader<R> {
    name: String,
    input: R,
    file_len: u64,
    buf: Vec<u8>,
    filled: usize,
    /// File offset of `buf[0]`.
    offset: u64,
    eof: bool,
    packet: Option<Packet>,
    /// Position in the current packet, bits.
    pos: u64,
    clock: u64,
    slots: Vec<i128>,
    last_seq: Option<u64>,
    stats: StreamStats,
    damage: Option<Damage>,
    /// The fields of the network event read last.
    fields: NetSink,
}

/// Reads the packet header and context fields the reader needs.
#[derive(Default)]
struct PacketFields {
    magic: Option<u64>,
    stream_id: Option<u64>,
    uuid: Vec<u8>,
    ts_begin: Option<u64>,
    content: Option<u64>,
    size: Option<u64>,
    discarded: Option<u64>,
    cpu: u64,
    seq: Option<u64>,
}

impl Sink for PacketFields {
    fn int(&mut self, role: Role, v: u64, _bits: u8) {
        match role {
            Role::Magic => self.magic = Some(v),
            Role::StreamId => self.stream_id = Some(v),
            Role::TraceUuid if self.uuid.len() < 16 => self.uuid.push(v as u8),
            Role::TsBegin => self.ts_begin = Some(v),
            Role::ContentSize => self.content = Some(v),
            Role::PacketSize => self.size = Some(v),
            Role::Discarded => self.discarded = Some(v),
            Role::CpuId => self.cpu = v,
            Role::SeqNum => self.seq = Some(v),
            _ => {}
        }
    }
}

/// The event header's id and the clock it moves.
struct HeaderFields {
    id: Option<u64>,
    clock: u64,
}

/// CTF 1.8 §8: an integer of fewer than 64 bits mapped to a clock gives its low bits; a value
/// below the current low bits means they wrapped.
#[inline]
pub(crate) fn update_clock(clock: u64, value: u64, bits: u8) -> u64 {
    if bits >= 64 {
        return value;
    }
    let mask = (1u64 << bits) - 1;
    let mut c = (clock & !mask) | value;
    if value < clock & mask {
        c = c.wrapping_add(1 << bits);
    }
    c
}

impl Sink for HeaderFields {
    #[inline]
    fn int(&mut self, role: Role, v: u64, bits: u8) {
        match role {
            Role::EventId => self.id = Some(v),
            Role::Clock => self.clock = update_clock(self.clock, v, bits),
            _ => {}
        }
    }
}

impl<R: Read> StreamReader<R> {
    /// A reader of `input` (`file_len` bytes), named `name` in messages.
    pub fn new(name: String, input: R, file_len: u64, program: &Program) -> Self {
        StreamReader {
            name,
            input,
            file_len,
            buf: Vec::new(),
            filled: 0,
            offset: 0,
            eof: false,
            packet: None,
            pos: 0,
            clock: 0,
            slots: vec![0; program.slots],
            last_seq: None,
            stats: StreamStats {
                per_class: vec![0; program.events.len()],
                ..StreamStats::default()
            },
            damage: None,
            fields: NetSink::default(),
        }
    }

    /// The file's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What was read so far.
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// Where and why the stream stopped being readable, if it did.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Reads until `filled >= n` or the end of the input.
    fn fill(&mut self, n: usize) -> std::io::Result<()> {
        while self.filled < n && !self.eof {
            let want = (n - self.filled).min(READ_STEP);
            if self.buf.len() < self.filled + want {
                self.buf.resize(self.filled + want, 0);
            }
            match self
                .input
                .read(&mut self.buf[self.filled..self.filled + want])
            {
                Ok(0) => self.eof = true,
                Ok(k) => self.filled += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn stop(&mut self, reason: String) {
        self.damage = Some(Damage {
            offset: self.offset,
            bytes_discarded: self.file_len.saturating_sub(self.offset),
            reason: format!("{}: {reason}", self.name),
        });
        self.packet = None;
    }

    /// Drops the current packet's bytes and reads the next packet's header and context; false
    /// at the end of the file (or where it stopped being readable).
    fn next_packet(&mut self, program: &Program) -> bool {
        if let Some(p) = self.packet.take() {
            if let Some(cut) = p.cut {
                self.stop(cut);
                return false;
            }
            self.buf.copy_within(p.len..self.filled, 0);
            self.filled -= p.len;
            self.offset += p.len as u64;
        }
        if self.damage.is_some() {
            return false;
        }
        match self.open_packet(program) {
            Ok(more) => more,
            Err(e) => {
                self.stop(e);
                false
            }
        }
    }

    fn open_packet(&mut self, program: &Program) -> Result<bool, String> {
        let io = |e: std::io::Error| format!("cannot read: {e}");
        self.fill(PREFIX).map_err(io)?;
        if self.filled == 0 {
            return Ok(false);
        }
        let mut want = PREFIX;
        let (fields, stream, header_end) = loop {
            match self.header(program) {
                Ok(found) => break found,
                // Not all of the header and context buffered yet: read more.
                Err(_) if !self.eof && want < MAX_PREFIX => {
                    want *= 4;
                    self.fill(want).map_err(io)?;
                }
                Err(e) => return Err(format!("packet header: {e}")),
            }
        };
        if fields.magic.is_some_and(|m| m != PACKET_MAGIC) {
            return Err(format!(
                "not a CTF packet (magic {:#x}, not 0xc1fc1fc1)",
                fields.magic.unwrap_or(0)
            ));
        }
        if let Some(size) = fields.size
            && (size % 8 != 0 || size / 8 > MAX_PACKET_LEN || size < header_end)
        {
            return Err(format!("packet size of {size} bits"));
        }
        let len = match fields.size {
            Some(size) => (size / 8) as usize,
            None => {
                // No size: the packet runs to the end of the file.
                self.fill(MAX_PACKET_LEN as usize + 1).map_err(io)?;
                if self.filled as u64 > MAX_PACKET_LEN {
                    return Err(format!("a packet of more than {MAX_PACKET_LEN} bytes"));
                }
                self.filled
            }
        };
        let content = fields.content.unwrap_or(len as u64 * 8);
        if content > len as u64 * 8 || content < header_end {
            return Err(format!(
                "content size of {content} bits in a packet of {} bits (header {header_end})",
                len as u64 * 8
            ));
        }
        self.fill(len).map_err(io)?;
        let cut = (self.filled < len).then(|| {
            format!(
                "the last packet is cut short ({} of its {len} bytes in the file)",
                self.filled
            )
        });
        if let Some(ts) = fields.ts_begin {
            self.clock = ts;
        }
        if let Some(d) = fields.discarded {
            self.stats.discarded = d;
        }
        if let Some(seq) = fields.seq {
            if let Some(prev) = self.last_seq
                && seq > prev.saturating_add(1)
            {
                self.stats.lost_packets += seq - prev - 1;
            }
            self.last_seq = Some(seq);
        }
        self.stats.packets += 1;
        self.stats.bytes += len.min(self.filled) as u64;
        self.pos = header_end;
        self.packet = Some(Packet {
            len: len.min(self.filled),
            content_end: content.min(self.filled as u64 * 8),
            stream,
            cpu: fields.cpu.min(u64::from(u16::MAX)) as u16,
            cut,
        });
        Ok(true)
    }

    /// Decodes the packet header and context from what is buffered: the fields, the stream
    /// class, and where the events start (bits).
    fn header(&mut self, program: &Program) -> Result<(PacketFields, usize, u64), DecodeError> {
        let mut c = Cursor::new(&self.buf[..self.filled], self.filled as u64 * 8);
        let mut f = PacketFields::default();
        if let Some(h) = &program.packet_header {
            decode(h, &mut c, &mut self.slots, &mut f)?;
        }
        let stream = program.stream(f.stream_id).ok_or_else(|| {
            DecodeError(format!(
                "stream id {} is not declared in the metadata",
                f.stream_id.map_or("(none)".into(), |i| i.to_string())
            ))
        })?;
        if let Some(pc) = &program.streams[stream].packet_context {
            decode(pc, &mut c, &mut self.slots, &mut f)?;
        }
        Ok((f, stream, c.pos))
    }

    /// The next network event of the stream, reading over everything else; None at its end.
    pub fn next_net(&mut self, program: &Program) -> Option<NetHit> {
        loop {
            let at_end = self
                .packet
                .as_ref()
                .is_none_or(|p| self.pos >= p.content_end);
            if at_end {
                // (A packet may hold no event: look at the next one.)
                if !self.next_packet(program) {
                    return None;
                }
                continue;
            }
            match self.read_to_net(program) {
                Ok(Some(event)) => {
                    return Some(NetHit {
                        cycles: self.clock,
                        cpu: self.packet.as_ref().map_or(0, |p| p.cpu),
                        event,
                        fields: std::mem::take(&mut self.fields),
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    let at = self.pos / 8;
                    // In a packet the file cuts short, the event the cut splits is no error of
                    // its own: the cut is.
                    let why = match self.packet.as_ref().and_then(|p| p.cut.clone()) {
                        Some(cut) => format!("{cut}; its events before byte {at} were read"),
                        None => format!("event at byte {at} of the packet: {e}"),
                    };
                    self.stop(why);
                    return None;
                }
            }
        }
    }

    /// Reads the current packet's events from `pos` up to the next network event (Some: which,
    /// its fields in `self.fields`) or the packet's end (None). The loop every event of a trace
    /// goes through: the packet's bytes, stream and clock stay in hand between events.
    fn read_to_net(&mut self, program: &Program) -> Result<Option<NetEvent>, DecodeError> {
        let p = self.packet.as_ref().expect("a packet is open");
        let stream = &program.streams[p.stream];
        let mut c = Cursor::new(&self.buf[..p.len], p.content_end);
        c.pos = self.pos;
        let mut h = HeaderFields {
            id: None,
            clock: self.clock,
        };
        while c.pos < c.end {
            let start = c.pos;
            self.pos = start; // where an error is reported
            h.id = None;
            if let Some(fast) = &stream.fast_header {
                let (id, clock) = fast.decode(&mut c, &mut self.slots, h.clock)?;
                h.id = Some(id);
                h.clock = clock;
            } else if let Some(n) = &stream.event_header {
                decode(n, &mut c, &mut self.slots, &mut h)?;
            }
            if let Some(n) = &stream.event_context {
                decode(n, &mut c, &mut self.slots, &mut h)?;
            }
            let class = stream.event(h.id).ok_or_else(|| {
                DecodeError(match h.id {
                    Some(id) => format!("event id {id} is not declared for its stream"),
                    None => "an event without id in a stream of several event classes".into(),
                })
            })?;
            let e = &program.events[class as usize];
            if let Some(n) = &e.context {
                decode(n, &mut c, &mut self.slots, &mut h)?;
            }
            match (&e.fields, e.net) {
                (Some(n), Some(net)) if net.usable => {
                    self.fields = NetSink::default();
                    decode(n, &mut c, &mut self.slots, &mut self.fields)?;
                }
                // Most events of a kernel trace: a payload of fixed size, jumped over.
                (Some(Node::Skip { align, bits }), _) => {
                    c.align(*align)?;
                    c.skip(*bits)?;
                }
                (Some(n), _) => decode(n, &mut c, &mut self.slots, &mut Ignore)?,
                (None, _) => {}
            }
            if c.pos == start {
                return Err(DecodeError("an event of no bits".into()));
            }
            self.pos = c.pos;
            self.clock = h.clock;
            self.stats.events += 1;
            self.stats.per_class[class as usize] += 1;
            match &mut self.stats.span {
                Some(span) => span.1 = h.clock,
                None => self.stats.span = Some((h.clock, h.clock)),
            }
            if let Some(net) = e.net {
                // (One without a digest is handed on too, to be counted.)
                if !net.usable {
                    self.fields = NetSink::default();
                }
                return Ok(Some(net));
            }
        }
        self.pos = c.pos;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_timestamps_wrap_into_the_clock() {
        let base = 5u64 << 27;
        assert_eq!(update_clock(base + 100, 200, 27), base + 200);
        assert_eq!(update_clock(base + 200, 100, 27), base + (1 << 27) + 100);
        assert_eq!(update_clock(7, 3, 64), 3);
    }
}
