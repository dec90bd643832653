//! The fast path: a flat object line, as `apply` writes them and most loggers do.
//!
//! The full scanner ([`super::members`]) takes every JSON text, nested to 128 levels, escapes
//! and all; its generality (a call per value, a callback per member, an `Option` per byte) cost
//! about 2,500 instructions per line of `apply --interval`'s output, most of a merge's work.
//! This path takes the common case only — one object whose values are strings, numbers, `true`,
//! `false` or `null`; strings without escapes; whitespace anywhere JSON allows it — in one tight
//! loop, and validates it completely: what it accepts is valid JSON and its members are the
//! full scanner's. Anything else (an escape, a nested value, an error) makes it give up, and the
//! full scanner reads the line from the start and says what is wrong, if anything. A property
//! test checks that the two agree.

use super::digits::digit_run;
use super::{Members, Names, skip_plain};

/// Index of the first byte at or after `i` that is not JSON whitespace.
#[inline(always)]
fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\r' | b'\n') = s.get(i) {
        i += 1;
    }
    i
}

/// The closing quote of the string whose contents start at `at`, if it holds no escape and no
/// control character (and is UTF-8).
#[inline(always)]
fn string_end(s: &[u8], at: usize) -> Option<usize> {
    let mut e = skip_plain(s, at);
    let mut ascii = true;
    loop {
        match *s.get(e)? {
            b'"' => break,
            0x80.. => {
                ascii = false;
                e = skip_plain(s, e + 1);
            }
            // An escape, or a control character: the full scanner decides.
            _ => return None,
        }
    }
    if !ascii && std::str::from_utf8(&s[at..e]).is_err() {
        return None;
    }
    Some(e)
}

/// The end of the number that starts at `i` (the JSON grammar: `-?(0|[1-9][0-9]*)`, then an
/// optional fraction and exponent).
#[inline(always)]
fn number_end(s: &[u8], mut i: usize) -> Option<usize> {
    if s[i] == b'-' {
        i += 1;
    }
    match *s.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i += digit_run(s, i),
        _ => return None,
    }
    if s.get(i) == Some(&b'.') {
        let n = digit_run(s, i + 1);
        if n == 0 {
            return None;
        }
        i += 1 + n;
    }
    if let Some(b'e' | b'E') = s.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = s.get(i) {
            i += 1;
        }
        let n = digit_run(s, i);
        if n == 0 {
            return None;
        }
        i += n;
    }
    Some(i)
}

/// The end of the scalar value at `i`: a string without escapes, a number or a literal.
#[inline(always)]
fn scalar_end(s: &[u8], i: usize) -> Option<usize> {
    let word = |w: &[u8]| s[i..].starts_with(w).then_some(i + w.len());
    match *s.get(i)? {
        b'"' => string_end(s, i + 1).map(|e| e + 1),
        b'-' | b'0'..=b'9' => number_end(s, i),
        b't' => word(b"true"),
        b'f' => word(b"false"),
        b'n' => word(b"null"),
        // A nested object or array, or not JSON: the full scanner decides.
        _ => None,
    }
}

/// `s`'s members named by `names`, if `s` is a flat object line (see the module doc); `None`
/// if it is anything else, valid or not.
pub(super) fn members<const N: usize>(s: &[u8], names: &Names<N>) -> Option<Members<N>> {
    let mut found = Members {
        at: [None; N],
        duplicate: None,
    };
    let mut i = skip_ws(s, 0);
    if s.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(s, i + 1);
    if s.get(i) == Some(&b'}') {
        return (skip_ws(s, i + 1) == s.len()).then_some(found);
    }
    loop {
        if s.get(i) != Some(&b'"') {
            return None;
        }
        let key = (i + 1, string_end(s, i + 1)?);
        i = skip_ws(s, key.1 + 1);
        if s.get(i) != Some(&b':') {
            return None;
        }
        let v0 = skip_ws(s, i + 1);
        let v1 = scalar_end(s, v0)?;
        if let Some(k) = names.find(s, key, false) {
            if found.at[k].is_some() {
                found.duplicate = Some(found.duplicate.map_or(k, |d| d.min(k)));
            }
            found.at[k] = Some((v0, v1));
        }
        i = skip_ws(s, v1);
        match *s.get(i)? {
            b',' => i = skip_ws(s, i + 1),
            b'}' => return (skip_ws(s, i + 1) == s.len()).then_some(found),
            _ => return None,
        }
    }
}
