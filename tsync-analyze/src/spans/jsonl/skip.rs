//! Where a JSON value ends, found by its quotes and brackets alone: how the fast reading of a
//! span line (`skim.rs`) passes over the members `sync` does not use (a span's name and
//! attributes, scopes: most of a line's bytes), and how the first pass (`scan.rs`) takes a
//! resource out of its line.
//!
//! Only quotes, backslashes and brackets are looked at, sixty-four bytes at a time (SSE2 on
//! x86_64, part of its baseline; byte by byte elsewhere), in the manner of simdjson's structural
//! index: a value is skipped at the cost of finding those bytes, not of parsing it. What is
//! checked is the structure: strings close, brackets balance. What lies between (numbers,
//! `true`, commas, escapes' letters, which kind of bracket closes) is not: a line that only
//! serde_json would refuse for a malformed member `sync` skips is read, as simdjson's On-Demand
//! reads it (docs/spans.md).

/// The index just past the JSON value that starts at `s[i]` (its first byte, no whitespace
/// before it); None when it does not end within `s`, a bracket closes none, or it is no value
/// at all.
pub(crate) fn value_end(s: &[u8], i: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => string_end(s, i + 1),
        b'{' | b'[' => container_end(s, i),
        b',' | b':' | b'}' | b']' => None,
        _ => {
            // A number or a literal: up to the byte that ends it.
            let n = s[i..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                .unwrap_or(s.len() - i);
            Some(i + n)
        }
    }
}

/// The index past the closing quote of the string whose characters start at `s[i]`: from
/// plain run to plain run.
fn string_end(s: &[u8], mut i: usize) -> Option<usize> {
    loop {
        i += plain_run(s.get(i..)?)?;
        match s[i] {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            // A control character (serde_json would refuse it).
            _ => i += 1,
        }
    }
}

/// The length of the run of plain characters at the start of `s`: up to its first quote,
/// backslash or control character (what ends a string, or makes it one with escapes), None if
/// there is none. Eight bytes at a time: each test flags exactly the first byte it holds for,
/// and none before it, which is all that is looked at.
#[inline(always)]
pub(super) fn plain_run(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let found = found & HIGH;
        if found != 0 {
            return Some(i + (found.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    s[i..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|n| i + n)
}

/// The index past the bracket that closes the one at `s[i]`, sixty-four bytes at a time: where
/// a block has no backslash, which strings cover it is the running parity of its quotes (each
/// bit of a prefix xor), and the brackets outside them are counted at once unless the depth
/// can reach zero in it; a block with a backslash is walked mark by mark.
fn container_end(s: &[u8], i: usize) -> Option<usize> {
    let mut walk = Walk {
        in_string: false,
        escaped: false,
        depth: 0,
    };
    let mut at = i;
    while at < s.len() {
        let m = Marks::of(s, at);
        let end = if m.backslash == 0 && !walk.escaped {
            walk.plain_block(&m)
        } else {
            walk.marked_block(s, at, &m)?
        };
        if let Some(k) = end {
            return Some(at + k + 1);
        }
        at += BLOCK;
    }
    None
}

/// Where the walk over a container stands at a block's start.
struct Walk {
    /// Within a string.
    in_string: bool,
    /// The block's first byte is escaped (the last one before was a backslash in a string).
    escaped: bool,
    /// Brackets open.
    depth: u32,
}

impl Walk {
    /// A block without backslashes: the offset of the closing bracket, if it is in it.
    #[inline(always)]
    fn plain_block(&mut self, m: &Marks) -> Option<usize> {
        let mut inside = prefix_xor(m.quote);
        if self.in_string {
            inside = !inside;
        }
        self.in_string = inside >> 63 == 1;
        let (open, close) = (m.open & !inside, m.close & !inside);
        if close.count_ones() < self.depth {
            self.depth = self.depth + open.count_ones() - close.count_ones();
            return None;
        }
        let mut brackets = open | close;
        while brackets != 0 {
            let k = brackets.trailing_zeros();
            brackets &= brackets - 1;
            if open >> k & 1 == 1 {
                self.depth += 1;
            } else {
                self.depth -= 1;
                if self.depth == 0 {
                    return Some(k as usize);
                }
            }
        }
        None
    }

    /// A block with a backslash, mark by mark: Some(offset of the closing bracket) if it is in
    /// it, Some(None) if not, None when a bracket closes none.
    fn marked_block(&mut self, s: &[u8], at: usize, m: &Marks) -> Option<Option<usize>> {
        let mut marks = m.quote | m.backslash | m.open | m.close;
        if std::mem::take(&mut self.escaped) {
            marks &= !1;
        }
        while marks != 0 {
            let k = marks.trailing_zeros() as usize;
            marks &= marks - 1;
            match (self.in_string, s[at + k]) {
                (true, b'"') => self.in_string = false,
                (true, b'\\') => {
                    // The escaped byte is no mark of its own.
                    if k + 1 < BLOCK {
                        marks &= !(1 << (k + 1));
                    } else {
                        self.escaped = true;
                    }
                }
                (true, _) => {}
                (false, b'"') => self.in_string = true,
                (false, b'{' | b'[') => self.depth += 1,
                (false, b'}' | b']') => {
                    self.depth = self.depth.checked_sub(1)?;
                    if self.depth == 0 {
                        return Some(Some(k));
                    }
                }
                // A backslash outside a string.
                (false, _) => return None,
            }
        }
        Some(None)
    }
}

/// Bit k set where an odd number of bits at or below k are: which bytes lie within strings,
/// from the quotes' bits (an opening quote in, its closing quote out).
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// Bytes looked at together.
const BLOCK: usize = 64;

/// A block's quotes, backslashes, opening and closing brackets: bit k for its byte k.
struct Marks {
    quote: u64,
    backslash: u64,
    open: u64,
    close: u64,
}

impl Marks {
    /// The marks of `s[at..at + 64]`; bytes past `s`'s end are none.
    #[inline(always)]
    fn of(s: &[u8], at: usize) -> Marks {
        match s.get(at..at + BLOCK) {
            Some(chunk) => Marks::of_block(chunk.try_into().expect("64 bytes")),
            None => {
                let mut last = [0u8; BLOCK];
                last[..s.len() - at].copy_from_slice(&s[at..]);
                Marks::of_block(&last)
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn of_block(block: &[u8; BLOCK]) -> Marks {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut m = [0u64; 4];
        for (part, chunk) in block.chunks_exact(16).enumerate() {
            // SAFETY: an unaligned load of 16 bytes of `block`, and compares; SSE2 is part of
            // the x86_64 baseline.
            let found = unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                // `[` and `]` are `{` and `}` with bit 5 clear: one compare finds both kinds.
                let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
                [
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)),
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)),
                    _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8)),
                    _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8)),
                ]
                .map(|f| _mm_movemask_epi8(f) as u16)
            };
            for (mask, f) in m.iter_mut().zip(found) {
                *mask |= u64::from(f) << (16 * part);
            }
        }
        Marks {
            quote: m[0],
            backslash: m[1],
            open: m[2],
            close: m[3],
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn of_block(block: &[u8; BLOCK]) -> Marks {
        let bits = |f: fn(u8) -> bool| {
            block
                .iter()
                .enumerate()
                .fold(0u64, |m, (k, &b)| m | (u64::from(f(b)) << k))
        };
        Marks {
            quote: bits(|b| b == b'"'),
            backslash: bits(|b| b == b'\\'),
            open: bits(|b| matches!(b, b'{' | b'[')),
            close: bits(|b| matches!(b, b'}' | b']')),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde_json's reading of where the value at the start of `text` ends.
    fn serde_end(text: &str) -> Option<usize> {
        let mut values =
            serde_json::Deserializer::from_str(text).into_iter::<serde::de::IgnoredAny>();
        match values.next() {
            Some(Ok(_)) => Some(values.byte_offset()),
            _ => None,
        }
    }

    #[test]
    fn a_value_ends_where_serde_json_says() {
        let values = [
            r#""""#,
            r#""a""#,
            r#""a\"b""#,
            r#""a\\""#,
            r#""a\\\"\\""#,
            r#""\u0041\n""#,
            r#"{}"#,
            r#"[]"#,
            r#"{"a":[1,2,{"b":"]}"}],"c":"\\"}"#,
            r#"[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]"#,
            r#"{"key":"http.url","value":{"stringValue":"http://h:1/a?b=\"c\"&d={e}"}}"#,
            "12345",
            "-1.5e3",
            "true",
            "null",
        ];
        for v in values {
            // Every position of the value in a block, and something after it.
            for pad in 0..130 {
                let text = format!("{}{v},\"next\"]", " ".repeat(pad));
                let want = serde_end(&text[pad..]).map(|e| e + pad);
                assert_eq!(value_end(text.as_bytes(), pad), want, "{text}");
            }
        }
    }

    #[test]
    fn a_broken_structure_is_none() {
        for text in [r#""abc"#, r#"{"a":1"#, r#"{\"a":1}"#, r#""abc\"#, "]", ","] {
            assert_eq!(value_end(text.as_bytes(), 0), None, "{text}");
        }
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert_eq!(value_end(deep.as_bytes(), 0), Some(2000));
    }

    /// A random JSON value of strings with escapes and brackets, numbers, literals, nested.
    fn random_value(seed: &mut u64, depth: u32, out: &mut String) {
        let mut next = || {
            *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (*seed ^ (*seed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            (z ^ (z >> 31)) as usize
        };
        match if depth == 0 { next() % 3 } else { next() % 5 } {
            0 => {
                out.push('"');
                for _ in 0..next() % 40 {
                    let pieces = [r#"\""#, r#"\\"#, "{", "]", "a", "[", "}", r#"\n"#, "xy"];
                    out.push_str(pieces[next() % pieces.len()]);
                }
                out.push('"');
            }
            1 => out.push_str(["12", "-1.5e3", "true", "null"][next() % 4]),
            2 => out.push_str("\"\""),
            3 => {
                out.push('[');
                for k in 0..next() % 4 {
                    if k > 0 {
                        out.push(',');
                    }
                    random_value(seed, depth - 1, out);
                }
                out.push(']');
            }
            _ => {
                out.push('{');
                for k in 0..next() % 4 {
                    if k > 0 {
                        out.push(',');
                    }
                    out.push_str(&format!("\"k{k}\":"));
                    random_value(seed, depth - 1, out);
                }
                out.push('}');
            }
        }
    }

    #[test]
    fn random_values_end_where_serde_json_says() {
        let mut seed = 7;
        for _ in 0..3000 {
            let mut v = String::new();
            random_value(&mut seed, 5, &mut v);
            let pad = (seed % 64) as usize;
            let text = format!("{}{v} ,1]", " ".repeat(pad));
            let want = serde_end(&text[pad..]).map(|e| e + pad);
            assert_eq!(value_end(text.as_bytes(), pad), want, "{text}");
        }
    }
}
