//! LTTng's two event headers decoded in straight-line code: every event of a trace goes through
//! its stream's header, so it is the reader's hottest path.
//!
//! Both have the same shape — an enum `id` whose largest value escapes to an extended form, and a
//! variant on it: `{ timestamp }` or `{ id; timestamp }` — with different sizes: `compact` (5-bit
//! id, 27-bit timestamp; 32-bit id, 64-bit timestamp) and `large` (16-bit id, 32-bit timestamp;
//! 32 and 64 bits). [`FastHeader::of`] recognizes that shape in a compiled header whatever the
//! sizes and alignments (so it decodes exactly what the generic decoder would); other headers go
//! through the generic decoder.

use super::decode::{Cursor, DecodeError};
use super::layout::{NO_SLOT, Node, Role};

/// An integer of the header: alignment and size (little-endian, unsigned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Field {
    align: u32,
    bits: u8,
}

/// An LTTng-shaped event header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastHeader {
    align: u32,
    id: Field,
    /// Slot of `id`, if something else reads it.
    id_slot: u32,
    /// The id's escape value: the extended form follows.
    escape: u64,
    compact_align: u32,
    compact_ts: Field,
    extended_align: u32,
    extended_id: Field,
    extended_ts: Field,
}

/// A little-endian unsigned integer with `role`: its alignment and size.
fn int(n: &Node, role: Role) -> Option<(Field, u32)> {
    match n {
        Node::Int(i) if !i.signed && !i.big && i.role == role => Some((
            Field {
                align: i.align,
                bits: i.bits,
            },
            i.slot,
        )),
        _ => None,
    }
}

/// The fields of a struct.
fn fields(n: &Node) -> Option<(u32, &[Node])> {
    match n {
        Node::Struct { align, fields } => Some((*align, fields)),
        _ => None,
    }
}

impl FastHeader {
    /// The fast form of a compiled event header, when it has LTTng's shape.
    pub fn of(header: &Node) -> Option<FastHeader> {
        let (
            align,
            [
                id,
                Node::Variant {
                    tag,
                    select,
                    options,
                },
            ],
        ) = fields(header)?
        else {
            return None;
        };
        let (id, id_slot) = int(id, Role::EventId)?;
        if id_slot != *tag || id.bits >= 64 {
            return None;
        }
        let escape = (1u64 << id.bits) - 1;
        let [(0, last, 0), (e0, e1, 1)] = select.as_slice() else {
            return None;
        };
        if *last != i128::from(escape) - 1 || *e0 != i128::from(escape) || *e1 != *e0 {
            return None;
        }
        let [compact, extended] = options.as_slice() else {
            return None;
        };
        let (compact_align, [ts]) = fields(compact)? else {
            return None;
        };
        let (extended_align, [eid, ets]) = fields(extended)? else {
            return None;
        };
        let (compact_ts, s0) = int(ts, Role::Clock)?;
        let (extended_id, s1) = int(eid, Role::EventId)?;
        let (extended_ts, s2) = int(ets, Role::Clock)?;
        if [s0, s1, s2] != [NO_SLOT; 3] {
            return None;
        }
        Some(FastHeader {
            align,
            id,
            id_slot,
            escape,
            compact_align,
            compact_ts,
            extended_align,
            extended_id,
            extended_ts,
        })
    }

    /// Decodes the header at the cursor: the event id and the clock's new value.
    #[inline(always)]
    pub fn decode(
        &self,
        c: &mut Cursor<'_>,
        slots: &mut [i128],
        clock: u64,
    ) -> Result<(u64, u64), DecodeError> {
        c.align(self.align)?;
        c.align(self.id.align)?;
        let id = c.read(self.id.bits, false)?;
        if self.id_slot != NO_SLOT {
            slots[self.id_slot as usize] = i128::from(id);
        }
        if id != self.escape {
            c.align(self.compact_align)?;
            c.align(self.compact_ts.align)?;
            let ts = c.read(self.compact_ts.bits, false)?;
            return Ok((
                id,
                super::stream::update_clock(clock, ts, self.compact_ts.bits),
            ));
        }
        c.align(self.extended_align)?;
        c.align(self.extended_id.align)?;
        let id = c.read(self.extended_id.bits, false)?;
        c.align(self.extended_ts.align)?;
        let ts = c.read(self.extended_ts.bits, false)?;
        Ok((
            id,
            super::stream::update_clock(clock, ts, self.extended_ts.bits),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctf::metadata::TraceClass;
    use crate::ctf::program::Program;

    #[test]
    fn recognizes_both_lttng_headers_and_decodes_them_as_the_generic_decoder() {
        let meta = crate::ctf::writer::tsdl::metadata(
            "h",
            "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a",
            "5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5b",
            0,
        );
        let large = meta.replace("event.header := struct event_header_compact", "event.header := struct event_header_large")
            .replace("struct event_header_compact {", "struct event_header_large {\n\tenum : uint16_t { compact = 0 ... 65534, extended = 65535 } id;\n\tvariant <id> {\n\t\tstruct {\n\t\t\tuint32_clock_monotonic_t timestamp;\n\t\t} compact;\n\t\tstruct {\n\t\t\tuint32_t id;\n\t\t\tuint64_clock_monotonic_t timestamp;\n\t\t} extended;\n\t} v;\n} align(8);\nstruct event_header_compact {");
        for (text, id_bits) in [(meta, 5u8), (large, 16)] {
            let class = TraceClass::parse(&text, true).unwrap();
            let p = Program::compile(&class).unwrap();
            let s = &p.streams[0];
            let fast = s.fast_header.expect("LTTng's header");
            assert_eq!(fast.id.bits, id_bits);
            // Compact (id 3) then extended (id 1295) events, decoded both ways.
            let mut bytes = Vec::new();
            if id_bits == 5 {
                bytes.extend_from_slice(&((1234u32 << 5) | 3).to_le_bytes());
                bytes.push(31);
            } else {
                bytes.extend_from_slice(&3u16.to_le_bytes());
                bytes.extend_from_slice(&1234u32.to_le_bytes());
                bytes.extend_from_slice(&u16::MAX.to_le_bytes());
            }
            bytes.extend_from_slice(&1295u32.to_le_bytes());
            bytes.extend_from_slice(&(7u64 << 40).to_le_bytes());
            let mut slots = vec![0i128; p.slots];
            let mut c = Cursor::new(&bytes, bytes.len() as u64 * 8);
            // The compact timestamp replaces the clock's low 27 or 32 bits (a wrap for 32).
            let compact = if id_bits == 5 { 1 << 30 } else { 1 << 32 };
            let got = fast.decode(&mut c, &mut slots, 1 << 30).unwrap();
            assert_eq!(got, (3, compact + 1234));
            assert_eq!(
                fast.decode(&mut c, &mut slots, 1 << 30).unwrap(),
                (1295, 7 << 40)
            );
            assert_eq!(c.pos, bytes.len() as u64 * 8);
        }
    }
}
