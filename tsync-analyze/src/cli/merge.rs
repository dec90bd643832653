//! `tsync-analyze merge`: the applied logs (or Chrome traces) of several nodes as one timeline in
//! corrected order, each record flagged `certain`, `uncertain` or `unknown` (the library's
//! `merge` module says what each means).

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use clap::Args;
use tsync_analyze::apply::stream::{self, Sink};
use tsync_analyze::merge::chrome::{ChromeSink, ChromeSource, Members};
use tsync_analyze::merge::csv::{CsvSink, CsvSource};
use tsync_analyze::merge::jsonl::{JsonlSink, JsonlSource};
use tsync_analyze::merge::threaded::Threaded;
use tsync_analyze::merge::{self, DEFAULT_WINDOW, MergeError, MergeSummary};
use tsync_analyze::output::{InputIds, OutputFile};

use super::{CliError, CmdResult};

#[derive(Args)]
pub struct MergeCmd {
    /// The files to merge, one per node, each in time order (`apply`'s outputs; `-` for standard
    /// input, once; gzip is recognized).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output file (`-` for stdout; gzip-compressed if it ends in `.gz`). Written under a
    /// temporary name and renamed into place once complete; an input is never accepted.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// The corrected time field [default: ts_ns for jsonl and csv, ts for chrome]; its interval
    /// is read from <FIELD>_lo and <FIELD>_hi (`apply --interval`).
    #[arg(long, value_name = "NAME")]
    pub field: Option<String>,
    /// Format of the files and of the output [default: from the first file's name: csv for
    /// *.csv, chrome for *.json, else jsonl; a trailing .gz is looked through].
    #[arg(long, value_enum)]
    pub format: Option<MergeFormat>,
    /// How many records a file may come late by (a logger's threads stamp before they write);
    /// later than that is an error.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_WINDOW)]
    pub window: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MergeFormat {
    Jsonl,
    Csv,
    Chrome,
}

impl MergeFormat {
    fn guess(file: &Path) -> MergeFormat {
        let name = file.to_string_lossy().to_ascii_lowercase();
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        if name.ends_with(".csv") {
            MergeFormat::Csv
        } else if name.ends_with(".json") {
            MergeFormat::Chrome
        } else {
            MergeFormat::Jsonl
        }
    }
}

pub fn run(a: MergeCmd) -> CmdResult {
    if a.files.iter().filter(|f| *f == Path::new("-")).count() > 1 {
        return Err(CliError::usage("standard input (`-`) can be merged once"));
    }
    let format = a.format.unwrap_or_else(|| MergeFormat::guess(&a.files[0]));
    let field = a.field.clone().unwrap_or_else(|| {
        if format == MergeFormat::Chrome {
            "ts".into()
        } else {
            "ts_ns".into()
        }
    });
    let mut readers = Vec::new();
    for f in &a.files {
        let shown = f.display().to_string();
        let r = stream::open(f).map_err(|e| CliError::msg(format!("cannot read {shown}: {e}")))?;
        readers.push((r, shown));
    }
    let ids = InputIds::of(&a.files);
    let mut out = OutputFile::create(&a.output, "", &ids)?;
    let sink = Sink::new(BufWriter::with_capacity(1 << 20, &mut out), &a.output);
    let done = match format {
        MergeFormat::Jsonl => {
            let mut sources = Vec::new();
            for (r, name) in readers {
                sources.push(Threaded::spawn(JsonlSource::new(r, &name, &field))?);
            }
            let mut w = JsonlSink::new(sink);
            merge::merge(sources, &mut w, a.window).and_then(|s| finish(w.finish()?).map(|()| s))
        }
        MergeFormat::Csv => {
            let mut sources = Vec::new();
            for (r, name) in readers {
                sources.push(CsvSource::new(r, &name, &field)?);
            }
            let header = sources[0].header().clone();
            for s in &sources[1..] {
                if *s.header() != header {
                    return Err(CliError::msg(format!(
                        "{}: its header ({}) is not the one of {} ({}): merge makes one table",
                        merge::Source::name(s),
                        show(s.header()),
                        merge::Source::name(&sources[0]),
                        show(&header)
                    )));
                }
            }
            let sources = sources
                .into_iter()
                .map(Threaded::spawn)
                .collect::<Result<Vec<_>, _>>()?;
            let mut w = CsvSink::new(sink, &header)?;
            merge::merge(sources, &mut w, a.window).and_then(|s| finish(w.finish()?).map(|()| s))
        }
        MergeFormat::Chrome => {
            let members = Members::default();
            let mut sources = Vec::new();
            for (r, name) in readers {
                sources.push(ChromeSource::new(r, &name, &field, members.clone())?);
            }
            let mut w = ChromeSink::new(sink)?;
            merge::merge(sources, &mut w, a.window)
                .and_then(|s| finish(w.finish(&members.borrow())?).map(|()| s))
        }
    };
    let summary = match done {
        Ok(s) => s,
        Err(MergeError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            return Ok(());
        }
        // Dropping `out` removes the partial file: the target stays as it was.
        Err(e @ MergeError::Io { .. }) if out.io_error().is_some() => {
            return Err(CliError::msg(out.failure(&e)));
        }
        Err(e) => return Err(e.into()),
    };
    out.commit()?;
    report(&summary, &a, &field);
    Ok(())
}

/// Ends gzip (if any) and flushes.
fn finish<W: std::io::Write>(sink: Sink<W>) -> Result<(), MergeError> {
    sink.finish().map(drop).map_err(|e| MergeError::Io {
        what: "cannot write the output".into(),
        source: e,
    })
}

fn show(header: &csv::ByteRecord) -> String {
    header
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

fn report(s: &MergeSummary, a: &MergeCmd, field: &str) {
    let total: u64 = s.records.iter().sum();
    let per_file: Vec<String> = a
        .files
        .iter()
        .zip(&s.records)
        .map(|(f, n)| format!("{}: {n}", f.display()))
        .collect();
    eprintln!(
        "tsync-analyze: merge: {total} records ({}) merged by {field} into {}: {} certain, {} \
         uncertain, {} unknown (no interval)",
        per_file.join(", "),
        a.output.display(),
        s.certain,
        s.uncertain,
        s.unknown
    );
    if s.untimed > 0 {
        eprintln!(
            "tsync-analyze: merge: {} records without a time (metadata) kept at their place",
            s.untimed
        );
    }
    if s.reordered > 0 {
        eprintln!(
            "tsync-analyze: merge: {} records came later in their file than a record with a \
             later time: put in place (within --window {})",
            s.reordered, a.window
        );
    }
    if total > 0 && s.unknown == total {
        let (lo, hi) = tsync_analyze::apply::interval_names(field);
        eprintln!(
            "tsync-analyze: merge: warning: no record has `{lo}`/`{hi}`, so no order could be \
             judged: apply with --interval to have the guaranteed intervals"
        );
    }
}
