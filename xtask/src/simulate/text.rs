//! The simulated messages as one text message file (`messages.txt`), the analyzer's other input
//! format: `sender receiver send_time recv_time` with the events' CLOCK_MONOTONIC times in exact
//! decimal seconds, trace K being node K.
//!
//! Text inputs carry no clock samples, so nothing can undo slewing or tell the crystal's wander
//! from the network: the case where piecewise estimation alone must follow the clocks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;

/// A message waiting to be written: true send time (ns, as an integer key), a sequence number
/// for ties, sender, receiver, and the two local times.
type Line = (u64, u64, usize, usize, u64, u64);

/// Writes messages in true send-time order, as a log of what was sent would hold them.
pub struct TextWriter {
    out: BufWriter<std::fs::File>,
    pending: BinaryHeap<Reverse<Line>>,
    seq: u64,
    line: String,
}

impl TextWriter {
    /// Creates `path` and writes its header: a comment saying what made it, and the trace count.
    pub fn create(path: &Path, nodes: usize, comment: &str) -> anyhow::Result<Self> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        writeln!(out, "# {comment}\n{nodes}")?;
        Ok(TextWriter {
            out,
            pending: BinaryHeap::new(),
            seq: 0,
            line: String::with_capacity(64),
        })
    }

    /// Queues a message sent at true time `sent` (ns).
    pub fn push(&mut self, sent: f64, from: usize, to: usize, send_ns: u64, recv_ns: u64) {
        self.seq += 1;
        self.pending
            .push(Reverse((sent as u64, self.seq, from, to, send_ns, recv_ns)));
    }

    /// Writes the queued messages sent before true time `t`: every later message is sent after.
    pub fn write_before(&mut self, t: f64) -> anyhow::Result<()> {
        while let Some(Reverse(m)) = self.pending.peek().copied() {
            if m.0 as f64 > t {
                break;
            }
            self.pending.pop();
            let (_, _, from, to, send_ns, recv_ns) = m;
            self.line.clear();
            let _ = write!(self.line, "{from} {to} ");
            tsync_analyze::text::format_seconds(send_ns as i64, &mut self.line);
            self.line.push(' ');
            tsync_analyze::text::format_seconds(recv_ns as i64, &mut self.line);
            self.line.push('\n');
            self.out.write_all(self.line.as_bytes())?;
        }
        Ok(())
    }

    /// Writes what is left and closes the file.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.write_before(f64::INFINITY)?;
        self.out.flush()?;
        Ok(())
    }
}
