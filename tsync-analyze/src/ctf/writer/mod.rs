//! Test support: LTTng-shaped CTF kernel traces written from packet events, so that the reader
//! can be checked against an independent reader (babeltrace2) and synchronized with known
//! truth, and benchmarked on a trace where network events are few among scheduler and syscall
//! events, as in a real kernel trace.
//!
//! The trace is what lttng-modules 2.10 writes for a session with `net_dev_queue`,
//! `netif_receive_skb` (`net_if_receive_skb`), `sched_switch` and `syscall_entry_select`
//! enabled: packetized metadata ([`tsdl`]), one stream file per CPU (`channel0_N`) of
//! fixed-size packets with LTTng's packet header and context, events with the compact header
//! (the extended form for ids above 30 or timestamps that moved 2²⁷ ns or more).

pub mod tsdl;

use std::fs;
use std::io::Write;
use std::path::Path;

use tsync_common::{IPPROTO_TCP, PacketEvent, kind};

use super::metadata::file::{METADATA_MAGIC, PACKET_HEADER_LEN, packetize};
use super::metadata::uuid_text;
use super::stream::PACKET_MAGIC;

/// How to write a trace.
#[derive(Clone, Debug)]
pub struct KernelTrace {
    /// `env.hostname`.
    pub hostname: String,
    /// The trace UUID (the clock's is derived from it).
    pub uuid: [u8; 16],
    /// The clock's offset from the epoch (realtime − monotonic), ns.
    pub clock_offset_ns: i64,
    /// Stream files (CPUs); an event goes to the one of its `cpu` modulo this.
    pub cpus: u16,
    /// Non-network events written before each network event of a CPU, alternating
    /// `sched_switch` and `syscall_entry_select`, spread over the time since the previous one.
    pub filler: u32,
    /// Packet size in bytes (LTTng's sub-buffer size).
    pub packet_len: usize,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Network events.
    pub network: u64,
    /// Other events.
    pub filler: u64,
    /// Packets, all streams.
    pub packets: u64,
}

/// A little bit writer with CTF's bit order (little-endian fields from the least significant
/// bit, big-endian ones from the most significant).
#[derive(Default)]
struct Bits {
    buf: Vec<u8>,
    pos: u64,
}

impl Bits {
    fn align(&mut self, a: u64) {
        self.pos = self.pos.div_ceil(a) * a;
        self.grow();
    }

    fn grow(&mut self) {
        let need = self.pos.div_ceil(8) as usize;
        if self.buf.len() < need {
            self.buf.resize(need, 0);
        }
    }

    fn put(&mut self, v: u64, bits: u32, big: bool) {
        if self.pos.is_multiple_of(8) && bits.is_multiple_of(8) {
            let n = (bits / 8) as usize;
            let bytes = if big {
                v.to_be_bytes()[8 - n..].to_vec()
            } else {
                v.to_le_bytes()[..n].to_vec()
            };
            self.buf.truncate((self.pos / 8) as usize);
            self.buf.extend_from_slice(&bytes);
            self.pos += u64::from(bits);
            return;
        }
        for i in 0..bits {
            let bit = if big {
                (v >> (bits - 1 - i)) & 1
            } else {
                (v >> i) & 1
            };
            let at = self.pos + u64::from(i);
            let byte = (at / 8) as usize;
            if self.buf.len() <= byte {
                self.buf.resize(byte + 1, 0);
            }
            let shift = if big { 7 - at % 8 } else { at % 8 };
            self.buf[byte] |= (bit as u8) << shift;
        }
        self.pos += u64::from(bits);
    }

    /// An integer field: aligned (bits), then written.
    fn int(&mut self, v: u64, bits: u32, align: u64, big: bool) {
        self.align(align);
        self.put(v, bits, big);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.align(8);
        self.buf.truncate((self.pos / 8) as usize);
        self.buf.extend_from_slice(b);
        self.pos += 8 * b.len() as u64;
    }
}

/// The device name of an interface index.
pub fn device_name(ifindex: u32) -> String {
    format!("eth{}", ifindex.saturating_sub(1))
}

/// One event's payload (after its header).
#[derive(Clone, Copy)]
enum Payload<'a> {
    Net(&'a PacketEvent),
    SchedSwitch(u64),
    Select(u64),
}

fn net_payload(w: &mut Bits, e: &PacketEvent) {
    w.int(0xFFFF_8800_0000_0000 | u64::from(e.seq), 64, 8, false); // skbaddr
    w.int(u64::from(e.tot_len) + 14, 32, 8, false); // len (with the Ethernet header)
    w.bytes(device_name(e.ifindex).as_bytes());
    w.bytes(&[0]);
    let header_type = match e.kind {
        kind::TCP4 | kind::UDP4 => 1,
        kind::TCP6 => 2,
        _ => 0,
    };
    w.int(header_type, 8, 8, false);
    let protocol = u64::from(e.transport_protocol);
    match header_type {
        1 => {
            w.int(4, 4, 4, true);
            w.int(u64::from(e.ihl), 4, 4, true);
            w.int(0, 8, 8, true); // tos
            w.int(u64::from(e.tot_len), 16, 8, true);
            w.int(u64::from(e.seq as u16), 16, 8, true); // id
            w.int(0x4000, 16, 8, true); // frag_off: DF
            w.int(64, 8, 8, true); // ttl
            w.int(protocol, 8, 8, true);
            w.int(0xBEEF, 16, 8, true); // checksum
            for b in &e.saddr[..4] {
                w.int(u64::from(*b), 8, 8, true);
            }
            for b in &e.daddr[..4] {
                w.int(u64::from(*b), 8, 8, true);
            }
        }
        2 => {
            w.int(6, 4, 4, true);
            w.int(0, 4, 4, true); // prio
            for b in [0u64, 0x0B, 0xEE] {
                w.int(b, 8, 8, true); // flow label
            }
            w.int(u64::from(e.tot_len.saturating_sub(40)), 16, 8, true);
            w.int(protocol, 8, 8, true);
            w.int(64, 8, 8, true); // hop limit
            for addr in [&e.saddr, &e.daddr] {
                for pair in addr.chunks(2) {
                    w.int(
                        u64::from(u16::from_be_bytes([pair[0], pair[1]])),
                        16,
                        8,
                        true,
                    );
                }
            }
        }
        _ => return,
    }
    if protocol == u64::from(IPPROTO_TCP) {
        w.int(u64::from(e.source), 16, 8, true);
        w.int(u64::from(e.dest), 16, 8, true);
        w.int(u64::from(e.seq), 32, 8, true);
        w.int(u64::from(e.ack_seq), 32, 8, true);
        w.int(u64::from(e.doff), 4, 4, true);
        w.int(0, 3, 1, true);
        w.int(u64::from(e.tcp_flags), 9, 1, true);
        w.int(502, 16, 8, true); // window
        w.int(0xCAFE, 16, 8, true); // checksum
        w.int(0, 16, 8, true); // urg_ptr
    }
}

fn sched_switch_payload(w: &mut Bits, k: u64) {
    let mut comm = [0u8; 16];
    let name = format!("worker/{}", k % 1000);
    comm[..name.len()].copy_from_slice(name.as_bytes());
    w.bytes(&comm);
    w.int(1000 + k % 4000, 32, 8, false);
    w.int(120, 32, 8, false);
    w.int(1, 64, 8, false);
    w.bytes(b"swapper/0\0\0\0\0\0\0\0");
    w.int(0, 32, 8, false);
    w.int(120, 32, 8, false);
}

fn select_payload(w: &mut Bits, k: u64) {
    w.int(k % 64 + 1, 32, 8, false); // n
    w.int(0, 8, 8, false); // overflow
    w.int(0x7FFD_0000_0000 + k, 64, 8, false); // tvp
    let fds = (k % 4) as usize;
    w.int(fds as u64, 8, 8, false);
    w.bytes(&[0xA5; 4][..fds]);
    w.int(0, 8, 8, false);
    w.int(1, 8, 8, false);
    w.bytes(&[0x01]);
}

/// One stream file being written: its packets.
struct StreamWriter {
    file: fs::File,
    cpu: u16,
    uuid: [u8; 16],
    packet_len: usize,
    seq: u64,
    /// The current packet's events and their clock span.
    events: Bits,
    begin: Option<u64>,
    clock: u64,
    written: Written,
}

/// Bytes of the packet header and context (32 + 52, then the first event's alignment).
const HEADER_BYTES: usize = 84;

impl StreamWriter {
    fn event(&mut self, ts: u64, id: u32, payload: Payload<'_>) -> std::io::Result<()> {
        let mut e = Bits::default();
        // The event is encoded as it will lie in the packet: its offset's alignment matters.
        let start = (HEADER_BYTES as u64 * 8 + self.events.pos).div_ceil(8) * 8;
        e.pos = start % 64;
        e.buf.resize(e.pos as usize / 8, 0);
        let first = e.pos;
        let compact = id < 31 && self.begin.is_some() && ts - self.clock < 1 << 27;
        e.align(8);
        if compact {
            e.put(u64::from(id), 5, false);
            e.put(ts & ((1 << 27) - 1), 27, false);
        } else {
            e.put(31, 5, false);
            e.int(u64::from(id), 32, 8, false);
            e.int(ts, 64, 8, false);
        }
        match payload {
            Payload::Net(p) => net_payload(&mut e, p),
            Payload::SchedSwitch(k) => sched_switch_payload(&mut e, k),
            Payload::Select(k) => select_payload(&mut e, k),
        }
        let bytes = &e.buf[first as usize / 8..];
        let used = HEADER_BYTES + (self.events.pos / 8) as usize;
        let pad = (start / 8) as usize - used;
        if self.begin.is_some() && used + pad + bytes.len() > self.packet_len {
            self.flush()?;
            return self.event(ts, id, payload);
        }
        if pad + bytes.len() + HEADER_BYTES > self.packet_len {
            return Err(std::io::Error::other("an event larger than a packet"));
        }
        self.begin.get_or_insert(ts);
        self.events.bytes(&vec![0; pad]);
        self.events.bytes(bytes);
        self.clock = ts;
        Ok(())
    }

    /// Writes the current packet (header, context, events, padding).
    fn flush(&mut self) -> std::io::Result<()> {
        let Some(begin) = self.begin.take() else {
            return Ok(());
        };
        let content = HEADER_BYTES as u64 * 8 + self.events.pos;
        let mut p = Bits::default();
        p.int(PACKET_MAGIC, 32, 8, false);
        p.bytes(&self.uuid);
        p.int(0, 32, 8, false); // stream_id
        p.int(u64::from(self.cpu), 64, 8, false); // stream_instance_id
        p.int(begin, 64, 8, false);
        p.int(self.clock, 64, 8, false);
        p.int(content, 64, 8, false);
        p.int(self.packet_len as u64 * 8, 64, 8, false);
        p.int(self.seq, 64, 8, false);
        p.int(0, 64, 8, false); // events_discarded
        p.int(u64::from(self.cpu), 32, 8, false);
        debug_assert_eq!(p.buf.len(), HEADER_BYTES);
        let mut out = p.buf;
        out.extend_from_slice(&self.events.buf);
        out.resize(self.packet_len, 0);
        self.file.write_all(&out)?;
        self.events = Bits::default();
        self.seq += 1;
        self.written.packets += 1;
        Ok(())
    }
}

impl KernelTrace {
    /// Writes the trace into `dir` (created): `events` (in time order per CPU) as
    /// `net_dev_queue` (sends) and `net_if_receive_skb` (receives), with filler events
    /// between them.
    pub fn write(&self, dir: &Path, events: &[PacketEvent]) -> std::io::Result<Written> {
        fs::create_dir_all(dir)?;
        let mut clock_uuid = self.uuid;
        clock_uuid[0] ^= 0xFF;
        let text = tsdl::metadata(
            &self.hostname,
            &uuid_text(&self.uuid),
            &uuid_text(&clock_uuid),
            self.clock_offset_ns,
        );
        let mut header = [0u8; PACKET_HEADER_LEN];
        header[..4].copy_from_slice(&METADATA_MAGIC.to_le_bytes());
        header[4..20].copy_from_slice(&self.uuid);
        header[35] = 1;
        header[36] = 8;
        fs::write(dir.join("metadata"), packetize(&text, &header, true))?;
        let cpus = self.cpus.max(1);
        let mut streams = Vec::with_capacity(cpus as usize);
        for cpu in 0..cpus {
            streams.push(StreamWriter {
                file: fs::File::create(dir.join(format!("channel0_{cpu}")))?,
                cpu,
                uuid: self.uuid,
                packet_len: self.packet_len,
                seq: 0,
                events: Bits::default(),
                begin: None,
                clock: 0,
                written: Written::default(),
            });
        }
        let mut last = vec![None::<u64>; cpus as usize];
        let mut k = 0u64;
        for e in events {
            let cpu = (e.cpu % cpus) as usize;
            let s = &mut streams[cpu];
            if let Some(prev) = last[cpu] {
                let gap = e.ts_ns.saturating_sub(prev);
                for i in 0..self.filler {
                    let t = prev + gap * u64::from(i + 1) / u64::from(self.filler + 1);
                    k += 1;
                    if k.is_multiple_of(2) {
                        s.event(t, tsdl::SCHED_SWITCH, Payload::SchedSwitch(k))?;
                    } else {
                        s.event(t, tsdl::SYSCALL_ENTRY_SELECT, Payload::Select(k))?;
                    }
                    s.written.filler += 1;
                }
            }
            let id = if e.direction == tsync_common::direction::SEND {
                tsdl::NET_DEV_QUEUE
            } else {
                tsdl::NET_IF_RECEIVE_SKB
            };
            s.event(e.ts_ns, id, Payload::Net(e))?;
            s.written.network += 1;
            last[cpu] = Some(e.ts_ns);
        }
        let mut total = Written::default();
        for mut s in streams {
            s.flush()?;
            s.file.sync_all()?;
            total.network += s.written.network;
            total.filler += s.written.filler;
            total.packets += s.written.packets;
        }
        Ok(total)
    }
}
