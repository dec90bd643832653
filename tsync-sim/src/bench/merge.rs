//! Throughput and memory of `tsync-analyze merge` against GNU `sort
//! -m` on the same files, in the same run (`cargo xtask bench merge`).
//!
//! Generates (once, under `target/bench/merge/`) three nodes' applied logs as `apply --interval`
//! writes them: `--records` JSON Lines records in all (~170 bytes each: the corrected time first,
//! its original and interval, then four fields of a service's log line), each file in time order,
//! the nodes interleaved. Runs the release binary's `merge` (output to /dev/null) and, as the
//! baseline, `LC_ALL=C sort -m -s -t: -k2,2n` on the same files: GNU sort's merge of presorted
//! files by the numeric key that follows the first colon (the corrected time), which reads and
//! compares the records but neither validates nor flags them. Prints a Markdown table and writes
//! it to `target/bench/merge.md`. The goal: ≥ 2 M records/s.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{Meter, publish};

/// What to run.
pub struct Options<'a> {
    /// Records in all (three files of a third each).
    pub records: u64,
    /// Regenerate the inputs even if they exist.
    pub regenerate: bool,
    /// Runs of each measurement; the fastest is reported.
    pub runs: u32,
    /// The release `tsync-analyze` binary.
    pub analyzer: &'a Path,
    /// Where the inputs go (`DIR/merge/`) and the table (`DIR/merge.md`).
    pub dir: &'a Path,
}

/// Writes the three logs (deterministic) unless they are there.
fn generate(dir: &Path, records: u64, regenerate: bool) -> Result<Vec<PathBuf>> {
    let files: Vec<PathBuf> = (0..3)
        .map(|k| dir.join(format!("node-{k}-{records}.applied.jsonl")))
        .collect();
    let done = dir.join(format!(".complete-{records}"));
    if done.exists() && !regenerate {
        return Ok(files);
    }
    std::fs::create_dir_all(dir)?;
    for (k, path) in files.iter().enumerate() {
        let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        let k = k as u64;
        for i in 0..records / 3 {
            // 5 µs apart per node, the nodes 1.7 µs apart: intervals of ±1.2 µs overlap for
            // some neighbours and not for others, as on a busy system.
            let t = 1_767_225_600_000_000_000 + i * 5_000 + k * 1_700 + (i * 7919) % 900;
            let level = ["info", "debug", "warn"][(i % 3) as usize];
            writeln!(
                f,
                "{{\"ts_ns\":{t},\"ts_ns_local\":{},\"ts_ns_lo\":{},\"ts_ns_hi\":{},\"level\":\"{level}\",\"service\":\"checkout\",\"msg\":\"request {i} handled in {}.{} ms\",\"trace_id\":\"{:016x}\"}}",
                t + 41_234_567,
                t - 1_200,
                t + 1_200,
                i % 17,
                i % 10,
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            )?;
        }
        f.flush()?;
    }
    std::fs::write(&done, b"")?;
    Ok(files)
}

/// Generates the inputs (once), measures `merge` and `sort -m`, prints the table and writes it.
pub fn run(o: &Options, meter: &Meter) -> Result<()> {
    let analyzer = o.analyzer;
    let dir = o.dir.join("merge");
    eprintln!(
        "bench merge: generating the inputs (once) in {}",
        dir.display()
    );
    let files = generate(&dir, o.records, o.regenerate)?;
    let bytes: f64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len() as f64))
        .sum::<std::io::Result<f64>>()?;
    let best =
        |program: &Path, args: &[PathBuf], pre: &[&str]| meter.best(o.runs, program, args, pre);
    let mut merge_args = files.clone();
    merge_args.extend(["-o".into(), "/dev/null".into()]);
    let (merge_s, merge_rss) = best(analyzer, &merge_args, &["merge"])?;
    // GNU sort reads LC_ALL from the environment `env` gives it.
    let mut sort_args: Vec<PathBuf> = ["LC_ALL=C", "sort", "-m", "-s", "-t:", "-k2,2n"]
        .iter()
        .map(PathBuf::from)
        .collect();
    sort_args.extend(files.iter().cloned());
    sort_args.extend(["-o".into(), "/dev/null".into()]);
    let (sort_s, sort_rss) = best(Path::new("env"), &sort_args, &[])?;
    let n = o.records as f64;
    let row = |name: &str, s: f64, rss: f64| {
        format!(
            "| {name} | {:.2} s | **{:.2}** | {:.0} | {rss:.1} MiB |",
            s,
            n / s / 1e6,
            bytes / s / 1e6
        )
    };
    let out = format!(
        "## Merging applied logs (`cargo xtask bench merge`)\n\n\
         Three nodes' applied JSON Lines logs, {} records in all ({:.0} MB, each with its \
         interval), merged into one timeline (output to /dev/null). Fastest of {} runs, wall \
         time. Baseline of the same run: GNU `sort -m` of the same presorted files by the same \
         numeric key (it neither validates the JSON nor judges the order). Peak RSS from `wait4` \
         (floor of a program doing nothing: {:.1} MiB). Goal: ≥ 2 M records/s.\n\n\
         | command | time | M records/s | MB/s | peak RSS |\n\
         |---|---:|---:|---:|---:|\n{}\n{}\n\n\
         merge / sort -m time: {:.2}\n",
        o.records,
        bytes / 1e6,
        o.runs,
        meter.floor()?,
        row("tsync-analyze merge", merge_s, merge_rss),
        row("sort -m -t: -k2,2n", sort_s, sort_rss),
        merge_s / sort_s
    );
    publish(o.dir, "merge.md", &out)
}
