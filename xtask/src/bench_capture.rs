//! `cargo xtask bench capture` (being written).
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {}

impl Args {
    pub fn run(self) -> Result<()> {
        anyhow::bail!("not written yet")
    }
}
