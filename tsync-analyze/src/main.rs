//! `tsync-analyze`: brings the traces of several nodes onto one timebase.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tsync_analyze::input::InputSet;
use tsync_analyze::matching::{DEFAULT_WINDOW_NS, MatchOptions};
use tsync_analyze::message::{MatchedMessage, MessageSink};
use tsync_analyze::sync::{Algorithm, SyncOptions};
use tsync_analyze::{progress, report, sync, text};

#[derive(Parser)]
#[command(
    name = "tsync-analyze",
    version,
    about = "Offline synchronization of distributed traces"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Estimate the clock correction of every trace.
    Sync(SyncArgs),
    /// Print the matched messages in the text message format.
    Messages(MessagesArgs),
}

#[derive(Args)]
struct MatchArgs {
    /// How long (seconds) a packet key waits for its partner and for duplicates; keys seen twice
    /// on a side within it are dropped as ambiguous.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_WINDOW_NS as f64 / 1e9)]
    match_window: f64,
}

impl MatchArgs {
    fn options(&self) -> Result<MatchOptions, String> {
        if !(self.match_window.is_finite() && self.match_window > 0.0) {
            return Err(format!(
                "--match-window {}: must be a positive number of seconds",
                self.match_window
            ));
        }
        Ok(MatchOptions {
            window_ns: (self.match_window * 1e9).round() as i64,
            exchanges: false,
        })
    }
}

#[derive(Args)]
struct SyncArgs {
    /// Trace files (tsync-agent) and/or text message files.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    /// Estimator.
    #[arg(long, value_enum, default_value = "chull")]
    algorithm: AlgorithmArg,
    /// Reference trace of its group, by name or index.
    #[arg(long, value_name = "NAME|INDEX")]
    reference: Option<String>,
    /// linreg: drop exchanges whose error margin exceeds mean + Z·σ (1.64 ≈ the paper's 90 %).
    #[arg(long, value_name = "Z")]
    filter: Option<f64>,
    /// Print the JSON document of the contracts instead of the report.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    matching: MatchArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum AlgorithmArg {
    Chull,
    Linreg,
}

#[derive(Args)]
struct MessagesArgs {
    /// Trace files (tsync-agent) and/or text message files.
    #[arg(required = true, value_name = "INPUT")]
    inputs: Vec<PathBuf>,
    #[command(flatten)]
    matching: MatchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sync(a) => cmd_sync(a),
        Command::Messages(a) => cmd_messages(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tsync-analyze: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open(inputs: &[PathBuf]) -> Result<InputSet, String> {
    InputSet::open(inputs).map_err(|e| e.to_string())
}

fn cmd_sync(a: SyncArgs) -> Result<(), String> {
    let inputs = open(&a.inputs)?;
    let options = SyncOptions {
        algorithm: match a.algorithm {
            AlgorithmArg::Chull => Algorithm::Chull,
            AlgorithmArg::Linreg => Algorithm::Linreg,
        },
        reference: a.reference,
        matching: a.matching.options()?,
        linreg_filter_z: a.filter,
    };
    let bar = progress::bar(inputs.total_bytes());
    let result = sync::run(&inputs, &options, &mut |n| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    })
    .map_err(|e| e.to_string())?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let out = if a.json {
        let mut s =
            serde_json::to_string_pretty(&report::to_json(&result)).map_err(|e| e.to_string())?;
        s.push('\n');
        for w in &result.warnings {
            eprintln!("tsync-analyze: warning: {w}");
        }
        s
    } else {
        report::to_text(&result)
    };
    write_stdout(out.as_bytes())
}

fn write_stdout(b: &[u8]) -> Result<(), String> {
    let mut o = std::io::stdout().lock();
    match o.write_all(b).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write the output: {e}")),
    }
}

/// Writes messages as text lines, buffered.
struct TextWriter<W: Write> {
    out: W,
    line: String,
    error: Option<std::io::Error>,
}

impl<W: Write> MessageSink for TextWriter<W> {
    fn message(&mut self, m: &MatchedMessage<'_>) {
        if self.error.is_some() {
            return;
        }
        let m = &m.message;
        self.line.clear();
        use std::fmt::Write as _;
        let _ = write!(self.line, "{} {} ", m.send_trace, m.recv_trace);
        text::format_seconds(m.send_ns, &mut self.line);
        self.line.push(' ');
        text::format_seconds(m.recv_ns, &mut self.line);
        self.line.push('\n');
        if let Err(e) = self.out.write_all(self.line.as_bytes()) {
            self.error = Some(e);
        }
    }
}

fn cmd_messages(a: MessagesArgs) -> Result<(), String> {
    let inputs = open(&a.inputs)?;
    let options = a.matching.options()?;
    let stdout = std::io::stdout().lock();
    let mut w = TextWriter {
        out: std::io::BufWriter::with_capacity(1 << 16, stdout),
        line: String::new(),
        error: None,
    };
    let mut head =
        String::from("# tsync-analyze messages: sender receiver send_time recv_time (s)\n");
    for t in &inputs.traces {
        head.push_str(&format!("# trace {}: {}\n", t.index, t.name));
    }
    head.push_str(&format!("{}\n", inputs.traces.len()));
    w.out
        .write_all(head.as_bytes())
        .map_err(|e| e.to_string())?;
    let stats = inputs
        .for_each_message(&options, &mut w, &mut |_| {})
        .map_err(|e| e.to_string())?;
    let flushed = w.out.flush();
    match w.error.map_or(flushed, Err) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(format!("cannot write the output: {e}")),
        Ok(()) => {}
    }
    eprintln!(
        "tsync-analyze: {} messages ({} events, {} unmatched, {} same-trace, {} ambiguous keys)",
        stats.matched, stats.events, stats.unmatched, stats.same_trace, stats.ambiguous
    );
    Ok(())
}
