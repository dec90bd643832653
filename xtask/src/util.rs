//! What several tasks share: the workspace's location, running commands and cargo, task
//! defaults. (The namespace lab, agents and BPF program checks are the `tsync-lab` crate.)
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

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

/// Runs a command, failing with its command line if it cannot start or exits non-zero.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs a command and returns its stdout, or `None` if it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
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

/// Set by the Ctrl-C handler of [`catch_interrupts`].
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes Ctrl-C (and SIGTERM) set [`interrupted`] instead of ending xtask, so that a task can tear
/// down what it started (namespaces, guests) and fail. Installed once per process, whichever
/// task asks first (`cargo xtask test` runs several).
pub fn catch_interrupts() -> Result<()> {
    static INSTALLED: std::sync::OnceLock<std::result::Result<(), String>> =
        std::sync::OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            ctrlc::set_handler(|| {
                INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
                eprintln!("interrupted: stopping and cleaning up");
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!("cannot install the Ctrl-C handler: {e}"))
}

/// Whether Ctrl-C was pressed since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}
