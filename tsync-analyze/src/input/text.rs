//! The text message format (README, compatible with the LTTV test cases):
//! `#` comments, blank lines, the number of traces, then `sender receiver send_time recv_time`.
//!
//! The parser works on raw bytes without allocating per line: it is on the hot path when a capture
//! is re-analyzed from `tsync-analyze messages` output (10^7 lines and more).

use std::io::Read;
use std::path::Path;

use crate::input::error::InputError;
use crate::model::Message;

/// Bytes read from the file at a time.
const BLOCK: usize = 1 << 20;
/// The longest line read (a message line is under 100 bytes): memory stays bounded on any input.
const MAX_LINE: usize = 16 << 20;

/// The most traces a text message file may declare. Memory grows with the traces and pairs that
/// messages actually name, not with this number, but a count far beyond any traced system is a
/// typo or a wrong file, and is said to be one.
pub const MAX_TRACES: u32 = 4096;

/// What the first data line of a text message file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextHeader {
    /// Number of traces N: trace indices in the file are 0..N.
    pub traces: u32,
}

/// Counts of what a text file held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TextStats {
    /// Lines in the file, blank lines and comments included.
    pub lines: u64,
    /// Messages passed on (lines whose sender is not the receiver).
    pub messages: u64,
    /// Lines whose sender is its receiver (dropped, like loopback packets).
    pub same_trace: u64,
}

/// True if `prefix` (the start of a file) looks like a text message file: no control bytes but
/// whitespace (comments may hold any UTF-8 or Latin-1 text).
pub fn looks_like_text(prefix: &[u8]) -> bool {
    prefix
        .iter()
        .all(|&b| b == b'\n' || b == b'\r' || b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Reads the header (number of traces) of a text message file.
pub fn read_header(path: &Path) -> Result<TextHeader, InputError> {
    let mut header = None;
    scan(path, &mut |_| {}, |line, bytes, pos| {
        let p = skip_blanks(bytes, *pos);
        if bytes[p] == b'\n' || bytes[p] == b'#' {
            *pos = skip_line(bytes, p);
            return Ok(true);
        }
        let mut q = p;
        let n = match parse_uint(bytes, &mut q) {
            Some(n) => n,
            // Digits, but more than a u64 holds.
            None if bytes[p].is_ascii_digit() => u64::MAX,
            None => {
                return Err(InputError::syntax(
                    path,
                    line,
                    "expected the number of traces",
                ));
            }
        };
        if n == u64::MAX {
            while bytes[q].is_ascii_digit() {
                q += 1;
            }
        }
        let digits = &bytes[p..q];
        q = skip_blanks(bytes, q);
        if bytes[q] != b'\n' {
            return Err(InputError::syntax(
                path,
                line,
                "the first line must hold only the number of traces",
            ));
        }
        if n == 0 {
            return Err(InputError::syntax(
                path,
                line,
                "the number of traces is 0: it must be at least 1",
            ));
        }
        if n > MAX_TRACES as u64 {
            return Err(InputError::syntax(
                path,
                line,
                format!(
                    "the file declares {} traces; tsync-analyze takes at most {MAX_TRACES} \
                     traces per text file (is the first line really the number of traces?)",
                    shown(digits)
                ),
            ));
        }
        header = Some(TextHeader { traces: n as u32 });
        Ok(false)
    })?;
    header.ok_or_else(|| {
        InputError::syntax(path, 1, "the file is empty: expected the number of traces")
    })
}

/// Streams the messages of a text message file to `f`, with trace indices shifted by `trace_base`
/// (the position of the file's trace 0 in the analyzer's trace list). Same-trace lines are counted,
/// not passed on. `f` gets the message and its 1-based line number.
pub fn for_each_message(
    path: &Path,
    trace_base: u32,
    f: &mut dyn FnMut(Message, u64),
) -> Result<TextStats, InputError> {
    for_each_message_with_progress(path, trace_base, f, &mut |_| {})
}

/// [`for_each_message`], calling `progress(bytes)` after every block read.
pub fn for_each_message_with_progress(
    path: &Path,
    trace_base: u32,
    f: &mut dyn FnMut(Message, u64),
    progress: &mut dyn FnMut(u64),
) -> Result<TextStats, InputError> {
    for_each_message_in(path, trace_base, f, progress)
}

/// [`for_each_message_with_progress`] for a callback of a known type (inlined into the parsing
/// loop: no call per line).
pub fn for_each_message_in<F: FnMut(Message, u64) + ?Sized>(
    path: &Path,
    trace_base: u32,
    f: &mut F,
    progress: &mut dyn FnMut(u64),
) -> Result<TextStats, InputError> {
    let mut traces: Option<u64> = None;
    let mut stats = TextStats::default();
    let lines = scan(path, progress, |line, bytes, pos| {
        let p = skip_blanks(bytes, *pos);
        let b = bytes[p];
        if b == b'\n' || b == b'#' {
            *pos = skip_line(bytes, p);
            return Ok(true);
        }
        let Some(n) = traces else {
            let mut q = p;
            traces =
                Some(parse_uint(bytes, &mut q).ok_or_else(|| {
                    InputError::syntax(path, line, "expected the number of traces")
                })?);
            *pos = skip_line(bytes, q);
            return Ok(true);
        };
        let (s, r, ts, tr, q) = match parse_record_fast(bytes, p, n) {
            Some(fast) => fast,
            None => {
                let mut q = p;
                let (s, r, ts, tr) = parse_record(bytes, &mut q, n)
                    .map_err(|what| InputError::syntax(path, line, what))?;
                (s, r, ts, tr, q)
            }
        };
        *pos = q + 1;
        if s == r {
            stats.same_trace += 1;
        } else {
            stats.messages += 1;
            f(
                Message {
                    send_trace: trace_base + s as u32,
                    recv_trace: trace_base + r as u32,
                    send_ns: ts,
                    recv_ns: tr,
                },
                line,
            );
        }
        Ok(true)
    })?;
    stats.lines = lines;
    Ok(stats)
}

/// Calls `on_line(line_number, buffer, position)` for every line, where `buffer[position..]`
/// starts the line and is guaranteed to contain its terminating `\n` (one is added at the end of
/// the file if missing). The callback advances `position` past the `\n` and returns whether to go
/// on. Returns the number of lines seen.
fn scan<H: FnMut(u64, &[u8], &mut usize) -> Result<bool, InputError>>(
    path: &Path,
    progress: &mut dyn FnMut(u64),
    mut on_line: H,
) -> Result<u64, InputError> {
    let mut file = std::fs::File::open(path).map_err(|e| InputError::io(path, e))?;
    let mut buf = vec![0u8; BLOCK];
    let mut filled = 0usize;
    let mut line = 0u64;
    let mut eof = false;
    loop {
        if !eof {
            if filled == buf.len() {
                // The buffer holds no newline (else its complete lines were consumed): one line
                // fills it all.
                if buf.len() >= MAX_LINE {
                    return Err(InputError::syntax(
                        path,
                        line + 1,
                        format!(
                            "the line is longer than {} MiB: not a text message file",
                            MAX_LINE >> 20
                        ),
                    ));
                }
                buf.resize(buf.len() * 2, 0);
            }
            let n = loop {
                match file.read(&mut buf[filled..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(InputError::io(path, e)),
                }
            };
            if n == 0 {
                eof = true;
                if filled > 0 && buf[filled - 1] != b'\n' {
                    if filled == buf.len() {
                        buf.push(b'\n');
                    } else {
                        buf[filled] = b'\n';
                    }
                    filled += 1;
                }
            } else {
                filled += n;
                progress(n as u64);
            }
        }
        // Complete lines end at the last newline of the buffer.
        let end = match buf[..filled].iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if eof => return Ok(line),
            None => continue,
        };
        let region = &buf[..end];
        let mut pos = 0usize;
        while pos < end {
            line += 1;
            if !on_line(line, region, &mut pos)? {
                return Ok(line);
            }
        }
        buf.copy_within(end..filled, 0);
        filled -= end;
        if eof && filled == 0 {
            return Ok(line);
        }
    }
}

#[inline]
fn skip_blanks(b: &[u8], mut p: usize) -> usize {
    while b[p] == b' ' || b[p] == b'\t' || b[p] == b'\r' {
        p += 1;
    }
    p
}

#[inline]
fn skip_line(b: &[u8], mut p: usize) -> usize {
    while b[p] != b'\n' {
        p += 1;
    }
    p + 1
}

#[inline]
fn parse_uint(b: &[u8], p: &mut usize) -> Option<u64> {
    let start = *p;
    let mut v: u64 = 0;
    while b[*p].is_ascii_digit() {
        v = v.checked_mul(10)?.checked_add(u64::from(b[*p] - b'0'))?;
        *p += 1;
    }
    (*p > start).then_some(v)
}

/// The common case of [`parse_record`], in one straight pass: `S R I.FFFFFFFFF I.FFFFFFFFF\n`
/// (single spaces, nanosecond fractions, indices in range, times that fit). Returns the fields
/// and the position of the `\n`, or None for anything else — which [`parse_record`] then parses
/// (or reports) in full. For every line it accepts, both give the same values.
#[inline]
fn parse_record_fast(b: &[u8], p: usize, traces: u64) -> Option<(u64, u64, i64, i64, usize)> {
    let mut q = p;
    let s = fast_uint(b, &mut q)?;
    let r = fast_uint(b, &mut q)?;
    let ts = fast_seconds(b, &mut q)?;
    if b[q] != b' ' {
        return None;
    }
    q += 1;
    let tr = fast_seconds(b, &mut q)?;
    (b[q] == b'\n' && s < traces && r < traces).then_some((s, r, ts, tr, q))
}

/// Up to 9 digits followed by one space (skipped).
#[inline]
fn fast_uint(b: &[u8], q: &mut usize) -> Option<u64> {
    let start = *q;
    let mut v = 0u64;
    while b[*q].is_ascii_digit() {
        if *q - start == 9 {
            return None;
        }
        v = v * 10 + u64::from(b[*q] - b'0');
        *q += 1;
    }
    if *q == start || b[*q] != b' ' {
        return None;
    }
    *q += 1;
    Some(v)
}

/// `I.FFFFFFFFF`: up to 10 integer digits and exactly 9 fraction digits, as nanoseconds.
#[inline]
fn fast_seconds(b: &[u8], q: &mut usize) -> Option<i64> {
    let start = *q;
    let mut int = 0u64;
    while b[*q].is_ascii_digit() {
        if *q - start == 10 {
            return None;
        }
        int = int * 10 + u64::from(b[*q] - b'0');
        *q += 1;
    }
    if *q == start || b[*q] != b'.' {
        return None;
    }
    let f = *q + 1;
    // Eight digits, then the ninth (the line's `\n` is still ahead, so both reads are in bounds).
    let high = eight_digits(u64::from_le_bytes(b.get(f..f + 8)?.try_into().ok()?))?;
    let ninth = b[f + 8];
    if !ninth.is_ascii_digit() || b[f + 9].is_ascii_digit() {
        return None;
    }
    *q = f + 9;
    // int < 10¹⁰, so int·10⁹ + frac < 10¹⁹ fits in u64.
    let ns = int * 1_000_000_000 + high * 10 + u64::from(ninth - b'0');
    i64::try_from(ns).ok()
}

/// Parses `sender receiver send recv` up to (not past) the line's `\n`.
#[inline]
fn parse_record(b: &[u8], p: &mut usize, traces: u64) -> Result<(u64, u64, i64, i64), String> {
    let s = parse_index(b, p, traces, "sender")?;
    *p = expect_blank(b, *p)?;
    let r = parse_index(b, p, traces, "receiver")?;
    *p = expect_blank(b, *p)?;
    let ts = parse_seconds(b, p, "send time")?;
    *p = expect_blank(b, *p)?;
    let tr = parse_seconds(b, p, "receive time")?;
    *p = skip_blanks(b, *p);
    if b[*p] != b'\n' {
        return Err(format!(
            "unexpected text after the 4 fields: `{}`",
            rest_of_line(b, *p)
        ));
    }
    Ok((s, r, ts, tr))
}

fn rest_of_line(b: &[u8], p: usize) -> String {
    let e = skip_line(b, p) - 1;
    shown(&b[p..e])
}

#[inline]
fn expect_blank(b: &[u8], p: usize) -> Result<usize, String> {
    if b[p] == b' ' || b[p] == b'\t' {
        Ok(skip_blanks(b, p))
    } else if b[p] == b'\n' {
        Err("expected 4 fields `sender receiver send_time recv_time`, the line ends early".into())
    } else {
        Err(format!("unexpected character in `{}`", rest_of_line(b, p)))
    }
}

#[inline]
fn parse_index(b: &[u8], p: &mut usize, traces: u64, what: &str) -> Result<u64, String> {
    if b[*p] == b'-' {
        return Err(format!("{what} trace index is negative"));
    }
    let v = parse_uint(b, p).ok_or_else(|| {
        format!(
            "expected the {what} trace index, found `{}`",
            rest_of_line(b, *p)
        )
    })?;
    if v >= traces {
        return Err(format!(
            "{what} trace index {v} is out of range: the file declares {traces} traces (0..{traces})"
        ));
    }
    Ok(v)
}

/// Parses a time in seconds and returns `round(t * 1e9)` nanoseconds.
///
/// Plain decimals are converted exactly on their digits (ties round away from zero, as `f64::round`
/// does), so every value printed as `S.NNNNNNNNN` reads back to the same nanosecond however large;
/// for the LTTV cases this equals the reference's `round(t * 1e9)` in doubles. Exponent notation
/// goes through `f64`.
#[inline]
pub(crate) fn parse_seconds(b: &[u8], p: &mut usize, what: &str) -> Result<i64, String> {
    let start = *p;
    match b[*p] {
        b'-' => return Err(format!("negative {what} `{}`", token(b, start))),
        b'+' => *p += 1,
        _ => {}
    }
    let mut int: u64 = 0;
    let mut digits = 0u32;
    let mut overflow = false;
    while b[*p].is_ascii_digit() {
        // 18 digits always fit in a u64; a value with more significant digits is too large for
        // i64 nanoseconds anyway.
        if int < 100_000_000_000_000_000 {
            int = int * 10 + u64::from(b[*p] - b'0');
        } else {
            overflow = true;
        }
        *p += 1;
        digits += 1;
    }
    let mut frac: u64 = 0;
    let mut frac_digits = 0u32;
    let mut round_up = false;
    if b[*p] == b'.' {
        *p += 1;
        // Nanosecond fractions usually have 9 digits: take the first 8 at once.
        if let Some(chunk) = b.get(*p..*p + 8)
            && let Some(v) = eight_digits(u64::from_le_bytes(chunk.try_into().expect("8 bytes")))
        {
            frac = v;
            frac_digits = 8;
            *p += 8;
        }
        while b[*p].is_ascii_digit() {
            let d = u64::from(b[*p] - b'0');
            if frac_digits < 9 {
                frac = frac * 10 + d;
            } else if frac_digits == 9 {
                round_up = d >= 5;
            }
            frac_digits += 1;
            *p += 1;
        }
    }
    if digits + frac_digits == 0 {
        return Err(format!(
            "expected the {what} in seconds, found `{}`",
            token(b, start)
        ));
    }
    match b[*p] {
        b' ' | b'\t' | b'\r' | b'\n' => {}
        b'e' | b'E' => return parse_seconds_float(b, p, start, what),
        _ => return Err(format!("{what} `{}` is not a number", token(b, start))),
    }
    if frac_digits < 9 {
        frac *= POW10[(9 - frac_digits) as usize];
    }
    let ns = if overflow {
        None
    } else {
        int.checked_mul(1_000_000_000)
            .and_then(|v| v.checked_add(frac + u64::from(round_up)))
            .filter(|&v| v <= i64::MAX as u64)
    };
    ns.map(|v| v as i64).ok_or_else(|| {
        format!(
            "{what} `{}` is too large (at most {} s)",
            token(b, start),
            i64::MAX / 1_000_000_000
        )
    })
}

/// The value of 8 ASCII digits read as a little-endian u64, or None if any byte is not a digit
/// (SWAR: the classic multiply-and-shift reduction of pairs, quads, then octets).
#[inline]
fn eight_digits(v: u64) -> Option<u64> {
    let all_digits = (v & 0xF0F0_F0F0_F0F0_F0F0)
        | (((v.wrapping_add(0x0606_0606_0606_0606)) & 0xF0F0_F0F0_F0F0_F0F0) >> 4)
        == 0x3333_3333_3333_3333;
    if !all_digits {
        return None;
    }
    let v = v - 0x3030_3030_3030_3030;
    let v = (v * 10 + (v >> 8)) & 0x00FF_00FF_00FF_00FF;
    let v = (v * 100 + (v >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((v * 10_000 + (v >> 32)) & 0xFFFF_FFFF)
}

const POW10: [u64; 10] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The end of the token that starts at `start` (the next blank or line end).
fn token_end(b: &[u8], start: usize) -> usize {
    let mut e = start;
    while !matches!(b[e], b' ' | b'\t' | b'\r' | b'\n') {
        e += 1;
    }
    e
}

/// The token at `start` as shown in an error message: cut to [`SHOWN_CHARS`] characters, so that a
/// megabyte of garbage on one line does not flood the terminal.
fn token(b: &[u8], start: usize) -> String {
    shown(&b[start..token_end(b, start)])
}

/// How many characters of a bad token or line an error message shows.
const SHOWN_CHARS: usize = 40;

/// `bytes` as text for an error message, cut to [`SHOWN_CHARS`] characters with `…` marking a cut.
pub(crate) fn shown(bytes: &[u8]) -> String {
    // SHOWN_CHARS characters take at most 4 bytes each.
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4 * SHOWN_CHARS)]);
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(SHOWN_CHARS).collect();
    if chars.next().is_some() || bytes.len() > 4 * SHOWN_CHARS {
        out.push('…');
    }
    out
}

#[cold]
fn parse_seconds_float(b: &[u8], p: &mut usize, start: usize, what: &str) -> Result<i64, String> {
    let end = token_end(b, start);
    *p = end;
    let tok = shown(&b[start..end]);
    let t: f64 = std::str::from_utf8(&b[start..end])
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("{what} `{tok}` is not a number"))?;
    if !t.is_finite() {
        return Err(format!("{what} `{tok}` is not finite"));
    }
    if t < 0.0 {
        return Err(format!("negative {what} `{tok}`"));
    }
    let ns = (t * 1e9).round();
    if ns >= 9.223_372_036_854_775e18 {
        return Err(format!("{what} `{tok}` is too large"));
    }
    Ok(ns as i64)
}

/// Formats nanoseconds as exact decimal seconds (`S.NNNNNNNNN`), which read back to the same value.
pub fn format_seconds(ns: i64, out: &mut String) {
    use std::fmt::Write;
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    let _ = write!(out, "{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000);
}

#[cfg(test)]
mod tests;
