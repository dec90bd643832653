//! What `--version` tells besides the version number, shared by `tsync-agent` and
//! `tsync-analyze`: which sources, which target, which trace format. Enough for a bug report to
//! say exactly which binary wrote or read a file.
use crate::format;

/// The lines of `--version` after the first (`NAME VERSION`): the git commit the binary was built
/// from (`unknown` outside a git checkout), its target triple, and the trace format version it
/// writes (the newest it reads).
pub fn describe(commit: &str, target: &str) -> String {
    format!(
        "commit: {commit}\ntarget: {target}\ntrace format: writes version {v} (reads up to {v})",
        v = format::VERSION
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_commit_target_and_format() {
        let text = describe("abc123", "aarch64-unknown-linux-musl");
        assert_eq!(text.lines().count(), 3);
        assert!(text.contains("commit: abc123"));
        assert!(text.contains("target: aarch64-unknown-linux-musl"));
        assert!(text.contains(&format!("writes version {}", format::VERSION)));
    }
}
