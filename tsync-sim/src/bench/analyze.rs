//! Throughput and peak memory of `tsync-analyze sync` (`cargo xtask bench analyze`).
//!
//! Generates deterministic workloads ([`Workload::benchmark`]): 10⁷ messages between 2 traces,
//! 10⁶ among 16 traces, and 10⁶ between 2 traces (to show that memory does not grow with trace
//! length), each as a text message file and as agent trace files. Runs the release binary on
//! each as a child process, one at a time, through a [`Meter`]. Baselines measured in the same
//! run: reading the files (`cat > /dev/null`), decoding them in this process, and
//! `tsync-analyze messages` (parse, match and print without any geometry).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, bail};

use super::{Measure, Meter, publish, size};
use crate::Workload;

/// What to run.
pub struct Options<'a> {
    /// Scale of the message counts (e.g. 0.1 for a quick run).
    pub scale: f64,
    /// Regenerate the inputs even if they exist.
    pub regenerate: bool,
    /// The release `tsync-analyze` binary.
    pub analyzer: &'a Path,
    /// Another binary to run `sync` with right after each measurement of the current one.
    pub baseline: Option<&'a Path>,
    /// Where the inputs go (`DIR/analyze/`) and the table (`DIR/analyze.md`).
    pub dir: &'a Path,
    /// The CPU the table names.
    pub cpu: &'a str,
}

struct Dataset {
    name: String,
    traces: usize,
    messages: u64,
    dir: PathBuf,
}

impl Dataset {
    fn text(&self) -> PathBuf {
        self.dir.join("messages.txt")
    }

    fn trace_files(&self) -> Vec<PathBuf> {
        (0..self.traces)
            .map(|k| self.dir.join(format!("node{k}.tsync")))
            .collect()
    }

    /// Writes the inputs unless a previous run completed them.
    fn generate(&self, regenerate: bool) -> Result<()> {
        let done = self.dir.join(".complete");
        if done.exists() && !regenerate {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let w = Workload::benchmark(self.traces, self.messages, 2026);
        eprintln!("generating {} ({} messages)…", self.name, self.messages);
        let mut f = std::fs::File::create(self.text())?;
        w.write_text(&mut f)?;
        w.write_traces(&self.dir)
            .map_err(|e| anyhow::anyhow!("writing trace files: {e}"))?;
        std::fs::write(&done, b"")?;
        Ok(())
    }
}

/// Rounds of `decode`, `sync` (one thread, every core) and the baseline per row, the fastest
/// run of each kept.
const RUNS: usize = 5;

/// Baseline: only reading and decoding the inputs (text lines parsed into messages, trace-file
/// chunks checked and decoded into events), in this process; returns seconds.
fn decode(files: &[PathBuf], text: bool) -> Result<f64> {
    let start = Instant::now();
    let mut count = 0u64;
    for f in files {
        if text {
            tsync_analyze::text::for_each_message(f, 0, &mut |m, _| {
                count += (m.send_ns ^ m.recv_ns) as u64 & 1;
            })?;
        } else {
            let mut r = tsync_common::format::TraceReader::open(f)
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
            while let Some(ev) = r
                .next_events()
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?
            {
                count += ev.iter().map(|e| e.ts_ns & 1).sum::<u64>();
            }
        }
    }
    std::hint::black_box(count);
    Ok(start.elapsed().as_secs_f64())
}

/// The fastest run of each command a row compares.
struct Best {
    /// `decode`, seconds.
    decode: f64,
    /// `sync --threads 1`.
    one: Measure,
    /// `sync` on every core.
    sync: Measure,
    /// The baseline's `sync` on every core, if one is given.
    baseline: Option<Measure>,
}

impl Best {
    /// One round: each command run once on `files`.
    fn round(o: &Options, meter: &Meter, files: &[PathBuf], text: bool) -> Result<Best> {
        let sync_args = ["sync", "--json"];
        Ok(Best {
            decode: decode(files, text)?,
            one: meter.measure(o.analyzer, files, &["sync", "--json", "--threads", "1"])?,
            sync: meter.measure(o.analyzer, files, &sync_args)?,
            baseline: o
                .baseline
                .map(|b| meter.measure(b, files, &sync_args))
                .transpose()?,
        })
    }

    /// Folds a later round in: each command's fastest run.
    fn keep_best(&mut self, other: Best) {
        self.decode = self.decode.min(other.decode);
        self.one.keep_best(other.one);
        self.sync.keep_best(other.sync);
        if let (Some(kept), Some(run)) = (self.baseline.as_mut(), other.baseline) {
            kept.keep_best(run);
        }
    }
}

/// Runs `decode`, `sync --threads 1`, `sync` and the baseline's `sync` on `files` in [`RUNS`]
/// interleaved rounds and keeps each one's fastest run. The rows' ratios (`÷ decode`, the
/// speed-up) compare commands whose runs are minutes apart otherwise: on a shared host whose
/// speed moves by 20 % and more within minutes, measuring each command's runs in a block made
/// the same binary come out ×0.9 to ×1.9 against itself. Interleaved, every command meets the
/// host's fast and slow moments alike.
fn rounds(o: &Options, meter: &Meter, files: &[PathBuf], text: bool) -> Result<Best> {
    let mut best = Best::round(o, meter, files, text)?;
    for _ in 1..RUNS {
        best.keep_best(Best::round(o, meter, files, text)?);
    }
    Ok(best)
}

/// Generates the inputs, measures every row, prints the table and writes it.
pub fn run(o: &Options, meter: &Meter) -> Result<()> {
    if let Some(b) = o.baseline
        && !b.is_file()
    {
        bail!("--baseline {}: no such file", b.display());
    }
    let n = |m: f64| ((m * o.scale).round() as u64).max(1000);
    let sets = [(2, n(1e7)), (16, n(1e6)), (2, n(1e6))].map(|(traces, messages)| Dataset {
        name: format!("{traces} traces, {messages} messages"),
        traces,
        messages,
        dir: o.dir.join(format!("analyze/t{traces}-m{messages}")),
    });
    for d in &sets {
        d.generate(o.regenerate)?;
    }
    let cat = PathBuf::from("cat");
    let mut rows = Vec::new();
    for d in &sets {
        for (format, files) in [("text", vec![d.text()]), ("trace files", d.trace_files())] {
            let bytes = size(&files);
            // Warm the page cache so that every row measures the same thing.
            meter.measure(&cat, &files, &[])?;
            let read = meter.measure(&cat, &files, &[])?;
            let msgs = meter.measure(o.analyzer, &files, &["messages"])?;
            let best = rounds(o, meter, &files, format == "text")?;
            let (decode, one, sync) = (best.decode, best.one, best.sync);
            let versus = match best.baseline {
                Some(old) => {
                    format!(
                        " {:.1} | {:.0} MiB | ×{:.2} |",
                        d.messages as f64 / old.seconds / 1e6,
                        old.max_rss_kib as f64 / 1024.0,
                        old.seconds / sync.seconds
                    )
                }
                None => String::new(),
            };
            rows.push(format!(
                "| {} | {} | {:.0} MB | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} s | **{:.1}** | ×{:.2} | {:.2} | {:.2} | {:.0} MiB |{versus}",
                d.name,
                format,
                bytes as f64 / 1e6,
                d.messages as f64 / read.seconds / 1e6,
                d.messages as f64 / decode / 1e6,
                d.messages as f64 / msgs.seconds / 1e6,
                d.messages as f64 / one.seconds / 1e6,
                sync.seconds,
                d.messages as f64 / sync.seconds / 1e6,
                one.seconds / sync.seconds,
                decode / one.seconds,
                decode / sync.seconds,
                sync.max_rss_kib as f64 / 1024.0,
            ));
            eprintln!("{}", rows.last().expect("pushed"));
        }
    }
    let mut note = format!(
        "Peak RSS from `wait4`; a program that does nothing (`true`) measures {:.1} MiB the same \
         way.\n\n",
        meter.floor()?
    );
    if let Some(b) = o.baseline {
        note += &format!(
            "Baseline: `{}`, its `sync` run in the same rounds as the current binary's, the \
             fastest of {RUNS} kept.\n\n",
            b.display()
        );
    }
    let (head, rule) = if o.baseline.is_some() {
        (
            " baseline sync M/s | baseline peak RSS | speed-up |",
            "---|---|---|",
        )
    } else {
        ("", "")
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = format!(
        "## `tsync-analyze sync` throughput ({}, {threads} cores)\n\n\
         Rates in millions of messages per second; `decode`, both `sync` columns and the baseline are each the fastest of {RUNS} runs, taken in interleaved rounds (so that the host's drift meets them alike). Baselines from the same run: `cat` reads the \
         files (page cache warm); `decode` only parses the text lines, or checks and decodes the \
         trace-file chunks (the trace format's reader), without matching, on one core; \
         `messages` parses and matches them and prints the messages, without any geometry. \
         `sync 1 thread` is `sync --threads 1`; `sync` uses every core (trace files are matched \
         on every core; text files need no matching and are read on one); `×` is the ratio of \
         the two times. `decode` bounds `sync` on one core; `÷ decode` is `sync`'s speed as a \
         fraction of it, on one thread and on every core (a ratio measured in the same run, so it \
         holds on any machine). Goals: ≥ 10 M/s from text; memory independent of trace length; \
         from trace files, on one thread ≥ 0.5 of decode (2 traces) and ≥ 0.4 (16 traces), on \
         two cores ≥ 0.8 and ≥ 0.6.\n\n\
         {note}| workload | input | size | cat M/s | decode M/s | messages M/s | sync 1 thread M/s | sync time | sync M/s | × | 1 thread ÷ decode | sync ÷ decode | sync peak RSS |{head}\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|{rule}\n",
        o.cpu
    );
    for r in &rows {
        out.push_str(r);
        out.push('\n');
    }
    publish(o.dir, "analyze.md", &out)
}
