//! The syntax tree of a TSDL text, as the parser reads it, before any name is resolved.

/// A type as written: a keyword type with its attributes, a named type, or a compound.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeSpec {
    /// `integer { size = …; … }`.
    Integer(Vec<Attr>),
    /// `floating_point { exp_dig = …; mant_dig = …; … }`.
    Float(Vec<Attr>),
    /// `string` or `string { encoding = …; }`.
    String(Vec<Attr>),
    /// A name declared by `typealias` or `typedef` (C's multi-word names kept: `unsigned long`).
    Named(String),
    /// `struct [name] [{ fields }] [align(n)]`.
    Struct {
        /// The struct's name, declared or referred to.
        name: Option<String>,
        /// The body; None refers to the named struct.
        fields: Option<Vec<Field>>,
        /// `align(n)` after the body, in bits.
        align: Option<u64>,
    },
    /// `variant [name] [<tag>] [{ fields }]`.
    Variant {
        /// The variant's name, declared or referred to.
        name: Option<String>,
        /// The tag field's path (`id`, `_protocol`, `stream.event.header.id`).
        tag: Option<String>,
        /// The options; None refers to the named variant.
        fields: Option<Vec<Field>>,
    },
    /// `enum [name] [: integer type] [{ entries }]`.
    Enum {
        /// The enum's name, declared or referred to.
        name: Option<String>,
        /// The container integer type (`int` when absent, as CTF says).
        base: Option<Box<TypeSpec>>,
        /// The mappings; None refers to the named enum.
        entries: Option<Vec<EnumEntry>>,
    },
}

/// A field of a struct or an option of a variant: `type name[dims];`.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// The field's type.
    pub ty: TypeSpec,
    /// The field's name.
    pub name: String,
    /// Array (`[4]`) and sequence (`[len_field]`) dimensions, outermost first.
    pub dims: Vec<Dim>,
}

/// One dimension of an array or a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A static array of this many elements.
    Fixed(u64),
    /// A sequence whose length is the value of the field at this path.
    Ref(String),
}

/// One mapping of an enum: `label = lo ... hi`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumEntry {
    /// The label.
    pub label: String,
    /// First value mapped.
    pub lo: i128,
    /// Last value mapped.
    pub hi: i128,
}

/// `key = value;` or `key := type;` in a block or a type's attribute list.
#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    /// The key, dotted parts joined (`packet.header`, `event.fields` is `fields`).
    pub key: String,
    /// The value.
    pub value: Value,
    /// Byte range of the whole statement (without its `;`) in the text.
    pub range: (usize, usize),
}

/// The value of an attribute.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An integer (negative allowed).
    Int(i128),
    /// A string literal.
    Str(String),
    /// An identifier or a dotted path (`le`, `true`, `clock.monotonic.value`).
    Path(String),
    /// A type (`key := type`).
    Type(TypeSpec),
}

/// A top-level block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// `trace { … }`.
    Trace,
    /// `env { … }`.
    Env,
    /// `clock { … }`.
    Clock,
    /// `stream { … }`.
    Stream,
    /// `event { … }`.
    Event,
    /// Anything else (`callsite { … }`): read and ignored.
    Other,
}

/// A top-level declaration.
#[derive(Clone, Debug, PartialEq)]
pub enum Decl {
    /// `trace`, `env`, `clock`, `stream`, `event`, … blocks.
    Block {
        /// Which block.
        kind: BlockKind,
        /// Its statements.
        attrs: Vec<Attr>,
        /// Byte range of the declaration, from its keyword to its `;`.
        range: (usize, usize),
    },
    /// `typealias type := name;` or `typedef type name;`.
    Alias {
        /// The type.
        ty: TypeSpec,
        /// Array or sequence dimensions after the name (typedef only).
        dims: Vec<Dim>,
        /// The new name.
        name: String,
    },
    /// A named `struct`, `variant` or `enum` declared on its own.
    Type(TypeSpec),
}
