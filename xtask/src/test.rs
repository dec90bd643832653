//! `cargo xtask test`: the project's test command (README, CI): setup, fmt, clippy, the
//! workspace's tests, `dist` (static tarballs for x86_64 and aarch64), the real-kernel tests
//! (root: `tsync-lab`'s ignored tests, with the LTTng and babeltrace2 test of
//! `apply --format ctf`), a short run of every fuzz target, the
//! multi-kernel VM lab, the end-to-end demo with random skews (real kernel, real traffic,
//! every figure checked against the injected truth), then the cluster lab (every topology, both
//! agent modes, each figure against its expectation).
use std::{path::Path, process::Command};

use anyhow::{Result, ensure};

use crate::{
    setup::run_setup,
    util::{cargo, defaults, output, run, target_dir},
};

/// GiB a whole run fills from a clean clone, with a little room: `target/` and `fuzz/target/`
/// peaked at 6.9 GiB with CI's settings (`.ci/run`: no incremental caches, line tables only in
/// the test binaries) and at 14 GiB with a developer's defaults (measured 2026-11-28).
const DISK_NEEDED_GIB: u64 = 8;

/// Seconds of traffic per topology in the cluster lab's CI run: ten runs of about 12 s each (the
/// traffic, the agents' start and stop, the analysis) on a 2-core machine.
const CLUSTER_SECONDS: f64 = 5.0;

#[derive(clap::Args)]
pub struct Args {
    /// Do not run setup first.
    #[arg(long)]
    no_setup: bool,
    /// Skip the end-to-end demo (it needs root and takes about a minute plus a release build).
    #[arg(long)]
    no_demo: bool,
    /// Skip the multi-kernel VM lab (root; about three minutes, the first time plus downloads).
    #[arg(long)]
    no_lab: bool,
    /// Skip the cluster lab (root; about two minutes: five topologies, two agent modes).
    #[arg(long)]
    no_cluster: bool,
    /// Skip `cargo xtask dist` (the static x86_64 and aarch64 tarballs).
    #[arg(long)]
    no_dist: bool,
    /// Skip the real-kernel tests (they need root: namespaces, eBPF).
    #[arg(long)]
    no_root_tests: bool,
    /// Seconds of fuzzing per fuzz target after the tests, as `cargo xtask fuzz` does (0: skip).
    #[arg(long, value_name = "SECS", default_value_t = 15)]
    fuzz_seconds: u64,
    /// Extra arguments passed to `cargo test` (after `--`).
    #[arg(last = true)]
    test_args: Vec<String>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        warn_if_disk_short();
        if !self.no_setup {
            run_setup(true)?;
        }
        eprintln!("test: cargo xtask build-ebpf (once, for every build below)");
        crate::util::use_ebpf_object(crate::ebpf::build()?);
        eprintln!("test: cargo fmt --all --check");
        run(cargo().args(["fmt", "--all", "--check"]))?;
        eprintln!("test: cargo clippy --workspace --all-targets -- -D warnings");
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
        eprintln!("test: cargo test --workspace");
        run(cargo().args(["test", "--workspace"]).args(&self.test_args))?;
        if !self.no_dist {
            eprintln!("test: cargo xtask dist (static x86_64 and aarch64 tarballs, checked)");
            crate::dist::build(&crate::dist::Arch::ALL)?;
        }
        if !self.no_root_tests {
            ensure!(
                tsync_lab::is_root(),
                "the real-kernel tests need root (namespaces, eBPF): run cargo xtask test as \
                 root, as CI does, or pass --no-root-tests"
            );
            eprintln!(
                "test: cargo test -p tsync-lab -- --ignored (real kernel, root; LTTng and \
                 babeltrace2)"
            );
            run(cargo()
                .args(["test", "-p", "tsync-lab"])
                .args(&self.test_args)
                .args(["--", "--ignored"]))?;
        }
        if self.fuzz_seconds > 0 {
            eprintln!(
                "test: cargo xtask fuzz --seconds {} (every target)",
                self.fuzz_seconds
            );
            crate::fuzz::run_targets(crate::fuzz::TARGETS, self.fuzz_seconds)?;
        }
        if !self.no_lab {
            eprintln!(
                "test: cargo xtask lab (x86_64 guests on Linux 6.1 and 6.12, an arm64 one on 6.12, \
                 random slew)"
            );
            defaults::<crate::lab::Args>()?.run()?;
        }
        if !self.no_demo {
            eprintln!("test: cargo xtask demo (random skews)");
            defaults::<crate::demo::DemoArgs>()?.run()?;
        }
        if !self.no_cluster {
            eprintln!(
                "test: cargo xtask cluster --duration {CLUSTER_SECONDS} (every topology, both agent \
                 modes, random skews)"
            );
            let mut cluster = defaults::<crate::cluster::Args>()?;
            cluster.options.load.duration = CLUSTER_SECONDS;
            cluster.run()?;
        }
        Ok(())
    }
}

/// Says so before a long run that would fail half an hour in with "No space left on device"
/// (it once did in CI): the builds below fill [`DISK_NEEDED_GIB`] from a clean clone.
fn warn_if_disk_short() {
    let dir = target_dir();
    let Some(free) = free_gib(existing_ancestor(&dir)) else {
        return;
    };
    if free < DISK_NEEDED_GIB {
        eprintln!(
            "test: warning: {free} GiB free for {}; a clean run fills about {DISK_NEEDED_GIB} GiB \
             there (builds, tarballs, fuzzing). Free some space (`cargo clean` removes old \
             builds) or expect the run to stop with \"No space left on device\".",
            dir.display()
        );
    }
}

/// The nearest folder of `path` that exists (a fresh clone has no `target/` yet).
fn existing_ancestor(path: &Path) -> &Path {
    path.ancestors()
        .find(|p| p.is_dir())
        .unwrap_or(Path::new("/"))
}

/// Free GiB on the file system holding `dir`, as `df` reports them to an unprivileged writer;
/// `None` when `df` cannot tell (the run goes on, unwarned).
fn free_gib(dir: &Path) -> Option<u64> {
    let out = output(Command::new("df").args(["-Pk", "--"]).arg(dir))?;
    let kib: u64 = out
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kib >> 20)
}
