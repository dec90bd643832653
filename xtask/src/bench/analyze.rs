//! `cargo xtask bench analyze`: throughput and peak memory of `tsync-analyze sync`.
//!
//! Generates deterministic workloads (tsync-analyze's `synth`): 10⁷ messages between 2 traces,
//! 10⁶ among 16 traces, and 10⁶ between 2 traces (to show that memory does not grow with trace
//! length), each as a text message file and as agent trace files. Runs the release binary on each
//! as a child process, one at a time, and reads its peak RSS from `wait4` (see [`measure`]). Baselines measured in
//! the same run: reading the files (`cat > /dev/null`) and `tsync-analyze messages` (parse, match
//! and print without any geometry). Prints a Markdown table and writes it to
//! `target/bench/analyze.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use tsync_analyze::synth::Workload;

use crate::util::{build_release, release_binary, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// Scale the message counts (e.g. 0.1 for a quick run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Regenerate the inputs even if they exist.
    #[arg(long)]
    regenerate: bool,
    /// Another `tsync-analyze` binary (e.g. one built from an older commit) to run `sync` with on
    /// the same inputs, right after each measurement of the current one: a before/after ratio
    /// measured in the same conditions, which matter on a shared machine.
    #[arg(long, value_name = "BINARY")]
    baseline: Option<PathBuf>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        if cfg!(debug_assertions) {
            // Generating 10⁷ messages needs optimized code.
            return super::rerun_in_release();
        }
        analyze(self.scale, self.regenerate, self.baseline.as_deref())
    }
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
}

fn generate(d: &Dataset, regenerate: bool) -> Result<()> {
    let done = d.dir.join(".complete");
    if done.exists() && !regenerate {
        return Ok(());
    }
    std::fs::create_dir_all(&d.dir)?;
    let w = Workload::benchmark(d.traces, d.messages, 2026);
    eprintln!("generating {} ({} messages)…", d.name, d.messages);
    let mut f = std::fs::File::create(d.text())?;
    w.write_text(&mut f)?;
    w.write_traces(&d.dir)
        .map_err(|e| anyhow::anyhow!("writing trace files: {e}"))?;
    std::fs::write(&done, b"")?;
    Ok(())
}

pub(super) struct Measure {
    pub(super) seconds: f64,
    pub(super) max_rss_kib: i64,
}

/// Runs a command with stdout to /dev/null and returns its wall time and peak RSS.
///
/// Through the hidden `xtask peak-rss` helper, because a child's `ru_maxrss` starts from the peak
/// RSS of the process that spawned it: Linux carries the old address space's high-water mark
/// across `exec`, and `posix_spawn` children run in their parent's address space until then. This
/// process may have grown large (it generates the inputs), the freshly started helper has not, so
/// its children report their own peak (plus a floor of the helper's size: see [`floor`]).
pub(super) fn measure(program: &Path, args: &[PathBuf], pre: &[&str]) -> Result<Measure> {
    let out = Command::new(std::env::current_exe()?)
        .arg("peak-rss")
        .arg(program)
        .args(pre)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running the peak-rss helper")?;
    if !out.status.success() {
        bail!(
            "{} {:?} failed: {}",
            program.display(),
            pre,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    let (Some(seconds), Some(kib)) = (words.next(), words.next()) else {
        bail!("peak-rss printed {text:?}");
    };
    Ok(Measure {
        seconds: seconds.parse()?,
        max_rss_kib: kib.parse()?,
    })
}

/// The peak RSS the helper reports for a program that does nothing (`true`): the floor under
/// every figure of the table.
pub(super) fn floor() -> Result<f64> {
    Ok(measure(Path::new("true"), &[], &[])?.max_rss_kib as f64 / 1024.0)
}

/// `xtask peak-rss PROGRAM [ARGS...]`: runs PROGRAM with stdout to /dev/null and prints its wall
/// time (s) and peak RSS (KiB), read from `wait4`. Used by the benchmarks, not by people.
#[derive(clap::Args)]
pub struct PeakRss {
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<std::ffi::OsString>,
}

impl PeakRss {
    pub fn run(self) -> Result<()> {
        let (program, args) = self.command.split_first().expect("required by clap");
        let start = Instant::now();
        let child = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("running {}", program.to_string_lossy()))?;
        let pid = child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: rusage is plain old data; wait4 fills it for our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        let seconds = start.elapsed().as_secs_f64();
        if r != pid {
            bail!("wait4 failed: {}", std::io::Error::last_os_error());
        }
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            use std::os::unix::process::ExitStatusExt;
            bail!(
                "{} failed: {}",
                program.to_string_lossy(),
                std::process::ExitStatus::from_raw(status)
            );
        }
        println!("{seconds} {}", usage.ru_maxrss);
        Ok(())
    }
}

/// Baseline: only reading and decoding the inputs (text lines parsed into messages, trace-file
/// chunks checked and decoded into events), in this process; returns seconds.
fn read_only(files: &[PathBuf], text: bool) -> Result<f64> {
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

fn size(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

fn analyze(scale: f64, regenerate: bool, baseline: Option<&Path>) -> Result<()> {
    if let Some(b) = baseline
        && !b.is_file()
    {
        bail!("--baseline {}: no such file", b.display());
    }
    let root = workspace_root();
    build_release(&["tsync-analyze"])?;
    let bin = release_binary("tsync-analyze");
    let base = root.join("target/bench/analyze");
    let n = |m: f64| ((m * scale).round() as u64).max(1000);
    let sets = [(2, n(1e7)), (16, n(1e6)), (2, n(1e6))].map(|(traces, messages)| Dataset {
        name: format!("{traces} traces, {messages} messages"),
        traces,
        messages,
        dir: base.join(format!("t{traces}-m{messages}")),
    });
    for d in &sets {
        generate(d, regenerate)?;
    }
    let cat = PathBuf::from("cat");
    let mut rows = Vec::new();
    for d in &sets {
        for (format, files) in [("text", vec![d.text()]), ("trace files", d.trace_files())] {
            let bytes = size(&files);
            // Warm the page cache so that every row measures the same thing.
            measure(&cat, &files, &[])?;
            let read = measure(&cat, &files, &[])?;
            let decode = read_only(&files, format == "text")?;
            let msgs = measure(&bin, &files, &["messages"])?;
            let sync = measure(&bin, &files, &["sync", "--json"])?;
            let versus = match baseline {
                Some(b) => {
                    let old = measure(b, &files, &["sync", "--json"])?;
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
                "| {} | {} | {:.0} MB | {:.1} | {:.1} | {:.2} | {:.2} s | **{:.1}** | {:.0} MiB |{versus}",
                d.name,
                format,
                bytes as f64 / 1e6,
                d.messages as f64 / read.seconds / 1e6,
                d.messages as f64 / decode / 1e6,
                d.messages as f64 / msgs.seconds / 1e6,
                sync.seconds,
                d.messages as f64 / sync.seconds / 1e6,
                sync.max_rss_kib as f64 / 1024.0,
            ));
            eprintln!("{}", rows.last().unwrap());
        }
    }
    let cpu = super::machine::cpu();
    let mut note = format!(
        "Peak RSS from `wait4`; a program that does nothing (`true`) measures {:.1} MiB the same \
         way.\n\n",
        floor()?
    );
    if let Some(b) = baseline {
        note += &format!(
            "Baseline: `{}`, run right after the current binary on each row.\n\n",
            b.display()
        );
    }
    let mut out = format!(
        "## `tsync-analyze sync` throughput (one core, {cpu})\n\n\
         Rates in millions of messages per second. Baselines from the same run: `cat` reads the \
         files (page cache warm); `decode` only parses the text lines, or checks and decodes the \
         trace-file chunks (the trace format's reader), without matching; `messages` parses and \
         matches them and prints the messages, without any geometry. Goals: ≥ 20 M/s from trace \
         files, ≥ 10 M/s from text, memory independent of trace length.\n\n\
         {note}| workload | input | size | cat M/s | decode M/s | messages M/s | sync time | sync M/s | sync peak RSS |{}\n\
         |---|---|---|---|---|---|---|---|---|{}\n",
        if baseline.is_some() {
            " baseline sync M/s | baseline peak RSS | speed-up |"
        } else {
            ""
        },
        if baseline.is_some() {
            "---|---|---|"
        } else {
            ""
        },
    );
    for r in &rows {
        out.push_str(r);
        out.push('\n');
    }
    println!("{out}");
    std::fs::create_dir_all(root.join("target/bench"))?;
    std::fs::write(root.join("target/bench/analyze.md"), &out)?;
    eprintln!("written to target/bench/analyze.md");
    Ok(())
}
