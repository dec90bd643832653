//! Checks the capabilities loading and attaching tracing programs needs, so a missing one is named
//! up front instead of surfacing as a bare EPERM from the bpf() syscall.

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set of this process (from /proc/self/status), or None if unknown.
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// The capabilities missing for loading tsync's programs, by name; empty if none is missing.
///
/// Tracing programs and BPF maps need CAP_BPF and CAP_PERFMON; CAP_SYS_ADMIN implies both.
pub fn missing_capabilities() -> Vec<&'static str> {
    let Some(caps) = effective_caps() else {
        return Vec::new(); // cannot tell; let the kernel decide
    };
    missing_from(caps)
}

fn missing_from(caps: u64) -> Vec<&'static str> {
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(bit, _)| !has(bit))
        .map(|(_, name)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_is_missing() {
        assert!(missing_from(1 << CAP_SYS_ADMIN).is_empty());
        assert!(missing_from((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
        assert_eq!(missing_from(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert_eq!(missing_from(0), vec!["CAP_BPF", "CAP_PERFMON"]);
    }
}
