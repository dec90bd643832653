//! JSON Lines: one object per line; the time field (integer ns) is rewritten to the common
//! timebase and the original kept right after it as `<field>_local`. Every other byte of the
//! line is left as it was.
//!
//! Why not parse each line with serde_json and print it again: that would change what the user
//! wrote beyond the one field (number spellings such as `1.50` or `1e3`, integers beyond 64
//! bits, escapes, key order and spacing), and it runs at about a million lines per second where
//! the goal is five. So each line is checked by a small validating scanner (the full JSON
//! grammar: a line that is not JSON is an error naming `file:line`, with serde_json's own words
//! for what is wrong) that also finds the top-level field, and the output is the line spliced
//! around the new value.

use std::io::{BufRead, Write};

use super::{ApplyError, ApplySummary, NodeMapper};

mod digits;
mod flat;
mod names;
pub use digits::integer;
pub use names::Names;

/// Nesting deeper than this is refused (serde_json's own limit).
const MAX_DEPTH: usize = 128;

/// Why a line cannot be rewritten.
#[derive(Debug, PartialEq, Eq)]
pub enum LineError {
    /// Not JSON (the text says why).
    Syntax(String),
    /// JSON, but not an object.
    NotObject,
    /// The object has no such top-level field.
    Missing,
    /// The field is there twice.
    Duplicate,
    /// The field is not an integer (its text, cut to 40 characters).
    NotInteger(String),
    /// The line already has `<field>_local` (applied twice?).
    HasLocal,
    /// The line already has a field that `apply` adds (named).
    Has(String),
}

impl LineError {
    /// The error in words, for the time field `field`.
    pub fn describe(&self, field: &str) -> String {
        match self {
            LineError::Syntax(why) => format!("not valid JSON: {why}"),
            LineError::NotObject => "not a JSON object (JSON Lines: one object per line)".into(),
            LineError::Missing => format!(
                "no top-level field `{field}` (the time field; choose another with --field)"
            ),
            LineError::Duplicate => format!("the field `{field}` appears twice"),
            LineError::NotInteger(v) => {
                format!("`{field}` is {v}, not an integer number of nanoseconds")
            }
            LineError::HasLocal => format!(
                "the line already has `{field}_local`: was the file applied already? (the \
                 original time is kept under that name)"
            ),
            LineError::Has(name) => format!(
                "the line already has `{name}`: was the file applied already? (--interval \
                 writes the guaranteed interval under that name)"
            ),
        }
    }
}

/// Where the field's value lies in a line, and its value.
#[derive(Debug, PartialEq, Eq)]
pub struct Located {
    /// Byte range of the value.
    pub start: usize,
    /// End of the value (exclusive).
    pub end: usize,
    /// The integer.
    pub value: i64,
}

/// The bytes a string scan must stop at: the closing quote, a backslash, a control character
/// (JSON forbids them unescaped) and non-ASCII bytes (whose UTF-8 is then checked).
static SPECIAL_IN_STRING: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = b < 0x20 || b >= 0x80 || b == b'"' as usize || b == b'\\' as usize;
        b += 1;
    }
    t
};

/// The first byte at or after `i` that a string scan must stop at (`s.len()` if none).
///
/// Strings are most of a log line, so this is the scanner's hot loop: sixteen bytes per step
/// with SSE2 (part of every x86_64 CPU), one signed comparison catching both control characters
/// and non-ASCII bytes (negative as `i8`); a table look-up per byte for the last few bytes of a
/// line and on other architectures.
#[inline]
fn skip_plain(s: &[u8], i: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    let i = {
        let mut i = i;
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is in every x86_64 CPU; each unaligned 16-byte load lies within `s`
        // (`i + 16 <= s.len()`).
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let backslash = _mm_set1_epi8(b'\\' as i8);
            let space = _mm_set1_epi8(0x20);
            while i + 16 <= s.len() {
                let v = _mm_loadu_si128(s.as_ptr().add(i).cast::<__m128i>());
                let hit = _mm_or_si128(
                    _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                    _mm_cmplt_epi8(v, space),
                );
                let mask = _mm_movemask_epi8(hit) as u32;
                if mask != 0 {
                    return i + mask.trailing_zeros() as usize;
                }
                i += 16;
            }
        }
        i
    };
    i + s[i..]
        .iter()
        .position(|&b| SPECIAL_IN_STRING[b as usize])
        .unwrap_or(s.len() - i)
}

/// A validating scanner over one line.
struct Scanner<'a> {
    s: &'a [u8],
    i: usize,
}

type Scan<T> = Result<T, ()>;

impl<'a> Scanner<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&b) = self.s.get(self.i) {
            if !matches!(b, b' ' | b'\t' | b'\r' | b'\n') {
                break;
            }
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// A string starting at the opening quote; returns its contents' range and whether it
    /// holds an escape.
    #[inline(always)]
    fn string(&mut self) -> Scan<(usize, usize, bool)> {
        debug_assert_eq!(self.peek(), Some(b'"'));
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            self.i = skip_plain(self.s, self.i);
            let b = *self.s.get(self.i).ok_or(())?;
            match b {
                b'"' => {
                    self.i += 1;
                    // Only strings may hold non-ASCII bytes (elsewhere the grammar refuses
                    // them), so checking UTF-8 here checks the whole line.
                    if non_ascii && std::str::from_utf8(&self.s[start..self.i - 1]).is_err() {
                        return Err(());
                    }
                    return Ok((start, self.i - 1, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match *self.s.get(self.i + 1).ok_or(())? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 2,
                        b'u' => {
                            let unit = self.hex_escape(self.i)?;
                            self.i += 6;
                            match unit {
                                // A surrogate pair: the trailing half must follow.
                                0xD800..=0xDBFF => {
                                    if self.s.get(self.i) != Some(&b'\\') {
                                        return Err(());
                                    }
                                    if !(0xDC00..=0xDFFF).contains(&self.hex_escape(self.i)?) {
                                        return Err(());
                                    }
                                    self.i += 6;
                                }
                                0xDC00..=0xDFFF => return Err(()),
                                _ => {}
                            }
                        }
                        _ => return Err(()),
                    }
                }
                0..=0x1f => return Err(()),
                0x80.. => {
                    non_ascii = true;
                    self.i += 1;
                }
                _ => self.i += 1,
            }
        }
    }

    /// The code unit of the `\\uXXXX` escape at `at`.
    fn hex_escape(&self, at: usize) -> Scan<u16> {
        if self.s.get(at + 1) != Some(&b'u') {
            return Err(());
        }
        let hex = self.s.get(at + 2..at + 6).ok_or(())?;
        let hex = std::str::from_utf8(hex).map_err(|_| ())?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(());
        }
        u16::from_str_radix(hex, 16).map_err(|_| ())
    }

    #[inline]
    fn digits(&mut self) -> Scan<()> {
        let n = digits::digit_run(self.s, self.i.min(self.s.len()));
        self.i += n;
        if n == 0 { Err(()) } else { Ok(()) }
    }

    /// A number; returns whether it is an integer (no fraction, no exponent).
    fn number(&mut self) -> Scan<bool> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits()?,
            _ => return Err(()),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digits()?;
            integer = false;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
            integer = false;
        }
        Ok(integer)
    }

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(())
        }
    }

    #[inline]
    fn value(&mut self, depth: usize) -> Scan<()> {
        match self.peek().ok_or(())? {
            b'{' => self.object(depth + 1, &mut |_: &[u8], _, _, _| Ok(())),
            b'[' => {
                if depth + 1 > MAX_DEPTH {
                    return Err(());
                }
                self.i += 1;
                self.ws();
                if self.peek() == Some(b']') {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.ws();
                    self.value(depth + 1)?;
                    self.ws();
                    match self.peek().ok_or(())? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Ok(());
                        }
                        _ => return Err(()),
                    }
                }
            }
            b'"' => self.string().map(|_| ()),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(|_| ()),
        }
    }

    /// An object; `member(scanner, key range, key escaped, value range)` sees each member.
    #[inline]
    fn object<F>(&mut self, depth: usize, member: &mut F) -> Scan<()>
    where
        F: FnMut(&[u8], (usize, usize), bool, (usize, usize)) -> Scan<()>,
    {
        if depth > MAX_DEPTH {
            return Err(());
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(());
            }
            let (k0, k1, escaped) = self.string()?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(());
            }
            self.i += 1;
            self.ws();
            let v0 = self.i;
            self.value(depth)?;
            member(self.s, (k0, k1), escaped, (v0, self.i))?;
            self.ws();
            match self.peek().ok_or(())? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(()),
            }
        }
    }
}

/// The top-level members of one JSON object line that a caller asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct Members<const N: usize> {
    /// Per name asked for: the byte range of its value, if the object has it.
    pub at: [Option<(usize, usize)>; N],
    /// The first name (by its index) that the object holds twice.
    pub duplicate: Option<usize>,
}

/// Validates `line` (without its line break) as one JSON object — the full grammar, UTF-8
/// included — and finds its top-level members named `names` (nested objects are not looked
/// into). Errors are only `Syntax` and `NotObject`. A flat line takes the fast path
/// ([`flat`]); the full scanner reads the others.
pub fn members<const N: usize>(line: &[u8], names: &Names<N>) -> Result<Members<N>, LineError> {
    match flat::members(line, names) {
        Some(found) => Ok(found),
        None => scan_members(line, names),
    }
}

/// [`members`] by the full scanner alone.
fn scan_members<const N: usize>(line: &[u8], names: &Names<N>) -> Result<Members<N>, LineError> {
    let syntax = || {
        LineError::Syntax(
            match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
                Err(e) => e.to_string(),
                Ok(_) => "unexpected input".into(),
            },
        )
    };
    let mut sc = Scanner { s: line, i: 0 };
    sc.ws();
    if sc.peek() != Some(b'{') {
        // Valid JSON of another kind, or not JSON at all.
        let whole = sc.value(0).is_ok() && {
            sc.ws();
            sc.i == line.len()
        };
        return Err(if whole {
            LineError::NotObject
        } else {
            syntax()
        });
    }
    let mut found = Members {
        at: [None; N],
        duplicate: None,
    };
    sc.object(1, &mut |s, key, escaped, value| {
        if let Some(k) = names.find(s, key, escaped) {
            if found.at[k].is_some() {
                found.duplicate = Some(found.duplicate.map_or(k, |d| d.min(k)));
            }
            found.at[k] = Some(value);
        }
        Ok(())
    })
    .map_err(|()| syntax())?;
    sc.ws();
    if sc.i != line.len() {
        return Err(syntax());
    }
    Ok(found)
}

/// Appends the next line of `input` (with its line break, if any) to `line`; false at the end.
/// (`BufRead::read_until` scans with a slower byte search than the `memchr` crate's.)
pub fn read_line<R: BufRead>(input: &mut R, line: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut any = false;
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(any);
        }
        any = true;
        match memchr::memchr(b'\n', buf) {
            Some(nl) => {
                line.extend_from_slice(&buf[..=nl]);
                input.consume(nl + 1);
                return Ok(true);
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                input.consume(n);
            }
        }
    }
}

/// `text` for an error message: cut to 40 characters.
fn shown(text: &[u8]) -> String {
    let t = String::from_utf8_lossy(text);
    if t.chars().count() > 40 {
        format!("{}…", t.chars().take(40).collect::<String>())
    } else {
        t.into_owned()
    }
}

/// Validates `line` (without its line break) as one JSON object and finds its top-level `field`,
/// which must be an integer; `local` is the name the original will be kept under, which must
/// not be there yet.
pub fn locate(line: &[u8], field: &[u8], local: &[u8]) -> Result<Located, LineError> {
    locate_in(line, &Names::new([field, local, local, local]))
}

/// [`locate`] with `names` = `[field, local, lo, hi]` (prepared once per file): `lo` and `hi`
/// (what `--interval` adds) must not be there either.
fn locate_in(line: &[u8], names: &Names<4>) -> Result<Located, LineError> {
    let m = members(line, names)?;
    let (start, end) = m.at[0].ok_or(LineError::Missing)?;
    if m.duplicate == Some(0) {
        return Err(LineError::Duplicate);
    }
    if m.at[1].is_some() {
        return Err(LineError::HasLocal);
    }
    if let Some(k) = (2..4).find(|&k| m.at[k].is_some()) {
        return Err(LineError::Has(
            String::from_utf8_lossy(names.name(k)).into_owned(),
        ));
    }
    let value = integer(&line[start..end])
        .ok_or_else(|| LineError::NotInteger(shown(&line[start..end])))?;
    Ok(Located { start, end, value })
}

/// A member name as it is written between quotes in JSON.
pub(crate) fn json_key(name: &str) -> Vec<u8> {
    let quoted = serde_json::to_string(name).expect("a string serializes");
    quoted.as_bytes()[1..quoted.len() - 1].to_vec()
}

/// Rewrites a JSON Lines stream: per line, `field` mapped by `mapper`, the original kept as
/// `<field>_local` right after it; with `interval`, the guaranteed interval after that as
/// `<field>_lo` and `<field>_hi` (`null` where there is none). Blank lines are passed through.
/// `name` names the input in errors (`name:line: …`).
pub fn apply_jsonl<R: BufRead, W: Write>(
    mut input: R,
    name: &str,
    mut out: W,
    field: &str,
    interval: bool,
    mapper: &mut NodeMapper<'_>,
) -> Result<ApplySummary, ApplyError> {
    let local = format!("{field}_local");
    let (lo_name, hi_name) = super::interval_names(field);
    // Without --interval, the line may hold `<field>_lo` and `_hi` (they are not added).
    let names = if interval {
        Names::new([field, &local, &lo_name, &hi_name].map(str::as_bytes))
    } else {
        Names::new([field, &local, &local, &local].map(str::as_bytes))
    };
    let member = |key: &str| [&b",\""[..], &json_key(key), b"\":"].concat();
    let inserted = member(&local);
    let (lo_key, hi_key) = (member(&lo_name), member(&hi_name));
    let mut summary = ApplySummary::default();
    let mut number = itoa::Buffer::new();
    let mut number_no = 0u64;
    let write_err = |e| ApplyError::io("cannot write the output", e);
    // Lines are taken straight from the reader's buffer; only a line that straddles two
    // buffers' worth is copied (into `carry`).
    let mut carry: Vec<u8> = Vec::new();
    let mut rewrite = |line: &[u8], out: &mut W, summary: &mut ApplySummary| {
        number_no += 1;
        let body_end = line.len() - usize::from(line.last() == Some(&b'\n'));
        let body = &line[..body_end];
        if body
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        {
            out.write_all(line).map_err(write_err)?;
            summary.passed_through += 1;
            return Ok(());
        }
        let at = locate_in(body, &names).map_err(|e| {
            ApplyError::Events(format!("{name}:{number_no}: {}", e.describe(field)))
        })?;
        if !interval {
            let mapped = mapper.map(at.value);
            out.write_all(&line[..at.start]).map_err(write_err)?;
            out.write_all(number.format(mapped).as_bytes())
                .map_err(write_err)?;
            out.write_all(&inserted).map_err(write_err)?;
            out.write_all(&line[at.start..]).map_err(write_err)?;
            summary.events += 1;
            return Ok(());
        }
        let m = mapper.map_with_interval(at.value);
        summary.without_interval += u64::from(m.interval.is_none());
        out.write_all(&line[..at.start]).map_err(write_err)?;
        out.write_all(number.format(m.t_ns).as_bytes())
            .map_err(write_err)?;
        out.write_all(&inserted).map_err(write_err)?;
        out.write_all(&line[at.start..at.end]).map_err(write_err)?;
        for (key, bound) in [
            (&lo_key, m.interval.map(|i| i.0)),
            (&hi_key, m.interval.map(|i| i.1)),
        ] {
            out.write_all(key).map_err(write_err)?;
            let text = bound.map_or(&b"null"[..], |b| number.format(b).as_bytes());
            out.write_all(text).map_err(write_err)?;
        }
        out.write_all(&line[at.end..]).map_err(write_err)?;
        summary.events += 1;
        Ok::<(), ApplyError>(())
    };
    loop {
        let buf = input
            .fill_buf()
            .map_err(|e| ApplyError::io(format!("cannot read {name}"), e))?;
        if buf.is_empty() {
            break;
        }
        let len = buf.len();
        let mut at = 0;
        if !carry.is_empty() {
            match memchr::memchr(b'\n', buf) {
                Some(nl) => {
                    carry.extend_from_slice(&buf[..=nl]);
                    rewrite(&carry, &mut out, &mut summary)?;
                    carry.clear();
                    at = nl + 1;
                }
                None => {
                    carry.extend_from_slice(buf);
                    input.consume(len);
                    continue;
                }
            }
        }
        while let Some(nl) = memchr::memchr(b'\n', &buf[at..]) {
            rewrite(&buf[at..at + nl + 1], &mut out, &mut summary)?;
            at += nl + 1;
        }
        carry.extend_from_slice(&buf[at..]);
        input.consume(len);
    }
    if !carry.is_empty() {
        rewrite(&carry, &mut out, &mut summary)?;
    }
    out.flush().map_err(write_err)?;
    summary.outside_span = mapper.outside;
    summary.ambiguous = mapper.ambiguous;
    Ok(summary)
}

#[cfg(test)]
mod tests;
