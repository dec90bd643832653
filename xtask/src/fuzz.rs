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
use tsync_analyze::{InputSet, MatchOptions, MatchedMessage, MessageSink};
use tsync_common::format::{
    ClockSample, Footer, KernelClock, LostCounts, TraceReader, TraceWriter,
};

use crate::setup::run;

/// The fuzz targets (`fuzz/fuzz_targets/NAME.rs`).
pub const TARGETS: &[&str] = &["trace_reader", "text_parser", "sync_pipeline", "ctf_reader"];
/// libFuzzer's memory limit: going past it is a bug (an allocation sized by the input).
const RSS_LIMIT_MB: u32 = 2048;
/// Seconds one input may take before libFuzzer reports a hang (inputs are a few KiB).
const TIMEOUT_S: u32 = 10;
/// The largest seed: bigger files are cut (a cut trace file is a valid input too).
const MAX_SEED_BYTES: usize = 32 << 10;
/// Options of `sync_pipeline`'s input (first byte; `fuzz/src/lib.rs`).
const OPT_LINREG: u8 = 1;
const OPT_ONE_FILE: u8 = 2;
const OPT_REFERENCE: u8 = 4;
const OPT_REPAIR: u8 = 16;

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

/// What one target's run did, from libFuzzer's output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Inputs executed.
    pub runs: u64,
    pub exec_per_s: u64,
    /// Coverage: code edges (`cov`) and features (`ft`) reached.
    pub cov: u64,
    pub ft: u64,
    /// Inputs in libFuzzer's in-memory corpus at the end.
    pub corpus_units: u64,
    pub peak_rss_mb: u64,
    /// The input that crashed the target, as libFuzzer wrote it.
    pub artifact: Option<PathBuf>,
    /// What went wrong (`deadly signal`, `timeout`, `out-of-memory`, the panic message, …).
    pub failure: Option<String>,
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

/// Reads the figures and any crash out of libFuzzer's output (`-print_final_stats=1`).
pub fn parse_output(output: &str) -> Stats {
    let mut s = Stats::default();
    let field = |line: &str, name: &str| -> Option<u64> {
        let rest = &line[line.find(name)? + name.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    for line in output.lines() {
        let line = line.trim_end();
        if line.starts_with('#') && line.contains("cov: ") {
            // `#19110	DONE   cov: 272 ft: 312 corp: 32/1093b lim: 122 exec/s: 910 rss: 370Mb`
            s.runs = field(line, "#").unwrap_or(s.runs);
            s.cov = field(line, "cov:").unwrap_or(s.cov);
            s.ft = field(line, "ft:").unwrap_or(s.ft);
            s.corpus_units = field(line, "corp:").unwrap_or(s.corpus_units);
            s.exec_per_s = field(line, "exec/s:").unwrap_or(s.exec_per_s);
            s.peak_rss_mb = s.peak_rss_mb.max(field(line, "rss:").unwrap_or(0));
        } else if let Some(n) = line.strip_prefix("Done ").and_then(|r| field(r, "")) {
            s.runs = n;
        } else if let Some((name, value)) =
            line.strip_prefix("stat::").and_then(|r| r.split_once(':'))
        {
            let value = value.trim().parse().ok();
            match name {
                "number_of_executed_units" => s.runs = value.unwrap_or(s.runs),
                "average_exec_per_sec" => s.exec_per_s = value.unwrap_or(s.exec_per_s),
                "peak_rss_mb" => s.peak_rss_mb = value.unwrap_or(s.peak_rss_mb),
                _ => {}
            }
        } else if let Some(i) = line.find("Test unit written to ") {
            s.artifact = Some(PathBuf::from(
                line[i + "Test unit written to ".len()..].trim(),
            ));
        } else if let Some((i, tag)) = ["ERROR: libFuzzer: ", "ERROR: AddressSanitizer: "]
            .iter()
            .find_map(|tag| Some((line.find(tag)?, tag)))
        {
            let what = line[i + tag.len()..].to_string();
            // A Rust panic says more than the signal it ends with.
            if s.failure.as_ref().is_none_or(|f| !f.starts_with("panic")) {
                s.failure = Some(what);
            }
        } else if line.contains("panicked at ") && s.failure.is_none() {
            s.failure = Some(format!("panic: {}", line.trim()));
        } else if let Some(f) = s.failure.as_mut()
            && f.starts_with("panic")
            && !f.contains('\n')
            && !line.is_empty()
            && !line.starts_with("note:")
            && !line.starts_with("==")
        {
            // The panic message follows its location.
            f.push('\n');
            f.push_str("  ");
            f.push_str(line.trim());
        }
    }
    s
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

/// Writes the seeds of every target into its corpus (named `seed-*`, rewritten every run).
fn seed_corpora(root: &Path, targets: &[&str]) -> Result<()> {
    let seeds = Seeds::make(root)?;
    for &target in targets {
        let dir = corpus_dir(root, target);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let list = match target {
            "trace_reader" => &seeds.trace_reader,
            "text_parser" => &seeds.text_parser,
            "sync_pipeline" => &seeds.sync_pipeline,
            "ctf_reader" => &seeds.ctf_reader,
            other => bail!("no seeds for fuzz target {other}"),
        };
        for (name, bytes) in list {
            let path = dir.join(format!("seed-{name}"));
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        eprintln!("fuzz: {target}: {} seeds in {}", list.len(), dir.display());
    }
    Ok(())
}

/// Seed inputs per target.
struct Seeds {
    trace_reader: Vec<(String, Vec<u8>)>,
    text_parser: Vec<(String, Vec<u8>)>,
    sync_pipeline: Vec<(String, Vec<u8>)>,
    ctf_reader: Vec<(String, Vec<u8>)>,
}

impl Seeds {
    fn make(root: &Path) -> Result<Seeds> {
        let scratch = std::env::temp_dir().join(format!("tsync-fuzz-seeds-{}", std::process::id()));
        let result = Seeds::make_in(root, &scratch);
        let _ = std::fs::remove_dir_all(&scratch);
        result
    }

    fn make_in(root: &Path, scratch: &Path) -> Result<Seeds> {
        // Simulated traces: small (3 nodes, a quarter of a second: a few KiB each) but real,
        // with messages that match across the files.
        let mut config = crate::defaults::<crate::simulate::SimConfig>()?;
        config.nodes = 3;
        config.duration = 0.25;
        config.rate = 40.0;
        config.seed = 7;
        let truth = crate::simulate::simulate(&config, scratch)?;
        let mut traces = Vec::new();
        for node in &truth.nodes {
            let bytes = std::fs::read(&node.file)
                .with_context(|| format!("cannot read {}", node.file.display()))?;
            traces.push(cut(bytes));
        }
        // The simulator writes neither clock samples nor lost counts: the same events again, with
        // both, as the agent writes them.
        let rich: Vec<Vec<u8>> = truth
            .nodes
            .iter()
            .map(|n| with_samples_and_losses(&n.file).map(cut))
            .collect::<Result<_>>()?;
        let mut texts = Vec::new();
        let lttv = root.join("tsync-analyze/tests/data/lttv");
        let mut names: Vec<PathBuf> = std::fs::read_dir(&lttv)
            .with_context(|| format!("cannot list {}", lttv.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        names.sort();
        for path in &names {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            texts.push((format!("lttv-{name}"), cut(bytes)));
        }
        // The simulated messages in the text format, nanoseconds exact (the parser's fast path).
        let files: Vec<&Path> = truth.nodes.iter().map(|n| n.file.as_path()).collect();
        let messages = cut(messages_text(&files)?);
        texts.push(("simulated-messages".into(), messages.clone()));

        let mut trace_reader = Vec::new();
        for (k, t) in traces.iter().enumerate() {
            trace_reader.push((format!("sim-node-{k}"), t.clone()));
        }
        for (k, t) in rich.iter().enumerate() {
            trace_reader.push((format!("sim-node-{k}-samples-lost"), t.clone()));
        }
        // Cut short inside a chunk, and without its end chunk.
        let r0 = &rich[0];
        trace_reader.push(("cut-in-chunk".into(), r0[..r0.len() * 2 / 3].to_vec()));
        trace_reader.push(("header-only".into(), header_only(r0)));
        // As chunk lists (lengths and checksums filled in by the targets).
        for (k, t) in rich.iter().enumerate() {
            trace_reader.push((format!("chunks-sim-node-{k}"), chunk_list(t)));
        }
        // A version 1 file (32-byte samples without bracket), as a file and as a chunk list.
        let old = version_1(&rich[1]);
        trace_reader.push(("version-1-sim-node-1".into(), old.clone()));
        trace_reader.push(("chunks-version-1-sim-node-1".into(), chunk_list(&old)));

        let mut sync_pipeline = vec![
            ("traces-0-1".into(), encode(0, &traces[0], &traces[1])),
            (
                "traces-1-2-reference".into(),
                encode(OPT_REFERENCE, &traces[1], &traces[2]),
            ),
            (
                "samples-0-2-linreg".into(),
                encode(OPT_LINREG | OPT_REPAIR, &rich[0], &rich[2]),
            ),
            (
                "chunks-0-1".into(),
                encode(0, &chunk_list(&rich[0]), &chunk_list(&rich[1])),
            ),
            (
                "version-1-and-2".into(),
                encode(0, &version_1(&rich[0]), &rich[1]),
            ),
            ("trace-alone".into(), encode(OPT_ONE_FILE, &traces[0], &[])),
            ("text-and-trace".into(), encode(0, &messages, &traces[2])),
            (
                "text-alone-linreg".into(),
                encode(OPT_ONE_FILE | OPT_LINREG, &messages, &[]),
            ),
        ];
        for (name, bytes) in &texts {
            sync_pipeline.push((format!("text-{name}"), encode(OPT_ONE_FILE, bytes, &[])));
        }
        if let [(_, a), (_, b), ..] = &texts[..] {
            sync_pipeline.push(("two-texts".into(), encode(0, a, b)));
        }
        Ok(Seeds {
            trace_reader,
            text_parser: texts,
            sync_pipeline,
            ctf_reader: crate::fuzz_ctf::seeds(root, scratch)?,
        })
    }
}

/// `sync_pipeline`'s input layout (`fuzz/src/lib.rs`, `SyncInput`): options, length of file A,
/// file A, file B.
fn encode(options: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + a.len() + b.len());
    out.push(options);
    out.extend_from_slice(&(a.len() as u32).to_le_bytes());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

/// A trace file as the chunk list the targets rebuild it from (`build_trace` in
/// `fuzz/src/lib.rs`): `CHUNKS` (`CHUNKSv1` for a version 1 file), then per chunk the separator,
/// its kind as one byte and its payload. Stops at the first chunk cut short.
fn chunk_list(trace: &[u8]) -> Vec<u8> {
    let mut out = if trace.get(8..12) == Some(&1u32.to_le_bytes()[..]) {
        b"CHUNKSv1".to_vec()
    } else {
        b"CHUNKS".to_vec()
    };
    let mut offset = 16;
    while let Some(head) = trace.get(offset..offset + 16) {
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (kind, len) = (word(0), word(4) as usize);
        let Some(payload) = trace.get(offset + 16..offset + 16 + len) else {
            break;
        };
        out.extend_from_slice(b"\xc4\xc4\xc4\xc4");
        out.push(kind as u8);
        out.extend_from_slice(payload);
        offset += 16 + len.div_ceil(8) * 8;
    }
    out
}

/// At most [`MAX_SEED_BYTES`] of a seed.
fn cut(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.truncate(MAX_SEED_BYTES);
    bytes
}

/// The preamble and header chunk of a trace file (its length read from the chunk header).
fn header_only(trace: &[u8]) -> Vec<u8> {
    let len = u32::from_le_bytes(trace[20..24].try_into().expect("4 bytes")) as usize;
    let end = 32 + len.div_ceil(8) * 8;
    trace[..end.min(trace.len())].to_vec()
}

/// The trace at `path` rewritten with bracketed clock samples (start, middle, end), kernel clock
/// states and lost-event counters, as the agent writes them.
fn with_samples_and_losses(path: &Path) -> Result<Vec<u8>> {
    let mut reader = TraceReader::open(path)?;
    let header = reader.header().clone();
    let mut events = Vec::new();
    while let Some(chunk) = reader.next_events()? {
        events.extend_from_slice(chunk);
    }
    let sample = |mono: u64| ClockSample {
        monotonic_ns: mono,
        monotonic_raw_ns: mono,
        realtime_ns: header
            .start_realtime_ns
            .saturating_add(mono as i64 - header.start_monotonic_ns as i64),
        tsc: mono.wrapping_mul(3),
        monotonic_after_ns: mono.saturating_add(47),
    };
    let kernel = |mono: u64, freq: i64| KernelClock {
        monotonic_ns: mono,
        freq,
        offset: 0,
        tick: 10_000,
        status: 0x2001, // STA_PLL | STA_NANO
        maxerror: 16_000,
        state: 0,
    };
    let mut w = TraceWriter::new(Vec::new(), &header)?;
    w.write_clock_sample(sample(header.start_monotonic_ns))?;
    w.write_kernel_clock(kernel(header.start_monotonic_ns, 0))?;
    let (first, second) = events.split_at(events.len() / 2);
    w.write_events(first)?;
    w.flush()?;
    let lost = LostCounts {
        send: 2,
        recv: 1,
        per_cpu: vec![[1, 1], [1, 0]],
    };
    w.write_lost(&lost)?;
    if let Some(e) = second.first() {
        w.write_clock_sample(sample(e.ts_ns))?;
        w.write_kernel_clock(kernel(e.ts_ns, -65_536 * 12))?;
    }
    w.write_events(second)?;
    let end = events.last().map_or(header.start_monotonic_ns, |e| e.ts_ns);
    w.write_clock_sample(sample(end))?;
    let footer = Footer {
        events: events.len() as u64,
        send_events: events.iter().filter(|e| e.direction == 0).count() as u64,
        recv_events: events.iter().filter(|e| e.direction == 1).count() as u64,
        lost,
        end_realtime_ns: sample(end).realtime_ns,
        end_monotonic_ns: end,
    };
    Ok(w.finish(&footer)?)
}

/// A trace file rewritten as format version 1 wrote it: version 1 in the preamble, clock
/// samples as 32-byte records in kind-3 chunks (without the second monotonic reading), no
/// kernel clock states; the other chunks as they are. Stops at the first chunk cut short.
fn version_1(trace: &[u8]) -> Vec<u8> {
    let mut out = trace[..16.min(trace.len())].to_vec();
    if out.len() == 16 {
        out[8..12].copy_from_slice(&1u32.to_le_bytes());
    }
    let mut offset = 16;
    while let Some(head) = trace.get(offset..offset + 16) {
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (kind, len, count) = (word(0), word(4) as usize, word(12));
        let Some(payload) = trace.get(offset + 16..offset + 16 + len) else {
            break;
        };
        offset += 16 + len.div_ceil(8) * 8;
        let (kind, payload) = match kind {
            6 => (
                3,
                payload
                    .chunks_exact(40)
                    .flat_map(|record| &record[..32])
                    .copied()
                    .collect(),
            ),
            7 => continue,
            _ => (kind, payload.to_vec()),
        };
        for w in [kind, payload.len() as u32, crc32fast::hash(&payload), count] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&payload);
        out.resize(out.len() + (8 - payload.len() % 8) % 8, 0);
    }
    out
}

/// The messages matched in trace files, in the text message format (`tsync-analyze messages`).
fn messages_text(files: &[&Path]) -> Result<Vec<u8>> {
    struct Lines(String);
    impl MessageSink for Lines {
        fn message(&mut self, m: &MatchedMessage<'_>) {
            let m = m.message;
            let s = &mut self.0;
            s.push_str(&format!("{} {} ", m.send_trace, m.recv_trace));
            tsync_analyze::text::format_seconds(m.send_ns, s);
            s.push(' ');
            tsync_analyze::text::format_seconds(m.recv_ns, s);
            s.push('\n');
        }
        fn wants_events(&self) -> bool {
            false
        }
    }
    let inputs = InputSet::open(files)?;
    let mut lines = Lines(format!(
        "# simulated messages (cargo xtask fuzz seed)\n{}\n",
        inputs.traces.len()
    ));
    inputs.for_each_message(&MatchOptions::default(), &mut lines, &mut |_| {})?;
    Ok(lines.0.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_final_figures() {
        let out = "INFO: Seed: 1\n\
            #2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
            #19015\tREDUCE cov: 272 ft: 312 corp: 32/1093b lim: 122 exec/s: 950 rss: 370Mb L: 92/92 MS: 5 EraseBytes-\n\
            #19110\tDONE   cov: 272 ft: 312 corp: 32/1093b lim: 122 exec/s: 910 rss: 370Mb\n\
            Done 19110 runs in 21 second(s)\n\
            stat::number_of_executed_units: 19110\n\
            stat::average_exec_per_sec:     910\n\
            stat::new_units_added:          43\n\
            stat::slowest_unit_time_sec:    0\n\
            stat::peak_rss_mb:              371\n";
        assert_eq!(
            parse_output(out),
            Stats {
                runs: 19110,
                exec_per_s: 910,
                cov: 272,
                ft: 312,
                corpus_units: 32,
                peak_rss_mb: 371,
                artifact: None,
                failure: None,
            }
        );
    }

    #[test]
    fn finds_the_crashing_input_and_the_panic() {
        let out = "#1024\tpulse  cov: 50 ft: 60 corp: 5/100b lim: 4 exec/s: 512 rss: 40Mb\n\
            \n\
            thread '<unnamed>' panicked at tsync-common/src/format.rs:141:9:\n\
            attempt to add with overflow\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\
            ==4242== ERROR: libFuzzer: deadly signal\n\
            MS: 1 ChangeBit-; base unit: 0123\n\
            artifact_prefix='/w/target/fuzz-artifacts/trace_reader/'; Test unit written to /w/target/fuzz-artifacts/trace_reader/crash-abc\n\
            Base64: AAAA\n\
            stat::number_of_executed_units: 1100\n";
        let s = parse_output(out);
        assert_eq!(s.runs, 1100);
        assert_eq!(s.cov, 50);
        assert_eq!(
            s.artifact.as_deref(),
            Some(Path::new("/w/target/fuzz-artifacts/trace_reader/crash-abc"))
        );
        assert_eq!(
            s.failure.as_deref(),
            Some(
                "panic: thread '<unnamed>' panicked at tsync-common/src/format.rs:141:9:\n  \
                 attempt to add with overflow"
            )
        );
    }

    #[test]
    fn names_timeouts_and_memory() {
        let out = "==7== ERROR: libFuzzer: timeout after 10 seconds\n\
            artifact_prefix='a/'; Test unit written to a/timeout-1\n";
        let s = parse_output(out);
        assert_eq!(s.failure.as_deref(), Some("timeout after 10 seconds"));
        assert_eq!(s.artifact.as_deref(), Some(Path::new("a/timeout-1")));
        let out = "==7== ERROR: libFuzzer: out-of-memory (malloc(4294967296))\n\
            artifact_prefix='a/'; Test unit written to a/oom-1\n";
        assert_eq!(
            parse_output(out).failure.as_deref(),
            Some("out-of-memory (malloc(4294967296))")
        );
        let out = "==6094==ERROR: AddressSanitizer: out of memory: allocator is trying to \
            allocate 0xe8d4a51000 bytes\n\
            artifact_prefix='a/'; Test unit written to a/crash-1\n";
        assert_eq!(
            parse_output(out).failure.as_deref(),
            Some("out of memory: allocator is trying to allocate 0xe8d4a51000 bytes")
        );
    }

    #[test]
    fn chunk_lists_hold_every_chunk() {
        let header = tsync_common::format::Header {
            node: "n".into(),
            ..Default::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
        w.write_event(&tsync_common::PacketEvent::default())
            .unwrap();
        let file = w.finish(&Footer::default()).unwrap();
        let list = chunk_list(&file);
        assert!(list.starts_with(b"CHUNKS\xc4\xc4\xc4\xc4\x01"));
        let parts = list.windows(4).filter(|w| w == b"\xc4\xc4\xc4\xc4").count();
        assert_eq!(parts, 3, "header, events, end");
    }

    #[test]
    fn version_1_rewrites_samples_and_drops_kernel_states() {
        let header = tsync_common::format::Header {
            node: "n".into(),
            ..Default::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
        w.write_event(&tsync_common::PacketEvent::default())
            .unwrap();
        let sample = ClockSample {
            monotonic_ns: 10,
            monotonic_raw_ns: 7,
            realtime_ns: 5,
            tsc: 3,
            monotonic_after_ns: 12,
        };
        w.write_clock_sample(sample).unwrap();
        w.write_kernel_clock(KernelClock::default()).unwrap();
        let file = w.finish(&Footer::default()).unwrap();
        let old = version_1(&file);
        let mut r = TraceReader::new(old.as_slice()).unwrap();
        while r.next_events().unwrap().is_some() {}
        assert_eq!(r.version(), 1);
        assert!(r.damage().is_none(), "{:?}", r.damage());
        assert!(r.kernel_clock().is_empty());
        assert_eq!(
            r.clock_samples(),
            &[ClockSample {
                monotonic_after_ns: 10,
                ..sample
            }]
        );
        assert!(chunk_list(&old).starts_with(b"CHUNKSv1\xc4\xc4\xc4\xc4\x01"));
    }

    #[test]
    fn sync_seeds_follow_the_fuzz_targets_layout() {
        let v = encode(OPT_LINREG | OPT_ONE_FILE, b"abc", b"de");
        assert_eq!(v, [3, 3, 0, 0, 0, b'a', b'b', b'c', b'd', b'e']);
    }
}
