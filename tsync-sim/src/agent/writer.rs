//! One node's trace file being written, as the agent writes it: events in the node's local time
//! order (a generator makes them in true-time order across nodes, and a packet's receive
//! happens after its send), clock samples and kernel clock states between them, and the end
//! chunk with the counts.

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use tsync_common::PacketEvent;
use tsync_common::direction;
use tsync_common::format::{ClockSample, Footer, FormatError, Header, TraceWriter};

use super::Reading;

/// One event waiting in the reorder buffer, ordered by local time (earliest first), then by
/// when it was queued, so that the order of equal times never depends on when the buffer is
/// drained.
#[derive(PartialEq, Eq)]
struct Pending(u64, PacketEvent);

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.1.ts_ns, other.0).cmp(&(self.1.ts_ns, self.0))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// What a node's file holds once finished.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Events, and how many of them are sends.
    pub events: u64,
    /// Send events among them.
    pub sent: u64,
    /// Local times of the first and last events (0 when there are none).
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
    /// Clock samples and kernel clock states.
    pub samples: u64,
    /// See `samples`.
    pub kernel_states: u64,
}

/// A node's trace file being written (or, without a file, only counted: a simulation that
/// writes a text file alone still reports each node's events).
pub struct NodeWriter {
    writer: Option<TraceWriter<BufWriter<File>>>,
    pending: BinaryHeap<Pending>,
    queued: u64,
    written: Written,
    last_sample: Option<ClockSample>,
}

impl NodeWriter {
    /// Creates the trace file at `path` and writes its header.
    pub fn create(path: &Path, header: &Header) -> Result<Self, FormatError> {
        Ok(Self::new(Some(TraceWriter::create(path, header)?)))
    }

    /// A node whose events are counted but written nowhere.
    pub fn without_file() -> Self {
        Self::new(None)
    }

    fn new(writer: Option<TraceWriter<BufWriter<File>>>) -> Self {
        NodeWriter {
            writer,
            pending: BinaryHeap::new(),
            queued: 0,
            written: Written::default(),
            last_sample: None,
        }
    }

    /// Whether a file is being written.
    pub fn has_file(&self) -> bool {
        self.writer.is_some()
    }

    /// Queues an event; it is written once no earlier one can come.
    pub fn queue(&mut self, event: PacketEvent) {
        self.queued += 1;
        self.pending.push(Pending(self.queued, event));
    }

    /// Writes the queued events stamped at or before `horizon` (local ns): the caller knows that
    /// every later event of this node is stamped after it.
    pub fn write_until(&mut self, horizon: u64) -> Result<(), FormatError> {
        while self.pending.peek().is_some_and(|p| p.1.ts_ns <= horizon) {
            let event = self.pending.pop().expect("peeked").1;
            if let Some(writer) = &mut self.writer {
                writer.write_event(&event)?;
            }
            let w = &mut self.written;
            if w.events == 0 {
                w.first_ns = event.ts_ns;
            }
            w.events += 1;
            w.sent += u64::from(event.direction == direction::SEND);
            w.last_ns = event.ts_ns;
        }
        Ok(())
    }

    /// Writes one round of the sampling timer: the kernel's state if it changed, the clock
    /// sample, and a flush when due (a reader aligns each flushed part of the file with the
    /// sample taken during it).
    pub fn write_reading(&mut self, reading: Reading) -> Result<(), FormatError> {
        let Some(writer) = &mut self.writer else {
            return Ok(());
        };
        if let Some(state) = reading.kernel {
            writer.write_kernel_clock(state)?;
            self.written.kernel_states += 1;
        }
        writer.write_clock_sample(reading.sample)?;
        self.written.samples += 1;
        self.last_sample = Some(reading.sample);
        if reading.flush {
            writer.flush()?;
        }
        Ok(())
    }

    /// Writes what is still queued, the `last` reading (the agent's when it stops) and the end
    /// chunk, whose end times are the last sample's.
    pub fn finish(mut self, last: Option<Reading>) -> Result<Written, FormatError> {
        self.write_until(u64::MAX)?;
        if let Some(reading) = last {
            self.write_reading(reading)?;
        }
        let w = self.written;
        if let Some(writer) = self.writer.take() {
            let end = self.last_sample.unwrap_or_default();
            writer.finish(&Footer {
                events: w.events,
                send_events: w.sent,
                recv_events: w.events - w.sent,
                end_realtime_ns: end.realtime_ns,
                end_monotonic_ns: end.monotonic_ns,
                ..Default::default()
            })?;
        }
        Ok(w)
    }
}
