//! The analyzer's library: everything `tsync-analyze` does, usable from tests and benchmarks.
//!
//! Main entry points:
//! - [`input::InputSet::open`] reads the inputs (trace files and text message files);
//! - [`input::InputSet::for_each_message`] streams matched messages (and exchanges) to a
//!   [`message::MessageSink`];
//! - [`sync::run`] computes per-pair hulls, limit lines, estimates, accuracy curves and the
//!   per-trace maps onto a common timebase ([`sync::SyncResult`]); [`sync::run_messages`] does
//!   the same on messages held in memory;
//! - [`timeline::Timeline`] carries `sync`'s linear correction on to every event: the controlled
//!   logical clock ([`clc`]), the evaluation ([`eval`]), the exports ([`export`]); [`figures`]
//!   draws a run's plots ([`plot`]).

pub mod accuracy;
mod alignment;
pub mod corridor;
pub mod error;
pub mod exchange;
pub mod hull;
pub mod info;
pub mod input;
pub mod linreg;
pub mod matching;
pub mod message;
pub mod output;
pub mod progress;
pub mod reduction;
pub mod report;
pub mod sync;
pub mod synth;
pub mod text;
pub mod tracefile;

pub mod clc;
pub mod eval;
pub mod export;
pub mod histogram;
pub mod plot;

pub mod figures;
pub mod timeline;
