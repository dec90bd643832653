//! JSON Lines: each line one record, merged by its top-level integer time field, its interval
//! read from `<field>_lo` and `<field>_hi` (`apply --interval`; `null` or absent: none). The
//! verdict is spliced in as `"tsync_order":"…"` before the object's closing brace: every other
//! byte of the line is written as it was (blank lines are dropped).

use std::io::{BufRead, Write};

use super::{MergeError, Next, ORDER_FIELD, Order, Sink, Source};
use crate::apply::lines::{LineError, Names, integer, json_key, members, read_line};

/// A line and where its closing brace is.
pub struct Line {
    bytes: Vec<u8>,
    brace: usize,
}

/// One file's lines.
pub struct JsonlSource<R> {
    input: R,
    name: String,
    field: String,
    names: Names<4>,
    line: u64,
    /// Buffers of lines written already, to read the next lines into.
    free: Vec<Vec<u8>>,
}

impl<R: BufRead> JsonlSource<R> {
    /// Reads `input` (named `name` in errors), merging by `field`.
    pub fn new(input: R, name: &str, field: &str) -> Self {
        let (lo, hi) = crate::apply::interval_names(field);
        JsonlSource {
            input,
            name: name.to_string(),
            field: field.to_string(),
            names: Names::new([
                field.as_bytes(),
                lo.as_bytes(),
                hi.as_bytes(),
                ORDER_FIELD.as_bytes(),
            ]),
            line: 0,
            free: Vec::new(),
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> MergeError {
        MergeError::Input(format!("{}:{}: {what}", self.name, self.line))
    }

    /// A bound: an integer, or `null` for none.
    fn bound(&self, text: &[u8], which: &[u8]) -> Result<Option<i64>, MergeError> {
        if text == b"null" {
            return Ok(None);
        }
        integer(text).map(Some).ok_or_else(|| {
            self.fail(format!(
                "`{}` is {}, not an integer number of nanoseconds or null",
                String::from_utf8_lossy(which),
                String::from_utf8_lossy(&text[..text.len().min(40)])
            ))
        })
    }
}

impl<R: BufRead> Source for JsonlSource<R> {
    type Item = Line;

    fn next(&mut self) -> Result<Next<Line>, MergeError> {
        let mut bytes = self.free.pop().unwrap_or_else(|| Vec::with_capacity(256));
        loop {
            bytes.clear();
            if !read_line(&mut self.input, &mut bytes)
                .map_err(|e| MergeError::io(format!("cannot read {}", self.name), e))?
            {
                return Ok(Next::End);
            }
            self.line += 1;
            let body_len = bytes.trim_ascii_end().len();
            if body_len == 0 {
                continue;
            }
            let body = &bytes[..body_len];
            let m = members(body, &self.names).map_err(|e| self.fail(e.describe(&self.field)))?;
            if let Some(d) = m.duplicate {
                let name = String::from_utf8_lossy(self.names.name(d)).into_owned();
                return Err(self.fail(format!("the field `{name}` appears twice")));
            }
            if m.at[3].is_some() {
                return Err(self.fail(format!(
                    "the line already has `{ORDER_FIELD}`: was it merged already?"
                )));
            }
            let (s, e) =
                m.at[0].ok_or_else(|| self.fail(LineError::Missing.describe(&self.field)))?;
            let t = integer(&body[s..e]).ok_or_else(|| {
                self.fail(
                    LineError::NotInteger(String::from_utf8_lossy(&body[s..e]).into_owned())
                        .describe(&self.field),
                )
            })?;
            let value = |k: usize| m.at[k].map(|(s, e)| &body[s..e]);
            let lo = value(1)
                .map(|v| self.bound(v, self.names.name(1)))
                .transpose()?
                .flatten();
            let hi = value(2)
                .map(|v| self.bound(v, self.names.name(2)))
                .transpose()?
                .flatten();
            let interval = lo.zip(hi);
            // A valid object line ends with its closing brace.
            let brace = body_len - 1;
            bytes.truncate(body_len);
            return Ok(Next::Timed {
                t,
                interval,
                line: self.line,
                item: Line { bytes, brace },
            });
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn recycle(&mut self, line: Line) {
        // As many as a reorder window and the batches in flight hold, at most.
        if self.free.len() < 1 << 14 {
            self.free.push(line.bytes);
        }
    }
}

/// Writes the lines, each with its verdict and a line break.
pub struct JsonlSink<W> {
    out: W,
    members: [Vec<u8>; 3],
}

impl<W: Write> JsonlSink<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        let member = |o: Order| {
            [
                &b",\""[..],
                &json_key(ORDER_FIELD),
                b"\":\"",
                o.as_str().as_bytes(),
                b"\"",
            ]
            .concat()
        };
        JsonlSink {
            out,
            members: [
                member(Order::Certain),
                member(Order::Uncertain),
                member(Order::Unknown),
            ],
        }
    }

    /// The writer back (flushed).
    pub fn finish(mut self) -> Result<W, MergeError> {
        self.out
            .flush()
            .map_err(|e| MergeError::io("cannot write the output", e))?;
        Ok(self.out)
    }
}

impl<W: Write> Sink<Line> for JsonlSink<W> {
    fn record(&mut self, line: &mut Line, order: Order) -> Result<(), MergeError> {
        // The object has the time field at least, so the verdict follows a member.
        let member = &self.members[order as usize];
        let b = &line.bytes;
        let w = |out: &mut W, bytes: &[u8]| {
            out.write_all(bytes)
                .map_err(|e| MergeError::io("cannot write the output", e))
        };
        w(&mut self.out, &b[..line.brace])?;
        w(&mut self.out, member)?;
        w(&mut self.out, &b[line.brace..])?;
        w(&mut self.out, b"\n")
    }

    fn untimed(&mut self, line: &mut Line) -> Result<(), MergeError> {
        self.out
            .write_all(&line.bytes)
            .and_then(|()| self.out.write_all(b"\n"))
            .map_err(|e| MergeError::io("cannot write the output", e))
    }
}
