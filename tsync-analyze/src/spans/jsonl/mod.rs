//! OTLP/JSON span files, one `TracesData` object per line, as the Collector's file exporter
//! writes them: the lines handed out in place ([`Lines`]), and each read into [`SpanData`] for
//! the [`SpanVisitor`], as protobuf's frames are (`proto.rs`).
//!
//! * `skim.rs` reads the usual line fast: the shape the Collector writes, the members `sync`
//!   does not use passed over by their structure (`skip.rs`).
//! * `strict.rs` is the reference: serde_json's reading, for every line the fast one does not
//!   take (anything unusual), and every error.
//! * `scan.rs` is the first pass, for the nodes and the epoch: a search for two keys.
//!
//! A line that is not OTLP/JSON traces is an error naming `file:line`, except a last line
//! without its newline that does not parse: the file was cut short while it was written (a
//! Collector still running, a copy taken too early), which is counted and warned about.

mod scan;
mod skim;
mod skip;
mod strict;

use std::io::BufRead;
use std::path::Path;

use super::node::NodeAttribution;
use super::read::{ReadCounts, SpanVisitor};
use crate::input::error::InputError;

pub(super) use scan::scan_lines;

/// Test support (the span fuzz target): whether the fast reading of a line (a whole trimmed
/// line) gives what the reference reading gives, where it takes the line at all.
#[cfg(feature = "fuzzing")]
pub fn readings_agree(line: &str) -> Result<(), String> {
    skim::readings_agree(line)
}

/// Reads the OTLP/JSON lines of `reader` (the file at `path`) into `visitor`.
pub(super) fn read_lines(
    path: &Path,
    reader: impl BufRead,
    attribution: &NodeAttribution,
    visitor: &mut dyn SpanVisitor,
    progress: &mut dyn FnMut(u64),
) -> Result<ReadCounts, InputError> {
    let mut counts = ReadCounts::default();
    let mut lines = Lines::new(reader);
    let mut skimmed = skim::Skimmed::default();
    let mut number = 0u64;
    while let Some(line) = lines.next().map_err(|e| InputError::io(path, e))? {
        let n = line.len();
        counts.bytes += n as u64;
        progress(n as u64);
        number += 1;
        let complete = line.last() == Some(&b'\n');
        // Checked many bytes at a time; std says what is wrong with a line that is not UTF-8.
        let checked = simdutf8::basic::from_utf8(line).or_else(|_| std::str::from_utf8(line));
        let text = match checked {
            Ok(t) => t.trim(),
            Err(e) if complete => {
                return Err(InputError::spans(
                    path,
                    number,
                    format!("not UTF-8 text ({e}); is it OTLP/JSON?"),
                ));
            }
            Err(_) => {
                counts.cut_short = true;
                break;
            }
        };
        if text.is_empty() {
            continue;
        }
        // The usual line of a whole line, read fast; anything else, the reference way.
        if complete && skimmed.line(text, attribution) {
            skimmed.deliver(visitor, number);
            counts.lines += 1;
            continue;
        }
        match strict::read_line(text, attribution, visitor, number) {
            Ok(()) => counts.lines += 1,
            // A last line without its newline that does not parse: the file was cut short.
            Err(_) if !complete => counts.cut_short = true,
            Err(what) => return Err(InputError::spans(path, number, what)),
        }
    }
    Ok(counts)
}

/// The lines of a file, each one handed out in place, in a buffer that holds at least the
/// longest (no copy of each line, as `read_until` makes).
pub(super) struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    /// The next line's start, the end of what was read, and how far a newline was looked for.
    start: usize,
    end: usize,
    scanned: usize,
    eof: bool,
}

impl<R: std::io::Read> Lines<R> {
    pub(super) fn new(reader: R) -> Self {
        Self::with_capacity(reader, 4 << 20)
    }

    fn with_capacity(reader: R, capacity: usize) -> Self {
        Lines {
            reader,
            buf: vec![0; capacity.max(1)],
            start: 0,
            end: 0,
            scanned: 0,
            eof: false,
        }
    }

    /// The next line with its newline (the last one may have none); None at the end.
    pub(super) fn next(&mut self) -> std::io::Result<Option<&[u8]>> {
        self.next_by(|text| memchr::memchr(b'\n', text))
    }

    /// Every whole line read so far together, up to the last newline (the last line of the
    /// file may come alone, without its newline); None at the end. For a reading that need
    /// not split lines.
    pub(super) fn next_lines(&mut self) -> std::io::Result<Option<&[u8]>> {
        self.next_by(|text| memchr::memrchr(b'\n', text))
    }

    /// Lines up to the newline `newline` finds in what was read and not yet looked at.
    fn next_by(
        &mut self,
        newline: impl Fn(&[u8]) -> Option<usize>,
    ) -> std::io::Result<Option<&[u8]>> {
        loop {
            if let Some(i) = newline(&self.buf[self.scanned..self.end]) {
                let lines = self.start..self.scanned + i + 1;
                self.start = lines.end;
                self.scanned = lines.end;
                return Ok(Some(&self.buf[lines]));
            }
            self.scanned = self.end;
            if self.eof {
                let line = self.start..self.end;
                self.start = self.end;
                return Ok((!line.is_empty()).then(|| &self.buf[line]));
            }
            self.refill()?;
        }
    }

    /// Moves the start of a line to the front, with room after it, and reads into that room.
    fn refill(&mut self) -> std::io::Result<()> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.scanned = self.end;
        self.start = 0;
        if self.end == self.buf.len() {
            self.buf.resize(2 * self.buf.len(), 0);
        }
        match self.reader.read(&mut self.buf[self.end..]) {
            Ok(0) => self.eof = true,
            Ok(n) => self.end += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_whatever_the_buffer() {
        for text in ["", "a\n", "a\nbb\n\nccccccc", "long line of text\nx\n"] {
            for capacity in [1, 2, 3, 5, 64] {
                let mut lines = Lines::with_capacity(text.as_bytes(), capacity);
                let mut got = Vec::new();
                while let Some(line) = lines.next().unwrap() {
                    got.push(String::from_utf8(line.to_vec()).unwrap());
                }
                assert_eq!(
                    got,
                    text.split_inclusive('\n').collect::<Vec<_>>(),
                    "{capacity}"
                );
                // Together: the same bytes, in blocks of whole lines but the file's last.
                let mut lines = Lines::with_capacity(text.as_bytes(), capacity);
                let mut blocks = Vec::new();
                while let Some(block) = lines.next_lines().unwrap() {
                    blocks.push(String::from_utf8(block.to_vec()).unwrap());
                }
                assert_eq!(blocks.concat(), text, "{capacity}");
                let whole = blocks.len().saturating_sub(1);
                assert!(
                    blocks[..whole].iter().all(|b| b.ends_with('\n')),
                    "{blocks:?}"
                );
            }
        }
    }
}
