//! A small reader for the kernel's BTF (BPF Type Format), enough to find struct member offsets.
//!
//! aya-ebpf has no CO-RE relocations, so the agent resolves the offsets of the kernel struct fields
//! its programs read (`sk_buff.head`, `net_device.ifindex`, …) from `/sys/kernel/btf/vmlinux` at load
//! time and passes them in as globals. `aya::Btf` keeps member offsets private, hence this reader.
//! Format: <https://docs.kernel.org/bpf/btf.html> — a header, a type section (variable-length
//! records) and a string section.
use std::{fs, io, path::Path};

/// Where the running kernel exposes its own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;

// BTF kinds used or skipped below.
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Why BTF could not be read or a member not found.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error(
        "cannot read kernel BTF at {path}: {source} — the kernel must be built with CONFIG_DEBUG_INFO_BTF=y (tsync needs it to find kernel struct layouts)"
    )]
    Read { path: String, source: io::Error },
    #[error("malformed BTF data: {0}")]
    Malformed(String),
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    #[error("kernel struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
    #[error("kernel struct member {0} is a bitfield or not byte-aligned")]
    Unaligned(String),
}

/// One type record, decoded enough to follow members and type references.
#[derive(Debug, Clone)]
struct Type {
    name_off: u32,
    kind: u32,
    /// `size` for INT/STRUCT/UNION/ENUM/FLOAT, referenced type id for PTR/TYPEDEF/modifiers.
    size_or_type: u32,
    /// STRUCT/UNION members.
    members: Vec<Member>,
    /// ARRAY: element type and count.
    array: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
struct Member {
    name_off: u32,
    type_id: u32,
    bit_offset: u32,
    bitfield_size: u32,
}

/// A member's location: byte offset from the start of the outer struct, and byte size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: u32,
    pub size: u32,
}

/// Parsed BTF: types by id (index 0 is `void`) and the string section.
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
}

/// Little-endian u32 at `at`, or a malformed-data error.
fn u32_at(data: &[u8], at: usize) -> Result<u32, BtfError> {
    data.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| BtfError::Malformed(format!("truncated at byte {at}")))
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub fn from_kernel() -> Result<Self, BtfError> {
        Self::from_file(Path::new(VMLINUX))
    }

    /// Reads BTF from a file (e.g. `/sys/kernel/btf/vmlinux`).
    pub fn from_file(path: &Path) -> Result<Self, BtfError> {
        let data = fs::read(path).map_err(|source| BtfError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    /// Parses raw BTF bytes (little-endian only, as on every target tsync runs on).
    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        if data.len() < 24 || u16::from_le_bytes([data[0], data[1]]) != MAGIC {
            return Err(BtfError::Malformed(
                "no little-endian BTF magic 0xeb9f".into(),
            ));
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let section = |off: usize, len: usize, what: &str| {
            data.get(hdr_len + off..hdr_len + off + len)
                .ok_or_else(|| BtfError::Malformed(format!("{what} section out of bounds")))
        };
        let type_data = section(type_off, type_len, "type")?;
        let strings = section(str_off, str_len, "string")?.to_vec();
        let types = parse_types(type_data)?;
        Ok(Self { types, strings })
    }

    /// The NUL-terminated string at `off` in the string section.
    fn name(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    fn ty(&self, id: u32) -> Result<&Type, BtfError> {
        self.types
            .get(id as usize)
            .ok_or_else(|| BtfError::Malformed(format!("type id {id} out of range")))
    }

    /// Follows typedefs and qualifiers (const, volatile, restrict, type tags) to the real type.
    fn resolve(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..64 {
            let t = self.ty(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Ok(id),
            }
        }
        Err(BtfError::Malformed(format!("type chain too long at {id}")))
    }

    /// Size in bytes of a type.
    fn size_of(&self, id: u32) -> Result<u32, BtfError> {
        let id = self.resolve(id)?;
        let t = self.ty(id)?;
        Ok(match t.kind {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                t.size_or_type
            }
            KIND_PTR => 8,
            KIND_ARRAY => {
                let (elem, n) = t.array.unwrap_or((0, 0));
                self.size_of(elem)? * n
            }
            _ => 0,
        })
    }

    /// The id of the named struct (the first complete definition).
    fn struct_id(&self, name: &str) -> Result<u32, BtfError> {
        self.types
            .iter()
            .position(|t| t.kind == KIND_STRUCT && self.name(t.name_off) == name)
            .map(|i| i as u32)
            .ok_or_else(|| BtfError::NoStruct(name.into()))
    }

    /// Finds `name` among the members of the struct/union `id`, looking inside anonymous structs
    /// and unions too; returns its bit offset from the start of `id` and the member.
    fn find_member(&self, id: u32, name: &str) -> Result<Option<(u32, Member)>, BtfError> {
        let t = self.ty(self.resolve(id)?)?;
        for m in &t.members {
            let member_name = self.name(m.name_off);
            if member_name == name {
                return Ok(Some((m.bit_offset, m.clone())));
            }
            if member_name.is_empty() {
                let inner = self.ty(self.resolve(m.type_id)?)?;
                if (inner.kind == KIND_STRUCT || inner.kind == KIND_UNION)
                    && let Some((off, found)) = self.find_member(m.type_id, name)?
                {
                    return Ok(Some((m.bit_offset + off, found)));
                }
            }
        }
        Ok(None)
    }

    /// Byte offset and size of a member path in a struct, e.g. `("net_device", "nd_net.net")`.
    /// Each path component may sit inside anonymous structs or unions.
    pub fn member(&self, strukt: &str, path: &str) -> Result<Field, BtfError> {
        let mut id = self.struct_id(strukt)?;
        let mut bits = 0u32;
        let mut size = 0u32;
        for part in path.split('.') {
            let (off, m) = self
                .find_member(id, part)?
                .ok_or_else(|| BtfError::NoMember {
                    strukt: strukt.into(),
                    member: path.into(),
                })?;
            if m.bitfield_size != 0 || off % 8 != 0 {
                return Err(BtfError::Unaligned(format!("{strukt}.{path}")));
            }
            bits += off;
            id = m.type_id;
            size = self.size_of(m.type_id)?;
        }
        Ok(Field {
            offset: bits / 8,
            size,
        })
    }
}

/// Decodes the type section into records, indexed by type id (id 0 = void placeholder).
fn parse_types(data: &[u8]) -> Result<Vec<Type>, BtfError> {
    let mut types = vec![Type {
        name_off: 0,
        kind: 0,
        size_or_type: 0,
        members: Vec::new(),
        array: None,
    }];
    let mut at = 0usize;
    while at < data.len() {
        let name_off = u32_at(data, at)?;
        let info = u32_at(data, at + 4)?;
        let size_or_type = u32_at(data, at + 8)?;
        at += 12;
        let vlen = (info & 0xffff) as usize;
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 == 1;
        let mut t = Type {
            name_off,
            kind,
            size_or_type,
            members: Vec::new(),
            array: None,
        };
        match kind {
            KIND_INT | KIND_VAR | KIND_DECL_TAG => at += 4,
            KIND_ARRAY => {
                t.array = Some((u32_at(data, at)?, u32_at(data, at + 8)?));
                at += 12;
            }
            KIND_STRUCT | KIND_UNION => {
                for _ in 0..vlen {
                    let raw = u32_at(data, at + 8)?;
                    let (bit_offset, bitfield_size) = if kind_flag {
                        (raw & 0x00ff_ffff, raw >> 24)
                    } else {
                        (raw, 0)
                    };
                    t.members.push(Member {
                        name_off: u32_at(data, at)?,
                        type_id: u32_at(data, at + 4)?,
                        bit_offset,
                        bitfield_size,
                    });
                    at += 12;
                }
            }
            KIND_ENUM | KIND_FUNC_PROTO => at += 8 * vlen,
            KIND_DATASEC | KIND_ENUM64 => at += 12 * vlen,
            KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
            | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => {}
            other => {
                return Err(BtfError::Malformed(format!(
                    "unknown BTF kind {other} at type id {}",
                    types.len()
                )));
            }
        }
        types.push(t);
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel() -> Btf {
        Btf::from_kernel().expect("this test needs a kernel with BTF")
    }

    #[test]
    fn finds_members_inside_anonymous_unions() {
        let btf = kernel();
        // `dev` sits in an anonymous union inside an anonymous struct of sk_buff.
        let dev = btf.member("sk_buff", "dev").unwrap();
        assert_eq!(dev.size, 8);
        let head = btf.member("sk_buff", "head").unwrap();
        let data = btf.member("sk_buff", "data").unwrap();
        assert_eq!((head.size, data.size), (8, 8));
        // `head` and `data` are consecutive pointers at the end of sk_buff.
        assert_eq!(data.offset, head.offset + 8);
        let proto = btf.member("sk_buff", "protocol").unwrap();
        let th = btf.member("sk_buff", "transport_header").unwrap();
        let nh = btf.member("sk_buff", "network_header").unwrap();
        assert_eq!((proto.size, th.size, nh.size), (2, 2, 2));
        // protocol, transport_header, network_header are declared in this order.
        assert_eq!(th.offset, proto.offset + 2);
        assert_eq!(nh.offset, th.offset + 2);
    }

    #[test]
    fn follows_member_paths_through_typedefs() {
        let btf = kernel();
        // possible_net_t is a typedef of an anonymous struct holding `struct net *net`.
        let nd_net = btf.member("net_device", "nd_net").unwrap();
        let net = btf.member("net_device", "nd_net.net").unwrap();
        assert_eq!(net.offset, nd_net.offset);
        assert_eq!(net.size, 8);
        assert_eq!(btf.member("net_device", "ifindex").unwrap().size, 4);
        let inum = btf.member("net", "ns.inum").unwrap();
        let ns = btf.member("net", "ns").unwrap();
        assert!(inum.offset > ns.offset && inum.size == 4);
    }

    #[test]
    fn matches_the_kernel_layout_of_a_stable_struct() {
        // struct iphdr has had the same layout forever: saddr at 12, daddr at 16.
        let btf = kernel();
        assert_eq!(
            btf.member("iphdr", "saddr").unwrap(),
            Field {
                offset: 12,
                size: 4
            }
        );
        assert_eq!(
            btf.member("iphdr", "daddr").unwrap(),
            Field {
                offset: 16,
                size: 4
            }
        );
        assert_eq!(
            btf.member("tcphdr", "seq").unwrap(),
            Field { offset: 4, size: 4 }
        );
    }

    #[test]
    fn rejects_bitfields() {
        let btf = kernel();
        // tcphdr.doff is a 4-bit bitfield.
        assert!(matches!(
            btf.member("tcphdr", "doff"),
            Err(BtfError::Unaligned(_))
        ));
    }

    #[test]
    fn unknown_struct_and_member_are_errors() {
        let btf = kernel();
        assert!(matches!(
            btf.member("no_such_struct_tsync", "x"),
            Err(BtfError::NoStruct(_))
        ));
        let err = btf.member("sk_buff", "no_such_member").unwrap_err();
        assert!(
            err.to_string()
                .contains("sk_buff has no member no_such_member")
        );
    }

    #[test]
    fn missing_file_names_the_kernel_option() {
        let err = Btf::from_file(Path::new("/nonexistent/btf/vmlinux"))
            .err()
            .expect("a missing file must be an error");
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/btf/vmlinux"), "{msg}");
        assert!(msg.contains("CONFIG_DEBUG_INFO_BTF"), "{msg}");
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        assert!(matches!(
            Btf::parse(b"not btf"),
            Err(BtfError::Malformed(_))
        ));
        let mut data = vec![0u8; 24];
        data[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        data[4..8].copy_from_slice(&24u32.to_le_bytes());
        data[12..16].copy_from_slice(&1000u32.to_le_bytes()); // type section past the end
        assert!(matches!(Btf::parse(&data), Err(BtfError::Malformed(_))));
    }
}
