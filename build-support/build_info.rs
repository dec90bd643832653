//! Shared by the build scripts of the two binaries (`#[path]`-included): tells the compiler the
//! git commit and the target triple, for `--version`.
//!
//! The commit comes from `git rev-parse HEAD` when the sources are a git checkout, and is
//! `unknown` otherwise (a source tarball, no git installed). The build script reruns when HEAD
//! moves (a checkout, a commit on the branch), so the commit a binary prints is the one it was
//! built from, never an earlier one.
use std::{path::Path, process::Command};

/// Prints the `cargo:` lines setting `TSYNC_GIT_COMMIT` and `TSYNC_TARGET` for the crate.
pub fn emit() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../build-support/build_info.rs");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .current_dir(&manifest_dir)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    // What moves HEAD: HEAD itself (a checkout), the branch's ref (a commit), packed refs.
    if let Some(head) = git(&["rev-parse", "--path-format=absolute", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        for path in [branch.as_str(), "packed-refs"] {
            if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
                // A path that does not exist would rerun the script on every build.
                if Path::new(&p).exists() {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
        }
    }
    println!("cargo:rustc-env=TSYNC_GIT_COMMIT={commit}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=TSYNC_TARGET={target}");
}
