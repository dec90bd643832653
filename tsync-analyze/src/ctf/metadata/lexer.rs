//! The tokens of TSDL, CTF 1.8's metadata language: C-like identifiers, integer literals, string
//! literals and punctuation, with comments dropped. Every token keeps its byte range in the text,
//! so that `apply --format ctf` can rewrite one block and leave the rest byte for byte.

use super::MetadataError;

/// What a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// An identifier or keyword (`struct`, `integer`, `uint32_t`, `_seq`, …).
    Ident(String),
    /// An integer literal (decimal, `0x` hexadecimal or `0` octal; suffixes `u`/`l` dropped).
    /// The sign of a negative number is a separate `-` token.
    Int(u64),
    /// A string literal, escapes resolved.
    Str(String),
    /// Punctuation: `{ } ( ) [ ] ; , : := = . ... < > - + * ->`.
    Punct(&'static str),
}

/// A token and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// The token.
    pub kind: TokenKind,
    /// Byte offset of its first character.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
}

/// The punctuators, longest first so that `:=` is not read as `:` then `=`.
const PUNCTS: [&str; 17] = [
    "...", ":=", "->", "{", "}", "(", ")", "[", "]", ";", ",", ":", "=", ".", "<", ">", "-",
];

/// Splits `text` into tokens. Fails on a character TSDL does not use, an unclosed comment or
/// string, or a number that does not fit 64 bits — each error says where.
pub fn tokenize(text: &str) -> Result<Vec<Token>, MetadataError> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(text.len() / 4);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"/*") {
            let close = memchr::memmem::find(&b[i + 2..], b"*/")
                .ok_or_else(|| MetadataError::at(text, i, "a comment is not closed"))?;
            i += close + 4;
            continue;
        }
        if b[i..].starts_with(b"//") {
            i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |p| i + p);
            continue;
        }
        let start = i;
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            TokenKind::Ident(text[start..i].to_string())
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            TokenKind::Int(number(&text[start..i]).ok_or_else(|| {
                MetadataError::at(
                    text,
                    start,
                    format!("`{}` is not an integer of 64 bits", &text[start..i]),
                )
            })?)
        } else if c == b'"' || c == b'\'' {
            let (s, next) = string(text, i)?;
            i = next;
            TokenKind::Str(s)
        } else if c == b'+' || c == b'*' {
            i += 1;
            TokenKind::Punct(if c == b'+' { "+" } else { "*" })
        } else if let Some(p) = PUNCTS.iter().find(|p| b[i..].starts_with(p.as_bytes())) {
            i += p.len();
            TokenKind::Punct(p)
        } else {
            return Err(MetadataError::at(
                text,
                i,
                format!(
                    "unexpected character {:?}",
                    text[i..].chars().next().unwrap_or('?')
                ),
            ));
        };
        out.push(Token {
            kind,
            start,
            end: i,
        });
    }
    Ok(out)
}

/// An integer literal: `0x…` hexadecimal, `0…` octal, else decimal, with C's `u`/`l` suffixes.
fn number(s: &str) -> Option<u64> {
    let s = s.trim_end_matches(['u', 'U', 'l', 'L']);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// A string (or character) literal starting at `at`: its value and the offset after it.
fn string(text: &str, at: usize) -> Result<(String, usize), MetadataError> {
    let b = text.as_bytes();
    let quote = b[at];
    let mut out = String::new();
    let mut i = at + 1;
    let mut run = i;
    loop {
        let Some(&c) = b.get(i) else {
            return Err(MetadataError::at(text, at, "a string is not closed"));
        };
        if c == quote {
            out.push_str(&text[run..i]);
            return Ok((out, i + 1));
        }
        if c == b'\\' {
            out.push_str(&text[run..i]);
            let e = *b
                .get(i + 1)
                .ok_or_else(|| MetadataError::at(text, at, "a string is not closed"))?;
            out.push(match e {
                b'n' => '\n',
                b't' => '\t',
                b'r' => '\r',
                b'0' => '\0',
                _ => e as char,
            });
            i += 2;
            run = i;
            continue;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<TokenKind> {
        tokenize(text)
            .unwrap()
            .into_iter()
            .map(|t| t.kind)
            .collect()
    }

    #[test]
    fn reads_lttngs_constructs() {
        use TokenKind::*;
        let k = kinds(
            "/* CTF 1.8 */ typealias integer { size = 27; } := uint27_t; // line\n\
             enum : uint5_t { compact = 0 ... 30 } id; x = 0x1F; y = 017; s = \"a\\\"b\";",
        );
        assert_eq!(k[0], Ident("typealias".into()));
        assert!(k.contains(&Punct(":=")));
        assert!(k.contains(&Punct("...")));
        assert!(k.contains(&Int(0x1F)));
        assert!(k.contains(&Int(15)));
        assert!(k.contains(&Str("a\"b".into())));
        assert!(!k.contains(&Ident("line".into())));
    }

    #[test]
    fn keeps_byte_ranges_and_says_where_it_fails() {
        let t = tokenize("clock { name = \"x\"; };").unwrap();
        assert_eq!((t[0].start, t[0].end), (0, 5));
        assert_eq!(t.last().unwrap().kind, TokenKind::Punct(";"));
        let e = tokenize("a\n  b @").unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        assert!(tokenize("/* open").is_err());
        assert!(tokenize("\"open").is_err());
        assert!(tokenize("99999999999999999999").is_err());
    }
}
