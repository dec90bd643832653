//! Decimal digits eight at a time.
//!
//! Times are 19-digit integers, and a line as `apply --interval` writes it holds four of them:
//! checking and converting them byte by byte was a third of the scanner's work. Here eight
//! bytes are loaded as one little-endian `u64` (SWAR: SIMD within a register) and tested, or
//! converted, with a few arithmetic operations; the last bytes of a line go one at a time.

/// `0x30` in every byte: the digit `0`.
const ZEROS: u64 = 0x3030_3030_3030_3030;
/// The high nibble of every byte.
const HIGH: u64 = 0xF0F0_F0F0_F0F0_F0F0;

/// A nonzero byte where the byte of `x` is not an ASCII digit, zero where it is.
///
/// A digit is `0x30..=0x39`: its high nibble is 3, and still 3 once 6 is added. Adding 6 to a
/// byte of `0xFA` or more carries into the next byte, but that byte is itself flagged (its high
/// nibble is `F`), and the carry only reaches bytes after it: the *first* flagged byte is always
/// the first non-digit.
#[inline(always)]
fn non_digits(x: u64) -> u64 {
    ((x & HIGH) ^ ZEROS) | ((x.wrapping_add(0x0606_0606_0606_0606) & HIGH) ^ ZEROS)
}

/// The eight bytes of `s` at `at` as a little-endian word (the first byte lowest).
#[inline(always)]
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"))
}

/// How many ASCII digits follow `s[at]` (inclusive).
#[inline(always)]
pub(super) fn digit_run(s: &[u8], at: usize) -> usize {
    let mut n = 0;
    while at + n + 8 <= s.len() {
        let flags = non_digits(word(s, at + n));
        if flags != 0 {
            return n + (flags.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + s[at + n..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count()
}

/// The value of eight ASCII digits (the first byte the most significant), checked already.
#[inline(always)]
fn value8(x: u64) -> u64 {
    // Pairs, then groups of four, then the eight: each step multiplies every other lane by
    // its weight and adds its neighbour (no lane overflows: 99, 9999, 99999999).
    let x = x - ZEROS;
    let x = (x * 10 + (x >> 8)) & 0x00FF_00FF_00FF_00FF;
    let x = (x * 100 + (x >> 16)) & 0x0000_FFFF_0000_FFFF;
    (x * 10_000 + (x >> 32)) & 0xFFFF_FFFF
}

/// A JSON integer's text as an i64: digits with an optional minus sign, no fraction, no
/// exponent, within 64 bits.
#[inline]
pub fn integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix(b"-") {
        Some(d) => (true, d),
        None => (false, text),
    };
    // Any 19 digits fit in a u64 (10^19 − 1 < 2^64): no overflow checks, then the range check.
    // More digits are out of range anyway (leading zeros are not JSON).
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    let mut at = 0;
    while at + 8 <= digits.len() {
        let x = word(digits, at);
        if non_digits(x) != 0 {
            return None;
        }
        v = v * 100_000_000 + value8(x);
        at += 8;
    }
    for &b in &digits[at..] {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    if negative {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The obvious byte-at-a-time versions, to check against.
    fn run_bytewise(s: &[u8], at: usize) -> usize {
        s[at..].iter().take_while(|b| b.is_ascii_digit()).count()
    }

    #[test]
    fn every_byte_value_next_to_digits() {
        for b in 0..=255u8 {
            for at in 0..12 {
                let mut s = b"12345678901234567890".to_vec();
                s[at] = b;
                assert_eq!(digit_run(&s, 0), run_bytewise(&s, 0), "{b:#x} at {at}");
                // A carry out of a byte of 0xFA or more must not hide the byte before.
                s[at + 1] = 0xFF;
                assert_eq!(digit_run(&s, 0), run_bytewise(&s, 0), "{b:#x} at {at}");
            }
        }
    }

    proptest! {
        #[test]
        fn digit_runs_as_bytewise(s in prop::collection::vec(
            prop_oneof![b'0'..=b'9', any::<u8>()], 0..40), at in 0usize..40) {
            let at = at.min(s.len());
            prop_assert_eq!(digit_run(&s, at), run_bytewise(&s, at));
        }

        #[test]
        fn integers_as_std_parses_them(text in "-?[1-9][0-9]{0,20}|-?0|[0-9a-]{0,6}") {
            // (std also takes a leading `+`, and leading zeros beyond 19 digits: not here.)
            prop_assert_eq!(integer(text.as_bytes()), text.parse::<i64>().ok());
        }

        #[test]
        fn every_i64_round_trips(v in any::<i64>()) {
            prop_assert_eq!(integer(v.to_string().as_bytes()), Some(v));
        }
    }
}
