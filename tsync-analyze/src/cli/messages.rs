//! `tsync-analyze messages`: the matched messages in the text message format, so that any tool
//! that reads the LTTV format can be run on real captures.

use std::io::Write;

use clap::Args;
use tsync_analyze::{InputSet, MatchedMessage, MessageSink, text};

use super::{CliError, CmdResult, MatchArgs};

#[derive(Args)]
pub struct MessagesCmd {
    /// Trace files (tsync-agent), text message files, OpenTelemetry span files (OTLP/JSON)
    /// and/or LTTng trace directories.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<std::path::PathBuf>,
    #[command(flatten)]
    pub matching: MatchArgs,
}

/// Writes messages as text lines, buffered; remembers the first write error.
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

    fn wants_events(&self) -> bool {
        false
    }
}

pub fn run(a: MessagesCmd) -> CmdResult {
    let inputs = InputSet::open_with(&a.inputs, &a.matching.span_options())?;
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
    w.out.write_all(head.as_bytes())?;
    let stats = inputs.for_each_message(&options, &mut w, &mut |_| {})?;
    let flushed = w.out.flush();
    match w.error.map_or(flushed, Err) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(CliError::msg(format!("cannot write the output: {e}"))),
        Ok(()) => {}
    }
    eprintln!(
        "tsync-analyze: {} messages ({} events, {} unmatched, {} same-trace, {} ambiguous keys)",
        stats.matched, stats.events, stats.unmatched, stats.same_trace, stats.ambiguous
    );
    Ok(())
}
