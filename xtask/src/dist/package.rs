//! Building, checking and packing one architecture's static binaries (see [`super`]).
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail, ensure};
use sha2::{Digest as _, Sha256};

use crate::util::{cargo, run, target_dir, workspace_root};

/// The binaries each tarball holds.
const BINARIES: [&str; 2] = ["tsync-agent", "tsync-analyze"];
/// The other files, as (name in the tarball, path in the workspace).
const DOCUMENTS: [(&str, &str); 3] = [
    ("INSTALL.md", "docs/install.md"),
    ("LICENSE-APACHE", "LICENSE-APACHE"),
    ("LICENSE-MIT", "LICENSE-MIT"),
];
/// The cargo profile (Cargo.toml): release, stripped, no debug info.
const PROFILE: &str = "release-static";
/// The version the tarballs carry (the workspace's).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// An architecture tsync ships for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    Aarch64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The name in file names and `uname -m`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The Rust target: musl, so the binaries link statically and run on any distribution.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// How `file` names the architecture.
    fn file_says(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86-64",
            Arch::Aarch64 => "ARM aarch64",
        }
    }

    /// True when this machine runs the architecture's binaries natively.
    fn is_host(self) -> bool {
        std::env::consts::ARCH == self.name()
    }

    /// The C compiler for C code in dependencies (the `cc` crate: `zstd-sys`, ...) and, for a
    /// foreign architecture, the linker: Rust's musl targets bring their own C runtime and libc
    /// (self-contained), so a plain cross gcc links them statically.
    fn compiler_env(self) -> Vec<(String, String)> {
        let key = self.triple().replace('-', "_");
        if self.is_host() {
            return vec![(format!("CC_{key}"), "musl-gcc".into())];
        }
        let prefix = format!("{}-linux-gnu", self.name());
        vec![
            (format!("CC_{key}"), format!("{prefix}-gcc")),
            (format!("AR_{key}"), format!("{prefix}-ar")),
            (
                format!("CARGO_TARGET_{}_LINKER", key.to_uppercase()),
                format!("{prefix}-gcc"),
            ),
        ]
    }

    /// A command running one of the architecture's binaries here (natively or under QEMU).
    fn command(self, binary: &Path) -> Command {
        if self.is_host() {
            return Command::new(binary);
        }
        let mut cmd = Command::new(format!("qemu-{}-static", self.name()));
        cmd.arg(binary);
        cmd
    }

    /// The tarball's base name, and its top folder.
    fn base_name(self) -> String {
        format!("tsync-{VERSION}-{}-linux-musl", self.name())
    }
}

/// `target/dist`.
pub fn dist_dir() -> PathBuf {
    target_dir().join("dist")
}

/// Where `cargo build --profile release-static --target T` puts a binary.
fn built_binary(arch: Arch, name: &str) -> PathBuf {
    target_dir().join(arch.triple()).join(PROFILE).join(name)
}

/// Builds both binaries for `arch` with the [`PROFILE`] profile.
pub fn build_binaries(arch: Arch) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--profile", PROFILE, "--target", arch.triple()]);
    for name in BINARIES {
        cmd.args(["-p", name]);
    }
    cmd.envs(arch.compiler_env());
    run(&mut cmd).with_context(|| {
        format!(
            "building for {} failed (does `cargo xtask setup` run? it installs the Rust target, \
             musl-tools and the cross gcc)",
            arch.triple()
        )
    })
}

/// Builds the VM lab's guest program for `arch` as the dist binaries are built (same profile,
/// target and compilers; without the crate's `host` feature, which only the lab's host needs)
/// and checks that it is static; its path. Not shipped: the lab's guests run it beside the
/// tarball's agent.
pub fn build_lab_guest(arch: Arch) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args(["build", "--profile", PROFILE, "--target", arch.triple()])
        .args(["-p", "tsync-lab", "--no-default-features"])
        .envs(arch.compiler_env());
    run(&mut cmd).with_context(|| format!("building tsync-lab for {} failed", arch.triple()))?;
    let binary = built_binary(arch, "tsync-lab");
    check_static(arch, &binary)?;
    Ok(binary)
}

/// A staged tarball folder, checked.
pub struct Staged {
    pub dir: PathBuf,
    /// The SHA-256 of the eBPF object the agent embeds (from its `--version`).
    pub ebpf_sha256: String,
}

/// One architecture done.
pub struct Built {
    pub arch: Arch,
    pub staged: Staged,
}

/// Copies the files into `target/dist/<base name>/`, writes `SHA256SUMS`, then checks the folder
/// as a user would: `file`, `--version`, `sha256sum -c`.
pub fn stage(arch: Arch) -> Result<Staged> {
    let dir = dist_dir().join(arch.base_name());
    // The folder is ours (made by an earlier run): start afresh so nothing stale stays.
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let root = workspace_root();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for name in BINARIES {
        let path = built_binary(arch, name);
        files.push((name.into(), read(&path)?));
    }
    for (name, path) in DOCUMENTS {
        files.push((name.into(), read(&root.join(path))?));
    }
    files.sort();
    let sums: String = files
        .iter()
        .map(|(name, data)| format!("{}  {name}\n", sha256_hex(data)))
        .collect();
    files.push(("SHA256SUMS".into(), sums.into_bytes()));
    for (name, data) in &files {
        let path = dir.join(name);
        fs::write(&path, data).with_context(|| format!("cannot write {}", path.display()))?;
        set_mode(&path, mode_of(name))?;
    }
    for name in BINARIES {
        check_static(arch, &dir.join(name))?;
    }
    let sums_ok = Command::new("sha256sum")
        .args(["--check", "--strict", "--quiet", "SHA256SUMS"])
        .current_dir(&dir)
        .status()
        .context("cannot run sha256sum")?;
    ensure!(
        sums_ok.success(),
        "sha256sum -c rejects {}/SHA256SUMS",
        dir.display()
    );
    let mut ebpf_sha256 = String::new();
    for name in BINARIES {
        let text = version_text(arch, &dir.join(name))?;
        if let Some(hash) = text
            .lines()
            .find_map(|l| l.strip_prefix("eBPF object: sha256 "))
        {
            ebpf_sha256 = hash.split_whitespace().next().unwrap_or_default().into();
        }
    }
    ensure!(
        !ebpf_sha256.is_empty(),
        "the {} agent's --version names no eBPF object",
        arch.name()
    );
    Ok(Staged { dir, ebpf_sha256 })
}

/// Mode of a file in the tarball: binaries executable.
fn mode_of(name: &str) -> u32 {
    if BINARIES.contains(&name) {
        0o755
    } else {
        0o644
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot chmod {}", path.display()))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Lowercase hex SHA-256, as `sha256sum` prints it.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `file` must call the binary statically linked, for `arch`.
fn check_static(arch: Arch, binary: &Path) -> Result<()> {
    let out = Command::new("file")
        .arg("-b")
        .arg(binary)
        .output()
        .context("cannot run `file` (cargo xtask setup installs it)")?;
    let says = String::from_utf8_lossy(&out.stdout);
    let is_static = says.contains("statically linked") || says.contains("static-pie linked");
    ensure!(
        out.status.success() && is_static && says.contains(arch.file_says()),
        "{} is not a static {} binary: file says {}",
        binary.display(),
        arch.name(),
        says.trim()
    );
    Ok(())
}

/// Runs `binary --version` (under QEMU for a foreign architecture) and checks that it names this
/// version and target.
fn version_text(arch: Arch, binary: &Path) -> Result<String> {
    let out = arch
        .command(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {} --version", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    ensure!(
        out.status.success()
            && text.starts_with(&format!("{name} {VERSION}"))
            && text.contains(&format!("target: {}", arch.triple())),
        "{} --version says {text:?} ({}; stderr: {})",
        binary.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(text)
}

/// Packs the staged folder into `<folder>.tar.gz` deterministically: sorted names, mtime 0, owner
/// root, fixed modes, a gzip header without time or name. An identical tarball is left alone.
pub fn pack(staged: &Staged) -> Result<PathBuf> {
    let base = staged
        .dir
        .file_name()
        .context("staged folder has no name")?
        .to_string_lossy()
        .into_owned();
    let mut names: Vec<String> = fs::read_dir(&staged.dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_>>()?;
    names.sort();
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    let mut dir_header = header(0o755, 0);
    dir_header.set_entry_type(tar::EntryType::Directory);
    tar.append_data(&mut dir_header, format!("{base}/"), std::io::empty())?;
    for name in &names {
        let data = read(&staged.dir.join(name))?;
        let mut h = header(mode_of(name), data.len() as u64);
        tar.append_data(&mut h, format!("{base}/{name}"), data.as_slice())?;
    }
    let bytes = tar.into_inner()?.finish()?;
    let path = dist_dir().join(format!("{base}.tar.gz"));
    write_if_changed(&path, &bytes)?;
    Ok(path)
}

/// A tar header with everything but mode and size fixed.
fn header(mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// Writes `bytes` to `path` through a temporary file and a rename, unless it holds them already.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<()> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let tmp = path.with_extension("tmp");
    let mut f =
        fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("cannot rename to {}", path.display()))
}

/// Every agent embeds the same eBPF object, byte for byte: the one `cargo xtask build-ebpf`
/// built for `bpfel` (see [`super::ebpf`]).
pub fn check_same_ebpf_object(built: &[Built]) -> Result<()> {
    let mut objects = Vec::new();
    for b in built {
        let binary = read(&b.staged.dir.join("tsync-agent"))?;
        let object = super::ebpf::embedded_object(&binary)?.to_vec();
        ensure!(
            sha256_hex(&object) == b.staged.ebpf_sha256,
            "the eBPF object found in the {} agent is not the one its --version names",
            b.arch.name()
        );
        objects.push((b.arch.name(), object));
    }
    let Some((first, rest)) = objects.split_first() else {
        return Ok(());
    };
    for other in rest {
        if first.1 == other.1 {
            eprintln!(
                "dist: {} and {} agents embed the same eBPF object, byte for byte (sha256 {})",
                first.0,
                other.0,
                sha256_hex(&first.1)
            );
            continue;
        }
        bail!(
            "the {} and {} agents embed different eBPF objects: both must embed the one \
             `cargo xtask build-ebpf` built",
            first.0,
            other.0
        );
    }
    Ok(())
}

/// Every analyzer computes the same result: `sync --json` (convex hull, then regression) on the
/// traces of a simulated three-node cluster with NTP-disciplined clocks prints byte-identical
/// JSON on every architecture (floating point included).
pub fn check_same_sync(built: &[Built]) -> Result<()> {
    let traces = dist_dir().join("sync-check");
    let xtask = std::env::current_exe().context("cannot find the xtask binary")?;
    run(Command::new(xtask)
        .args([
            "simulate",
            "--nodes",
            "3",
            "--duration",
            "20",
            "--clock",
            "disciplined",
        ])
        .args(["--seed", "7", "-o"])
        .arg(&traces))?;
    let inputs: Vec<PathBuf> = (0..3)
        .map(|k| traces.join(format!("node-{k}.tsync")))
        .collect();
    for algorithm in ["chull", "linreg"] {
        let mut first: Option<(Arch, Vec<u8>)> = None;
        for b in built {
            let out = b
                .arch
                .command(&b.staged.dir.join("tsync-analyze"))
                .args(["sync", "--json", "--algorithm", algorithm])
                .args(&inputs)
                .output()
                .context("cannot run tsync-analyze sync")?;
            ensure!(
                out.status.success() && !out.stdout.is_empty(),
                "the {} tsync-analyze sync failed ({}): {}",
                b.arch.name(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            match &first {
                None => first = Some((b.arch, out.stdout)),
                Some((arch, json)) => ensure!(
                    *json == out.stdout,
                    "tsync-analyze sync --algorithm {algorithm} prints different JSON on {} and \
                     {} (inputs in {})",
                    arch.name(),
                    b.arch.name(),
                    traces.display()
                ),
            }
        }
    }
    fs::remove_dir_all(&traces).with_context(|| format!("cannot remove {}", traces.display()))?;
    if built.len() > 1 {
        eprintln!("dist: every analyzer's sync --json is byte-identical (3 simulated nodes)");
    }
    Ok(())
}

/// `target/dist/SHA256SUMS`: the sums of this version's tarballs, for users who download them.
pub fn write_tarball_sums(built: &[Built]) -> Result<()> {
    let mut tarballs: Vec<PathBuf> = fs::read_dir(dist_dir())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&format!("tsync-{VERSION}-")) && n.ends_with(".tar.gz")
            })
        })
        .collect();
    tarballs.sort();
    let mut sums = String::new();
    for path in &tarballs {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        sums.push_str(&format!("{}  {name}\n", sha256_hex(&read(path)?)));
    }
    write_if_changed(&dist_dir().join("SHA256SUMS"), sums.as_bytes())?;
    for b in built {
        for name in BINARIES {
            let size = fs::metadata(b.staged.dir.join(name))?.len();
            eprintln!("dist: {} {name}: {size} bytes", b.arch.name());
        }
    }
    Ok(())
}
