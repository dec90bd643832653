//! `cargo xtask bench capture`: the capture benchmark (`tsync_lab::bench::capture`) with the
//! workspace's agent, built in release mode; the table goes to `target/bench/capture.md`.
use anyhow::Result;
use tsync_lab::bench::capture::CaptureOptions;

use crate::util::{build_release, release_binary, target_dir};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    options: CaptureOptions,
}

impl Args {
    pub fn run(self) -> Result<()> {
        self.options.check()?;
        eprintln!("bench: building tsync-agent (release)");
        build_release(&["tsync-agent"])?;
        self.options
            .run(&release_binary("tsync-agent"), &target_dir().join("bench"))
    }
}
