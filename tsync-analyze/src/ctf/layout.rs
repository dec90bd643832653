//! The trace's types compiled for decoding: names of tag and length fields resolved to slots,
//! byte orders resolved, the fields the reader needs marked with a [`Role`], and every
//! fixed-size subtree the reader does not need collapsed into one [`Node::Skip`] — so that the
//! events a network synchronization ignores (most of a kernel trace: scheduler, syscalls, …)
//! cost one header and one jump.
//!
//! Bounded: a hostile metadata text can declare types whose expansion is exponential (aliases of
//! arrays of aliases …); compilation stops past [`MAX_NODES`] nodes, and arrays of elements that
//! may be empty are refused past [`MAX_EMPTY_ELEMENTS`] elements, so that no decode loops without
//! consuming input.

use std::collections::HashMap;
use std::sync::Arc;

use super::metadata::ast::EnumEntry;
use super::metadata::types::{ByteOrder, IntType, Type};
use super::network::NetField;

/// Most nodes one trace's compiled types may hold.
pub const MAX_NODES: usize = 1 << 18;
/// Largest number of elements of an array or sequence whose elements may take no bits.
pub const MAX_EMPTY_ELEMENTS: u64 = 1 << 16;
/// A slot that nothing reads.
pub const NO_SLOT: u32 = u32::MAX;

/// What a field means to the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Nothing: read over.
    None,
    /// Packet header `magic`.
    Magic,
    /// Packet header `stream_id`.
    StreamId,
    /// An element of the packet header's `uuid`.
    TraceUuid,
    /// Packet context `timestamp_begin`: sets the clock.
    TsBegin,
    /// Packet context `timestamp_end`.
    TsEnd,
    /// Packet context `content_size` (bits).
    ContentSize,
    /// Packet context `packet_size` (bits).
    PacketSize,
    /// Packet context `events_discarded` (a running count per stream).
    Discarded,
    /// Packet context `cpu_id`.
    CpuId,
    /// Packet context `packet_seq_num`.
    SeqNum,
    /// Event header `id` (the last one read wins: `v.extended.id` after the compact `id`).
    EventId,
    /// An integer mapped to the clock: updates its value (with wrap-around below 64 bits).
    Clock,
    /// A field of a network event.
    Net(NetField),
}

/// A compiled type.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// An integer (or an enum's container).
    Int(IntLeaf),
    /// Fixed-size data nothing reads: aligned, then jumped over.
    Skip {
        /// Alignment in bits.
        align: u32,
        /// Size in bits.
        bits: u64,
    },
    /// A NUL-terminated string.
    Str {
        /// What it means.
        role: Role,
    },
    /// A structure.
    Struct {
        /// Alignment in bits.
        align: u32,
        /// Its fields.
        fields: Vec<Node>,
    },
    /// A static array of elements that are not all fixed-size.
    Array {
        /// Alignment in bits.
        align: u32,
        /// Elements.
        len: u64,
        /// Element.
        elem: Box<Node>,
    },
    /// A sequence.
    Seq {
        /// Alignment in bits.
        align: u32,
        /// Slot of the length.
        len: u32,
        /// Element.
        elem: Box<Node>,
        /// Fewest bits an element takes (0: empty elements are possible).
        elem_min_bits: u64,
    },
    /// A sequence of fixed-size elements nothing reads (what a sequence becomes once compiled
    /// when nothing in its elements is needed): its length from its slot, then one jump.
    SeqSkip {
        /// Alignment of the elements, bits.
        align: u32,
        /// Slot of the length.
        len: u32,
        /// Size of an element, bits.
        bits: u64,
    },
    /// A variant.
    Variant {
        /// Slot of the tag.
        tag: u32,
        /// Tag value ranges and the option each selects.
        select: Vec<(i128, i128, u32)>,
        /// The options.
        options: Vec<Node>,
    },
}

/// An integer field, compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntLeaf {
    /// Size in bits.
    pub bits: u8,
    /// Alignment in bits.
    pub align: u32,
    /// Sign-extended into its slot.
    pub signed: bool,
    /// Big-endian.
    pub big: bool,
    /// What it means.
    pub role: Role,
    /// Where its value is kept for a variant or a sequence ([`NO_SLOT`]: nowhere).
    pub slot: u32,
}

/// Which part of a packet or event a type describes: it decides the roles of its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `trace.packet.header`.
    PacketHeader,
    /// `stream.packet.context`.
    PacketContext,
    /// `stream.event.header`.
    EventHeader,
    /// `stream.event.context` or `event.context`.
    EventContext,
    /// `event.fields`.
    Payload,
}

impl Scope {
    /// The prefix of an absolute path into this scope.
    fn prefix(self) -> &'static str {
        match self {
            Scope::PacketHeader => "trace.packet.header.",
            Scope::PacketContext => "stream.packet.context.",
            Scope::EventHeader => "stream.event.header.",
            Scope::EventContext => "stream.event.context.",
            Scope::Payload => "event.fields.",
        }
    }
}

/// A field visible to tag and length paths: its slot and, for an enum, its mappings.
#[derive(Clone)]
struct Visible {
    name: String,
    slot: u32,
    entries: Option<Arc<[EnumEntry]>>,
}

/// Compiles a trace's types (one compiler per trace: slots are numbered across its scopes).
pub struct Compiler {
    order: ByteOrder,
    nodes: usize,
    slots: u32,
    /// Fields visible from the node being compiled: the current struct, then its parents.
    scopes: Vec<Vec<Visible>>,
    /// The top-level fields of each scope compiled so far (absolute paths).
    roots: HashMap<&'static str, Vec<Visible>>,
    /// Slots some variant or sequence reads.
    read: Vec<bool>,
    /// The top-level fields of the scope just compiled.
    top: Vec<Visible>,
    /// Final slot numbers (by first slot number), once compilation is over.
    renumber: Vec<u32>,
}

/// A type that cannot be compiled.
pub type CompileError = String;

impl Compiler {
    /// A compiler for a trace of byte order `order` (its `native`).
    pub fn new(order: ByteOrder) -> Self {
        Compiler {
            order,
            nodes: 0,
            slots: 0,
            scopes: Vec::new(),
            roots: HashMap::new(),
            read: Vec::new(),
            top: Vec::new(),
            renumber: Vec::new(),
        }
    }

    /// Compiles the type of `scope`. `roles` gives the role of a field from its name and type.
    pub fn compile(
        &mut self,
        ty: &Type,
        scope: Scope,
        roles: &dyn Fn(&str, &IntType) -> Role,
    ) -> Result<Node, CompileError> {
        self.scopes.clear();
        self.top.clear();
        let node = self.node(ty, "", scope, roles)?;
        self.roots
            .insert(scope.prefix(), std::mem::take(&mut self.top));
        Ok(node)
    }

    /// The final form of `node`, once every node of the trace is compiled: slots nobody reads
    /// dropped and the others numbered from 0, fixed-size subtrees without roles collapsed.
    pub fn finish(&mut self, node: Node) -> Node {
        if self.renumber.len() != self.read.len() {
            let mut next = 0;
            self.renumber = self
                .read
                .iter()
                .map(|&r| {
                    if r {
                        next += 1;
                        next - 1
                    } else {
                        NO_SLOT
                    }
                })
                .collect();
        }
        collapse(node, &self.read, &self.renumber)
    }

    /// Number of slots the decoder needs (those some variant or sequence reads).
    pub fn slots(&self) -> usize {
        self.read.iter().filter(|&&r| r).count()
    }

    fn count(&mut self) -> Result<(), CompileError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(format!(
                "the metadata's types expand to more than {MAX_NODES} fields: not decoded"
            ));
        }
        Ok(())
    }

    fn node(
        &mut self,
        ty: &Type,
        name: &str,
        scope: Scope,
        roles: &dyn Fn(&str, &IntType) -> Role,
    ) -> Result<Node, CompileError> {
        self.count()?;
        Ok(match ty {
            Type::Int(i) => self.int(i, name, None, roles),
            Type::Enum { int, entries } => {
                self.int(int, name, Some(entries.as_slice().into()), roles)
            }
            // Floats are only jumped over: their byte order does not matter.
            Type::Float { size, align, .. } => Node::Skip {
                align: (*align).max(1),
                bits: u64::from(*size),
            },
            Type::String => Node::Str {
                role: roles(name, &STRING_MARK),
            },
            Type::Struct { fields, align } => {
                self.scopes.push(Vec::new());
                let mut out = Vec::with_capacity(fields.len());
                let mut max_align = (*align).max(1);
                for (field, t) in fields {
                    let n = self.node(t, field, scope, roles)?;
                    max_align = max_align.max(n.align());
                    out.push(n);
                }
                let inner = self.scopes.pop().unwrap_or_default();
                // A struct's fields are visible after it only through it (`a.b` paths), which
                // LTTng never writes; the top level's are kept for absolute paths.
                if self.scopes.is_empty() {
                    self.top = inner;
                }
                Node::Struct {
                    align: max_align,
                    fields: out,
                }
            }
            Type::Variant { tag, options } => {
                let tag = tag
                    .as_deref()
                    .ok_or_else(|| format!("variant `{name}` has no tag"))?;
                let found = self.lookup(tag, scope)?;
                let entries = found
                    .entries
                    .ok_or_else(|| format!("variant `{name}`: its tag `{tag}` is not an enum"))?;
                self.read[found.slot as usize] = true;
                let mut compiled = Vec::with_capacity(options.len());
                for (option, t) in options {
                    self.scopes.push(Vec::new());
                    let n = self.node(t, option, scope, roles);
                    self.scopes.pop();
                    compiled.push(n?);
                }
                let select = entries
                    .iter()
                    .filter_map(|e| {
                        let k = options.iter().position(|(o, _)| *o == e.label)?;
                        Some((e.lo, e.hi, k as u32))
                    })
                    .collect();
                Node::Variant {
                    tag: found.slot,
                    select,
                    options: compiled,
                }
            }
            Type::Array { elem, len } => {
                let e = self.node(elem, name, scope, roles)?;
                if e.min_bits() == 0 && *len > MAX_EMPTY_ELEMENTS && !e.is_fixed() {
                    return Err(format!(
                        "array `{name}` of {len} elements that may be empty: not decoded"
                    ));
                }
                Node::Array {
                    align: e.align(),
                    len: *len,
                    elem: Box::new(e),
                }
            }
            Type::Sequence { elem, len } => {
                let found = self.lookup(len, scope)?;
                self.read[found.slot as usize] = true;
                let e = self.node(elem, name, scope, roles)?;
                Node::Seq {
                    align: e.align(),
                    len: found.slot,
                    elem_min_bits: e.min_bits(),
                    elem: Box::new(e),
                }
            }
        })
    }

    fn int(
        &mut self,
        i: &IntType,
        name: &str,
        entries: Option<Arc<[EnumEntry]>>,
        roles: &dyn Fn(&str, &IntType) -> Role,
    ) -> Node {
        let slot = self.slots;
        self.slots += 1;
        self.read.push(false);
        if let Some(s) = self.scopes.last_mut() {
            s.push(Visible {
                name: name.to_string(),
                slot,
                entries,
            });
        }
        let big = match i.order {
            ByteOrder::Native => self.order == ByteOrder::Big,
            o => o == ByteOrder::Big,
        };
        Node::Int(IntLeaf {
            bits: i.size as u8,
            align: i.align.max(1),
            signed: i.signed,
            big,
            role: roles(name, i),
            slot,
        })
    }

    /// The field a tag or length path names: relative paths from the innermost struct outward,
    /// absolute ones (`stream.event.header.id`) in their scope.
    fn lookup(&self, path: &str, scope: Scope) -> Result<Visible, CompileError> {
        for prefix in [
            Scope::PacketHeader,
            Scope::PacketContext,
            Scope::EventHeader,
            Scope::EventContext,
            Scope::Payload,
        ]
        .map(Scope::prefix)
        {
            if let Some(rest) = path.strip_prefix(prefix) {
                let within = if prefix == scope.prefix() {
                    self.scopes.first()
                } else {
                    self.roots.get(prefix)
                };
                return within
                    .and_then(|fields| fields.iter().rev().find(|f| f.name == rest))
                    .cloned()
                    .ok_or_else(|| format!("`{path}` names no field before it"));
            }
        }
        self.scopes
            .iter()
            .rev()
            .find_map(|fields| fields.iter().rev().find(|f| f.name == path))
            .cloned()
            .ok_or_else(|| format!("`{path}` names no field before it"))
    }
}

/// A marker type for the roles of strings (which have no integer type).
const STRING_MARK: IntType = IntType {
    size: 8,
    align: 8,
    signed: false,
    order: ByteOrder::Native,
    base: 10,
    text: true,
    clock: None,
};

fn align_up(x: u64, a: u32) -> Option<u64> {
    let a = u64::from(a);
    x.checked_add(a - 1).map(|v| v & !(a - 1))
}

impl Node {
    /// Alignment in bits.
    pub fn align(&self) -> u32 {
        match self {
            Node::Int(IntLeaf { align, .. })
            | Node::Skip { align, .. }
            | Node::Struct { align, .. }
            | Node::Array { align, .. }
            | Node::Seq { align, .. }
            | Node::SeqSkip { align, .. } => *align,
            Node::Str { .. } => 8,
            Node::Variant { .. } => 1,
        }
    }

    /// Fewest bits the node takes.
    pub fn min_bits(&self) -> u64 {
        match self {
            Node::Int(i) => u64::from(i.bits),
            Node::Skip { bits, .. } => *bits,
            Node::Str { .. } => 8,
            Node::Struct { fields, .. } => fields
                .iter()
                .fold(0u64, |s, f| s.saturating_add(f.min_bits())),
            Node::Array { len, elem, .. } => len.saturating_mul(elem.min_bits()),
            Node::Seq { .. } | Node::SeqSkip { .. } => 0,
            Node::Variant { options, .. } => options.iter().map(Node::min_bits).min().unwrap_or(0),
        }
    }

    fn is_fixed(&self) -> bool {
        self.fixed().is_some()
    }

    /// (alignment, size) in bits when the node's size does not depend on the data. A struct's
    /// inner padding then does not depend on where it starts either: every alignment inside
    /// divides its own.
    pub fn fixed(&self) -> Option<(u32, u64)> {
        match self {
            Node::Int(i) => Some((i.align, u64::from(i.bits))),
            Node::Skip { align, bits } => Some((*align, *bits)),
            Node::Struct { align, fields } => {
                let mut at = 0u64;
                for f in fields {
                    let (a, b) = f.fixed()?;
                    at = align_up(at, a)?.checked_add(b)?;
                }
                Some((*align, at))
            }
            Node::Array { len, elem, .. } => {
                let (a, b) = elem.fixed()?;
                if *len == 0 {
                    return Some((a, 0));
                }
                let stride = align_up(b, a)?;
                let bits = stride.checked_mul(len - 1)?.checked_add(b)?;
                (bits < 1 << 60).then_some((a, bits))
            }
            Node::Str { .. } | Node::Seq { .. } | Node::SeqSkip { .. } | Node::Variant { .. } => {
                None
            }
        }
    }

    /// Whether the node (or anything in it) has a role or a slot something reads.
    fn needed(&self, read: &[bool]) -> bool {
        match self {
            Node::Int(i) => {
                i.role != Role::None || read.get(i.slot as usize).copied().unwrap_or(false)
            }
            Node::Skip { .. } | Node::SeqSkip { .. } => false,
            Node::Str { role } => *role != Role::None,
            Node::Struct { fields, .. } => fields.iter().any(|f| f.needed(read)),
            Node::Array { elem, .. } | Node::Seq { elem, .. } => elem.needed(read),
            Node::Variant { .. } => true,
        }
    }
}

/// `node` with unread slots dropped (the others renumbered) and fixed-size subtrees nothing
/// needs made [`Node::Skip`].
fn collapse(node: Node, read: &[bool], renumber: &[u32]) -> Node {
    if !node.needed(read)
        && let Some((align, bits)) = node.fixed()
    {
        return Node::Skip { align, bits };
    }
    let slot = |s: u32| renumber.get(s as usize).copied().unwrap_or(NO_SLOT);
    let again = |n: Node| collapse(n, read, renumber);
    match node {
        Node::Int(i) => Node::Int(IntLeaf {
            slot: slot(i.slot),
            ..i
        }),
        Node::Struct { align, fields } => {
            // Neighbouring skips merge when the first leaves the position aligned for the
            // second (its alignment divides the first's and the first's size).
            let mut out: Vec<Node> = Vec::with_capacity(fields.len());
            for f in fields.into_iter().map(again) {
                if let (
                    Some(Node::Skip {
                        align: a0,
                        bits: b0,
                    }),
                    Node::Skip {
                        align: a1,
                        bits: b1,
                    },
                ) = (out.last_mut(), &f)
                    && *a1 <= *a0
                    && *b0 % u64::from(*a1) == 0
                {
                    *b0 += b1;
                    continue;
                }
                out.push(f);
            }
            Node::Struct { align, fields: out }
        }
        Node::Array { align, len, elem } => Node::Array {
            align,
            len,
            elem: Box::new(again(*elem)),
        },
        Node::Seq {
            align,
            len,
            elem,
            elem_min_bits,
        } => match again(*elem) {
            Node::Skip { align, bits } => Node::SeqSkip {
                align,
                len: slot(len),
                bits,
            },
            elem => Node::Seq {
                align,
                len: slot(len),
                elem: Box::new(elem),
                elem_min_bits,
            },
        },
        Node::Variant {
            tag,
            select,
            options,
        } => Node::Variant {
            tag: slot(tag),
            select,
            options: options.into_iter().map(again).collect(),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use crate::ctf::metadata::TraceClass;
    use crate::ctf::program::Program;

    fn compile(fields: &str) -> Result<Program, String> {
        let text = format!(
            "/* CTF 1.8 */ typealias integer {{ size = 8; align = 8; signed = false; }} := u8;\n\
             trace {{ major = 1; minor = 8; byte_order = le; }};\n\
             event {{ name = \"e\"; fields := struct {{ {fields} }}; }};"
        );
        let class = TraceClass::parse(&text, true).map_err(|e| e.to_string())?;
        Program::compile(&class).map_err(|e| e.to_string())
    }

    #[test]
    fn hostile_types_are_bounded_at_compile_time() {
        // A huge array of fixed-size elements is one jump, whatever its size.
        let p = compile("u8 x[1000000000000];").unwrap();
        let fields = p.events[0].fields.as_ref().unwrap();
        assert_eq!(fields.fixed(), Some((8, 8_000_000_000_000)));
        // Empty elements: a huge array of structs is one jump of nothing…
        compile("struct { } x[1099511627776];").unwrap();
        // …but of variants (that may be empty) it is refused.
        let e = compile(
            "enum : u8 { a = 0, b = 1 } t; variant <t> { struct { } a; u8 b; } v[1000000];",
        )
        .err()
        .unwrap();
        assert!(e.contains("that may be empty"), "{e}");
        // Expansion past the node limit: aliases of arrays of aliases.
        let mut decls = String::new();
        for i in 1..30 {
            decls.push_str(&format!(
                "typealias struct {{ t{} a; t{} b; }} := t{i};\n",
                i - 1,
                i - 1
            ));
        }
        let full = format!(
            "/* CTF 1.8 */ typealias integer {{ size = 8; align = 8; }} := t0;\n{decls}\
             trace {{ byte_order = le; }};\nevent {{ name = \"e\"; fields := struct {{ t29 x; }}; }};"
        );
        let class = TraceClass::parse(&full, true).unwrap();
        let e = Program::compile(&class).unwrap_err().to_string();
        assert!(e.contains("expand to more than"), "{e}");
        // A tag or length that names nothing, or not an enum, is an error, not a panic.
        assert!(compile("u8 x[ nope ];").is_err());
        assert!(compile("u8 t; variant <t> { u8 a; } v;").is_err());
    }
}
