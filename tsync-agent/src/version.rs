//! `tsync-agent --version`: the version, the commit, the target, the trace format it writes, and
//! the hash of the embedded eBPF object (built once for `bpfel`: the same bytes in the x86_64 and
//! aarch64 agents, which the hash lets anyone check).
use sha2::{Digest as _, Sha256};

use crate::loader;

/// `-V`: the version and the commit.
pub const SHORT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("TSYNC_GIT_COMMIT"),
    ")"
);

/// `--version`, after `tsync-agent `.
pub fn long() -> String {
    format!(
        "{}\n{}\neBPF object: sha256 {} ({} bytes)",
        env!("CARGO_PKG_VERSION"),
        tsync_common::build_info::describe(env!("TSYNC_GIT_COMMIT"), env!("TSYNC_TARGET")),
        ebpf_object_sha256(),
        loader::ebpf_object().len()
    )
}

/// The SHA-256 of the embedded eBPF object, in hex.
pub fn ebpf_object_sha256() -> String {
    Sha256::digest(loader::ebpf_object())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_version_names_everything() {
        let text = long();
        assert!(text.starts_with(env!("CARGO_PKG_VERSION")));
        assert!(text.contains("commit: "));
        assert!(text.contains("trace format: writes version"));
        let hash = ebpf_object_sha256();
        assert_eq!(hash.len(), 64);
        assert!(text.contains(&hash));
    }
}
