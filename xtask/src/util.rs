//! What several tasks share: the workspace's location, running commands and cargo, task
//! defaults, the binaries the demo runs. (The lab itself is the `tsync-lab` crate.)
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

/// Running a command: the lab's helpers, which failing say what they ran.
pub use tsync_lab::command::{output, run};

/// The workspace's root folder (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_owned()
}

/// A task's options at their defaults, as if given no flag (for tasks that run other tasks).
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> Result<T> {
    let matches = T::augment_args(clap::Command::new("task")).try_get_matches_from(["task"])?;
    Ok(T::from_arg_matches(&matches)?)
}

/// `cargo` (the one running xtask), in the workspace's root folder.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    if let Some(object) = EBPF_OBJECT.get() {
        cmd.env(crate::ebpf::OBJECT_ENV, object);
    }
    cmd
}

/// The eBPF object [`use_ebpf_object`] named: every [`cargo`] run embeds it (and so do the cargo
/// runs of what those start, which inherit the variable: the lab's agent build).
static EBPF_OBJECT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Makes every later [`cargo`] run embed `object` instead of building the programs again.
pub fn use_ebpf_object(object: PathBuf) {
    let _ = EBPF_OBJECT.set(object);
}

/// The workspace's target folder (`$CARGO_TARGET_DIR` or `target/`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Builds `packages` in release mode; their binaries are then [`release_binary`].
pub fn build_release(packages: &[&str]) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["build", "--release"]);
    for p in packages {
        cmd.args(["-p", p]);
    }
    run(&mut cmd).with_context(|| format!("building {} failed", packages.join(" and ")))
}

/// Where [`build_release`] puts the binary `name`.
pub fn release_binary(name: &str) -> PathBuf {
    target_dir().join("release").join(name)
}

/// Builds the binaries the demo runs (the VM lab runs the static dist builds instead:
/// `dist::lab_guest_binaries`) and says where they are.
pub fn lab_binaries() -> Result<tsync_lab::Binaries> {
    build_release(&["tsync-agent", "tsync-analyze", "tsync-lab"])?;
    Ok(tsync_lab::Binaries {
        agent: release_binary("tsync-agent"),
        analyzer: release_binary("tsync-analyze"),
        lab: release_binary("tsync-lab"),
    })
}
