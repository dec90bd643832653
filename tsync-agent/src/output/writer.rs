//! The writer thread: the only code that touches the trace file. It may block for seconds in a
//! `write()` (a saturated disk, dirty-page throttling, a network file system) while the drain
//! goes on filling the queue.
use std::{io::Write, path::Path};

use anyhow::Result;
use tsync_common::format::{FormatError, TraceWriter};

use super::{chunk, queue::Queue};
use crate::sampler::ClockRecord;

/// Describes a write error, naming a full disk when that is the cause.
pub fn write_error(path: &Path, err: FormatError) -> anyhow::Error {
    let full = matches!(&err, FormatError::Io { error, .. }
        if error.raw_os_error() == Some(libc::ENOSPC) || error.raw_os_error() == Some(libc::EDQUOT));
    let err = anyhow::Error::new(err);
    if full {
        err.context(format!(
            "the disk holding {} is full: free space or write elsewhere (the file is readable up to its last complete chunk)",
            path.display()
        ))
    } else {
        // The format error names the file and the operation already.
        err
    }
}

/// Writes what the queue brings until the footer (or the drain side gives up), then tells the
/// queue it stopped, with the error if one stopped it.
pub fn run<W: Write>(writer: TraceWriter<W>, queue: &Queue, path: &Path) {
    let result = serve(writer, queue, path);
    queue.stopped(result.err());
}

fn serve<W: Write>(mut writer: TraceWriter<W>, queue: &Queue, path: &Path) -> Result<()> {
    let error = |e| write_error(path, e);
    loop {
        let batch = queue.next_batch();
        for bytes in batch.chunks {
            queue
                .timed(|| writer.write_events(&chunk::events(&bytes)))
                .map_err(error)?;
            queue.written(bytes);
        }
        if batch.flush || batch.footer.is_some() || batch.closed {
            queue
                .timed(|| -> Result<(), FormatError> {
                    for table in &batch.addresses {
                        writer.write_addresses(table)?;
                    }
                    for record in batch.clock {
                        match record {
                            ClockRecord::Sample(s) => writer.write_clock_sample(s),
                            ClockRecord::Kernel(k) => writer.write_kernel_clock(k),
                        }?;
                    }
                    if let Some(lost) = &batch.lost {
                        writer.write_lost(lost)?;
                    }
                    writer.flush()
                })
                .map_err(error)?;
        }
        if let Some(footer) = batch.footer {
            queue.timed(|| writer.finish(&footer)).map_err(error)?;
            return Ok(());
        }
        if batch.closed {
            return Ok(());
        }
    }
}
