//! Common Trace Format 1.8, as LTTng writes it: read (an LTTng kernel trace is an input of
//! `sync` and every other command, its network events becoming the analyzer's events) and
//! rewritten (`apply --format ctf` maps a trace's clock class onto the common timebase).
//!
//! | module | what it holds |
//! |---|---|
//! | [`metadata`] | the `metadata` file (packetized or plain), TSDL's lexer and parser, the declared types, clocks, streams and events |
//! | [`layout`] | types compiled for decoding: roles, slots, fixed-size skips, limits |
//! | [`decode`] | the bit cursor and the decoder |
//! | [`header`] | LTTng's event headers in straight-line code (the hot path) |
//! | [`program`] | a trace's metadata compiled: one program per header, context and payload |
//! | [`stream`] | one stream file, packet by packet |
//! | [`network`] | LTTng's network events as [`tsync_common::PacketEvent`] digests |
//! | [`trace`] | a trace directory: its streams merged in time order, chunks of events |
//! | [`session`] | finding traces in a directory (an LTTng session holds several) |
//! | [`summary`] | what `info` reports about a trace |
//! | [`index`] | LTTng's packet index files |
//! | `writer` | (test support) LTTng-shaped kernel traces written from packet events |

pub mod decode;
pub mod header;
pub mod index;
pub mod layout;
pub mod metadata;
pub mod network;
pub mod program;
pub mod session;
pub mod stream;
pub mod summary;
pub mod trace;
#[cfg(any(test, feature = "ctf-writer"))]
pub mod writer;

use std::path::{Path, PathBuf};

pub use session::{find_traces, is_trace_dir};
pub use trace::{CtfTrace, NetCounts};

/// A CTF trace that cannot be read, naming the file or directory at fault.
#[derive(Debug, thiserror::Error)]
pub enum CtfError {
    /// A file or directory cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// What could not be read.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The trace's metadata cannot be used.
    #[error("{path}: not a usable CTF trace: {what}")]
    Trace {
        /// The trace directory.
        path: PathBuf,
        /// Why.
        what: String,
    },
}

impl CtfError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        CtfError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn trace(path: &Path, what: impl std::fmt::Display) -> Self {
        CtfError::Trace {
            path: path.to_path_buf(),
            what: what.to_string(),
        }
    }
}
