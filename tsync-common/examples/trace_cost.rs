//! Decodes or encodes the events of a trace file `REPEAT` times in memory: the work whose
//! instructions `valgrind --tool=callgrind` counts per event (two runs with different `REPEAT`s;
//! the difference is the cost of the repetitions alone, without start-up and file reading).
//!
//! ```text
//! cargo run --release -p tsync-common --features user --example trace_cost -- \
//!     decode FILE REPEAT
//! cargo run --release -p tsync-common --features user --example trace_cost -- \
//!     encode FILE REPEAT VERSION [LEVEL]
//! cargo run --release -p tsync-common --features user --example trace_cost -- \
//!     rewrite FILE OUT VERSION
//! ```
//!
//! `decode` reads the file (any version) from memory start to end. `encode` reads it once, then
//! writes its events again with `TraceWriter` of `VERSION` (2 or 3; zstd `LEVEL`, default the
//! writer's) to memory, one flush per event chunk of the original, as the agent writes them.
//! `rewrite` writes that once to the file `OUT` (to measure the decoding of another version).

use std::io::Cursor;

use tsync_common::PacketEvent;
use tsync_common::format::{Footer, Header, TraceReader, TraceWriter};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: trace_cost decode FILE REPEAT | encode FILE REPEAT VERSION [LEVEL] \
                 | rewrite FILE OUT VERSION";
    let (Some(mode), Some(path), Some(third)) = (args.first(), args.get(1), args.get(2)) else {
        panic!("{usage}");
    };
    let file = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let count = || -> usize { third.parse().expect(usage) };
    let events = match mode.as_str() {
        "decode" => (0..count()).map(|_| decode(&file)).sum::<usize>(),
        "encode" => {
            let version: u32 = args.get(3).expect(usage).parse().expect(usage);
            let level: Option<i32> = args.get(4).map(|l| l.parse().expect(usage));
            let (header, chunks) = chunks(&file);
            (0..count())
                .map(|_| encode(&header, &chunks, version, level))
                .sum()
        }
        "rewrite" => {
            let version: u32 = args.get(3).expect(usage).parse().expect(usage);
            let (header, chunks) = chunks(&file);
            let out = TraceWriter::with_version(Vec::new(), &header, version).expect("a version");
            let bytes = write(out, &chunks);
            std::fs::write(third, bytes).expect("OUT: writable");
            chunks.iter().map(Vec::len).sum()
        }
        _ => panic!("{usage}"),
    };
    println!("{events} events");
}

fn decode(file: &[u8]) -> usize {
    let mut r = TraceReader::new(Cursor::new(file)).expect("a trace file");
    let mut n = 0;
    while let Some(chunk) = r.next_events().expect("readable") {
        n += chunk.len();
    }
    n
}

fn chunks(file: &[u8]) -> (Header, Vec<Vec<PacketEvent>>) {
    let mut r = TraceReader::new(Cursor::new(file)).expect("a trace file");
    let mut chunks = Vec::new();
    while let Some(chunk) = r.next_events().expect("readable") {
        chunks.push(chunk.to_vec());
    }
    (r.header().clone(), chunks)
}

fn encode(header: &Header, chunks: &[Vec<PacketEvent>], version: u32, level: Option<i32>) -> usize {
    let mut w = TraceWriter::with_version(Vec::new(), header, version).expect("a version");
    if let Some(level) = level {
        w.set_compression_level(level).expect("a zstd level");
    }
    let n = chunks.iter().map(Vec::len).sum();
    write(w, chunks);
    n
}

/// Writes `chunks` with one flush each, and the end chunk.
fn write(mut w: TraceWriter<Vec<u8>>, chunks: &[Vec<PacketEvent>]) -> Vec<u8> {
    for chunk in chunks {
        w.write_events(chunk).expect("in memory");
        w.flush().expect("in memory");
    }
    w.finish(&Footer::default()).expect("in memory")
}
