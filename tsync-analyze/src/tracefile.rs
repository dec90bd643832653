//! Agent trace files (placeholder until the trace format lands in main).
use std::path::Path;

use crate::error::InputError;
use crate::input::Source;
use crate::matching::{MatchOptions, MatchStats};
use crate::message::MessageSink;

/// The trace file header.
#[derive(Clone, Debug, Default)]
pub struct TraceHeader {
    pub node: String,
    pub hostname: String,
}

pub fn is_trace_file(prefix: &[u8]) -> bool {
    prefix.starts_with(b"TSYNCTRC")
}

pub fn read_header(path: &Path) -> Result<TraceHeader, InputError> {
    Err(InputError::Trace {
        path: path.to_path_buf(),
        what: "trace files are not supported yet".into(),
    })
}

pub fn match_files(
    _sources: &[&Source],
    _options: &MatchOptions,
    _sink: &mut dyn MessageSink,
    _progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    Ok(MatchStats::default())
}
