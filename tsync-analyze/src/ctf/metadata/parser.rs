//! A recursive-descent parser of TSDL (CTF 1.8, section 7) into the syntax tree of [`ast`]:
//! the subset every LTTng version writes — `typealias`/`typedef`, `integer`, `floating_point`,
//! `string`, `enum`, `struct` (with `align(n)`), `variant`, static arrays and sequences, and the
//! `trace`, `env`, `clock`, `stream`, `event` (and `callsite`) blocks.
//!
//! Hostile metadata cannot exhaust the stack: nesting deeper than [`MAX_DEPTH`] is refused.

use super::MetadataError;
use super::ast::{Attr, BlockKind, Decl, Dim, EnumEntry, Field, TypeSpec, Value};
use super::lexer::{Token, TokenKind, tokenize};

/// Deepest nesting of types and blocks accepted (LTTng's deepest is 5).
pub const MAX_DEPTH: usize = 64;

/// Keywords that start a type.
const TYPE_KEYWORDS: [&str; 6] = [
    "integer",
    "floating_point",
    "string",
    "struct",
    "variant",
    "enum",
];
/// C qualifiers TSDL allows and that change nothing here.
const QUALIFIERS: [&str; 2] = ["const", "volatile"];

/// Parses a whole TSDL text.
pub fn parse(text: &str) -> Result<Vec<Decl>, MetadataError> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        text,
        toks: &tokens,
        pos: 0,
        depth: 0,
        hoisted: Vec::new(),
    };
    let mut out = Vec::new();
    while p.pos < p.toks.len() {
        if p.eat(";") {
            continue;
        }
        let d = p.top_level()?;
        out.append(&mut p.hoisted);
        out.push(d);
    }
    Ok(out)
}

/// A top-level block's statements and the byte range of the whole declaration.
pub type Block = (Vec<Attr>, (usize, usize));

/// The statements of the top-level `kind` blocks of `text` with their byte ranges, read from
/// the tokens alone: the types around them need not parse (what `apply` rewrites).
pub fn blocks(text: &str, kind: &str) -> Result<Vec<Block>, MetadataError> {
    let tokens = tokenize(text)?;
    let mut p = Parser {
        text,
        toks: &tokens,
        pos: 0,
        depth: 0,
        hoisted: Vec::new(),
    };
    let mut found = Vec::new();
    let mut depth = 0usize;
    while let Some(t) = p.toks.get(p.pos) {
        match &t.kind {
            TokenKind::Punct("{") => depth += 1,
            TokenKind::Punct("}") => depth = depth.saturating_sub(1),
            TokenKind::Ident(w) if depth == 0 && w == kind && p.peek_at(1) == Some("{") => {
                let start = t.start;
                p.pos += 2;
                let attrs = p.attrs()?;
                let mut end = p.toks[p.pos - 1].end;
                if p.eat(";") {
                    end = p.toks[p.pos - 1].end;
                }
                found.push((attrs, (start, end)));
                continue;
            }
            _ => {}
        }
        p.pos += 1;
    }
    Ok(found)
}

struct Parser<'a> {
    text: &'a str,
    toks: &'a [Token],
    pos: usize,
    depth: usize,
    /// Aliases declared inside a struct body: TSDL scopes them there, the reader declares them
    /// before the declaration that holds them (no LTTng metadata shadows a name).
    hoisted: Vec<Decl>,
}

impl<'a> Parser<'a> {
    fn error(&self, what: impl Into<String>) -> MetadataError {
        let at = self.toks.get(self.pos).map_or(self.text.len(), |t| t.start);
        MetadataError::at(self.text, at, what)
    }

    fn peek_at(&self, k: usize) -> Option<&'a str> {
        match &self.toks.get(self.pos + k)?.kind {
            TokenKind::Punct(p) => Some(p),
            TokenKind::Ident(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn is(&self, what: &str) -> bool {
        self.peek_at(0) == Some(what)
    }

    fn is_ident(&self) -> bool {
        matches!(
            self.toks.get(self.pos).map(|t| &t.kind),
            Some(TokenKind::Ident(_))
        )
    }

    fn eat(&mut self, what: &str) -> bool {
        let hit = self.is(what);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect(&mut self, what: &str) -> Result<(), MetadataError> {
        if self.eat(what) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{what}`")))
        }
    }

    fn ident(&mut self) -> Result<String, MetadataError> {
        match self.toks.get(self.pos).map(|t| &t.kind) {
            Some(TokenKind::Ident(s)) => {
                self.pos += 1;
                Ok(s.clone())
            }
            _ => Err(self.error("expected a name")),
        }
    }

    fn enter(&mut self) -> Result<(), MetadataError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn top_level(&mut self) -> Result<Decl, MetadataError> {
        let start = self.toks[self.pos].start;
        if self.eat("typealias") {
            let ty = self.type_spec(false)?;
            self.expect(":=")?;
            let name = self.words(&[";"])?;
            self.expect(";")?;
            return Ok(Decl::Alias {
                ty,
                dims: Vec::new(),
                name,
            });
        }
        if self.eat("typedef") {
            let f = self.field()?;
            return Ok(Decl::Alias {
                ty: f.ty,
                dims: f.dims,
                name: f.name,
            });
        }
        if self.is_ident() && self.peek_at(1) == Some("{") {
            let kind = match self.ident()?.as_str() {
                "trace" => BlockKind::Trace,
                "env" => BlockKind::Env,
                "clock" => BlockKind::Clock,
                "stream" => BlockKind::Stream,
                "event" => BlockKind::Event,
                _ => BlockKind::Other,
            };
            self.expect("{")?;
            let attrs = self.attrs()?;
            self.expect(";")?;
            let end = self.toks[self.pos - 1].end;
            return Ok(Decl::Block {
                kind,
                attrs,
                range: (start, end),
            });
        }
        if TYPE_KEYWORDS[3..].iter().any(|k| self.is(k)) {
            let ty = self.type_spec(false)?;
            self.expect(";")?;
            return Ok(Decl::Type(ty));
        }
        Err(self.error(
            "expected a declaration (typealias, typedef, struct, variant, enum, or a block)",
        ))
    }

    /// Items up to and including the closing `}` of a body (empty statements skipped), each
    /// read by `item`; `what` names the body in the error when it is not closed.
    fn body<T>(
        &mut self,
        what: &str,
        mut item: impl FnMut(&mut Self, &mut Vec<T>) -> Result<(), MetadataError>,
    ) -> Result<Vec<T>, MetadataError> {
        self.enter()?;
        let mut out = Vec::new();
        loop {
            if self.eat("}") {
                break;
            }
            if self.eat(";") {
                continue;
            }
            if self.pos >= self.toks.len() {
                return Err(self.error(format!("{what} is not closed")));
            }
            item(self, &mut out)?;
        }
        self.depth -= 1;
        Ok(out)
    }

    /// Statements up to and including the closing `}` of a block or attribute list.
    fn attrs(&mut self) -> Result<Vec<Attr>, MetadataError> {
        self.body("a block", |p, out| {
            let start = p.toks[p.pos].start;
            let mut key = p.ident()?;
            while p.eat(".") {
                key.push('.');
                key.push_str(&p.ident()?);
            }
            let value = if p.eat(":=") {
                Value::Type(p.type_spec(false)?)
            } else {
                p.expect("=")?;
                p.value()?
            };
            let end = p.toks[p.pos - 1].end;
            p.expect(";")?;
            out.push(Attr {
                key,
                value,
                range: (start, end),
            });
            Ok(())
        })
    }

    fn value(&mut self) -> Result<Value, MetadataError> {
        let t = self
            .toks
            .get(self.pos)
            .ok_or_else(|| self.error("expected a value"))?;
        match &t.kind {
            TokenKind::Int(_) | TokenKind::Punct("-") | TokenKind::Punct("+") => {
                Ok(Value::Int(self.int()?))
            }
            TokenKind::Str(s) => {
                self.pos += 1;
                Ok(Value::Str(s.clone()))
            }
            TokenKind::Ident(_) => Ok(Value::Path(self.path()?)),
            _ => Err(self.error("expected a value")),
        }
    }

    fn path(&mut self) -> Result<String, MetadataError> {
        let mut p = self.ident()?;
        while self.eat(".") || self.eat("->") {
            p.push('.');
            p.push_str(&self.ident()?);
        }
        Ok(p)
    }

    fn int(&mut self) -> Result<i128, MetadataError> {
        let negative = self.eat("-");
        if !negative {
            self.eat("+");
        }
        match self.toks.get(self.pos).map(|t| &t.kind) {
            Some(TokenKind::Int(v)) => {
                self.pos += 1;
                Ok(if negative { -(*v as i128) } else { *v as i128 })
            }
            _ => Err(self.error("expected an integer")),
        }
    }

    /// Identifiers up to one of `stops` (a C multi-word type name), joined by spaces.
    fn words(&mut self, stops: &[&str]) -> Result<String, MetadataError> {
        let mut w = vec![self.ident()?];
        while self.is_ident() && !stops.iter().any(|s| self.is(s)) {
            w.push(self.ident()?);
        }
        Ok(w.join(" "))
    }

    /// A type. `in_field`: a field's name follows, so a lone identifier after `struct`,
    /// `variant` or `enum` is that name, not the type's.
    fn type_spec(&mut self, in_field: bool) -> Result<TypeSpec, MetadataError> {
        self.enter()?;
        while QUALIFIERS.iter().any(|q| self.is(q)) {
            self.pos += 1;
        }
        let named = |p: &Self| {
            p.is_ident()
                && match p.peek_at(1) {
                    Some("{") | Some(":") | Some("<") | Some("align") => true,
                    Some(_) if !in_field => true,
                    _ => p
                        .toks
                        .get(p.pos + 1)
                        .is_some_and(|t| matches!(t.kind, TokenKind::Ident(_))),
                }
        };
        let spec = if self.eat("integer") {
            self.expect("{")?;
            TypeSpec::Integer(self.attrs()?)
        } else if self.eat("floating_point") {
            self.expect("{")?;
            TypeSpec::Float(self.attrs()?)
        } else if self.eat("string") {
            TypeSpec::String(if self.eat("{") {
                self.attrs()?
            } else {
                Vec::new()
            })
        } else if self.eat("struct") {
            let name = if named(self) {
                Some(self.ident()?)
            } else {
                None
            };
            let fields = if self.eat("{") {
                Some(self.fields()?)
            } else {
                None
            };
            let align = if self.eat("align") {
                self.expect("(")?;
                let a = self.int()?;
                self.expect(")")?;
                Some(u64::try_from(a).map_err(|_| self.error("negative alignment"))?)
            } else {
                None
            };
            TypeSpec::Struct {
                name,
                fields,
                align,
            }
        } else if self.eat("variant") {
            let name =
                if self.is_ident() && (self.peek_at(1) != Some(";") || !in_field) && named(self) {
                    Some(self.ident()?)
                } else {
                    None
                };
            let tag = if self.eat("<") {
                let t = self.path()?;
                self.expect(">")?;
                Some(t)
            } else {
                None
            };
            let fields = if self.eat("{") {
                Some(self.fields()?)
            } else {
                None
            };
            TypeSpec::Variant { name, tag, fields }
        } else if self.eat("enum") {
            let name = if named(self) {
                Some(self.ident()?)
            } else {
                None
            };
            let base = if self.eat(":") {
                Some(Box::new(if TYPE_KEYWORDS.iter().any(|k| self.is(k)) {
                    self.type_spec(false)?
                } else {
                    TypeSpec::Named(self.words(&["{"])?)
                }))
            } else {
                None
            };
            let entries = if self.eat("{") {
                Some(self.entries()?)
            } else {
                None
            };
            TypeSpec::Enum {
                name,
                base,
                entries,
            }
        } else if self.is_ident() {
            if in_field {
                // All words but the last (the field's name).
                let mut w = vec![self.ident()?];
                while self.is_ident()
                    && self
                        .toks
                        .get(self.pos + 1)
                        .is_some_and(|t| matches!(t.kind, TokenKind::Ident(_)))
                {
                    w.push(self.ident()?);
                }
                TypeSpec::Named(w.join(" "))
            } else {
                TypeSpec::Named(self.words(&[])?)
            }
        } else {
            return Err(self.error("expected a type"));
        };
        self.depth -= 1;
        Ok(spec)
    }

    /// Fields up to and including the closing `}` of a struct or variant body.
    fn fields(&mut self) -> Result<Vec<Field>, MetadataError> {
        self.body("a struct or variant", |p, out| {
            if p.is("typealias") || p.is("typedef") {
                let d = p.top_level()?;
                p.hoisted.push(d);
                return Ok(());
            }
            let f = p.field()?;
            out.push(f);
            // `type a, b;`: further declarators of the same type.
            while p.toks[p.pos - 1].kind == TokenKind::Punct(",") {
                let ty = out.last().expect("just pushed").ty.clone();
                let (name, dims) = p.declarator()?;
                out.push(Field { ty, name, dims });
            }
            Ok(())
        })
    }

    /// `type name[dims];` (or `,` instead of `;` before another declarator).
    fn field(&mut self) -> Result<Field, MetadataError> {
        let ty = self.type_spec(true)?;
        let (name, dims) = self.declarator()?;
        Ok(Field { ty, name, dims })
    }

    fn declarator(&mut self) -> Result<(String, Vec<Dim>), MetadataError> {
        let name = self.ident()?;
        let mut dims = Vec::new();
        while self.eat("[") {
            if self.is_ident() {
                dims.push(Dim::Ref(self.path()?));
            } else {
                let n = self.int()?;
                dims.push(Dim::Fixed(
                    u64::try_from(n).map_err(|_| self.error("negative array length"))?,
                ));
            }
            self.expect("]")?;
        }
        if !self.eat(";") {
            self.expect(",")?;
        }
        Ok((name, dims))
    }

    /// Enum mappings up to and including the closing `}`.
    fn entries(&mut self) -> Result<Vec<EnumEntry>, MetadataError> {
        let mut out = Vec::new();
        let mut next = 0i128;
        loop {
            if self.eat("}") {
                break;
            }
            let label = match self.toks.get(self.pos).map(|t| &t.kind) {
                Some(TokenKind::Str(s)) => {
                    self.pos += 1;
                    s.clone()
                }
                Some(TokenKind::Ident(_)) => self.ident()?,
                _ => return Err(self.error("expected an enum label")),
            };
            let (lo, hi) = if self.eat("=") {
                let lo = self.int()?;
                let hi = if self.eat("...") { self.int()? } else { lo };
                (lo, hi)
            } else {
                (next, next)
            };
            if hi < lo {
                return Err(self.error(format!(
                    "enum label `{label}`: range {lo} ... {hi} is empty"
                )));
            }
            next = hi.saturating_add(1);
            out.push(EnumEntry { label, lo, hi });
            if !self.eat(",") {
                self.expect("}")?;
                break;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_an_lttng_header_and_event() {
        let decls = parse(
            "typealias integer { size = 64; align = 8; signed = false; } := unsigned long;\n\
             trace { major = 1; byte_order = le; packet.header := struct { uint32_t magic; uint8_t uuid[16]; }; };\n\
             struct event_header_compact {\n\
               enum : uint5_t { compact = 0 ... 30, extended = 31 } id;\n\
               variant <id> { struct { uint27_clock_monotonic_t timestamp; } compact; } v;\n\
             } align(8);\n\
             event { name = \"x\"; id = 3; fields := struct { string _name; unsigned long _n; \
               integer { size = 8; } _a[ __a_length ]; struct { } align(8) _pad; }; };",
        )
        .unwrap();
        assert_eq!(decls.len(), 4);
        assert!(matches!(&decls[0], Decl::Alias { name, .. } if name == "unsigned long"));
        let Decl::Type(TypeSpec::Struct {
            name,
            fields,
            align,
        }) = &decls[2]
        else {
            panic!("{:?}", decls[2]);
        };
        assert_eq!(
            (name.as_deref(), *align),
            (Some("event_header_compact"), Some(8))
        );
        let fields = fields.as_ref().unwrap();
        assert!(matches!(&fields[0].ty, TypeSpec::Enum { entries: Some(e), .. } if e[1].lo == 31));
        assert!(matches!(&fields[1].ty, TypeSpec::Variant { tag: Some(t), .. } if t == "id"));
        let Decl::Block {
            kind: BlockKind::Event,
            attrs,
            ..
        } = &decls[3]
        else {
            panic!()
        };
        let Value::Type(TypeSpec::Struct {
            fields: Some(f), ..
        }) = &attrs[2].value
        else {
            panic!()
        };
        assert_eq!(f[1].ty, TypeSpec::Named("unsigned long".into()));
        assert_eq!(f[2].dims, vec![Dim::Ref("__a_length".into())]);
        assert!(matches!(&f[3].ty, TypeSpec::Struct { align: Some(8), .. }));
    }

    #[test]
    fn refuses_deep_nesting_with_a_clear_error() {
        let deep = format!("typealias {} := x;", "struct { ".repeat(10_000));
        let e = parse(&deep).unwrap_err().to_string();
        assert!(e.contains("nested deeper than 64"), "{e}");
    }

    #[test]
    fn finds_blocks_without_parsing_the_types() {
        let text = "typealias weird stuff; clock { name = \"m\"; freq = 10; }; clock{x=1;};";
        let b = blocks(text, "clock").unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(
            &text[b[0].1.0..b[0].1.1],
            "clock { name = \"m\"; freq = 10; };"
        );
        assert_eq!(&text[b[0].0[1].range.0..b[0].0[1].range.1], "freq = 10");
    }
}
