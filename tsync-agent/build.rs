//! Builds the eBPF programs (crate `tsync-ebpf`) for the BPF target with the nightly toolchain and
//! bpf-linker (`cargo xtask setup` installs both); the agent embeds the object file.
use std::path::Path;

#[path = "../build-support/build_info.rs"]
mod build_info;

fn main() -> anyhow::Result<()> {
    build_info::emit();
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
