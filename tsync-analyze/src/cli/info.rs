//! `tsync-analyze info`: what each input holds — for a trace file its header, event counts,
//! lost events, clock samples and time span; for a text message file its traces and messages.

use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use tsync_analyze::input::{SourceKind, sniff};
use tsync_analyze::{info, text};

use super::CmdResult;

#[derive(Args)]
pub struct InfoCmd {
    /// Trace files (tsync-agent) and/or text message files.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print a JSON array with one object per file (`"format": "trace"` or `"text"`).
    #[arg(long)]
    pub json: bool,
}

/// What a text message file holds.
#[derive(Serialize)]
struct TextSummary {
    path: PathBuf,
    format: &'static str,
    traces: u32,
    messages: u64,
    same_trace: u64,
    per_trace: Vec<TextTrace>,
}

/// One trace of a text message file: messages sent and received, first and last local time.
#[derive(Serialize, Default)]
struct TextTrace {
    index: u32,
    sent: u64,
    received: u64,
    first_ns: Option<i64>,
    last_ns: Option<i64>,
}

impl TextTrace {
    fn saw(&mut self, t: i64) {
        self.first_ns = Some(self.first_ns.map_or(t, |f| f.min(t)));
        self.last_ns = Some(self.last_ns.map_or(t, |l| l.max(t)));
    }
}

fn text_summary(path: &Path) -> Result<TextSummary, String> {
    let header = text::read_header(path).map_err(|e| e.to_string())?;
    let mut per_trace: Vec<TextTrace> = (0..header.traces)
        .map(|index| TextTrace {
            index,
            ..TextTrace::default()
        })
        .collect();
    let stats = text::for_each_message(path, 0, &mut |m, _| {
        let s = &mut per_trace[m.send_trace as usize];
        s.sent += 1;
        s.saw(m.send_ns);
        let r = &mut per_trace[m.recv_trace as usize];
        r.received += 1;
        r.saw(m.recv_ns);
    })
    .map_err(|e| e.to_string())?;
    Ok(TextSummary {
        path: path.to_path_buf(),
        format: "text",
        traces: header.traces,
        messages: stats.messages,
        same_trace: stats.same_trace,
        per_trace,
    })
}

fn render_text(s: &TextSummary) -> String {
    let mut out = format!(
        "{}\n  format         text messages\n  traces         {}\n  messages       {} ({} same-trace lines dropped)\n",
        s.path.display(),
        s.traces,
        s.messages,
        s.same_trace
    );
    for t in &s.per_trace {
        let span = match (t.first_ns, t.last_ns) {
            (Some(f), Some(l)) => format!("{:.9} s .. {:.9} s", f as f64 / 1e9, l as f64 / 1e9),
            _ => "no messages".into(),
        };
        out.push_str(&format!(
            "  trace {:<8} {} sent, {} received, {span}\n",
            t.index, t.sent, t.received
        ));
    }
    out
}

/// One file's report as JSON and as text.
fn describe(path: &Path) -> Result<(serde_json::Value, String), String> {
    match sniff(path).map_err(|e| e.to_string())? {
        SourceKind::Trace => {
            let i = info::inspect(path).map_err(|e| format!("{e:#}"))?;
            let mut v = serde_json::to_value(&i).map_err(|e| e.to_string())?;
            if let Some(o) = v.as_object_mut() {
                o.insert("format".into(), "trace".into());
            }
            Ok((v, info::render(&i)))
        }
        SourceKind::Text { .. } => {
            let s = text_summary(path)?;
            let v = serde_json::to_value(&s).map_err(|e| e.to_string())?;
            Ok((v, render_text(&s)))
        }
    }
}

pub fn run(a: InfoCmd) -> CmdResult {
    let mut values = Vec::new();
    let mut texts = Vec::new();
    for f in &a.files {
        let (v, t) = describe(f)?;
        values.push(v);
        texts.push(t);
    }
    let out = if a.json {
        super::json(&values)?
    } else {
        texts.join("\n")
    };
    // A piped input is described under the name it was given, not its temporary copy's.
    super::write_stdout(super::spool::as_given(&out).as_bytes())
}
