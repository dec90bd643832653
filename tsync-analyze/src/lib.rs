//! The analyzer's library: everything `tsync-analyze` does, usable from tests and benchmarks.

pub mod clc;
pub mod eval;
pub mod export;
pub mod histogram;
pub mod info;
pub mod plot;
