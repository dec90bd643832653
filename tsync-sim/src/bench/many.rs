//! Hundreds of traces (`cargo xtask bench analyze`, second table; alone with `--many-only`):
//! full meshes of 200 and 600 traces and a sparse mesh of 1000 traces (each talking to about 20
//! peers, as cluster nodes do), as text message files. Each runs through the release
//! `tsync-analyze sync --json` as a child process (wall time and peak RSS, as the first table),
//! then once more in this process through the library, whose every trace is compared with the
//! truth the generator knows: at 101 times across the run, the map's error and whether the
//! truth lies inside the guaranteed interval `sync --json` prints (the same
//! `SyncResult::interval`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use tsync_analyze::{ReductionChoice, SyncOptions, sync_messages};

use super::{Meter, publish};
use crate::Workload;
use crate::check::workload::{compare, messages};

/// One workload of the table.
struct Case {
    name: String,
    workload: Workload,
    dir: PathBuf,
}

impl Case {
    fn text(&self) -> PathBuf {
        self.dir.join("messages.txt")
    }

    /// Writes the text input unless a previous run completed it.
    fn generate(&self, regenerate: bool) -> Result<()> {
        let done = self.dir.join(".complete");
        if done.exists() && !regenerate {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        eprintln!("generating {}…", self.name);
        let mut f = std::io::BufWriter::new(std::fs::File::create(self.text())?);
        self.workload.write_text(&mut f)?;
        std::fs::write(&done, b"")?;
        Ok(())
    }
}

/// The workloads at `scale` (message counts; the trace counts stay).
fn cases(scale: f64, dir: &Path) -> Vec<Case> {
    let n = |m: f64| ((m * scale).round() as u64).max(1000);
    let full = |traces: usize, messages: u64| Case {
        name: format!("full mesh, {traces} traces, {messages} messages"),
        workload: Workload::benchmark(traces, messages, 2026),
        dir: dir.join(format!("analyze/full{traces}-m{messages}")),
    };
    let (peers, traces, messages) = (20, 1000, n(6e6));
    vec![
        full(200, n(4e6)),
        full(600, n(6e6)),
        Case {
            name: format!("sparse mesh, {traces} traces × ~{peers} peers, {messages} messages"),
            workload: Workload::sparse(traces, peers, messages, 2026),
            dir: dir.join(format!("analyze/sparse{traces}x{peers}-m{messages}")),
        },
    ]
}

/// Generates, measures and checks every case; returns the Markdown table.
pub fn table(
    scale: f64,
    regenerate: bool,
    analyzer: &Path,
    baseline: Option<&Path>,
    dir: &Path,
    meter: &Meter,
) -> Result<String> {
    let cases = cases(scale, dir);
    let mut rows = Vec::new();
    for c in &cases {
        c.generate(regenerate)?;
        let files = [c.text()];
        let sync = meter.measure(analyzer, &files, &["sync", "--json"])?;
        let versus = match baseline {
            Some(b) => {
                let old = meter.measure(b, &files, &["sync", "--json"])?;
                format!(
                    " {:.2} s | {:.0} MiB | ×{:.2} |",
                    old.seconds,
                    old.max_rss_kib as f64 / 1024.0,
                    old.seconds / sync.seconds
                )
            }
            None => String::new(),
        };
        let w = &c.workload;
        let names: Vec<String> = (0..w.clocks.len()).map(|i| format!("node{i}")).collect();
        let options = SyncOptions {
            reduction: ReductionChoice::Joint,
            ..Default::default()
        };
        let start = Instant::now();
        let result = sync_messages(&names, messages(w), &options, None);
        let e = compare(w, &result);
        let checked = start.elapsed().as_secs_f64();
        let pairs = result.pairs.len();
        rows.push(format!(
            "| {} | {} | {:.1} | {:.2} s | **{:.2}** | {:.0} MiB | {:.0} | {:.3} | {} of {} | {:.1} s |{versus}",
            c.name,
            pairs,
            w.messages as f64 / pairs.max(1) as f64,
            sync.seconds,
            w.messages as f64 / sync.seconds / 1e6,
            sync.max_rss_kib as f64 / 1024.0,
            sync.max_rss_kib as f64 * 1024.0 / pairs.max(1) as f64,
            e.worst_ns / 1e3,
            e.with_interval - e.outside,
            e.with_interval,
            checked,
        ));
        eprintln!("{}", rows.last().expect("pushed"));
    }
    let (head, rule) = if baseline.is_some() {
        (
            " baseline sync time | baseline peak RSS | speed-up |",
            "---:|---:|---:|",
        )
    } else {
        ("", "")
    };
    let mut out = String::from(
        "## Many traces\n\n\
         `sync --json` on text message files (clocks within ±10 s and ±200 ppm, 20 µs minimum \
         delay plus an exponential tail of mean 30 µs, a message every 100 µs): wall time and \
         peak RSS of the release binary (one text file: parsed on one core, its pairs \
         accumulated and finished on every core), bytes of peak RSS per pair. Then, in the benchmark's \
         process, the same messages through the library, every trace compared with the truth at \
         101 times: the worst error of its map and whether the truth lies inside its guaranteed \
         (network-wide) interval. Goal: 600 traces, 6·10⁶ messages in ≤ 10 s and ≤ 600 MiB.\n\n\
         | workload | pairs | messages per pair | sync time | sync M msg/s | sync peak RSS | \
         bytes per pair | worst error (µs) | truth inside the interval | check time |",
    );
    out += head;
    out += "\n|---|---:|---:|---:|---:|---:|---:|---:|---|---:|";
    out += rule;
    out.push('\n');
    for r in &rows {
        out += r;
        out.push('\n');
    }
    Ok(out)
}

/// [`table`], printed and written to `DIR/many.md`.
pub fn run(
    scale: f64,
    regenerate: bool,
    analyzer: &Path,
    baseline: Option<&Path>,
    dir: &Path,
    meter: &Meter,
) -> Result<()> {
    let out = table(scale, regenerate, analyzer, baseline, dir, meter)?;
    publish(dir, "many.md", &out)
}
