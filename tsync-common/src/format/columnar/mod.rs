//! Columnar encodings of event and clock-sample chunks (format version 3), compressed afterwards
//! by zstd ([`super::compress`]).
//!
//! Why columns: a raw [`PacketEvent`](crate::PacketEvent) is 80 bytes, most of them repeated from
//! the event before in the same flow (addresses, ports, interface) or predictable from it (the
//! next TCP sequence number is the last one plus the payload). Splitting the fields into columns,
//! interning the flows of a chunk, and storing times and sequence numbers as differences leaves
//! a few bytes of real information per event, grouped so that zstd's entropy coder sees similar
//! bytes together. Measured on the demo's real traffic: docs/format.md.
//!
//! An encoded chunk is a list of *sections*, each its length (varint) then its bytes; a decoder
//! reads each section with its own [`Section`] cursor and refuses a section with bytes left over,
//! so a chunk whose parts do not add up is damage, never misread events.

mod decode;
pub use decode::EventDecoder;
pub mod events;
mod flows;
pub mod samples;

/// Appends `value` as an LEB128 varint (7 bits per byte, low first; at most 10 bytes).
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A column being written: its buffer is sized for the worst case before a chunk's events are
/// written, so that appending costs a store and an add, with no capacity check per byte (the
/// agent encodes every event it records).
#[derive(Default)]
pub(crate) struct Column {
    buf: Vec<u8>,
    len: usize,
}

impl Column {
    /// Empties the column and makes room for `max` bytes (and the 8 that a varint writes).
    pub(crate) fn start(&mut self, max: usize) {
        self.len = 0;
        if self.buf.len() < max + 8 {
            self.buf.resize(max + 8, 0);
        }
    }

    #[inline(always)]
    pub(crate) fn bytes<const N: usize>(&mut self, b: [u8; N]) {
        self.buf[self.len..self.len + N].copy_from_slice(&b);
        self.len += N;
    }

    /// Appends `value` as an LEB128 varint; below 2⁵⁶ (the usual case) without a branch per
    /// byte: the 7-bit groups are spread into bytes pairwise and written as one word.
    #[inline(always)]
    pub(crate) fn varint(&mut self, value: u64) {
        // One byte, the usual case of every column (a predicted sequence number, an unchanged
        // acknowledgment, the next event's extras): a store, without the ~25 instructions of
        // spreading the groups; the branch is as predictable as the column is regular.
        if value < 0x80 {
            self.buf[self.len] = value as u8;
            self.len += 1;
            return;
        }
        if value >= 1 << 56 {
            let mut v = Vec::new();
            put_varint(&mut v, value);
            self.buf[self.len..self.len + v.len()].copy_from_slice(&v);
            self.len += v.len();
            return;
        }
        let bits = 64 - (value | 1).leading_zeros();
        let len = bits.div_ceil(7) as usize;
        let x = (value & 0x0fff_ffff) | ((value & 0x00ff_ffff_f000_0000) << 4);
        let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
        let x = (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1);
        let more = 0x8080_8080_8080_8080 & ((1u64 << (8 * (len - 1))) - 1);
        self.buf[self.len..self.len + 8].copy_from_slice(&(x | more).to_le_bytes());
        self.len += len;
    }

    /// The bytes written.
    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// Maps a signed difference to an unsigned one with small magnitudes first (0, -1, 1, -2, ...),
/// so that small negative differences take one varint byte too.
#[inline]
pub(crate) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub(crate) fn unzigzag(value: u64) -> i64 {
    (value >> 1) as i64 ^ -((value & 1) as i64)
}

/// Appends a section: its length, then the bytes.
pub(crate) fn put_section(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Why a chunk's columns cannot be decoded.
pub(crate) type DecodeError = String;

/// A cursor over a byte string that fails, rather than panics, on reading past its end.
#[derive(Clone, Copy)]
pub(crate) struct Section<'a> {
    bytes: &'a [u8],
    /// What the section holds, for messages.
    what: &'static str,
}

impl Section<'_> {
    /// True when every byte was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl<'a> Section<'a> {
    /// The whole of `bytes` as one section.
    pub(crate) fn whole(bytes: &'a [u8], what: &'static str) -> Self {
        Section { bytes, what }
    }

    /// Splits the next section (its length, then its bytes) off `self`.
    pub(crate) fn section(&mut self, what: &'static str) -> Result<Section<'a>, DecodeError> {
        let len = self.varint()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "{what} section claims {len} bytes, {} are left",
                    self.bytes.len()
                )
            })?;
        let (head, tail) = self.bytes.split_at(len);
        self.bytes = tail;
        Ok(Section { bytes: head, what })
    }

    /// Fails if bytes are left: a section that holds more than its records is not what it says.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} section has {} byte(s) after its records",
                self.what,
                self.bytes.len()
            ))
        }
    }

    fn short(&self) -> DecodeError {
        format!("{} section ends early", self.what)
    }

    #[inline]
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.bytes.len() {
            return Err(self.short());
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    #[inline]
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.bytes(N)?.try_into().expect("N bytes"))
    }

    #[inline]
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads an LEB128 varint of at most 10 bytes; a longer one, or one that overflows 64 bits,
    /// is an error.
    pub(crate) fn varint(&mut self) -> Result<u64, DecodeError> {
        self.try_varint().ok_or_else(|| self.varint_error())
    }

    /// [`varint`](Self::varint) for hot loops: `None` where `varint` fails (then
    /// [`varint_error`](Self::varint_error) says why).
    #[inline(always)]
    pub(crate) fn try_varint(&mut self) -> Option<u64> {
        // One byte: most sequence and acknowledgment differences.
        if let Some(&b) = self.bytes.first()
            && b < 0x80
        {
            self.bytes = &self.bytes[1..];
            return Some(u64::from(b));
        }
        // Up to 8 bytes with 8 to read: without a branch per byte (the lengths of time
        // differences vary from event to event). The 7-bit groups are joined pairwise: bytes
        // into 14 bits, those into 28, those into 56.
        if let Some(word) = self
            .bytes
            .first_chunk::<8>()
            .map(|w| u64::from_le_bytes(*w))
        {
            let ends = !word & 0x8080_8080_8080_8080;
            if ends != 0 {
                let len = (ends.trailing_zeros() / 8 + 1) as usize;
                let x = word & (u64::MAX >> (64 - 8 * len));
                let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
                let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
                let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
                self.bytes = &self.bytes[len..];
                return Some(x);
            }
        }
        self.varint_slow()
    }

    /// [`try_varint`](Self::try_varint) byte by byte: near a section's end, and for 9 or 10
    /// bytes.
    #[cold]
    fn varint_slow(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for (i, &b) in self.bytes.iter().enumerate().take(10) {
            if i == 9 && b > 1 {
                return None;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.bytes = &self.bytes[i + 1..];
                return Some(value);
            }
        }
        None
    }

    /// Why the varint at the cursor cannot be read.
    #[cold]
    pub(crate) fn varint_error(&self) -> DecodeError {
        if self.bytes.iter().take(10).all(|&b| b >= 0x80) && self.bytes.len() < 10 {
            self.short()
        } else {
            format!("{} section holds a varint over 64 bits", self.what)
        }
    }

    /// A zigzag-encoded signed varint, for hot loops ([`try_varint`](Self::try_varint)).
    #[inline(always)]
    pub(crate) fn try_signed(&mut self) -> Option<i64> {
        self.try_varint().map(unzigzag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length() {
        let mut values = vec![0, 1, 127, 128, 300, u64::MAX, u64::MAX - 1, 1 << 63];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((0..64).map(|b| (1u64 << b) - 1));
        let mut out = Vec::new();
        for &v in &values {
            put_varint(&mut out, v);
        }
        let mut s = Section::whole(&out, "test");
        for &v in &values {
            assert_eq!(s.varint().unwrap(), v);
        }
        s.finish().unwrap();
    }

    #[test]
    fn column_varints_are_the_plain_ones() {
        let mut values = vec![0, 1, 127, 128, 300, u64::MAX, (1 << 56) - 1, 1 << 56];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        let mut column = Column::default();
        column.start(10 * values.len());
        let mut plain = Vec::new();
        for &v in &values {
            column.varint(v);
            put_varint(&mut plain, v);
        }
        assert_eq!(column.as_slice(), plain.as_slice());
    }

    #[test]
    fn zigzag_puts_small_magnitudes_first() {
        for (v, z) in [(0, 0), (-1, 1), (1, 2), (-2, 3), (i64::MAX, u64::MAX - 1)] {
            assert_eq!(zigzag(v), z);
            assert_eq!(unzigzag(z), v);
        }
        assert_eq!(unzigzag(zigzag(i64::MIN)), i64::MIN);
    }

    #[test]
    fn bad_varints_and_sections_are_errors() {
        let too_long = [0xffu8; 11];
        assert!(Section::whole(&too_long, "t").varint().is_err());
        let overflow = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Section::whole(&overflow, "t").varint().is_err());
        assert!(Section::whole(&[0x80], "t").varint().is_err());
        let mut s = Section::whole(&[5, 1, 2], "t");
        assert!(s.section("inner").is_err(), "5 bytes claimed, 2 left");
        let mut s = Section::whole(&[1, 7, 9], "t");
        let mut inner = s.section("inner").unwrap();
        assert_eq!(inner.bytes(1).unwrap(), [7]);
        assert!(inner.bytes(1).is_err());
        assert!(s.finish().is_err(), "one byte left");
    }
}
