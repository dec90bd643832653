//! Messages as a text message file, the analyzer's other input format: a comment, the trace
//! count, then `sender receiver send_time recv_time` per line, the times in exact decimal
//! seconds of each trace's local clock.
//!
//! Text inputs carry no clock samples, so nothing can undo slewing or tell a crystal's wander
//! from the network: the case where piecewise estimation alone must follow the clocks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use anyhow::Context;

/// A message waiting to be written: true send time (ns, as an integer key), a sequence number
/// for ties, sender, receiver, and the two local times.
type Line = (u64, u64, u32, u32, i64, i64);

/// Writes messages either as they come ([`write`](Self::write)) or in true send-time order
/// ([`push`](Self::push), then [`write_before`](Self::write_before)), as a log of what was sent
/// would hold them.
pub struct TextWriter<W: Write> {
    out: BufWriter<W>,
    pending: BinaryHeap<Reverse<Line>>,
    seq: u64,
    line: String,
}

impl TextWriter<File> {
    /// Creates `path` and writes its header.
    pub fn create(path: &Path, traces: usize, comment: &str) -> anyhow::Result<Self> {
        let file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(TextWriter::new(file, traces, comment)?)
    }
}

impl<W: Write> TextWriter<W> {
    /// Writes the header to `out`: a comment saying what made the file, and the trace count.
    pub fn new(out: W, traces: usize, comment: &str) -> io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, out);
        writeln!(out, "# {comment}\n{traces}")?;
        Ok(TextWriter {
            out,
            pending: BinaryHeap::new(),
            seq: 0,
            line: String::with_capacity(64),
        })
    }

    /// Writes one message now.
    pub fn write(&mut self, from: u32, to: u32, send_ns: i64, recv_ns: i64) -> io::Result<()> {
        self.line.clear();
        let _ = write!(self.line, "{from} {to} ");
        format_seconds(send_ns, &mut self.line);
        self.line.push(' ');
        format_seconds(recv_ns, &mut self.line);
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())
    }

    /// Queues a message sent at true time `sent` (ns).
    pub fn push(&mut self, sent: f64, from: u32, to: u32, send_ns: i64, recv_ns: i64) {
        self.seq += 1;
        self.pending
            .push(Reverse((sent as u64, self.seq, from, to, send_ns, recv_ns)));
    }

    /// Writes the queued messages sent before true time `t`: every later message is sent after.
    pub fn write_before(&mut self, t: f64) -> io::Result<()> {
        while let Some(Reverse(m)) = self.pending.peek().copied() {
            if m.0 as f64 > t {
                break;
            }
            self.pending.pop();
            let (_, _, from, to, send_ns, recv_ns) = m;
            self.write(from, to, send_ns, recv_ns)?;
        }
        Ok(())
    }

    /// Writes what is left and flushes; returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.write_before(f64::INFINITY)?;
        self.out
            .into_inner()
            .map_err(io::IntoInnerError::into_error)
    }
}

/// `ns` as exact decimal seconds (`-1.000000005`), the text format's time.
pub fn format_seconds(ns: i64, out: &mut String) {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    let _ = write!(out, "{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_send_order_with_exact_seconds() {
        let mut w = TextWriter::new(Vec::new(), 2, "test").unwrap();
        w.push(20.0, 1, 0, 2_000_000_001, 5);
        w.push(10.0, 0, 1, -1_500_000_000, 7);
        w.write_before(15.0).unwrap();
        w.write(0, 1, 3, 4).unwrap();
        let text = String::from_utf8(w.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            "# test\n2\n0 1 -1.500000000 0.000000007\n0 1 0.000000003 0.000000004\n\
             1 0 2.000000001 0.000000005\n"
        );
    }
}
