//! Arbitrary bytes as a trace file through the streaming reader: preamble, header, every event
//! chunk (raw, or version 3's compressed columns), clock samples (versions 1 to 3), kernel clock
//! states, lost counts, footer and damage. Errors are fine; a panic, an abort, an allocation past
//! the memory limit or a hang is a bug.
//!
//! Each input is read as it is and, when it starts like a trace file, once more with its chunk
//! checksums made right, so that mutated payloads get past the checksum and are decoded. An input
//! that starts with `CHUNKS` is a list of chunks, read as the trace file it describes
//! (`tsync_fuzz::build_trace`: lengths, checksums and counts filled in).
//!
//! Also checked: what the reader reports does not depend on how the input hands out its bytes
//! (the file, or a pipe giving a few bytes per read), and the damage report accounts for every
//! byte after the last good chunk.
#![no_main]

use std::io::Read;

use libfuzzer_sys::fuzz_target;
use tsync_common::PacketEvent;
use tsync_common::format::{
    ClockSample, Damage, Footer, Header, KernelClock, LostCounts, TraceReader,
};

/// Everything a reader reports about one input (compared through `Debug`: the header holds
/// floats, which may be NaN).
#[derive(Debug)]
#[allow(dead_code, reason = "read through Debug")]
struct Outcome {
    header: Header,
    /// Events per chunk, in file order.
    chunks: Vec<Vec<PacketEvent>>,
    version: u32,
    bracketed: bool,
    samples: Vec<ClockSample>,
    kernel_clock: Vec<KernelClock>,
    lost: LostCounts,
    lost_total: u64,
    footer: Option<Footer>,
    damage: Option<Damage>,
    /// The error `next_events` returned, if any (there is no I/O error on these inputs).
    error: Option<String>,
}

fn read(input: impl Read) -> Result<Outcome, String> {
    let mut reader = TraceReader::new(input).map_err(|e| e.to_string())?;
    let header = reader.header().clone();
    let mut chunks = Vec::new();
    let mut error = None;
    loop {
        match reader.next_events() {
            Ok(Some(events)) => {
                let events = events.to_vec();
                assert_eq!(reader.current_events(), &events[..]);
                chunks.push(events);
            }
            Ok(None) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    if error.is_none() {
        // The end stays the end.
        assert!(reader.current_events().is_empty());
        assert!(matches!(reader.next_events(), Ok(None)));
    }
    if let Some(d) = reader.damage() {
        let _ = d.to_string();
    }
    Ok(Outcome {
        header,
        chunks,
        version: reader.version(),
        bracketed: reader.samples_bracketed(),
        samples: reader.clock_samples().to_vec(),
        kernel_clock: reader.kernel_clock().to_vec(),
        lost: reader.lost().clone(),
        lost_total: reader.lost().total(),
        footer: reader.footer().cloned(),
        damage: reader.damage().cloned(),
        error,
    })
}

/// A reader that hands out at most `step` bytes per call, like a pipe or a slow disk.
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.step).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    // A chunk list (`tsync_fuzz::build_trace`) stands for the trace file it describes.
    if let Some(built) = tsync_fuzz::build_trace(data) {
        check(&built);
        return;
    }
    check(data);
    // The same file with its checksums made right: what lies behind them gets decoded too.
    if let Some(repaired) = tsync_fuzz::repair_checksums(data) {
        check(&repaired);
    }
});

fn check(data: &[u8]) {
    let whole = read(data);
    if let Ok(outcome) = &whole {
        if !outcome.bracketed {
            // Version 1 samples come back with the second monotonic reading equal to the first.
            assert_eq!(outcome.version, 1);
            assert!(outcome.samples.iter().all(|s| s.bracket_ns() == 0));
            assert!(outcome.kernel_clock.is_empty());
        }
        let record = std::mem::size_of::<PacketEvent>();
        if outcome.version < 3 {
            let events: usize = outcome.chunks.iter().map(Vec::len).sum();
            assert!(events * record <= data.len());
        } else {
            // Compressed: memory stays within one chunk's limit, whatever the chunk claims.
            let limit = tsync_common::format::MAX_CHUNK_PAYLOAD as usize;
            assert!(outcome.chunks.iter().all(|c| c.len() * record <= limit));
        }
        if let Some(d) = &outcome.damage {
            assert_eq!(
                d.offset + d.bytes_discarded,
                data.len() as u64,
                "the damage report must account for every byte after the last good chunk: {d:?}"
            );
        }
        if outcome.footer.is_none() {
            assert!(
                outcome.damage.is_some(),
                "a file without end chunk is reported"
            );
        }
    }
    let step = 1 + data.len() % 13;
    let trickled = read(Trickle { data, step });
    assert_eq!(
        format!("{whole:?}"),
        format!("{trickled:?}"),
        "the result depends on the read size ({step})"
    );
}
