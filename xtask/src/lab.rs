//! `cargo xtask lab`: the VM lab (`tsync_lab::vm`): installs QEMU's Debian packages, builds the
//! static (dist) binaries the guests run, for each architecture among them, and runs it.
use tsync_lab::vm::{DEBIAN_PACKAGES, GuestArch, Lab, LabBinaries, LabOptions};

use crate::dist::Arch;
use crate::util::target_dir;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    options: LabOptions,
}

impl Args {
    pub fn run(self) -> anyhow::Result<()> {
        let lab = Lab::new(self.options, &target_dir())?;
        crate::setup::ensure_foreign_arch()?;
        crate::setup::ensure_packages(DEBIAN_PACKAGES)?;
        lab.run(guest_binaries)
    }
}

/// The dist binaries of every architecture the guests run (the eBPF object built once, as for
/// `dist`: the same programs on every guest).
fn guest_binaries(arches: &[GuestArch]) -> anyhow::Result<LabBinaries> {
    crate::util::use_ebpf_object(crate::ebpf::build()?);
    let mut binaries = LabBinaries::default();
    for &arch in arches {
        match arch {
            GuestArch::Amd64 => {
                binaries.x86_64 = Some(crate::dist::lab_guest_binaries(Arch::X86_64)?)
            }
            GuestArch::Arm64 => {
                binaries.aarch64 = Some(crate::dist::lab_guest_binaries(Arch::Aarch64)?)
            }
        }
    }
    Ok(binaries)
}
