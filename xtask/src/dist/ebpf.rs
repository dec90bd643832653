//! Proves that the agents of every architecture embed the same eBPF programs.
//!
//! `cargo xtask dist` builds the object once (`cargo xtask build-ebpf`, for `bpfel`) and every
//! agent embeds that file, so the objects inside the shipped binaries (found by their ELF header,
//! checked against the hash `--version` prints) must be byte-identical. Built separately per
//! agent, they would not be: aya-build passes the agent's architecture as `bpf_target_arch`, which
//! selects aya-ebpf's per-architecture helper bindings (same helper numbers, a module of another
//! name), and the debug information names that module's source file. [`compare`] says how two
//! objects differ when they do: every section but the debug information (code, relocations, maps,
//! globals, symbols, license) byte for byte, and the BTF's types and strings but for source paths.
use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail, ensure};
use object::{Object as _, ObjectSection as _};

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

/// Section name → contents.
fn sections(obj: &[u8]) -> Result<BTreeMap<String, Vec<u8>>> {
    let file = object::File::parse(obj).context("cannot parse the eBPF object")?;
    file.sections()
        .map(|s| {
            let name = s.name().context("a section without a name")?.to_owned();
            Ok((name, s.data().context("a section without data")?.to_vec()))
        })
        .collect()
}

/// Debug information: DWARF and its relocations, and BTF (compared on its own).
fn is_debug(name: &str) -> bool {
    name.starts_with(".debug_") || name.starts_with(".rel.debug_") || name.starts_with(".BTF")
}

/// The strings of a `.BTF` section, with `arch` in source paths replaced by `ARCH`, and the
/// length of its type section.
fn btf_strings(btf: &[u8], arch: &str) -> Result<(usize, Vec<String>)> {
    ensure!(btf.len() >= 24, "a .BTF section shorter than its header");
    let word = |at: usize| u32::from_le_bytes(btf[at..at + 4].try_into().unwrap()) as usize;
    let (hdr_len, type_len, str_off, str_len) = (word(4), word(12), word(16), word(20));
    let strings = btf
        .get(hdr_len + str_off..hdr_len + str_off + str_len)
        .context("the .BTF string section lies outside it")?;
    let mut list: Vec<String> = strings
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).replace(&format!("/{arch}/"), "/ARCH/"))
        .collect();
    list.sort();
    Ok((type_len, list))
}

/// Compares two agents' objects; `Ok` with a summary if the programs are the same.
pub fn compare(a: (&str, &[u8]), b: (&str, &[u8])) -> Result<String> {
    let (sa, sb) = (sections(a.1)?, sections(b.1)?);
    let names = |s: &BTreeMap<String, Vec<u8>>| -> Vec<String> { s.keys().cloned().collect() };
    ensure!(
        names(&sa) == names(&sb),
        "the {} and {} eBPF objects have different sections",
        a.0,
        b.0
    );
    let mut compared = 0;
    for (name, data) in &sa {
        if is_debug(name) {
            continue;
        }
        ensure!(
            sb[name] == *data,
            "section {name} of the eBPF object differs between the {} and {} agents",
            a.0,
            b.0
        );
        compared += 1;
    }
    let btf = |s: &BTreeMap<String, Vec<u8>>, arch| {
        s.get(".BTF").map(|d| btf_strings(d, arch)).transpose()
    };
    ensure!(
        btf(&sa, a.0)? == btf(&sb, b.0)?,
        "the BTF of the {} and {} eBPF objects differs beyond source paths",
        a.0,
        b.0
    );
    let identical = a.1 == b.1;
    Ok(if identical {
        format!("byte-identical eBPF objects ({} bytes)", a.1.len())
    } else {
        format!(
            "the same eBPF programs: {compared} sections (code, relocations, maps, globals, \
             symbols) byte-identical, BTF of the same size with the same names; only debug information names \
             aya-ebpf's {}/{} helper bindings",
            a.0, b.0
        )
    })
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

    #[test]
    fn only_source_paths_may_name_the_architecture() {
        let btf = |strings: &[u8]| {
            let mut b = vec![0u8; 24];
            b[4..8].copy_from_slice(&24u32.to_le_bytes());
            b[20..24].copy_from_slice(&(strings.len() as u32).to_le_bytes());
            b.extend(strings);
            b
        };
        let x86 = btf(b"\0PacketEvent\0/src/x86_64/helpers.rs\0");
        let arm = btf(b"\0PacketEvent\0/src/aarch64/helpers.rs\0");
        let other = btf(b"\0OtherEvent\0/src/aarch64/helpers.rs\0");
        assert_eq!(
            btf_strings(&x86, "x86_64").unwrap(),
            btf_strings(&arm, "aarch64").unwrap()
        );
        assert_ne!(
            btf_strings(&x86, "x86_64").unwrap(),
            btf_strings(&other, "aarch64").unwrap()
        );
    }
}
