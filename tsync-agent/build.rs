//! Builds the eBPF programs (crate `tsync-ebpf`) for the BPF target with the nightly toolchain and
//! bpf-linker (`cargo xtask setup` installs both); the agent embeds the object file.
//!
//! A build script's output lives in a directory of its own per profile, feature set and tool
//! (`cargo build`, `cargo build --release`, `cargo clippy`, `cargo test` of another package set),
//! and aya-build's target directory lives inside it: each of them would build the programs again,
//! `core` for the BPF target included. So when `TSYNC_EBPF_OBJECT` names an object already built
//! (`cargo xtask build-ebpf` prints it; `cargo xtask test` sets it for everything it runs), that
//! file is embedded as it is; without it, a plain `cargo build` builds the programs here.
use std::path::Path;

#[path = "../build-support/build_info.rs"]
mod build_info;

/// Names a prebuilt object (`cargo xtask build-ebpf`) to embed instead of building one.
const PREBUILT: &str = "TSYNC_EBPF_OBJECT";

fn main() -> anyhow::Result<()> {
    build_info::emit();
    println!("cargo:rerun-if-env-changed={PREBUILT}");
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow::anyhow!("OUT_DIR not set"))?;
    // aya-build names the object after the program crate's binary target.
    let embedded = Path::new(&out_dir).join("tsync");
    if let Some(object) = std::env::var_os(PREBUILT).filter(|v| !v.is_empty()) {
        let object = Path::new(&object);
        println!("cargo:rerun-if-changed={}", object.display());
        std::fs::copy(object, &embedded).map_err(|e| {
            anyhow::anyhow!(
                "{PREBUILT}={}: cannot copy the eBPF object ({e}); build it with `cargo xtask \
                 build-ebpf`, or unset {PREBUILT} to build it here",
                object.display()
            )
        })?;
        return Ok(());
    }
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let workspace = Path::new(&manifest_dir)
        .parent()
        .ok_or_else(|| anyhow::anyhow!("tsync-agent has no parent directory"))?;
    let ebpf_dir = workspace.join("tsync-ebpf");
    // The programs embed the shared event record: rebuild when it changes.
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("tsync-common/src/lib.rs").display()
    );
    let root_dir = ebpf_dir.to_string_lossy().into_owned();
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "tsync-ebpf",
            root_dir: &root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
