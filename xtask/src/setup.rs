//! `cargo xtask setup`: installs everything building and testing tsync needs on a fresh machine
//! (nightly rust-src, bpf-linker, cargo-fuzz, the musl targets of `dist`, Debian packages,
//! OpenTelemetry's Python SDK in a venv, mounts).
//!
//! Idempotent and fast when everything is there already: each step first checks, then acts.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

// `fuzz` reaches these here.
pub use crate::util::{output, run};

/// The bpf-linker release the eBPF build is known to work with.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The bpf-linker feature matching the LLVM major version of the nightly toolchain.
const BPF_LINKER_LLVM_FEATURE: &str = "llvm-22";
/// The cargo-fuzz release `cargo xtask setup` installs when there is none.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// Debian packages the tests and benchmarks call (`ip`, `bpftool`, `iperf3`, `tshark`,
/// `setpriv`), the font the plots are drawn with, and LTTng with
/// babeltrace2 for the test that applies maps to a real LTTng userspace trace
/// (`tsync-lab/tests/lttng.rs`: a Python program logging through `lttngust`, read back with
/// `babeltrace2`), and python3-venv for the test that reads `apply --format otlp`'s output with
/// the OpenTelemetry project's own protobuf definitions (`tsync-analyze/tests/otlp.rs` makes a
/// venv and installs `opentelemetry-proto` from PyPI into it); FUSE with Python's binding for the
/// stalling pass-through file system the agent's output is tested and benchmarked through
/// (`tsync-lab/src/stall.py`); nftables (`nft`) for the cluster lab's NAT, which loads
/// kube-proxy's and Docker's kind of rules into its nodes' namespaces.
const DEBIAN_PACKAGES: &[&str] = &[
    "iproute2",
    "bpftool",
    "iperf3",
    "tshark",
    "util-linux",
    "fonts-dejavu-core",
    "lttng-tools",
    "babeltrace2",
    "python3-lttngust",
    "liblttng-ust1",
    // `cargo xtask dist`: musl-gcc for C in dependencies of the static x86_64 build (the `cc`
    // crate: zstd-sys, ...), the cross gcc linking the aarch64 one and compiling its C (with the
    // aarch64 C headers: without them it would take the host's), QEMU's user mode running its
    // binaries here, `file` checking that every binary is static.
    "musl-tools",
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
    "qemu-user-static",
    "file",
    "python3-venv",
    "fuse3",
    "python3-fusepy",
    "nftables",
];

/// OpenTelemetry's Python SDK and its HTTP instrumentations, for the test that synchronizes
/// spans of real instrumented services (`tsync-analyze/tests/spans_sdk.rs`, whose services are
/// `tests/otel_services.py`); pinned so that every machine runs the same instrumentation.
const OTEL_PYTHON_PACKAGES: &[&str] = &[
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-instrumentation-requests==0.66b2",
    "opentelemetry-instrumentation-wsgi==0.66b2",
    "requests==2.34.2",
];

/// The Rust targets `cargo xtask dist` builds for (static binaries: musl).
const DIST_TARGETS: &[&str] = &["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"];

#[derive(clap::Args)]
pub struct Args {
    /// Skip the Debian packages (e.g. on a machine without apt).
    #[arg(long)]
    no_apt: bool,
}

impl Args {
    pub fn run(self) -> Result<()> {
        run_setup(!self.no_apt)
    }
}

/// Runs every setup step; `apt` says whether Debian packages may be installed.
pub fn run_setup(apt: bool) -> Result<()> {
    ensure_nightly_rust_src()?;
    ensure_bpf_linker()?;
    ensure_cargo_fuzz()?;
    ensure_dist_targets()?;
    if apt {
        ensure_debian_packages()?;
        // The VM lab's: QEMU for x86_64 and arm64 guests, and Debian's arm64 packages (the
        // arm64 guest's kernel and busybox, fetched into the lab's cache when it runs).
        ensure_foreign_arch()?;
        ensure_packages(tsync_lab::vm::DEBIAN_PACKAGES)?;
    }
    ensure_otel_venv()?;
    ensure_mounts()?;
    eprintln!("setup: done");
    Ok(())
}

/// The eBPF crate is built with `-Z build-std=core` on nightly, which needs the nightly's sources.
fn ensure_nightly_rust_src() -> Result<()> {
    if output(Command::new("rustc").args(["+nightly", "--version"])).is_none() {
        eprintln!("setup: installing the nightly toolchain");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]))
    .unwrap_or_default();
    if installed.lines().any(|l| l.trim().starts_with("rust-src")) {
        return Ok(());
    }
    eprintln!("setup: adding rust-src to the nightly toolchain");
    run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

/// True if `bpf-linker --version` reports the pinned release.
fn bpf_linker_ok() -> bool {
    output(Command::new("bpf-linker").arg("--version"))
        .is_some_and(|v| v.split_whitespace().any(|w| w == BPF_LINKER_VERSION))
}

/// Builds bpf-linker against the nightly's own libLLVM, so the linker and rustc agree on the LLVM
/// bitcode version. The soname is looked up at run time: it changes with every LLVM bump.
fn ensure_bpf_linker() -> Result<()> {
    if bpf_linker_ok() {
        return Ok(());
    }
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .context("cannot ask the nightly rustc for its sysroot")?;
    let lib = Path::new(sysroot.trim()).join("lib");
    let soname = fs::read_dir(&lib)
        .with_context(|| format!("cannot list {}", lib.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("libLLVM.so."))
        .with_context(|| {
            format!(
                "no libLLVM.so.* in {}: the nightly toolchain has no shared LLVM",
                lib.display()
            )
        })?;
    let prefix = llvm_prefix_dir()?;
    let prefix_lib = prefix.join("lib");
    fs::create_dir_all(&prefix_lib)
        .with_context(|| format!("cannot create {}", prefix_lib.display()))?;
    for link in ["libLLVM.so", soname.as_str()] {
        let dst = prefix_lib.join(link);
        let _ = fs::remove_file(&dst);
        std::os::unix::fs::symlink(lib.join(&soname), &dst)
            .with_context(|| format!("cannot link {}", dst.display()))?;
    }
    eprintln!("setup: building bpf-linker {BPF_LINKER_VERSION} against {soname} (about a minute)");
    run(Command::new("cargo")
        .env("LLVM_PREFIX", &prefix)
        .args(["install", "--locked"])
        .arg(format!("bpf-linker@{BPF_LINKER_VERSION}"))
        .args([
            "--no-default-features",
            "--features",
            BPF_LINKER_LLVM_FEATURE,
        ]))?;
    if !bpf_linker_ok() {
        bail!(
            "bpf-linker {BPF_LINKER_VERSION} was installed but is not on PATH (add ~/.cargo/bin)"
        );
    }
    Ok(())
}

/// `cargo xtask fuzz` (and `test`) run the fuzz targets with cargo-fuzz on the nightly toolchain,
/// which needs nothing more than the toolchain itself (libFuzzer comes with `libfuzzer-sys`).
/// Installed only when `cargo +nightly fuzz` does not run; any installed release is kept.
fn ensure_cargo_fuzz() -> Result<()> {
    let works = || output(Command::new("cargo").args(["+nightly", "fuzz", "--version"])).is_some();
    if works() {
        return Ok(());
    }
    eprintln!("setup: installing cargo-fuzz {CARGO_FUZZ_VERSION} (about a minute)");
    run(Command::new("cargo")
        .args(["install", "--locked"])
        .arg(format!("cargo-fuzz@{CARGO_FUZZ_VERSION}")))?;
    if !works() {
        bail!(
            "cargo-fuzz was installed but `cargo +nightly fuzz --version` fails (is ~/.cargo/bin \
             on PATH? is the nightly toolchain installed?)"
        );
    }
    Ok(())
}

/// The venv `target/otel-venv` with [`OTEL_PYTHON_PACKAGES`] from PyPI (python3-venv is one of
/// the Debian packages). Kept when it already has those versions.
fn ensure_otel_venv() -> Result<()> {
    let venv = crate::util::target_dir().join("otel-venv");
    let python = venv.join("bin/python");
    let pinned: Vec<String> = OTEL_PYTHON_PACKAGES
        .iter()
        .map(|p| {
            let (name, version) = p.split_once("==").expect("pinned as NAME==VERSION");
            format!("importlib.metadata.version({name:?}) == {version:?}")
        })
        .collect();
    let check = format!(
        "import importlib.metadata, sys; sys.exit(0 if all([{}]) else 1)",
        pinned.join(", ")
    );
    if output(Command::new(&python).args(["-c", &check])).is_some() {
        return Ok(());
    }
    eprintln!(
        "setup: installing OpenTelemetry's Python SDK into {}",
        venv.display()
    );
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        .context("python3 -m venv failed (Debian's python3-venv is needed)")?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(OTEL_PYTHON_PACKAGES))
    .context("pip install of OpenTelemetry's Python SDK failed (PyPI must be reachable)")
}

/// Adds the [`DIST_TARGETS`] missing from the toolchain the workspace builds with.
fn ensure_dist_targets() -> Result<()> {
    let root = crate::util::workspace_root();
    let installed =
        output(
            Command::new("rustup")
                .current_dir(&root)
                .args(["target", "list", "--installed"]),
        )
        .unwrap_or_default();
    let missing: Vec<&str> = DIST_TARGETS
        .iter()
        .copied()
        .filter(|t| !installed.lines().any(|l| l.trim() == *t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: adding Rust targets {}", missing.join(" "));
    run(Command::new("rustup")
        .current_dir(&root)
        .args(["target", "add"])
        .args(&missing))
}

/// A directory laid out like an LLVM install prefix that points at the nightly's libLLVM.
fn llvm_prefix_dir() -> Result<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    Ok(home.join("tsync-llvm-prefix"))
}

/// True if dpkg says the package is installed.
fn debian_package_installed(name: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", name]))
        .is_some_and(|s| s.contains("install ok installed"))
}

/// Installs the missing Debian packages (one `apt-get update` first, only when something is missing).
fn ensure_debian_packages() -> Result<()> {
    ensure_packages(DEBIAN_PACKAGES)
}

/// Installs those of `packages` that are missing (one `apt-get update` first, only then); waits
/// for another apt or dpkg to finish rather than failing on its lock. Also for tasks with
/// packages of their own (`cargo xtask lab`).
pub fn ensure_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !debian_package_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !tsync_lab::is_root() {
        bail!(
            "Debian packages missing: {} — run `cargo xtask setup` as root, or install them yourself",
            missing.join(" ")
        );
    }
    eprintln!("setup: installing Debian packages: {}", missing.join(" "));
    let apt = || {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .args(["-o", "DPkg::Lock::Timeout=300"]);
        cmd
    };
    run(apt().args(["update", "-q"]))?;
    run(apt()
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing))
}

/// Makes Debian's packages of the VM lab's foreign architecture (arm64) known to apt: `dpkg
/// --add-architecture` and one `apt-get update`, only when it is not known yet.
pub fn ensure_foreign_arch() -> Result<()> {
    let arch = tsync_lab::vm::FOREIGN_ARCH;
    let known = output(Command::new("dpkg").arg("--print-foreign-architectures"))
        .is_some_and(|s| s.split_whitespace().any(|a| a == arch));
    if known {
        return Ok(());
    }
    if !tsync_lab::is_root() {
        bail!("Debian's {arch} packages are not known here — run `cargo xtask setup` as root");
    }
    eprintln!("setup: adding the {arch} architecture to dpkg (the VM lab's arm64 guest)");
    run(Command::new("dpkg").args(["--add-architecture", arch]))?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["-o", "DPkg::Lock::Timeout=300", "update", "-q"]))
}

/// Mounts tracefs and the BPF filesystem where they are absent (bpftool and tracepoint listing use them).
fn ensure_mounts() -> Result<()> {
    let mounts = fs::read_to_string("/proc/mounts").context("cannot read /proc/mounts")?;
    for (fstype, target) in [("tracefs", "/sys/kernel/tracing"), ("bpf", "/sys/fs/bpf")] {
        let mounted = mounts.lines().any(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, ty) = (f.next(), f.next(), f.next());
            dir == Some(target) && ty == Some(fstype)
        });
        if mounted {
            continue;
        }
        if !tsync_lab::is_root() {
            eprintln!("setup: note: {fstype} is not mounted on {target} (needs root)");
            continue;
        }
        eprintln!("setup: mounting {fstype} on {target}");
        run(Command::new("mount").args(["-t", fstype, fstype, target]))?;
    }
    Ok(())
}
