//! What can go wrong while reading the inputs, said so that a user knows what to fix.

use std::path::PathBuf;

/// An input the analyzer cannot use. Every variant names the file and, where there is one, the line.
#[derive(thiserror::Error, Debug)]
pub enum InputError {
    /// The file cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of a text message file does not follow the format.
    #[error(
        "{path}:{line}: {what}\n  (a text message file holds the number of traces on its first line, \
         then one `sender receiver send_time recv_time` per line, times in seconds)"
    )]
    Syntax {
        /// The text message file.
        path: PathBuf,
        /// Line number, from 1.
        line: u64,
        /// What is wrong with the line.
        what: String,
    },
    /// A line of a span file is not OTLP/JSON traces.
    #[error(
        "{path}:{line}: {what}\n  (a span file holds OTLP/JSON `TracesData`, one object with \
         `resourceSpans` per line, as the OpenTelemetry Collector's file exporter writes it)"
    )]
    Spans {
        /// The span file.
        path: PathBuf,
        /// Line number, from 1.
        line: u64,
        /// What is wrong with the line.
        what: String,
    },
    /// A trace file written by `tsync-agent` cannot be decoded.
    #[error("{path}: not a usable tsync trace file: {what}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// Why it cannot be decoded.
        what: String,
    },
    /// A CTF (LTTng) trace cannot be decoded.
    #[error("{path}: not a usable CTF trace: {what}")]
    Ctf {
        /// The trace directory.
        path: PathBuf,
        /// Why it cannot be decoded.
        what: String,
    },
    /// The inputs are fine one by one but cannot be analyzed together.
    #[error("{0}")]
    Invalid(String),
}

impl From<crate::ctf::CtfError> for InputError {
    fn from(e: crate::ctf::CtfError) -> Self {
        match e {
            crate::ctf::CtfError::Io { path, source } => InputError::Io { path, source },
            crate::ctf::CtfError::Trace { path, what } => InputError::Ctf { path, what },
        }
    }
}

impl InputError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        InputError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn spans(path: &std::path::Path, line: u64, what: impl Into<String>) -> Self {
        InputError::Spans {
            path: path.to_path_buf(),
            line,
            what: what.into(),
        }
    }

    pub(crate) fn syntax(path: &std::path::Path, line: u64, what: impl Into<String>) -> Self {
        InputError::Syntax {
            path: path.to_path_buf(),
            line,
            what: what.into(),
        }
    }
}
