//! The analyzer's library: everything `tsync-analyze` does, usable from tests and benchmarks.
pub mod info;
