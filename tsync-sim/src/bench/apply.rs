//! Throughput of `tsync-analyze apply` on a large application log (`cargo xtask bench apply`).
//!
//! Generates (once, under `DIR/apply/`) a two-node text message file (2·10⁵ messages) and one
//! node's log as JSON Lines and as CSV: `lines` records of about 120 bytes, a time field among
//! four others, as a service's log line looks. Runs the release binary on each (the output to
//! /dev/null, as `cat` does) and, in the same run, the baselines: `cat` of the same file (the
//! cost of moving the bytes at all) and `tsync-analyze sync` of the messages alone (the fixed
//! cost every `apply` pays first). The goal: ≥ 5 M events/s for JSON Lines.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{Meter, publish};
use crate::Workload;

/// What to run.
pub struct Options<'a> {
    /// Records in the generated log.
    pub lines: u64,
    /// Regenerate the inputs even if they exist.
    pub regenerate: bool,
    /// Runs of each measurement; the fastest is reported.
    pub runs: u32,
    /// The release `tsync-analyze` binary.
    pub analyzer: &'a Path,
    /// Where the inputs go (`DIR/apply/`) and the table (`DIR/apply.md`).
    pub dir: &'a Path,
}

/// Writes the inputs (deterministic) unless they are there.
fn generate(dir: &Path, lines: u64, regenerate: bool) -> Result<(PathBuf, PathBuf, PathBuf)> {
    let (messages, jsonl, csv) = (
        dir.join("messages.txt"),
        dir.join(format!("log-{lines}.jsonl")),
        dir.join(format!("log-{lines}.csv")),
    );
    let done = dir.join(format!(".complete-{lines}"));
    if done.exists() && !regenerate {
        return Ok((messages, jsonl, csv));
    }
    std::fs::create_dir_all(dir)?;
    let w = Workload::benchmark(2, 200_000, 2026);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&messages)?);
    w.write_text(&mut f)?;
    // Node 1's log over the messages' span (20 s from 20 s of true time on its clock).
    let start = w.clocks[1].local(w.start_ns);
    let step = (20e9 / lines as f64).max(1.0);
    let mut j = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&jsonl)?);
    let mut c = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&csv)?);
    writeln!(c, "ts_ns,level,service,msg,trace_id")?;
    for i in 0..lines {
        let t = start + (i as f64 * step) as i64;
        let level = ["info", "debug", "warn"][(i % 3) as usize];
        writeln!(
            j,
            "{{\"ts_ns\":{t},\"level\":\"{level}\",\"service\":\"checkout\",\"msg\":\"request {i} handled in {}.{} ms\",\"trace_id\":\"{:016x}\"}}",
            i % 17,
            i % 10,
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        )?;
        writeln!(
            c,
            "{t},{level},checkout,request {i} handled in {}.{} ms,{:016x}",
            i % 17,
            i % 10,
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        )?;
    }
    j.flush()?;
    c.flush()?;
    std::fs::write(&done, b"")?;
    Ok((messages, jsonl, csv))
}

/// Generates the inputs (once), measures each format, prints the table and writes it.
pub fn run(o: &Options, meter: &Meter) -> Result<()> {
    let analyzer = o.analyzer;
    let dir = o.dir.join("apply");
    eprintln!(
        "bench apply: generating the inputs (once) in {}",
        dir.display()
    );
    let (messages, jsonl, csv) = generate(&dir, o.lines, o.regenerate)?;
    let best =
        |program: &Path, args: &[PathBuf], pre: &[&str]| meter.best(o.runs, program, args, pre);
    let (sync_s, _) = best(analyzer, std::slice::from_ref(&messages), &["sync"])?;
    let mut rows = Vec::new();
    for (name, file) in [("jsonl", &jsonl), ("csv", &csv)] {
        let bytes = std::fs::metadata(file)
            .with_context(|| format!("cannot stat {}", file.display()))?
            .len() as f64;
        let (cat_s, _) = best(Path::new("cat"), std::slice::from_ref(file), &[])?;
        let events = PathBuf::from("--events");
        let args = [
            messages.clone(),
            PathBuf::from("--node"),
            PathBuf::from("1"),
            events,
            file.clone(),
            PathBuf::from("-o"),
            PathBuf::from("/dev/null"),
        ];
        let (apply_s, rss) = best(analyzer, &args, &["apply"])?;
        let rewrite_s = (apply_s - sync_s).max(1e-9);
        let n = o.lines as f64;
        rows.push(format!(
            "| {name} | {} | {:.0} MB | {:.0} | {:.2} s | {:.3} s | **{:.2}** | {:.2} | {:.1} MiB |",
            o.lines,
            bytes / 1e6,
            bytes / cat_s / 1e6,
            apply_s,
            rewrite_s,
            n / rewrite_s / 1e6,
            (bytes / rewrite_s) / (bytes / cat_s),
            rss
        ));
        eprintln!("bench apply: {}", rows.last().expect("pushed"));
    }
    let out = format!(
        "## Applying a map to an application log (`cargo xtask bench apply`)\n\n\
         One node's log of {} records (~120 bytes each, the time field among four others) mapped \
         through a two-node synchronization of 2·10⁵ messages; output to /dev/null. Fastest of \
         {} runs. Baselines of the same run: `cat` of the same file, and `sync` of the messages \
         alone ({sync_s:.3} s, subtracted: *rewrite* is the streaming part). *vs cat* is the \
         rewrite's throughput in bytes per second over `cat`'s. Peak RSS from `wait4` (floor of \
         a program doing nothing: {:.1} MiB). Goal: ≥ 5 M events/s for JSON Lines.\n\n\
         | format | events | size | cat MB/s | apply time | rewrite time | rewrite M events/s | vs cat | peak RSS |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n{}\n",
        o.lines,
        o.runs,
        meter.floor()?,
        rows.join("\n")
    );
    publish(o.dir, "apply.md", &out)
}
