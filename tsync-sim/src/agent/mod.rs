//! What `tsync-agent` writes, simulated: its sampling timer ([`Sampler`]: bracketed clock
//! samples, kernel clock states, flushes) and its trace file ([`NodeWriter`]: events in the
//! node's time order, the end chunk with the counts).

mod sampler;
mod writer;

pub use sampler::{Reading, SAMPLE_INTERVAL_NS, SAMPLES_PER_FLUSH, Sampler};
pub use writer::{NodeWriter, Written};
