//! `cargo xtask dist`: one tarball per architecture under `target/dist/`, holding the static
//! (musl) `tsync-agent` and `tsync-analyze`, `INSTALL.md`, the licenses and `SHA256SUMS`.
//!
//! Idempotent: a second run rebuilds nothing and leaves byte-identical tarballs (fixed mtimes,
//! owners and order). Before writing anything it checks what a user would: `file` calls every
//! binary statically linked for its architecture, the binaries run (aarch64 under
//! `qemu-aarch64-static`), `sha256sum -c` accepts the sums, and every agent embeds the same eBPF
//! object, byte for byte ([`ebpf`]), and every analyzer prints the same `sync --json` for the same traces.
mod ebpf;
mod package;

use anyhow::Result;

pub use package::Arch;

/// What the VM lab's guests of `arch` run (`cargo xtask lab`): the agent exactly as the tarball
/// holds it (built, staged and checked as `dist` does) and the guest program built alike.
pub fn lab_guest_binaries(arch: Arch) -> Result<tsync_lab::vm::GuestBinaries> {
    package::build_binaries(arch)?;
    let staged = package::stage(arch)?;
    Ok(tsync_lab::vm::GuestBinaries {
        agent: staged.dir.join("tsync-agent"),
        lab: package::build_lab_guest(arch)?,
    })
}

#[derive(clap::Args)]
pub struct Args {
    /// Architectures to build (default: all).
    #[arg(long = "arch", value_enum)]
    arches: Vec<Arch>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let arches = if self.arches.is_empty() {
            Arch::ALL.to_vec()
        } else {
            self.arches
        };
        build(&arches)
    }
}

/// Builds, checks and packs `arches`; prints where the tarballs are.
pub fn build(arches: &[Arch]) -> Result<()> {
    // One eBPF object, built once for bpfel, embedded in every agent: the programs a node runs
    // are byte for byte the same whatever its architecture.
    crate::util::use_ebpf_object(crate::ebpf::build()?);
    let mut built = Vec::new();
    for &arch in arches {
        eprintln!("dist: building {} (static, musl)", arch.triple());
        package::build_binaries(arch)?;
        let staged = package::stage(arch)?;
        let tarball = package::pack(&staged)?;
        eprintln!("dist: {}", tarball.display());
        built.push(package::Built { arch, staged });
    }
    package::check_same_ebpf_object(&built)?;
    package::check_same_sync(&built)?;
    package::write_tarball_sums(&built)
}
