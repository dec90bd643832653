//! The arm64 guest's whole system: one initramfs (the host is x86_64, so its root file system
//! cannot serve an arm64 guest over 9p as it serves the x86_64 ones).
//!
//! It holds Debian's static busybox for arm64 (shell, `mount`, `insmod`, `ip`), the few kernel
//! modules the guest needs from the kernel package's own tree (virtio-net, 9p for the output
//! folder; virtio-pci and the ivshmem BAR's PCI are built in), the static aarch64 `tsync-agent`
//! and `tsync-lab` (the dist build), and an `/init` that mounts, loads, mounts the host's output
//! folder at the same path as on the host, runs the guest's command and powers off. Written as a
//! `newc` cpio archive, uncompressed (the kernel unpacks it; compression would only cost the
//! guest's emulated CPU time).
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use super::cache::Kernel;
use crate::command::output;

/// The modules the guest loads (with what they depend on, loaded first).
pub const MODULES: &[&str] = &["virtio_net", "9p", "9pnet_virtio"];
/// The 9p mount tag of the host's output folder.
pub const OUT_TAG: &str = "out";

/// What goes into one guest's initramfs.
pub struct Contents<'a> {
    pub busybox: &'a Path,
    pub kernel: &'a Kernel,
    /// The static aarch64 agent and lab program, installed as `/bin/tsync-agent` and
    /// `/bin/tsync-lab`.
    pub agent: &'a Path,
    pub lab: &'a Path,
    /// The host's output folder (mounted at the same path inside).
    pub out: &'a Path,
    /// The shell command the guest runs (with `/bin/tsync-agent` and `/bin/tsync-lab`).
    pub exec: &'a str,
}

/// Writes the initramfs to `path`.
pub fn write(path: &Path, c: &Contents<'_>) -> anyhow::Result<()> {
    let modules = modules(c.kernel)?;
    let mut archive = Newc::default();
    for dir in ["bin", "dev", "proc", "sys", "tmp", "lib", "lib/modules"] {
        archive.dir(dir);
    }
    archive.file("bin/busybox", 0o755, &read(c.busybox)?);
    archive.file("bin/tsync-agent", 0o755, &read(c.agent)?);
    archive.file("bin/tsync-lab", 0o755, &read(c.lab)?);
    let mut names = Vec::new();
    for (name, file) in &modules {
        archive.file(
            &format!("lib/modules/{name}.ko"),
            0o644,
            &module_bytes(file)?,
        );
        names.push(name.as_str());
    }
    archive.file("init", 0o755, init_script(&names, c.out).as_bytes());
    archive.file("exec.sh", 0o755, format!("{}\n", c.exec).as_bytes());
    let bytes = archive.finish();
    fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// The guest's `/init`: busybox's applets, the pseudo file systems, the modules in order, the
/// output folder, the command (`/exec.sh`); then power off whatever happened (the host reads
/// the reports).
fn init_script(modules: &[&str], out: &Path) -> String {
    let out = out.display();
    format!(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         export PATH=/bin\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         mount -t tmpfs tmpfs /tmp\n\
         for m in {mods}; do insmod /lib/modules/$m.ko || echo \"init: insmod $m failed\"; done\n\
         mkdir -p '{out}'\n\
         mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 {OUT_TAG} '{out}' \
         || echo 'init: cannot mount the output folder'\n\
         ip link set lo up\n\
         echo \"init: booted in $(cut -d' ' -f1 /proc/uptime) s\"\n\
         sh /exec.sh\n\
         sync\n\
         umount '{out}'\n\
         poweroff -f\n",
        mods = modules.join(" "),
    )
}

/// The modules [`MODULES`] need, dependencies first: (name, file in the kernel package).
fn modules(kernel: &Kernel) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let tree = kernel.modules()?;
    let mut index = BTreeMap::new();
    index_modules(&tree.join("kernel"), &mut index)?;
    let mut ordered = Vec::new();
    for name in MODULES {
        add_with_dependencies(name, &index, &mut ordered, 0)?;
    }
    Ok(ordered)
}

/// Module name (as the kernel spells it: `_` for `-`) → file, for every module in `dir`.
fn index_modules(dir: &Path, index: &mut BTreeMap<String, PathBuf>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            index_modules(&path, index)?;
            continue;
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if let Some(stem) = name
            .strip_suffix(".ko.xz")
            .or_else(|| name.strip_suffix(".ko"))
        {
            index.insert(stem.replace('-', "_"), path.clone());
        }
    }
    Ok(())
}

/// Appends `name` after its dependencies (`modinfo -F depends`), each once.
fn add_with_dependencies(
    name: &str,
    index: &BTreeMap<String, PathBuf>,
    ordered: &mut Vec<(String, PathBuf)>,
    depth: usize,
) -> anyhow::Result<()> {
    let name = name.replace('-', "_");
    if ordered.iter().any(|(n, _)| *n == name) {
        return Ok(());
    }
    if depth > 16 {
        bail!("module dependencies of {name} loop");
    }
    let Some(file) = index.get(&name) else {
        bail!("the kernel package has no module {name} (built in? then drop it from MODULES)");
    };
    let depends = output(Command::new("modinfo").args(["-F", "depends"]).arg(file))
        .with_context(|| format!("cannot read {}'s dependencies (modinfo)", file.display()))?;
    for dep in depends.trim().split(',').filter(|d| !d.is_empty()) {
        add_with_dependencies(dep, index, ordered, depth + 1)?;
    }
    ordered.push((name, file.clone()));
    Ok(())
}

/// A module's object, decompressed (busybox's `insmod` takes plain objects).
fn module_bytes(file: &Path) -> anyhow::Result<Vec<u8>> {
    if file.extension().is_some_and(|e| e == "xz") {
        let out = Command::new("xz")
            .arg("-dc")
            .arg(file)
            .output()
            .context("cannot run xz (xz-utils)")?;
        if !out.status.success() {
            bail!("xz cannot decompress {}", file.display());
        }
        return Ok(out.stdout);
    }
    read(file)
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// A `newc` (SVR4, no CRC) cpio archive, the format the kernel unpacks.
#[derive(Default)]
struct Newc {
    bytes: Vec<u8>,
    inode: u32,
}

impl Newc {
    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.inode += 1;
        let nlink = if mode & 0o040_000 != 0 { 2 } else { 1 };
        let fields = [
            self.inode,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        let _ = write!(self.bytes, "070701");
        for f in fields {
            let _ = write!(self.bytes, "{f:08x}");
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.inode = 0;
        self.entry("TRAILER!!!", 0, &[]);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newc_archive_is_what_cpio_reads() {
        let mut a = Newc::default();
        a.dir("bin");
        a.file("bin/hello", 0o755, b"#!/bin/sh\necho hi\n");
        let bytes = a.finish();
        assert_eq!(&bytes[..6], b"070701");
        assert!(bytes.len().is_multiple_of(4));
        // The header's name size counts the NUL; the first entry's name follows its 110 bytes.
        assert_eq!(&bytes[94..102], b"00000004");
        assert_eq!(&bytes[110..114], b"bin\0");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("bin/hello\0") && text.contains("echo hi") && text.contains("TRAILER!!!")
        );
    }

    #[test]
    fn the_init_script_mounts_runs_the_command_and_powers_off() {
        let s = init_script(&["failover", "virtio_net"], Path::new("/t/out"));
        assert!(s.starts_with("#!/bin/busybox sh\n"));
        assert!(s.contains("for m in failover virtio_net;"));
        assert!(
            s.contains("mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out '/t/out'")
        );
        assert!(s.contains("\nsh /exec.sh\n"));
        assert!(s.trim_end().ends_with("poweroff -f"));
    }
}
