//! CSV with a header row: every file must have the same header (one table); records merged by
//! the integer time column, the interval from the `<field>_lo` and `<field>_hi` columns (empty:
//! none), the verdict in a new last column `tsync_order`. Read and written with the `csv` crate:
//! values are kept, quoting only where CSV needs it (so `apply`'s output comes out as it went in).

use std::io::{Read, Write};

use super::{MergeError, Next, ORDER_FIELD, Order, Sink, Source};

/// One file's rows.
pub struct CsvSource<R> {
    reader: csv::Reader<R>,
    name: String,
    field: String,
    header: csv::ByteRecord,
    /// Columns of the time and of its bounds.
    columns: (usize, Option<usize>, Option<usize>),
}

fn read_error(name: &str, e: csv::Error) -> MergeError {
    match crate::apply::csv::read_failure(name, e) {
        Err(io) => MergeError::io(format!("cannot read {name}"), io),
        Ok(what) => MergeError::Input(what),
    }
}

impl<R: Read> CsvSource<R> {
    /// Reads the header of `input` (named `name` in errors), merging by the column `field`.
    pub fn new(input: R, name: &str, field: &str) -> Result<Self, MergeError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(input);
        let mut header = csv::ByteRecord::new();
        if !reader
            .read_byte_record(&mut header)
            .map_err(|e| read_error(name, e))?
        {
            return Err(MergeError::Input(format!(
                "{name}: empty file; a CSV file starts with a header row naming `{field}`"
            )));
        }
        let find = |c: &str| header.iter().position(|h| h == c.as_bytes());
        let (lo, hi) = crate::apply::interval_names(field);
        let time = find(field).ok_or_else(|| {
            MergeError::Input(format!(
                "{name}:1: the header row has no column `{field}` (the time column; choose \
                 another with --field)"
            ))
        })?;
        if find(ORDER_FIELD).is_some() {
            return Err(MergeError::Input(format!(
                "{name}:1: the header already has `{ORDER_FIELD}`: was the file merged already?"
            )));
        }
        let columns = (time, find(&lo), find(&hi));
        Ok(CsvSource {
            reader,
            name: name.to_string(),
            field: field.to_string(),
            header,
            columns,
        })
    }

    /// The header row.
    pub fn header(&self) -> &csv::ByteRecord {
        &self.header
    }
}

/// An integer cell (surrounding spaces allowed).
fn cell_integer(raw: &[u8]) -> Option<i64> {
    std::str::from_utf8(raw).ok()?.trim().parse().ok()
}

impl<R: Read> Source for CsvSource<R> {
    type Item = csv::ByteRecord;

    fn next(&mut self) -> Result<Next<csv::ByteRecord>, MergeError> {
        let mut row = csv::ByteRecord::new();
        if !self
            .reader
            .read_byte_record(&mut row)
            .map_err(|e| read_error(&self.name, e))?
        {
            return Ok(Next::End);
        }
        let line = row.position().map_or(0, |p| p.line());
        // A bound may be empty (no interval); the time may not.
        let cell = |k: usize, what: &str, required: bool| -> Result<Option<i64>, MergeError> {
            let raw = &row[k];
            if !required && raw.iter().all(u8::is_ascii_whitespace) {
                return Ok(None);
            }
            cell_integer(raw).map(Some).ok_or_else(|| {
                let shown: String = String::from_utf8_lossy(raw).chars().take(40).collect();
                MergeError::Input(format!(
                    "{}:{line}: `{what}` is \"{shown}\", not an integer number of nanoseconds",
                    self.name
                ))
            })
        };
        let (lo_name, hi_name) = crate::apply::interval_names(&self.field);
        let t = cell(self.columns.0, &self.field, true)?.expect("required: never None");
        let lo = self
            .columns
            .1
            .map(|k| cell(k, &lo_name, false))
            .transpose()?
            .flatten();
        let hi = self
            .columns
            .2
            .map(|k| cell(k, &hi_name, false))
            .transpose()?
            .flatten();
        Ok(Next::Timed {
            t,
            interval: lo.zip(hi),
            line,
            item: row,
        })
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// Writes the header (with `tsync_order`) and the rows.
pub struct CsvSink<W: Write> {
    writer: csv::Writer<W>,
}

fn write_error(e: csv::Error) -> MergeError {
    match e.into_kind() {
        csv::ErrorKind::Io(io) => MergeError::io("cannot write the output", io),
        kind => MergeError::Input(format!("cannot write the CSV output: {kind:?}")),
    }
}

impl<W: Write> CsvSink<W> {
    /// Writes `header` and the verdict's column to `out`.
    pub fn new(out: W, header: &csv::ByteRecord) -> Result<Self, MergeError> {
        let mut writer = csv::WriterBuilder::new().from_writer(out);
        let mut h = header.clone();
        h.push_field(ORDER_FIELD.as_bytes());
        writer.write_byte_record(&h).map_err(write_error)?;
        Ok(CsvSink { writer })
    }

    /// The writer back (flushed).
    pub fn finish(self) -> Result<W, MergeError> {
        self.writer
            .into_inner()
            .map_err(|e| MergeError::io("cannot write the output", e.into_error()))
    }
}

impl<W: Write> Sink<csv::ByteRecord> for CsvSink<W> {
    fn record(&mut self, row: &mut csv::ByteRecord, order: Order) -> Result<(), MergeError> {
        row.push_field(order.as_str().as_bytes());
        self.writer.write_byte_record(row).map_err(write_error)
    }

    fn untimed(&mut self, row: &mut csv::ByteRecord) -> Result<(), MergeError> {
        self.writer.write_byte_record(row).map_err(write_error)
    }
}
