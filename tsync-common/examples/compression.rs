//! How large trace files are in each format, measured on real files: the numbers behind the
//! choice of format version 3's encoding (docs/format.md).
//!
//! ```text
//! cargo run --release -p tsync-common --features user --example compression -- \
//!     [--out DIR] FILE...
//! ```
//!
//! With `--out DIR`, each file is also written to DIR as version 2 (`NAME.v2.tsync`) and as
//! versions 3 to 5 at the default level (`NAME.v3.tsync`, …), for `read_trace` and the
//! benchmarks.
//!
//! Each file (any version) is read chunk by chunk and written again as the agent would have
//! written it (one flush per event chunk of the original, so the agent's 0.5 s flushes and their
//! small chunks are kept): as version 2 (raw records), as raw records compressed by zstd chunk
//! by chunk ("zstd only"), and as versions 3 to 5 (columns, then zstd; version 4 stores the
//! time differences as byte planes, version 5 the flags per flow and the TTLs as a column) at
//! several zstd levels. It
//! prints bytes per event on disk, of the whole file and of the event chunks alone, and the
//! time to write and read each (wall clock, so noisy on a shared machine; the criterion
//! benchmark `cargo bench -p tsync-common --features user` measures the speeds properly).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tsync_common::PacketEvent;
use tsync_common::format::{
    ClockSample, Footer, Header, KernelClock, LostCounts, TraceReader, TraceWriter,
};

const LEVELS: [i32; 7] = [-5, -3, -1, 1, 3, 9, 19];
/// Chunk kinds that hold events (raw in versions 1 and 2, packed in 3).
const EVENT_KINDS: [u32; 2] = [2, 8];

/// Everything a file holds, with its flush structure: one group per event chunk.
struct Recording {
    header: Header,
    groups: Vec<Group>,
    footer: Footer,
}

/// One flush of the agent: an event chunk and the clock records and lost counts after it.
#[derive(Default)]
struct Group {
    events: Vec<PacketEvent>,
    samples: Vec<ClockSample>,
    kernel: Vec<KernelClock>,
    lost: LostCounts,
}

fn read(path: &Path) -> Recording {
    let mut r = TraceReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut groups: Vec<Group> = Vec::new();
    let (mut samples, mut kernel) = (0, 0);
    let mut take = |r: &TraceReader<_>, groups: &mut Vec<Group>| {
        if let Some(g) = groups.last_mut() {
            g.samples = r.clock_samples()[samples..].to_vec();
            g.kernel = r.kernel_clock()[kernel..].to_vec();
            g.lost = r.lost().clone();
        }
        samples = r.clock_samples().len();
        kernel = r.kernel_clock().len();
    };
    loop {
        let more = r.next_events().unwrap().map(<[PacketEvent]>::to_vec);
        take(&r, &mut groups);
        match more {
            Some(events) => groups.push(Group {
                events,
                ..Group::default()
            }),
            None => break,
        }
    }
    if let Some(d) = r.damage() {
        eprintln!("{}: {d}", path.display());
    }
    Recording {
        header: r.header().clone(),
        groups,
        footer: r.footer().cloned().unwrap_or_default(),
    }
}

/// The recording as `TraceWriter` writes it in `version` at zstd `level`.
fn write(rec: &Recording, version: u32, level: i32) -> Vec<u8> {
    let mut w = TraceWriter::with_version(Vec::new(), &rec.header, version).unwrap();
    w.set_compression_level(level).unwrap();
    for g in &rec.groups {
        w.write_events(&g.events).unwrap();
        for &s in &g.samples {
            w.write_clock_sample(s).unwrap();
        }
        for &k in &g.kernel {
            w.write_kernel_clock(k).unwrap();
        }
        w.write_lost(&g.lost).unwrap();
        w.flush().unwrap();
    }
    w.finish(&rec.footer).unwrap()
}

/// Bytes of the chunks of the given kinds, headers and padding included.
fn chunk_bytes(file: &[u8], kinds: &[u32]) -> usize {
    let mut at = 16;
    let mut total = 0;
    while at + 16 <= file.len() {
        let kind = u32::from_le_bytes(file[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(file[at + 4..at + 8].try_into().unwrap()) as usize;
        let size = 16 + len + (8 - len % 8) % 8;
        if kinds.contains(&kind) {
            total += size;
        }
        at += size;
    }
    total
}

/// Seconds per run of `f`, the fastest of a few runs.
fn time(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn read_events(file: &[u8]) -> usize {
    let mut r = TraceReader::new(Cursor::new(file)).unwrap();
    let mut n = 0;
    while let Some(chunk) = r.next_events().unwrap() {
        n += chunk.len();
    }
    n
}

fn main() {
    let mut paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let out = match paths.iter().position(|p| p.as_os_str() == "--out") {
        Some(at) if at + 1 < paths.len() => {
            let dir = paths.remove(at + 1);
            paths.remove(at);
            Some(dir)
        }
        _ => None,
    };
    if paths.is_empty() {
        eprintln!("usage: compression [--out DIR] FILE...");
        std::process::exit(2);
    }
    println!(
        "| file | events | per chunk | encoding | level | file B/event | event chunks B/event | \
         samples B/sample | write ns/event | read M events/s |"
    );
    println!("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for path in &paths {
        let rec = read(path);
        let events: usize = rec.groups.iter().map(|g| g.events.len()).sum();
        let samples: usize = rec
            .groups
            .iter()
            .map(|g| g.samples.len())
            .sum::<usize>()
            .max(1);
        let name = path.display();
        let per_chunk = events as f64 / rec.groups.len().max(1) as f64;
        let row = |encoding: &str,
                   level: String,
                   file: usize,
                   ev: usize,
                   sa: usize,
                   w: f64,
                   r: f64| {
            println!(
                "| {name} | {events} | {per_chunk:.0} | {encoding} | {level} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} |",
                file as f64 / events as f64,
                ev as f64 / events as f64,
                sa as f64 / samples as f64,
                w * 1e9 / events as f64,
                events as f64 / r * 1e-6,
            );
        };

        let v2 = write(&rec, 2, 0);
        if let Some(dir) = &out {
            let stem = path.file_stem().unwrap().to_string_lossy();
            let level = tsync_common::format::DEFAULT_COMPRESSION_LEVEL;
            std::fs::write(dir.join(format!("{stem}.v2.tsync")), &v2).unwrap();
            std::fs::write(dir.join(format!("{stem}.v3.tsync")), write(&rec, 3, level)).unwrap();
            std::fs::write(dir.join(format!("{stem}.v4.tsync")), write(&rec, 4, level)).unwrap();
            std::fs::write(dir.join(format!("{stem}.v5.tsync")), write(&rec, 5, level)).unwrap();
        }
        let w2 = time(|| drop(write(&rec, 2, 0)));
        let r2 = time(|| assert_eq!(read_events(&v2), events));
        row(
            "v2 raw",
            "–".into(),
            v2.len(),
            chunk_bytes(&v2, &EVENT_KINDS),
            chunk_bytes(&v2, &[6]),
            w2,
            r2,
        );

        for level in LEVELS {
            // zstd of the raw records, chunk by chunk (the rest of the file as in version 2).
            let mut compressor = zstd::bulk::Compressor::new(level).unwrap();
            let mut packed = 0;
            let w = time(|| {
                packed = rec
                    .groups
                    .iter()
                    .map(|g| {
                        let len = compressor
                            .compress(bytemuck::cast_slice(&g.events))
                            .unwrap()
                            .len();
                        16 + len + (8 - len % 8) % 8
                    })
                    .sum();
            });
            let raw_events = chunk_bytes(&v2, &EVENT_KINDS);
            row(
                "zstd only",
                level.to_string(),
                v2.len() - raw_events + packed,
                packed,
                chunk_bytes(&v2, &[6]),
                w2 + w,
                f64::NAN,
            );
        }
        for (version, name) in [
            (3, "v3 columns + zstd"),
            (4, "v4 time planes + zstd"),
            (5, "v5 flags per flow, ttl column + zstd"),
        ] {
            for level in LEVELS {
                let file = write(&rec, version, level);
                let w = time(|| drop(write(&rec, version, level)));
                let r = time(|| assert_eq!(read_events(&file), events));
                row(
                    name,
                    level.to_string(),
                    file.len(),
                    chunk_bytes(&file, &EVENT_KINDS),
                    chunk_bytes(&file, &[9]),
                    w,
                    r,
                );
            }
        }
    }
}
