//! The analyzer's vocabulary, shared by every stage from matching to export: messages and their
//! events, exchanges, clock maps and latency bounds. One type per concept.

mod latency;
mod map;
mod message;
mod pairs;
mod piecewise;

pub use latency::PairLatency;
pub use map::Affine;
pub use message::{EventRef, Exchange, MatchedMessage, Message, MessageRef, MessageSink, Origin};
pub(crate) use pairs::PairTable;
pub use piecewise::{Piece, PiecewiseMap};
