//! `cargo xtask fuzz`: coverage-guided fuzzing of everything that reads untrusted input
//! (cargo-fuzz and libFuzzer, on the nightly toolchain; the targets live in `fuzz/`).
//!
//! Builds the targets once (`cargo +nightly fuzz build`: release with debug assertions, the
//! cargo-fuzz default), seeds each target's corpus under `target/fuzz-corpus/TARGET` from real
//! inputs (simulated traces, the LTTV text cases), runs the targets one after another for the
//! given time, prints executions and coverage per target, and fails naming the input that crashed
//! a target and how to reproduce it. The corpus is kept between runs, so every run starts from
//! what the previous ones found.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use tsync_sim::corpus::Seeds;
pub use tsync_sim::corpus::TARGETS;
use tsync_sim::corpus::report::{Stats, parse_output};

use crate::setup::run;

/// libFuzzer's memory limit: going past it is a bug (an allocation sized by the input).
const RSS_LIMIT_MB: u32 = 2048;
/// Seconds one input may take before libFuzzer reports a hang (inputs are a few KiB).
const TIMEOUT_S: u32 = 10;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Target to run (repeat for several; default: all of them).
    #[arg(long = "target", value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(TARGETS))]
    targets: Vec<String>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let targets: Vec<&str> = if self.targets.is_empty() {
            TARGETS.to_vec()
        } else {
            self.targets.iter().map(String::as_str).collect()
        };
        run_targets(&targets, self.seconds)
    }
}

/// Builds, seeds and runs `targets` for `seconds` each, one after another; prints a summary and
/// fails if any target crashed.
pub fn run_targets(targets: &[&str], seconds: u64) -> Result<()> {
    let root = crate::workspace_root();
    if crate::setup::output(Command::new("cargo").args(["+nightly", "fuzz", "--version"])).is_none()
    {
        bail!("`cargo +nightly fuzz` does not run: install it with `cargo xtask setup`");
    }
    eprintln!("fuzz: cargo +nightly fuzz build (release, debug assertions)");
    run(Command::new("cargo")
        .current_dir(&root)
        .args(["+nightly", "fuzz", "build"]))?;
    seed_corpora(&root, targets).context("cannot seed the fuzz corpora")?;
    let mut rows = Vec::new();
    for &target in targets {
        let started = Instant::now();
        let stats = run_one(&root, target, seconds)?;
        let wall = started.elapsed().as_secs_f64();
        let (files, bytes) = dir_size(&corpus_dir(&root, target));
        rows.push((target, stats, wall, files, bytes));
    }
    eprintln!();
    eprintln!(
        "{:<14} {:>12} {:>8} {:>6} {:>7} {:>14} {:>8} {:>7}  result",
        "target", "executions", "exec/s", "cov", "ft", "corpus", "rss MB", "wall s"
    );
    for (target, s, wall, files, bytes) in &rows {
        eprintln!(
            "{target:<14} {:>12} {:>8} {:>6} {:>7} {:>14} {:>8} {wall:>7.0}  {}",
            s.runs,
            s.exec_per_s,
            s.cov,
            s.ft,
            format!("{files} ({}K)", bytes.div_ceil(1024)),
            s.peak_rss_mb,
            if s.artifact.is_some() { "CRASH" } else { "ok" },
        );
    }
    let crashes: Vec<String> = rows
        .iter()
        .filter_map(|(target, s, ..)| {
            let artifact = s.artifact.as_ref()?;
            let shown = artifact.strip_prefix(&root).unwrap_or(artifact).display();
            Some(format!(
                "{target}: {}\n  input: {}\n  reproduce: cargo +nightly fuzz run {target} {shown}\n  \
                 minimize:  cargo +nightly fuzz tmin {target} {shown}",
                s.failure.as_deref().unwrap_or("crash"),
                artifact.display(),
            ))
        })
        .collect();
    if !crashes.is_empty() {
        bail!(
            "{} fuzz target(s) crashed:\n{}",
            crashes.len(),
            crashes.join("\n")
        );
    }
    eprintln!("fuzz: no crash ({seconds} s per target)");
    Ok(())
}

/// `target/fuzz-corpus/TARGET`: the corpus kept between runs.
fn corpus_dir(root: &Path, target: &str) -> PathBuf {
    root.join("target").join("fuzz-corpus").join(target)
}

/// Runs one target for `seconds`, its output echoed (but for the lines of every new input) and
/// logged to `target/fuzz-logs/TARGET.log`.
fn run_one(root: &Path, target: &str, seconds: u64) -> Result<Stats> {
    let corpus = corpus_dir(root, target);
    let artifacts = root.join("target").join("fuzz-artifacts").join(target);
    let logs = root.join("target").join("fuzz-logs");
    for dir in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let log_path = logs.join(format!("{target}.log"));
    let mut log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    eprintln!(
        "fuzz: {target} for {seconds} s (corpus {})",
        corpus.display()
    );
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root)
        .args(["+nightly", "fuzz", "run", target])
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"));
    // Tokens of the formats (magic, chunk kinds, bincode varint markers, number forms).
    let dict = root
        .join("fuzz")
        .join("dicts")
        .join(format!("{target}.dict"));
    if dict.is_file() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    cmd.arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-timeout={TIMEOUT_S}"))
        .arg("-print_final_stats=1")
        // Last, so that it wins over the one cargo-fuzz passes (fuzz/artifacts/TARGET/).
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("cannot run {cmd:?}"))?;
    let mut output = String::new();
    let mut reader = BufReader::new(child.stderr.take().expect("stderr is piped"));
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader
            .read_until(b'\n', &mut line)
            .context("cannot read the fuzzer's output")?
            == 0
        {
            break;
        }
        let _ = log.write_all(&line);
        let text = String::from_utf8_lossy(&line);
        if !(text.contains("\tNEW ") || text.contains("\tREDUCE ")) {
            eprint!("{text}");
        }
        output.push_str(&text);
    }
    let status = child.wait().context("cannot wait for the fuzzer")?;
    let stats = parse_output(&output);
    if !status.success() && stats.artifact.is_none() {
        bail!(
            "fuzz target {target} failed ({status}) without a crashing input; see {}",
            log_path.display()
        );
    }
    Ok(stats)
}

/// Files and bytes in a directory.
fn dir_size(dir: &Path) -> (u64, u64) {
    std::fs::read_dir(dir).map_or((0, 0), |entries| {
        entries
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
    })
}

/// Writes the seeds of every target (`tsync_sim::corpus`) into its corpus (named `seed-*`,
/// rewritten every run).
fn seed_corpora(root: &Path, targets: &[&str]) -> Result<()> {
    let seeds = Seeds::make(root)?;
    for &target in targets {
        let dir = corpus_dir(root, target);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let list = seeds
            .of(target)
            .with_context(|| format!("no seeds for fuzz target {target}"))?;
        for (name, bytes) in list {
            let path = dir.join(format!("seed-{name}"));
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        eprintln!("fuzz: {target}: {} seeds in {}", list.len(), dir.display());
    }
    Ok(())
}
