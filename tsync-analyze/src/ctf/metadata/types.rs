//! The types of a CTF trace, names resolved: what the decoder is compiled from.
//!
//! Named types are shared ([`Arc`]), never copied: a hostile metadata text that nests aliases
//! of aliases stays as small in memory as its text; the decoder's compiler bounds the expanded
//! size ([`super::super::decode`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::ast::{Attr, Dim, EnumEntry, Field, TypeSpec, Value};

/// Byte order of an integer or a float.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    /// The trace's (`byte_order` of the `trace` block), resolved when the decoder is compiled.
    Native,
    /// Little-endian.
    Little,
    /// Big-endian (`be`, `network`).
    Big,
}

/// An integer type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntType {
    /// Size in bits, 1 to 64.
    pub size: u32,
    /// Alignment in bits (a power of two).
    pub align: u32,
    /// Two's complement.
    pub signed: bool,
    /// Byte order.
    pub order: ByteOrder,
    /// Display base (2, 8, 10, 16).
    pub base: u32,
    /// A character encoding (`UTF8`, `ASCII`): arrays and sequences of it are text.
    pub text: bool,
    /// `map = clock.NAME.value`: the clock whose value this integer carries.
    pub clock: Option<String>,
}

/// A type of the trace.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// An integer.
    Int(IntType),
    /// A floating-point number of `exp + mant` bits.
    Float {
        /// Size in bits.
        size: u32,
        /// Alignment in bits.
        align: u32,
        /// Byte order.
        order: ByteOrder,
    },
    /// A NUL-terminated string.
    String,
    /// An enumeration: an integer and its labels.
    Enum {
        /// The container integer.
        int: IntType,
        /// The mappings, as declared.
        entries: Vec<EnumEntry>,
    },
    /// A structure.
    Struct {
        /// Its fields, in order.
        fields: Vec<(String, Arc<Type>)>,
        /// Its declared minimum alignment (`align(n)`, bits; 1 without).
        align: u32,
    },
    /// A variant, selected by an enum field.
    Variant {
        /// Path of the tag field (None: given where the variant is used, which it is not here).
        tag: Option<String>,
        /// The options, by label.
        options: Vec<(String, Arc<Type>)>,
    },
    /// A static array.
    Array {
        /// Element type.
        elem: Arc<Type>,
        /// Number of elements.
        len: u64,
    },
    /// A sequence whose length is another field's value.
    Sequence {
        /// Element type.
        elem: Arc<Type>,
        /// Path of the length field.
        len: String,
    },
}

/// Where a type name lives: typealiases and typedefs share one namespace, struct, variant and
/// enum names each have their own (as in C).
#[derive(Default)]
pub struct TypeScope {
    names: HashMap<String, Arc<Type>>,
    /// Nesting depth of every type made, by address.
    depths: HashMap<*const Type, u32>,
    keep: Vec<Arc<Type>>,
}

/// Deepest nesting of types (LTTng's deepest is 6).
pub const MAX_TYPE_DEPTH: u32 = 64;

fn int_attr(a: &Attr) -> Result<i128, String> {
    match &a.value {
        Value::Int(v) => Ok(*v),
        Value::Path(p) if p == "true" || p == "TRUE" => Ok(1),
        Value::Path(p) if p == "false" || p == "FALSE" => Ok(0),
        _ => Err(format!("`{}` must be an integer", a.key)),
    }
}

fn byte_order(a: &Attr) -> Result<ByteOrder, String> {
    match &a.value {
        Value::Path(p) => match p.as_str() {
            "native" => Ok(ByteOrder::Native),
            "le" | "little" => Ok(ByteOrder::Little),
            "be" | "big" | "network" => Ok(ByteOrder::Big),
            _ => Err(format!("unknown byte order `{p}`")),
        },
        _ => Err("`byte_order` must be le, be, network or native".into()),
    }
}

/// An alignment in bits from an attribute in bits (`align`), checked to be a power of two.
fn alignment(v: i128) -> Result<u32, String> {
    u32::try_from(v)
        .ok()
        .filter(|a| a.is_power_of_two() && *a <= 1 << 16)
        .ok_or_else(|| format!("alignment {v} is not a power of two up to 65536 bits"))
}

impl TypeScope {
    /// Declares `name` as `ty`.
    pub fn declare(&mut self, name: String, ty: Arc<Type>) {
        self.names.insert(name, ty);
    }

    /// Resolves a type as written.
    pub fn resolve(&mut self, spec: &TypeSpec) -> Result<Arc<Type>, String> {
        Ok(match spec {
            TypeSpec::Integer(attrs) => self.make(Type::Int(integer(attrs)?))?,
            TypeSpec::Float(attrs) => {
                let (mut exp, mut mant, mut align, mut order) = (0, 0, None, ByteOrder::Native);
                for a in attrs {
                    match a.key.as_str() {
                        "exp_dig" => exp = int_attr(a)?,
                        "mant_dig" => mant = int_attr(a)?,
                        "align" => align = Some(alignment(int_attr(a)?)?),
                        "byte_order" => order = byte_order(a)?,
                        _ => {}
                    }
                }
                let size = exp + mant;
                if size != 32 && size != 64 {
                    return Err(format!(
                        "floating_point of {size} bits: only 32 and 64 bits are supported"
                    ));
                }
                self.make(Type::Float {
                    size: size as u32,
                    align: align.unwrap_or(8),
                    order,
                })?
            }
            TypeSpec::String(_) => self.make(Type::String)?,
            TypeSpec::Named(n) => self
                .names
                .get(n)
                .cloned()
                .ok_or_else(|| format!("unknown type `{n}`"))?,
            TypeSpec::Struct {
                name,
                fields,
                align,
            } => {
                let key = name.as_ref().map(|n| format!("struct {n}"));
                let Some(fields) = fields else {
                    let key = key.ok_or("a struct without name nor body")?;
                    return self
                        .names
                        .get(&key)
                        .cloned()
                        .ok_or_else(|| format!("unknown type `{key}`"));
                };
                // `align(n)` is in bits, as every alignment of TSDL (LTTng's
                // `struct { } align(8) _saddr_padding;` aligns to a byte).
                let align = match align {
                    Some(bits) => alignment(i128::from(*bits))?,
                    None => 1,
                };
                let fields = self.fields(fields)?;
                let t = self.make(Type::Struct { fields, align })?;
                if let Some(k) = key {
                    self.names.insert(k, t.clone());
                }
                t
            }
            TypeSpec::Variant { name, tag, fields } => {
                let key = name.as_ref().map(|n| format!("variant {n}"));
                let t = match fields {
                    Some(fields) => {
                        let options = self.fields(fields)?;
                        let t = self.make(Type::Variant { tag: None, options })?;
                        if let Some(k) = &key {
                            self.names.insert(k.clone(), t.clone());
                        }
                        t
                    }
                    None => {
                        let key = key.ok_or("a variant without name nor body")?;
                        self.names
                            .get(&key)
                            .cloned()
                            .ok_or_else(|| format!("unknown type `{key}`"))?
                    }
                };
                match (tag, t.as_ref()) {
                    (Some(tag), Type::Variant { options, .. }) => self.make(Type::Variant {
                        tag: Some(tag.clone()),
                        options: options.clone(),
                    })?,
                    _ => t,
                }
            }
            TypeSpec::Enum {
                name,
                base,
                entries,
            } => {
                let key = name.as_ref().map(|n| format!("enum {n}"));
                let Some(entries) = entries else {
                    let key = key.ok_or("an enum without name nor body")?;
                    return self
                        .names
                        .get(&key)
                        .cloned()
                        .ok_or_else(|| format!("unknown type `{key}`"));
                };
                let int = match base {
                    Some(b) => match self.resolve(b)?.as_ref() {
                        Type::Int(i) => i.clone(),
                        _ => return Err("an enum's container type must be an integer".into()),
                    },
                    None => match self.names.get("int").map(|t| t.as_ref()) {
                        Some(Type::Int(i)) => i.clone(),
                        _ => {
                            return Err(
                                "an enum without container type and no `int` declared".into()
                            );
                        }
                    },
                };
                let t = self.make(Type::Enum {
                    int,
                    entries: entries.clone(),
                })?;
                if let Some(k) = key {
                    self.names.insert(k, t.clone());
                }
                t
            }
        })
    }

    fn fields(&mut self, fields: &[Field]) -> Result<Vec<(String, Arc<Type>)>, String> {
        let mut out = Vec::with_capacity(fields.len());
        for f in fields {
            let t = self.resolve(&f.ty)?;
            out.push((f.name.clone(), self.with_dims(t, &f.dims)?));
        }
        Ok(out)
    }

    /// `ty` wrapped in the arrays and sequences of `dims` (`x[2][3]`: two arrays of three).
    pub fn with_dims(&mut self, mut ty: Arc<Type>, dims: &[Dim]) -> Result<Arc<Type>, String> {
        for d in dims.iter().rev() {
            ty = self.make(match d {
                Dim::Fixed(n) => Type::Array { elem: ty, len: *n },
                Dim::Ref(p) => Type::Sequence {
                    elem: ty,
                    len: p.clone(),
                },
            })?;
        }
        Ok(ty)
    }

    /// A new shared type, refused when it nests deeper than [`MAX_TYPE_DEPTH`] (aliases of
    /// aliases can nest what the parser's depth limit lets through; everything that walks a
    /// type recurses).
    fn make(&mut self, t: Type) -> Result<Arc<Type>, String> {
        let depth_of = |c: &Arc<Type>| self.depths.get(&Arc::as_ptr(c)).copied().unwrap_or(0);
        let inner = match &t {
            Type::Struct { fields, .. } => fields.iter().map(|(_, f)| depth_of(f)).max(),
            Type::Variant { options, .. } => options.iter().map(|(_, f)| depth_of(f)).max(),
            Type::Array { elem, .. } | Type::Sequence { elem, .. } => Some(depth_of(elem)),
            _ => None,
        };
        let depth = inner.map_or(0, |d| d + 1);
        if depth > MAX_TYPE_DEPTH {
            return Err(format!("types nested deeper than {MAX_TYPE_DEPTH} levels"));
        }
        let t = Arc::new(t);
        self.depths.insert(Arc::as_ptr(&t), depth);
        // (The map keeps the types alive: a pointer is never reused for another type.)
        self.keep.push(t.clone());
        Ok(t)
    }
}

/// An `integer { … }` type from its attributes.
fn integer(attrs: &[Attr]) -> Result<IntType, String> {
    let mut size = None;
    let mut t = IntType {
        size: 0,
        align: 0,
        signed: false,
        order: ByteOrder::Native,
        base: 10,
        text: false,
        clock: None,
    };
    let mut align = None;
    for a in attrs {
        match a.key.as_str() {
            "size" => size = Some(int_attr(a)?),
            "align" => align = Some(alignment(int_attr(a)?)?),
            "signed" => t.signed = int_attr(a)? != 0,
            "byte_order" => t.order = byte_order(a)?,
            "base" => {
                t.base = match &a.value {
                    Value::Int(b) => u32::try_from(*b).unwrap_or(10),
                    Value::Path(p) => match p.as_str() {
                        "x" | "X" | "p" | "hexadecimal" => 16,
                        "o" | "octal" => 8,
                        "b" | "binary" => 2,
                        _ => 10,
                    },
                    _ => 10,
                }
            }
            "encoding" => {
                t.text = matches!(&a.value, Value::Path(p) if p != "none");
            }
            "map" => {
                if let Value::Path(p) = &a.value {
                    let clock = p
                        .strip_prefix("clock.")
                        .and_then(|c| c.strip_suffix(".value"));
                    t.clock = Some(
                        clock
                            .ok_or_else(|| format!("`map = {p}`: expected clock.NAME.value"))?
                            .to_string(),
                    );
                }
            }
            _ => {}
        }
    }
    let size = size.ok_or("an integer without `size`")?;
    if !(1..=64).contains(&size) {
        return Err(format!(
            "integer of {size} bits: sizes from 1 to 64 are supported"
        ));
    }
    t.size = size as u32;
    t.align = align.unwrap_or(if size % 8 == 0 { 8 } else { 1 });
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctf::metadata::ast::Decl;
    use crate::ctf::metadata::parser::parse;

    fn scope_of(text: &str) -> TypeScope {
        let mut s = TypeScope::default();
        for d in parse(text).unwrap() {
            match d {
                Decl::Alias { ty, dims, name } => {
                    let t = s.resolve(&ty).unwrap();
                    let t = s.with_dims(t, &dims).unwrap();
                    s.declare(name, t);
                }
                Decl::Type(t) => {
                    s.resolve(&t).unwrap();
                }
                _ => {}
            }
        }
        s
    }

    #[test]
    fn resolves_aliases_structs_and_clock_maps() {
        let mut s = scope_of(
            "typealias integer { size = 27; align = 1; signed = false; map = clock.monotonic.value; } := ts27;\n\
             typealias integer { size = 16; byte_order = network; } := be16;\n\
             struct hdr { ts27 timestamp; be16 port[2]; } align(8);",
        );
        let t = s
            .resolve(&TypeSpec::Struct {
                name: Some("hdr".into()),
                fields: None,
                align: None,
            })
            .unwrap();
        let Type::Struct { fields, align } = t.as_ref() else {
            panic!()
        };
        assert_eq!(*align, 8);
        let Type::Int(ts) = fields[0].1.as_ref() else {
            panic!()
        };
        assert_eq!(
            (ts.size, ts.align, ts.clock.as_deref()),
            (27, 1, Some("monotonic"))
        );
        let Type::Array { elem, len: 2 } = fields[1].1.as_ref() else {
            panic!()
        };
        assert!(matches!(elem.as_ref(), Type::Int(i) if i.order == ByteOrder::Big && i.align == 8));
    }

    #[test]
    fn refuses_types_nested_through_aliases() {
        let mut text = String::from("typealias integer { size = 8; } := t0;\n");
        for i in 1..200 {
            text.push_str(&format!("typealias struct {{ t{} x; }} := t{i};\n", i - 1));
        }
        let mut s = TypeScope::default();
        let mut error = None;
        for d in parse(&text).unwrap() {
            if let Decl::Alias { ty, name, .. } = d {
                match s.resolve(&ty) {
                    Ok(t) => s.declare(name, t),
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
        }
        assert_eq!(error.unwrap(), "types nested deeper than 64 levels");
    }

    #[test]
    fn says_what_is_wrong() {
        let mut s = TypeScope::default();
        let e = s.resolve(&TypeSpec::Named("nope".into())).unwrap_err();
        assert_eq!(e, "unknown type `nope`");
        let bad = parse("typealias integer { size = 65; } := x;").unwrap();
        let Decl::Alias { ty, .. } = &bad[0] else {
            panic!()
        };
        assert!(s.resolve(ty).unwrap_err().contains("65 bits"));
    }
}
