//! `tsync-analyze merge` streams: its peak memory does not grow with the logs' length.
//!
//! A test binary of its own: the kernel starts a child's peak RSS (`wait4`'s `ru_maxrss`) at the
//! parent's, and the other merge tests hold large documents in memory.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::{peak_rss_kib, s};

/// Three applied-looking logs of `n` records in all, interleaved in time.
fn logs(dir: &Path, tag: &str, n: u64) -> Vec<PathBuf> {
    (0..3u64)
        .map(|k| {
            let path = dir.join(format!("{tag}-{k}.jsonl"));
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
            for i in 0..n / 3 {
                let t = 1_000_000_000 + i * 3_000 + k * 1_000;
                writeln!(
                    f,
                    "{{\"ts_ns\":{t},\"ts_ns_local\":{},\"ts_ns_lo\":{},\"ts_ns_hi\":{},\"level\":\"info\",\"msg\":\"request {i} handled\"}}",
                    t + 55,
                    t - 700,
                    t + 700
                )
                .unwrap();
            }
            path
        })
        .collect()
}

#[test]
fn memory_does_not_grow_with_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let rss = |tag: &str, n: u64| {
        let mut args = vec!["merge".to_string()];
        args.extend(logs(dir.path(), tag, n).iter().map(|p| s(p)));
        args.extend(["-o".into(), s(&dir.path().join(format!("{tag}.out.jsonl")))]);
        peak_rss_kib(&args)
    };
    let (small, large) = (rss("small", 100_000), rss("large", 1_000_000));
    assert!(
        large - small < 4 * 1024,
        "peak RSS {small} KiB for 10⁵ records, {large} KiB for 10⁶"
    );
}
