//! What goes wrong with trace files: errors, and the damage a reader reports and reads around.

use std::io;

/// Where a file stops being readable, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the first chunk that could not be read.
    pub offset: u64,
    /// Bytes from there to the end of the file, which were not read.
    pub bytes_discarded: u64,
    pub reason: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at byte {}; {} byte(s) after it were not read",
            self.reason, self.offset, self.bytes_discarded
        )
    }
}

/// What can go wrong reading or writing a trace file.
#[derive(thiserror::Error, Debug)]
pub enum FormatError {
    /// The OS error is part of the message, and deliberately not a `source`: an error chain
    /// printed whole (`anyhow`'s `{:#}`) would say it twice.
    #[error("{context}: {error}")]
    Io { context: String, error: io::Error },
    #[error("not a tsync trace file (it does not start with \"TSYNCTRC\")")]
    NotATrace,
    #[error(
        "trace file format version {found} is newer than this build supports ({supported}); \
         upgrade tsync-analyze"
    )]
    FutureVersion { found: u32, supported: u32 },
    #[error(
        "trace file is big-endian or has an unknown byte order ({0}); tsync writes little-endian"
    )]
    ByteOrder(u32),
    #[error("trace file header is unreadable: {0}")]
    Header(String),
    #[error("cannot encode trace metadata: {0}")]
    Encode(String),
}

impl FormatError {
    pub(super) fn io(context: impl Into<String>, source: io::Error) -> Self {
        FormatError::Io {
            context: context.into(),
            error: source,
        }
    }
}
