//! `cargo xtask lab`: the VM lab (`tsync_lab::vm`): installs QEMU's Debian packages, builds the
//! binaries the guests run, and runs it.
use tsync_lab::vm::{DEBIAN_PACKAGES, Lab, LabOptions};

use crate::util::{lab_binaries, target_dir};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    options: LabOptions,
}

impl Args {
    pub fn run(self) -> anyhow::Result<()> {
        let lab = Lab::new(self.options, &target_dir())?;
        crate::setup::ensure_packages(DEBIAN_PACKAGES)?;
        lab.run(lab_binaries)
    }
}
