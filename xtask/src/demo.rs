//! `cargo xtask demo`: the end-to-end demo (`tsync_lab::demo`): runs setup, builds the binaries
//! the nodes run, and runs it.
use tsync_lab::demo::{Demo, DemoOptions};

use crate::util::{lab_binaries, target_dir};

#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    #[command(flatten)]
    options: DemoOptions,
}

impl DemoArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let demo = Demo::new(self.options, &target_dir())?;
        crate::setup::run_setup(true)?;
        demo.run(&lab_binaries()?)
    }
}
