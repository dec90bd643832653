//! `cargo xtask cluster`: the cluster lab (`tsync_lab::cluster`): runs setup (nftables among the
//! Debian packages), builds the binaries the nodes and pods run, and runs it.
use tsync_lab::cluster::{Cluster, ClusterOptions};

use crate::util::{lab_binaries, target_dir};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    #[command(flatten)]
    pub options: ClusterOptions,
}

impl Args {
    pub fn run(self) -> anyhow::Result<()> {
        let cluster = Cluster::new(self.options, &target_dir())?;
        crate::setup::run_setup(true)?;
        cluster.run(&lab_binaries()?)
    }
}
