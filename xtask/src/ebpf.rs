//! `cargo xtask build-ebpf`: the eBPF programs built once, for every cargo run that embeds them.
//!
//! `tsync-agent/build.rs` builds them through aya-build into its own `OUT_DIR`, which cargo keeps
//! per profile, feature set and tool: `cargo clippy`, `cargo test --workspace`, the lab's
//! `cargo build -p tsync-agent` and the release builds each had a separate copy, each built from
//! scratch (`core` for the BPF target included) on a fresh machine and again after every change to
//! the programs. Built here into `target/ebpf/` and named by `TSYNC_EBPF_OBJECT`, the object is
//! only copied by the build script. The command is aya-build 0.2's (same toolchain, target,
//! flags), so the object is the one a plain `cargo build` embeds.
use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, Result, ensure};

use crate::util::{run, target_dir, workspace_root};

/// The variable `tsync-agent/build.rs` reads: a prebuilt object to embed.
pub const OBJECT_ENV: &str = "TSYNC_EBPF_OBJECT";

#[derive(clap::Args)]
pub struct Args {}

impl Args {
    /// Builds the object and prints its path (for `TSYNC_EBPF_OBJECT=$(cargo xtask build-ebpf)`).
    pub fn run(self) -> Result<()> {
        println!("{}", build()?.display());
        Ok(())
    }
}

/// Builds the programs (a no-op for cargo when nothing changed) and returns the object's path.
pub fn build() -> Result<PathBuf> {
    let endian = if cfg!(target_endian = "big") {
        "bpfeb"
    } else {
        "bpfel"
    };
    let target = format!("{endian}-unknown-none");
    // aya-build's `bpf_target_arch`: the host's architecture (riscv64 variants as riscv64).
    let arch = match std::env::consts::ARCH {
        a if a.starts_with("riscv64") => "riscv64",
        a => a,
    };
    let dir = target_dir().join("ebpf");
    let mut cmd = Command::new("rustup");
    cmd.current_dir(workspace_root())
        .args([
            "run",
            "nightly",
            "cargo",
            "build",
            "--package",
            "tsync-ebpf",
            "--bins",
        ])
        .args(["--release", "--target", &target, "-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&dir)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf"),
        )
        // The outer cargo's compiler and wrapper (clippy) are not the nightly BPF ones.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    run(&mut cmd).context(
        "building the eBPF programs failed (cargo xtask setup installs the nightly toolchain, \
         rust-src and bpf-linker)",
    )?;
    let object = dir.join(&target).join("release").join("tsync");
    ensure!(
        object.is_file(),
        "the eBPF build produced no {}",
        object.display()
    );
    Ok(object)
}
