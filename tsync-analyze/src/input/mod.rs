//! The analyzer's inputs: agent trace files (one trace each), text message files (several
//! traces each), OpenTelemetry span files (one trace per node: `crate::spans`) and LTTng (CTF)
//! trace directories (one trace each; a directory holding several, as an LTTng session does,
//! gives one input per trace), told apart by their content. Traces get consecutive indices in
//! argument order.

pub mod ahead;
pub mod error;
pub mod info;
pub mod passages;
pub mod slew;
pub mod text;
pub mod tracefile;

use std::io::Read;
use std::path::{Path, PathBuf};

pub use crate::input::error::InputError;

/// What kind of file an input is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A text message file declaring `traces` traces.
    Text {
        /// Traces declared on the file's first data line (0 from [`sniff`], which does not read
        /// it).
        traces: u32,
    },
    /// A trace file written by `tsync-agent`.
    Trace,
    /// A CTF trace directory (LTTng), read through the same [`tracefile::TraceFile`] layer.
    Ctf,
    /// OpenTelemetry spans in OTLP/JSON or OTLP protobuf (`crate::spans`): one trace per node, in the order of
    /// `file.nodes` (empty from [`sniff`], which does not read the file).
    Spans {
        /// The nodes found, with the attribute that named each, and the file's epoch.
        file: crate::spans::SpanFile,
    },
}

impl SourceKind {
    /// Whether the input's events are read as a trace ([`tracefile::TraceFile`]): agent trace
    /// files and CTF traces.
    pub fn is_trace(&self) -> bool {
        matches!(self, SourceKind::Trace | SourceKind::Ctf)
    }
}

/// One input file (or CTF trace directory).
#[derive(Clone, Debug)]
pub struct Source {
    /// The file as given, or the CTF trace directory (found in the directory given).
    pub path: PathBuf,
    /// Trace file or text message file.
    pub kind: SourceKind,
    /// Index of the file's first trace in the analyzer's trace list.
    pub first_trace: u32,
    /// File size in bytes (for progress reporting; a CTF trace's stream files together).
    pub size: u64,
}

/// One trace (one node's clock).
#[derive(Clone, Debug)]
pub struct TraceInfo {
    /// Position of the trace in the analyzer's trace list (argument order).
    pub index: u32,
    /// Node name from the trace header (a CTF trace's `env.hostname`), or the index for text
    /// inputs.
    pub name: String,
    /// Index of the source file in [`InputSet::sources`].
    pub source: usize,
    /// The trace file header (trace-file and CTF inputs only; made up from the metadata for
    /// CTF).
    pub header: Option<crate::input::tracefile::TraceHeader>,
}

/// The set of inputs of one analysis.
#[derive(Clone, Debug)]
pub struct InputSet {
    /// The input files, in argument order.
    pub sources: Vec<Source>,
    /// Every trace of every file, in index order.
    pub traces: Vec<TraceInfo>,
    /// How span files are read (their nodes were found with it).
    pub spans: crate::spans::SpanOptions,
}

/// How many bytes at the start of a file tell its kind.
pub const SNIFF_LEN: usize = 512;

/// Reads up to [`SNIFF_LEN`] bytes of `input` (fewer only at its end).
pub fn read_prefix(input: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut prefix = vec![0u8; SNIFF_LEN];
    let mut n = 0;
    while n < prefix.len() {
        match input.read(&mut prefix[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    prefix.truncate(n);
    Ok(prefix)
}

/// The kind of a file from its first bytes ([`read_prefix`]): trace file (magic), text, or
/// neither (the error names `name`).
pub fn sniff_prefix(prefix: &[u8], name: &dyn std::fmt::Display) -> Result<SourceKind, InputError> {
    if crate::input::tracefile::is_trace_file(prefix) {
        Ok(SourceKind::Trace)
    } else if let Some(why) = crate::spans::compressed_spans(prefix) {
        Err(InputError::Invalid(format!("{name}: {why}")))
    } else if crate::spans::looks_like_spans(prefix) {
        Ok(SourceKind::Spans {
            file: crate::spans::SpanFile::default(),
        })
    } else if crate::spans::looks_like_json_object(prefix) {
        Err(InputError::Invalid(format!(
            "{name}: a JSON object, but not OpenTelemetry traces (no `resourceSpans` at its \
             start: OTLP/JSON `TracesData`, one per line, as the Collector's file exporter writes)"
        )))
    } else if text::looks_like_text(prefix) {
        Ok(SourceKind::Text { traces: 0 })
    } else {
        Err(InputError::Invalid(format!(
            "{name}: neither a tsync trace file (no TSYNCTRC magic), nor OTLP spans (JSON or \
             protobuf), nor a text message file"
        )))
    }
}

/// Sniffs a file: trace file (magic), text, or neither; a directory: CTF when it is, or holds,
/// a CTF trace.
pub fn sniff(path: &Path) -> Result<SourceKind, InputError> {
    if path.is_dir() {
        return if crate::ctf::find_traces(path)?.is_empty() {
            Err(InputError::Invalid(format!(
                "{}: a directory without CTF trace (no directory there holds a CTF `metadata` \
                 file); give trace files, text message files or LTTng trace directories",
                path.display()
            )))
        } else {
            Ok(SourceKind::Ctf)
        };
    }
    let mut f = std::fs::File::open(path).map_err(|e| InputError::io(path, e))?;
    let prefix = read_prefix(&mut f).map_err(|e| InputError::io(path, e))?;
    sniff_prefix(&prefix, &path.display())
}

impl InputSet {
    /// Opens and checks the headers of every input (span files with the default
    /// [`SpanOptions`](crate::spans::SpanOptions)).
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<InputSet, InputError> {
        InputSet::open_with(paths, &crate::spans::SpanOptions::default())
    }

    /// [`open`](Self::open), reading span files with `spans` (a span file is read once here,
    /// for its nodes).
    pub fn open_with<P: AsRef<Path>>(
        paths: &[P],
        spans: &crate::spans::SpanOptions,
    ) -> Result<InputSet, InputError> {
        if paths.is_empty() {
            return Err(InputError::Invalid("no input files given".into()));
        }
        let mut sources = Vec::new();
        let mut traces: Vec<TraceInfo> = Vec::new();
        for path in paths {
            let path = path.as_ref();
            if path.is_dir() {
                for t in crate::ctf::session::traces_of(path)? {
                    let header = tracefile::TraceFile::open(&t.dir)?.header().clone();
                    let index = traces.len() as u32;
                    traces.push(TraceInfo {
                        index,
                        name: t.name,
                        source: sources.len(),
                        header: Some(header),
                    });
                    sources.push(Source {
                        size: dir_size(&t.dir),
                        path: t.dir,
                        kind: SourceKind::Ctf,
                        first_trace: index,
                    });
                }
                continue;
            }
            let size = std::fs::metadata(path)
                .map_err(|e| InputError::io(path, e))?
                .len();
            let first_trace = traces.len() as u32;
            let kind = match sniff(path)? {
                SourceKind::Trace => {
                    let header = crate::input::tracefile::read_header(path)?;
                    let name = if !header.node.is_empty() {
                        header.node.clone()
                    } else if !header.hostname.is_empty() {
                        header.hostname.clone()
                    } else {
                        path.file_stem()
                            .map_or_else(|| first_trace.to_string(), |s| s.to_string_lossy().into())
                    };
                    traces.push(TraceInfo {
                        index: first_trace,
                        name,
                        source: sources.len(),
                        header: Some(header),
                    });
                    SourceKind::Trace
                }
                SourceKind::Ctf => unreachable!("directories are expanded above"),
                SourceKind::Spans { .. } => {
                    let mut file = crate::spans::scan(path, spans)?;
                    file.traces = (0..file.nodes.len() as u32)
                        .map(|i| crate::spans::SpanTrace::Own(first_trace + i))
                        .collect();
                    for (i, n) in file.nodes.iter().enumerate() {
                        traces.push(TraceInfo {
                            index: first_trace + i as u32,
                            name: n.name.clone(),
                            source: sources.len(),
                            header: None,
                        });
                    }
                    SourceKind::Spans { file }
                }
                SourceKind::Text { .. } => {
                    let h = text::read_header(path)?;
                    for i in 0..h.traces {
                        traces.push(TraceInfo {
                            index: first_trace + i,
                            name: (first_trace + i).to_string(),
                            source: sources.len(),
                            header: None,
                        });
                    }
                    SourceKind::Text { traces: h.traces }
                }
            };
            sources.push(Source {
                path: path.to_path_buf(),
                kind,
                first_trace,
                size,
            });
        }
        // A span node with an agent trace of its name shares that trace's clock.
        crate::spans::join_agent_traces(&mut sources, &mut traces);
        dedupe_names(&mut traces);
        Ok(InputSet {
            sources,
            traces,
            spans: spans.clone(),
        })
    }

    /// Total size of the inputs in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.sources.iter().map(|s| s.size).sum()
    }

    /// Finds a trace by name or index (as given to `--reference`).
    pub fn find_trace(&self, what: &str) -> Option<u32> {
        if let Some(t) = self.traces.iter().find(|t| t.name == what) {
            return Some(t.index);
        }
        what.parse::<u32>()
            .ok()
            .filter(|&i| (i as usize) < self.traces.len())
    }
}

/// Bytes of the files directly in `dir` (a CTF trace's streams and metadata).
fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    })
}

fn dedupe_names(traces: &mut [TraceInfo]) {
    for i in 0..traces.len() {
        let clash = traces[..i].iter().any(|t| t.name == traces[i].name);
        if clash {
            traces[i].name = format!("{}#{}", traces[i].name, traces[i].index);
        }
    }
}
