//! Synthetic workloads with known truth, for the analyzer's tests, benchmarks and fuzzing.
//!
//! Two generators share one set of models (clocks, delays, traffic, the agent's file writer,
//! the text format):
//!
//! * the **simulator** ([`simulate`], `cargo xtask simulate`): N nodes whose crystals are linear
//!   or wander, with an NTP/chrony-like daemon slewing CLOCK_MONOTONIC ([`ntp`]), TCP
//!   request/response traffic ([`traffic`]) over delays with a floor and a heavy tail
//!   ([`network`]), written as the agent writes its trace files ([`agent`]: events, bracketed
//!   clock samples every 20 ms, kernel clock states, flushes) and/or as a text message file
//!   ([`text`]), with the [`Truth`] beside them;
//! * fast **message workloads** ([`Workload`]): linear clocks and random messages, millions per
//!   second, for unit tests, property tests and the benchmarks.
//!
//! [`corpus`] builds the fuzz targets' seeds from both. With the `check` feature, [`check`] runs
//! the analyzer on what was simulated and compares it with the truth; with `bench`, [`bench`]
//! holds the analyzer's benchmarks. This crate's library never depends on the analyzer
//! otherwise: the analyzer's own tests take it as a dev-dependency, and a normal dependency the
//! other way would put two copies of the analyzer's types in its unit-test binary. Messages
//! come out as this crate's own [`Message`].
#![warn(missing_docs)]

pub mod agent;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "check")]
pub mod check;
pub mod clock;
pub mod corpus;
pub mod network;
pub mod ntp;
mod random;
mod simulation;
pub mod text;
pub mod traffic;
mod truth;
mod workload;

pub use clock::{BOOT_NS, ClockKind, ClockModel, Crystal, LinearClock};
pub use network::{Delay, DelayTail};
pub use random::{SplitMix64, substream};
pub use simulation::{Format, SimConfig, simulate};
pub use truth::{NodeTruth, Truth};
pub use workload::{Message, Workload};
