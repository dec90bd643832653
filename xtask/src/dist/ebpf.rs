//! Proves that the agents of every architecture embed the same eBPF programs.
//!
//! `cargo xtask dist` builds the object once (`cargo xtask build-ebpf`, for `bpfel`) and every
//! agent embeds that file, so the objects inside the shipped binaries (found by their ELF header,
//! checked against the hash `--version` prints) must be byte-identical. Built separately per
//! agent they would not be: aya-build passes the agent's architecture as `bpf_target_arch`, which
//! selects aya-ebpf's per-architecture helper bindings (same helper numbers, a module of another
//! name), and the debug information names that module's source file.
use anyhow::{Result, bail, ensure};

/// `EM_BPF`, the machine of an eBPF object's ELF header.
const EM_BPF: u16 = 247;

/// The eBPF object embedded in an agent binary: the 64-bit little-endian ELF file whose machine
/// is BPF, as long as its header says (the section headers end it).
pub fn embedded_object(binary: &[u8]) -> Result<&[u8]> {
    const MAGIC: &[u8] = b"\x7fELF\x02\x01\x01";
    let mut from = 0;
    while let Some(pos) = memchr::memmem::find(&binary[from..], MAGIC).map(|p| p + from) {
        from = pos + 1;
        let header = &binary[pos..];
        if header.len() < 64 || u16::from_le_bytes([header[18], header[19]]) != EM_BPF {
            continue;
        }
        let shoff = u64::from_le_bytes(header[0x28..0x30].try_into()?) as usize;
        let shentsize = u16::from_le_bytes([header[0x3a], header[0x3b]]) as usize;
        let shnum = u16::from_le_bytes([header[0x3c], header[0x3d]]) as usize;
        let len = shoff + shentsize * shnum;
        ensure!(len <= header.len(), "the embedded eBPF object is cut short");
        return Ok(&header[..len]);
    }
    bail!("no eBPF object (ELF, machine BPF) inside the binary")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_bpf_object_among_other_bytes() {
        let mut elf = vec![0u8; 64];
        elf[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        elf[18..20].copy_from_slice(&EM_BPF.to_le_bytes());
        elf[0x28..0x30].copy_from_slice(&64u64.to_le_bytes()); // section headers at 64
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        elf.extend(vec![7u8; 128]);
        // An x86-64 ELF header first (machine 62), then the BPF one.
        let mut binary = b"\x7fELF\x02\x01\x01".to_vec();
        binary.extend(vec![0u8; 11]);
        binary.extend(62u16.to_le_bytes());
        binary.extend(vec![0u8; 100]);
        binary.extend(&elf);
        binary.extend(b"trailing");
        assert_eq!(embedded_object(&binary).unwrap(), &elf[..]);
        assert!(embedded_object(b"no elf here").is_err());
    }
}
