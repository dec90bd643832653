//! CSV with a header row: the time column (integer ns) is rewritten to the common timebase and
//! the original kept in a new column `<field>_local` right after it. Read and written with the
//! `csv` crate (quoting, embedded line breaks), so every other value is kept as it was; fields
//! are re-quoted only where CSV needs it. With `--interval`, two more columns `<field>_lo` and
//! `<field>_hi` follow: the guaranteed interval, empty where there is none.

use std::io::{Read, Write};

use super::{ApplyError, ApplySummary, NodeMapper};

/// What went wrong reading CSV file `name`: its words with `name:line:` (Ok), or the I/O error.
pub(crate) fn read_failure(name: &str, e: csv::Error) -> Result<String, std::io::Error> {
    let line = e.position().map_or(0, |p| p.line());
    let what = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{len} columns where the header has {expected_len}"),
        csv::ErrorKind::Utf8 { err, .. } => format!("not UTF-8 text ({err})"),
        _ => e.to_string(),
    };
    match e.into_kind() {
        csv::ErrorKind::Io(io) => Err(io),
        _ => Ok(format!("{name}:{line}: {what}")),
    }
}

/// Rewrites a CSV stream: the column `field` mapped by `mapper`, its original in
/// `<field>_local` after it (and with `interval` the bounds in `<field>_lo`, `<field>_hi`).
/// `name` names the input in errors (`name:line: …`).
pub fn apply_csv<R: Read, W: Write>(
    input: R,
    name: &str,
    out: W,
    field: &str,
    interval: bool,
    mapper: &mut NodeMapper<'_>,
) -> Result<ApplySummary, ApplyError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(input);
    let mut writer = csv::WriterBuilder::new().from_writer(out);
    let read_err = |e: csv::Error| match read_failure(name, e) {
        Err(io) => ApplyError::io(format!("cannot read {name}"), io),
        Ok(what) => ApplyError::Events(what),
    };
    let write_err = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(io) => ApplyError::io("cannot write the output", io),
        kind => ApplyError::Events(format!("cannot write the CSV output: {:?}", kind)),
    };
    let mut record = csv::ByteRecord::new();
    if !reader.read_byte_record(&mut record).map_err(read_err)? {
        return Err(ApplyError::Events(format!(
            "{name}: empty file; a CSV events file starts with a header row naming `{field}`"
        )));
    }
    let local = format!("{field}_local");
    let column = record
        .iter()
        .position(|h| h == field.as_bytes())
        .ok_or_else(|| {
            ApplyError::Events(format!(
                "{name}:1: the header row has no column `{field}` (the time column; choose \
                 another with --field); it has: {}",
                record
                    .iter()
                    .map(|h| String::from_utf8_lossy(h).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let (lo, hi) = super::interval_names(field);
    let mut added = vec![local.as_str()];
    if interval {
        added.extend([lo.as_str(), hi.as_str()]);
    }
    if let Some(there) = added
        .iter()
        .find(|a| record.iter().any(|h| h == a.as_bytes()))
    {
        return Err(ApplyError::Events(format!(
            "{name}:1: the header already has `{there}`: was the file applied already? (apply \
             writes the original time or the interval under that name)"
        )));
    }
    let header_line = record.position().map_or(1, |p| p.line());
    let mut header = csv::ByteRecord::new();
    for (i, h) in record.iter().enumerate() {
        header.push_field(h);
        if i == column {
            for a in &added {
                header.push_field(a.as_bytes());
            }
        }
    }
    writer.write_byte_record(&header).map_err(write_err)?;
    let mut summary = ApplySummary::default();
    let mut number = itoa::Buffer::new();
    let mut row = csv::ByteRecord::new();
    while reader.read_byte_record(&mut record).map_err(read_err)? {
        let line = record.position().map_or(header_line, |p| p.line());
        let raw = &record[column];
        let value = std::str::from_utf8(raw)
            .ok()
            .map(str::trim)
            .filter(|t| {
                let d = t.strip_prefix('-').unwrap_or(t);
                !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
            })
            .and_then(|t| t.parse::<i64>().ok())
            .ok_or_else(|| {
                let shown: String = String::from_utf8_lossy(raw).chars().take(40).collect();
                ApplyError::Events(format!(
                    "{name}:{line}: `{field}` is \"{shown}\", not an integer number of nanoseconds"
                ))
            })?;
        let (mapped, bounds) = if interval {
            let m = mapper.map_with_interval(value);
            summary.without_interval += u64::from(m.interval.is_none());
            (m.t_ns, Some(m.interval))
        } else {
            (mapper.map(value), None)
        };
        row.clear();
        for (i, f) in record.iter().enumerate() {
            if i == column {
                row.push_field(number.format(mapped).as_bytes());
                row.push_field(f);
                if let Some(b) = bounds {
                    for v in [b.map(|b| b.0), b.map(|b| b.1)] {
                        row.push_field(v.map_or(&b""[..], |v| number.format(v).as_bytes()));
                    }
                }
            } else {
                row.push_field(f);
            }
        }
        writer.write_byte_record(&row).map_err(write_err)?;
        summary.events += 1;
    }
    writer
        .flush()
        .map_err(|e| ApplyError::io("cannot write the output", e))?;
    summary.outside_span = mapper.outside;
    summary.ambiguous = mapper.ambiguous;
    Ok(summary)
}
