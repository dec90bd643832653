//! Decoding compiled types ([`Node`]) from a packet's bytes: a bit cursor that reads integers
//! of any size, alignment and byte order (CTF 1.8 §4.1), and the walk that hands the fields
//! with a [`Role`] to a [`Sink`] and keeps tag and length values in slots.
//!
//! Every read is checked against the packet's content: a corrupt or hostile packet gives a
//! [`DecodeError`], never a read past the buffer; sequences longer than what is left are refused
//! before any element is read.

use super::layout::{IntLeaf, MAX_EMPTY_ELEMENTS, NO_SLOT, Node, Role};

/// Why a packet could not be decoded further.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// Where the fields with a role go.
pub trait Sink {
    /// An integer field with `role` (an array's elements one by one).
    fn int(&mut self, role: Role, value: u64, bits: u8);
    /// A string field with `role`.
    fn string(&mut self, _role: Role, _bytes: &[u8]) {}
}

/// A sink that wants nothing (to jump over an event).
pub struct Ignore;

impl Sink for Ignore {
    #[inline]
    fn int(&mut self, _role: Role, _value: u64, _bits: u8) {}
}

/// A position in a packet, in bits, and the end of what may be read.
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    data: &'a [u8],
    /// Current position, bits from the packet's start.
    pub pos: u64,
    /// End of the readable content, bits (at most the buffer's size).
    pub end: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `data`, reading at most `end_bits`.
    pub fn new(data: &'a [u8], end_bits: u64) -> Self {
        Cursor {
            data,
            pos: 0,
            end: end_bits.min(data.len() as u64 * 8),
        }
    }

    /// Bits left.
    #[inline]
    pub fn left(&self) -> u64 {
        self.end - self.pos
    }

    fn short(&self, bits: u64) -> DecodeError {
        DecodeError(format!(
            "a field of {bits} bits at bit {} runs past the packet's content ({} bits)",
            self.pos, self.end
        ))
    }

    /// Moves to the next multiple of `align` bits.
    #[inline]
    pub fn align(&mut self, align: u32) -> Result<(), DecodeError> {
        if align > 1 {
            let m = u64::from(align) - 1;
            let to = (self.pos + m) & !m;
            if to > self.end {
                return Err(self.short(to - self.pos));
            }
            self.pos = to;
        }
        Ok(())
    }

    /// Jumps over `bits`.
    #[inline]
    pub fn skip(&mut self, bits: u64) -> Result<(), DecodeError> {
        if bits > self.left() {
            return Err(self.short(bits));
        }
        self.pos += bits;
        Ok(())
    }

    /// Reads an unsigned integer of `bits` (1 to 64) at the current position.
    #[inline(always)]
    pub fn read(&mut self, bits: u8, big: bool) -> Result<u64, DecodeError> {
        let n = u64::from(bits);
        if n > self.left() {
            return Err(self.short(n));
        }
        let at = (self.pos / 8) as usize;
        let shift = (self.pos % 8) as u32;
        self.pos += n;
        // Eight bytes from `at` hold the field when it ends within them (all but 58 bits and
        // more at an odd position); the buffer's last bytes take the careful path.
        if let Some(word) = self.data.get(at..at + 8)
            && shift + u32::from(bits) <= 64
        {
            let word: [u8; 8] = word.try_into().expect("8 bytes");
            let mask = u64::MAX >> (64 - u32::from(bits));
            return Ok(if big {
                (u64::from_be_bytes(word) >> (64 - shift - u32::from(bits))) & mask
            } else {
                (u64::from_le_bytes(word) >> shift) & mask
            });
        }
        Ok(self.read_slow(at, shift, bits, big))
    }

    /// [`read`](Self::read) for fields that straddle 8 bytes or end in the buffer's last ones.
    #[cold]
    fn read_slow(&self, at: usize, shift: u32, bits: u8, big: bool) -> u64 {
        let mut w = [0u8; 16];
        let avail = (self.data.len() - at).min(16);
        w[..avail].copy_from_slice(&self.data[at..at + avail]);
        let mask = u64::MAX >> (64 - u32::from(bits));
        if big {
            // Big-endian bit fields start at the most significant bit of their first byte.
            (u128::from_be_bytes(w) >> (128 - shift - u32::from(bits))) as u64 & mask
        } else {
            (u128::from_le_bytes(w) >> shift) as u64 & mask
        }
    }

    /// The bytes of a NUL-terminated string at the current (byte-aligned) position, moving
    /// past its NUL.
    #[inline]
    pub fn string(&mut self) -> Result<&'a [u8], DecodeError> {
        self.align(8)?;
        let start = (self.pos / 8) as usize;
        let end = (self.end / 8) as usize;
        let len = memchr::memchr(0, &self.data[start..end]).ok_or_else(|| {
            DecodeError(format!("a string at byte {start} has no end in the packet"))
        })?;
        self.pos = (start + len + 1) as u64 * 8;
        Ok(&self.data[start..start + len])
    }
}

/// `value` of `bits` bits, sign-extended.
#[inline]
fn signed(value: u64, bits: u8) -> i128 {
    let s = 64 - u32::from(bits);
    i128::from(((value << s) as i64) >> s)
}

/// An integer field, decoded in line (the decoder's most frequent node).
#[inline(always)]
fn int<S: Sink>(
    i: &IntLeaf,
    c: &mut Cursor<'_>,
    slots: &mut [i128],
    sink: &mut S,
) -> Result<(), DecodeError> {
    c.align(i.align)?;
    let v = c.read(i.bits, i.big)?;
    if i.slot != NO_SLOT {
        slots[i.slot as usize] = if i.signed {
            signed(v, i.bits)
        } else {
            i128::from(v)
        };
    }
    if i.role != Role::None {
        sink.int(i.role, v, i.bits);
    }
    Ok(())
}

/// A sequence of fixed-size elements nothing reads: its length from `slots`, then one jump.
#[inline(always)]
fn seq_skip(
    align: u32,
    len: u32,
    bits: u64,
    c: &mut Cursor<'_>,
    slots: &[i128],
) -> Result<(), DecodeError> {
    let n = slots[len as usize];
    let n = u64::try_from(n).map_err(|_| DecodeError(format!("a sequence of {n} elements")))?;
    c.align(align)?;
    if n == 0 {
        return Ok(());
    }
    let a = u64::from(align.max(1));
    let total = (bits.div_ceil(a) * a)
        .checked_mul(n - 1)
        .and_then(|t| t.checked_add(bits))
        .ok_or_else(|| DecodeError(format!("a sequence of {n} elements of {bits} bits")))?;
    c.skip(total)
}

/// Decodes `node` at the cursor: fields with a role go to `sink`, values with a slot to
/// `slots`.
pub fn decode<S: Sink>(
    node: &Node,
    c: &mut Cursor<'_>,
    slots: &mut [i128],
    sink: &mut S,
) -> Result<(), DecodeError> {
    match node {
        Node::Skip { align, bits } => {
            c.align(*align)?;
            c.skip(*bits)
        }
        Node::Int(i) => int(i, c, slots, sink),
        Node::Struct { align, fields } => {
            c.align(*align)?;
            // Leaves in line: no call per field.
            for f in fields {
                match *f {
                    Node::Skip { align, bits } => {
                        c.align(align)?;
                        c.skip(bits)?;
                    }
                    Node::Int(ref i) => int(i, c, slots, sink)?,
                    Node::SeqSkip { align, len, bits } => seq_skip(align, len, bits, c, slots)?,
                    _ => decode(f, c, slots, sink)?,
                }
            }
            Ok(())
        }
        &Node::SeqSkip { align, len, bits } => seq_skip(align, len, bits, c, slots),
        Node::Str { role } => {
            let s = c.string()?;
            if *role != Role::None {
                sink.string(*role, s);
            }
            Ok(())
        }
        Node::Array { align, len, elem } => {
            c.align(*align)?;
            elements(elem, *len, c, slots, sink)
        }
        Node::Seq {
            align,
            len,
            elem,
            elem_min_bits,
        } => {
            let n = slots[*len as usize];
            let n =
                u64::try_from(n).map_err(|_| DecodeError(format!("a sequence of {n} elements")))?;
            c.align(*align)?;
            if *elem_min_bits == 0 && n > MAX_EMPTY_ELEMENTS && !matches!(**elem, Node::Skip { .. })
            {
                return Err(DecodeError(format!(
                    "a sequence of {n} elements that may be empty (more than {MAX_EMPTY_ELEMENTS})"
                )));
            }
            if n.saturating_mul(*elem_min_bits) > c.left() {
                return Err(DecodeError(format!(
                    "a sequence of {n} elements of at least {elem_min_bits} bits runs past the \
                     packet's content"
                )));
            }
            elements(elem, n, c, slots, sink)
        }
        Node::Variant {
            tag,
            select,
            options,
        } => {
            let v = slots[*tag as usize];
            let k = select
                .iter()
                .find(|(lo, hi, _)| *lo <= v && v <= *hi)
                .map(|s| s.2)
                .ok_or_else(|| DecodeError(format!("variant tag value {v} selects no option")))?;
            decode(&options[k as usize], c, slots, sink)
        }
    }
}

/// `n` elements of an array or a sequence; fixed-size elements nothing reads are jumped over
/// at once.
fn elements<S: Sink>(
    elem: &Node,
    n: u64,
    c: &mut Cursor<'_>,
    slots: &mut [i128],
    sink: &mut S,
) -> Result<(), DecodeError> {
    if n == 0 {
        return Ok(());
    }
    if let Node::Skip { align, bits } = *elem {
        let a = u64::from(align.max(1));
        let stride = bits.div_ceil(a) * a;
        let total = stride
            .checked_mul(n - 1)
            .and_then(|t| t.checked_add(bits))
            .ok_or_else(|| DecodeError(format!("{n} elements of {bits} bits")))?;
        c.align(align)?;
        return c.skip(total);
    }
    for _ in 0..n {
        decode(elem, c, slots, sink)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bit_fields_in_both_byte_orders() {
        // IPv4's first byte 0x45: version 4 then IHL 5, big-endian bit fields.
        let mut c = Cursor::new(&[0x45, 0x00], 16);
        assert_eq!(c.read(4, true).unwrap(), 4);
        assert_eq!(c.read(4, true).unwrap(), 5);
        // LTTng's compact header: 5-bit id then 27-bit timestamp, little-endian.
        let word: u32 = (123_456 << 5) | 17;
        let bytes = word.to_le_bytes();
        let mut c = Cursor::new(&bytes, 32);
        assert_eq!(c.read(5, false).unwrap(), 17);
        assert_eq!(c.read(27, false).unwrap(), 123_456);
        // TCP's data offset (4 bits), reserved (3) and flags (9): 0x50 0x18.
        let mut c = Cursor::new(&[0x50, 0x18], 16);
        assert_eq!(c.read(4, true).unwrap(), 5);
        assert_eq!(c.read(3, true).unwrap(), 0);
        assert_eq!(c.read(9, true).unwrap(), 0x18);
        // 64 bits at an odd bit position.
        let mut data = vec![0u8; 10];
        let v = 0xDEAD_BEEF_0123_4567u64;
        let w = (u128::from(v) << 3).to_le_bytes();
        data[..10].copy_from_slice(&w[..10]);
        let mut c = Cursor::new(&data, 80);
        c.skip(3).unwrap();
        assert_eq!(c.read(64, false).unwrap(), v);
    }

    #[test]
    fn never_reads_past_the_content() {
        let mut c = Cursor::new(&[1, 2, 3], 20);
        assert_eq!(c.read(16, false).unwrap(), 0x0201);
        assert!(c.read(8, false).is_err(), "20 bits of content");
        assert!(c.align(64).is_err());
        let mut c = Cursor::new(b"abc", 24);
        assert!(c.string().is_err(), "no NUL");
        let mut c = Cursor::new(b"ab\0c", 32);
        assert_eq!(c.string().unwrap(), b"ab");
        assert_eq!(c.pos, 24);
    }

    #[test]
    fn sequences_longer_than_the_packet_are_refused_before_reading() {
        let seq = Node::Seq {
            align: 8,
            len: 0,
            elem: Box::new(Node::Str { role: Role::None }),
            elem_min_bits: 8,
        };
        let mut slots = [1i128 << 60];
        let mut c = Cursor::new(&[0u8; 64], 512);
        let e = decode(&seq, &mut c, &mut slots, &mut Ignore).unwrap_err();
        assert!(e.0.contains("runs past"), "{e}");
        slots[0] = -1;
        assert!(decode(&seq, &mut c, &mut slots, &mut Ignore).is_err());
        // Empty elements: a huge count is refused, a skip of them is one jump.
        let empty = Node::Seq {
            align: 8,
            len: 0,
            elem: Box::new(Node::Struct {
                align: 8,
                fields: vec![Node::Seq {
                    align: 8,
                    len: 0,
                    elem: Box::new(Node::Skip { align: 8, bits: 8 }),
                    elem_min_bits: 8,
                }],
            }),
            elem_min_bits: 0,
        };
        slots[0] = 1 << 40;
        assert!(decode(&empty, &mut c, &mut slots, &mut Ignore).is_err());
    }
}
