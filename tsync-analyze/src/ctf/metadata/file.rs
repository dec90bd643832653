//! The `metadata` file of a CTF trace: TSDL text, either plain (starting `/* CTF`) or cut into
//! packets (magic 0x75D11D57, the trace UUID, sizes) as LTTng writes it. Read back, and written
//! back with the same packet headers (`apply --format ctf` rewrites the text).

use std::path::Path;

use super::MetadataError;

/// The packet magic of packetized CTF metadata.
pub const METADATA_MAGIC: u32 = 0x75D1_1D57;
/// Header of a metadata packet: magic, UUID, checksum, content size, packet size, compression,
/// encryption, checksum scheme, major, minor.
pub const PACKET_HEADER_LEN: usize = 37;
/// Metadata packet size written (LTTng writes 4096-byte packets).
const PACKET_LEN: usize = 4096;
/// Largest metadata text read (LTTng's kernel metadata is about 0.5 MiB): a bound on what a
/// corrupt or hostile file can make the reader hold.
pub const MAX_METADATA_LEN: u64 = 16 << 20;

/// True when `prefix` (the first bytes of a `metadata` file) is CTF metadata: the packet magic
/// in either byte order, or a text starting `/* CTF`.
pub fn is_metadata(prefix: &[u8]) -> bool {
    let magic = prefix.get(..4).map(|b| [b[0], b[1], b[2], b[3]]);
    magic.is_some_and(|m| {
        u32::from_le_bytes(m) == METADATA_MAGIC || u32::from_be_bytes(m) == METADATA_MAGIC
    }) || prefix.trim_ascii_start().starts_with(b"/* CTF")
}

/// One CTF trace's metadata as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The TSDL text.
    pub text: String,
    /// For packetized metadata: the first packet's header (uuid, byte order, versions), kept
    /// for the packets written back.
    pub packet_header: Option<[u8; PACKET_HEADER_LEN]>,
    /// Byte order of the packet headers (true: little-endian).
    pub little_endian: bool,
}

impl Metadata {
    /// Reads a `metadata` file, packetized or plain.
    pub fn read(path: &Path) -> Result<Metadata, MetadataError> {
        let len = std::fs::metadata(path)
            .map_err(|e| MetadataError::new(format!("cannot read {}: {e}", path.display())))?
            .len();
        if len > MAX_METADATA_LEN {
            return Err(MetadataError::new(format!(
                "{}: {len} bytes of metadata, more than the {MAX_METADATA_LEN} read",
                path.display()
            )));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| MetadataError::new(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&bytes).map_err(|e| e.in_file(path))
    }

    /// Parses the bytes of a `metadata` file.
    pub fn parse(bytes: &[u8]) -> Result<Metadata, MetadataError> {
        if bytes.len() as u64 > MAX_METADATA_LEN {
            return Err(MetadataError::new(format!(
                "{} bytes of metadata, more than the {MAX_METADATA_LEN} read",
                bytes.len()
            )));
        }
        let magic = |le: bool| {
            bytes.get(..4).map(|b| {
                let b = [b[0], b[1], b[2], b[3]];
                if le {
                    u32::from_le_bytes(b)
                } else {
                    u32::from_be_bytes(b)
                }
            })
        };
        let little_endian = if magic(true) == Some(METADATA_MAGIC) {
            true
        } else if magic(false) == Some(METADATA_MAGIC) {
            false
        } else {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| MetadataError::new("neither packetized CTF metadata nor TSDL text"))?;
            if !text.trim_start().starts_with("/* CTF") {
                return Err(MetadataError::new(
                    "not CTF metadata (no packet magic 0x75D11D57, no `/* CTF` text header)",
                ));
            }
            return Ok(Metadata {
                text: text.to_string(),
                packet_header: None,
                little_endian: true,
            });
        };
        let u32_at = |b: &[u8], at: usize| {
            let v: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
            if little_endian {
                u32::from_le_bytes(v)
            } else {
                u32::from_be_bytes(v)
            }
        };
        let mut text = Vec::new();
        let mut at = 0;
        let mut first = None;
        while at < bytes.len() {
            let p = &bytes[at..];
            if p.len() < PACKET_HEADER_LEN || u32_at(p, 0) != METADATA_MAGIC {
                return Err(MetadataError::new(format!(
                    "metadata packet at byte {at}: bad header"
                )));
            }
            let content = u32_at(p, 24) as usize / 8;
            let size = u32_at(p, 28) as usize / 8;
            if content < PACKET_HEADER_LEN || size < content || size > p.len() {
                return Err(MetadataError::new(format!(
                    "metadata packet at byte {at}: sizes {content}/{size} do not fit"
                )));
            }
            if p[32] != 0 || p[33] != 0 {
                return Err(MetadataError::new(
                    "compressed or encrypted metadata is not supported",
                ));
            }
            first.get_or_insert_with(|| {
                let mut h = [0u8; PACKET_HEADER_LEN];
                h.copy_from_slice(&p[..PACKET_HEADER_LEN]);
                h
            });
            text.extend_from_slice(&p[PACKET_HEADER_LEN..content]);
            at += size;
        }
        let text = String::from_utf8(text)
            .map_err(|_| MetadataError::new("metadata text is not UTF-8"))?;
        Ok(Metadata {
            text,
            packet_header: first,
            little_endian,
        })
    }

    /// The trace UUID of packetized metadata (bytes 4..20 of its packets).
    pub fn uuid(&self) -> Option<[u8; 16]> {
        self.packet_header
            .map(|h| h[4..20].try_into().expect("16 bytes"))
    }

    /// The bytes of the metadata file: packets as read (same header) around the text, or the
    /// text alone.
    pub fn to_bytes(&self) -> Vec<u8> {
        let Some(header) = self.packet_header else {
            return self.text.as_bytes().to_vec();
        };
        packetize(&self.text, &header, self.little_endian)
    }
}

/// `text` cut into 4096-byte metadata packets, each with `header` (magic, UUID, versions) and its
/// own sizes.
pub fn packetize(text: &str, header: &[u8; PACKET_HEADER_LEN], little_endian: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let put = |v: u32| {
        if little_endian {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        }
    };
    for chunk in text.as_bytes().chunks(PACKET_LEN - PACKET_HEADER_LEN) {
        let mut h = *header;
        h[20..24].copy_from_slice(&put(0)); // checksum: none
        h[24..28].copy_from_slice(&put(((PACKET_HEADER_LEN + chunk.len()) * 8) as u32));
        h[28..32].copy_from_slice(&put((PACKET_LEN * 8) as u32));
        out.extend_from_slice(&h);
        out.extend_from_slice(chunk);
        out.resize(out.len() + PACKET_LEN - PACKET_HEADER_LEN - chunk.len(), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packetized_metadata_reads_back_the_same() {
        let mut header = [0u8; PACKET_HEADER_LEN];
        header[..4].copy_from_slice(&METADATA_MAGIC.to_le_bytes());
        header[4..20].copy_from_slice(&[7; 16]);
        header[35] = 1;
        header[36] = 8;
        let text: String = "/* CTF 1.8 */ trace { major = 1; };\n".repeat(400); // > 1 packet
        let m = Metadata {
            text: text.clone(),
            packet_header: Some(header),
            little_endian: true,
        };
        let bytes = m.to_bytes();
        assert_eq!(bytes.len() % PACKET_LEN, 0);
        assert!(bytes.len() / PACKET_LEN > 1);
        let back = Metadata::parse(&bytes).unwrap();
        assert!(back.text == m.text && back.little_endian);
        assert_eq!(back.uuid(), Some([7; 16]));
        // Every packet keeps the UUID and versions, with its own sizes.
        for p in bytes.chunks(PACKET_LEN) {
            assert_eq!(&p[..20], &header[..20]);
            assert_eq!(&p[32..37], &header[32..37]);
            assert_eq!(u32::from_le_bytes(p[28..32].try_into().unwrap()), 4096 * 8);
        }
        assert!(is_metadata(&bytes[..8]) && is_metadata(b"  /* CTF 1.8 */"));
        assert!(!is_metadata(b"TSYNCTRC"));
    }
}
