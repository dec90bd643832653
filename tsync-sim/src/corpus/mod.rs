//! The fuzz targets' seed inputs (`cargo xtask fuzz` writes them into each target's corpus):
//! small simulated traces, the same events rewritten with other clock samples and lost-event
//! counters, cut, as chunk lists and as format version 1 wrote them; the LTTV text cases and the
//! simulated messages as text; for `sync_pipeline`, pairs of them in its input layout; and for
//! `ctf_reader`, LTTng traces ([`ctf`], with the `check` feature).
//!
//! The layouts here follow `fuzz/src/lib.rs` (`SyncInput`, `build_trace`); change both together.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use tsync_common::format::{
    ClockSample, Footer, KernelClock, LostCounts, TraceReader, TraceWriter,
};

use crate::{Format, SimConfig, simulate};

#[cfg(feature = "check")]
mod ctf;
pub mod report;

/// The fuzz targets (`fuzz/fuzz_targets/NAME.rs`).
pub const TARGETS: &[&str] = &[
    "trace_reader",
    "text_parser",
    "sync_pipeline",
    "ctf_reader",
    "span_reader",
];
/// The largest seed: bigger files are cut (a cut trace file is a valid input too).
const MAX_SEED_BYTES: usize = 32 << 10;
/// Options of `sync_pipeline`'s input (first byte; `fuzz/src/lib.rs`).
const OPT_LINREG: u8 = 1;
const OPT_ONE_FILE: u8 = 2;
const OPT_REFERENCE: u8 = 4;
const OPT_REPAIR: u8 = 16;

/// One seed: its name (without the `seed-` prefix) and its bytes.
pub type Seed = (String, Vec<u8>);

/// Seed inputs per target.
pub struct Seeds {
    /// For `trace_reader`: trace files and chunk lists.
    pub trace_reader: Vec<Seed>,
    /// For `text_parser`: text message files.
    pub text_parser: Vec<Seed>,
    /// For `sync_pipeline`: pairs of inputs with options.
    pub sync_pipeline: Vec<Seed>,
    /// For `ctf_reader`: CTF traces in its input layout (with the `check` feature, empty without).
    pub ctf_reader: Vec<Seed>,
    /// For `span_reader`: OTLP/JSON span files as the Collector's file exporter writes them.
    pub span_reader: Vec<Seed>,
}

impl Seeds {
    /// The seeds of target `name`, None for a target without seeds.
    pub fn of(&self, name: &str) -> Option<&[Seed]> {
        match name {
            "trace_reader" => Some(&self.trace_reader),
            "text_parser" => Some(&self.text_parser),
            "sync_pipeline" => Some(&self.sync_pipeline),
            "ctf_reader" if cfg!(feature = "check") => Some(&self.ctf_reader),
            "span_reader" => Some(&self.span_reader),
            _ => None,
        }
    }

    /// Makes every seed; `root` is the workspace (for the LTTV text cases). The simulation
    /// writes into a scratch directory, removed after.
    pub fn make(root: &Path) -> Result<Seeds> {
        let scratch = tempfile::Builder::new()
            .prefix("tsync-fuzz-seeds-")
            .tempdir()
            .context("cannot create a scratch directory for the fuzz seeds")?;
        Seeds::make_in(root, scratch.path())
    }

    fn make_in(root: &Path, scratch: &Path) -> Result<Seeds> {
        // Simulated traces: small (3 nodes, a quarter of a second: a few KiB each) but real,
        // with messages that match across the files.
        let config = SimConfig {
            nodes: 3,
            duration: 0.25,
            rate: 40.0,
            seed: 7,
            format: Format::Both,
            ..SimConfig::default()
        };
        let truth = simulate(&config, scratch)?;
        let mut traces = Vec::new();
        for node in &truth.nodes {
            let bytes = std::fs::read(&node.file)
                .with_context(|| format!("cannot read {}", node.file.display()))?;
            traces.push(cut(bytes));
        }
        // The simulator writes no lost counts and no TSC: the same events again, with both and
        // other clock samples and kernel states, as the agent writes them.
        let rich: Vec<Vec<u8>> = truth
            .nodes
            .iter()
            .map(|n| with_samples_and_losses(&n.file, tsync_common::format::VERSION).map(cut))
            .collect::<Result<_>>()?;
        let rich_v2: Vec<Vec<u8>> = truth
            .nodes
            .iter()
            .map(|n| with_samples_and_losses(&n.file, 2).map(cut))
            .collect::<Result<_>>()?;
        let mut texts = Vec::new();
        let lttv = root.join("tsync-analyze/tests/data/lttv");
        let mut names: Vec<PathBuf> = std::fs::read_dir(&lttv)
            .with_context(|| format!("cannot list {}", lttv.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "txt"))
            .collect();
        names.sort();
        for path in &names {
            let name = path.file_stem().unwrap_or_default().to_string_lossy();
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            texts.push((format!("lttv-{name}"), cut(bytes)));
        }
        // The simulated messages in the text format, nanoseconds exact (the parser's fast path).
        let text = truth
            .text
            .as_ref()
            .context("the simulation wrote no text file")?;
        let messages =
            cut(std::fs::read(text).with_context(|| format!("cannot read {}", text.display()))?);
        texts.push(("simulated-messages".into(), messages.clone()));

        let mut trace_reader = Vec::new();
        for (k, t) in traces.iter().enumerate() {
            trace_reader.push((format!("sim-node-{k}"), t.clone()));
        }
        for (k, t) in rich.iter().enumerate() {
            trace_reader.push((format!("sim-node-{k}-samples-lost"), t.clone()));
        }
        // Cut short inside a chunk, and without its end chunk.
        let r0 = &rich[0];
        trace_reader.push(("cut-in-chunk".into(), r0[..r0.len() * 2 / 3].to_vec()));
        trace_reader.push(("header-only".into(), header_only(r0)));
        // As chunk lists (lengths and checksums filled in by the targets).
        for (k, t) in rich.iter().enumerate() {
            trace_reader.push((format!("chunks-sim-node-{k}"), chunk_list(t)));
        }
        trace_reader.extend(older_and_compressed_seeds(&rich, &rich_v2)?);
        // A version 1 file (32-byte samples without bracket), as a file and as a chunk list.
        let old = version_1(&rich_v2[1]);
        trace_reader.push(("version-1-sim-node-1".into(), old.clone()));
        trace_reader.push(("chunks-version-1-sim-node-1".into(), chunk_list(&old)));

        let mut sync_pipeline = vec![
            ("traces-0-1".into(), encode(0, &traces[0], &traces[1])),
            (
                "traces-1-2-reference".into(),
                encode(OPT_REFERENCE, &traces[1], &traces[2]),
            ),
            (
                "samples-0-2-linreg".into(),
                encode(OPT_LINREG | OPT_REPAIR, &rich[0], &rich[2]),
            ),
            (
                "chunks-0-1".into(),
                encode(0, &chunk_list(&rich[0]), &chunk_list(&rich[1])),
            ),
            (
                "version-1-and-2".into(),
                encode(0, &version_1(&rich[0]), &rich[1]),
            ),
            ("trace-alone".into(), encode(OPT_ONE_FILE, &traces[0], &[])),
            ("text-and-trace".into(), encode(0, &messages, &traces[2])),
            (
                "text-alone-linreg".into(),
                encode(OPT_ONE_FILE | OPT_LINREG, &messages, &[]),
            ),
        ];
        for (name, bytes) in &texts {
            sync_pipeline.push((format!("text-{name}"), encode(OPT_ONE_FILE, bytes, &[])));
        }
        if let [(_, a), (_, b), ..] = &texts[..] {
            sync_pipeline.push(("two-texts".into(), encode(0, a, b)));
        }
        #[cfg(feature = "check")]
        let ctf_reader = ctf::seeds(root, scratch)?;
        #[cfg(not(feature = "check"))]
        let ctf_reader = Vec::new();
        Ok(Seeds {
            trace_reader,
            text_parser: texts,
            sync_pipeline,
            ctf_reader,
            span_reader: span_files(),
        })
    }
}

/// OTLP/JSON span files: a CLIENT span on one node and its SERVER child on another (in either
/// order, with a message event and a link), the usual shape and one with escapes, and a file cut
/// short.
fn span_files() -> Vec<Seed> {
    let resource = |host: &str| {
        format!(
            r#""resource":{{"attributes":[{{"key":"host.name","value":{{"stringValue":"{host}"}}}},{{"key":"process.pid","value":{{"intValue":"41"}}}}]}}"#
        )
    };
    let line = |host: &str, spans: &str| {
        format!(
            r#"{{"resourceSpans":[{{{},"scopeSpans":[{{"scope":{{"name":"s","version":"1"}},"spans":[{spans}]}}],"schemaUrl":"u"}}]}}"#,
            resource(host)
        )
    };
    let client = r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b173","parentSpanId":"","flags":256,"name":"GET","kind":3,"startTimeUnixNano":"1700000000000000100","endTimeUnixNano":"1700000000000900100","attributes":[{"key":"http.url","value":{"stringValue":"http://b:1/x?a=1\u0026b=\"2\""}}],"events":[{"name":"message","timeUnixNano":"1700000000000000200","attributes":[{"key":"message.type","value":{"stringValue":"SENT"}},{"key":"message.id","value":{"intValue":"1"}}]}],"status":{"code":2}}"#;
    let server = r#"{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173","flags":768,"name":"GET /x","kind":2,"startTimeUnixNano":"1700000000000300100","endTimeUnixNano":1700000000000600100,"events":[{"name":"message","timeUnixNano":"1700000000000300200","attributes":[{"key":"message.type","value":{"stringValue":"RECEIVED"}},{"key":"message.id","value":{"intValue":"1"}}]}],"links":[{"traceId":"5b8efff798038103d269b633813fc60d","spanId":"0000000000000009"}],"status":{}}"#;
    let a = line("a", client);
    let b = line("b", server);
    vec![
        (
            "spans-client-first".into(),
            format!("{a}\n{b}\n").into_bytes(),
        ),
        (
            "spans-server-first".into(),
            format!("{b}\n\n{a}\n").into_bytes(),
        ),
        (
            "spans-cut-short".into(),
            format!("{a}\n{}", &b[..b.len() / 2]).into_bytes(),
        ),
    ]
}

/// `sync_pipeline`'s input layout (`fuzz/src/lib.rs`, `SyncInput`): options, length of file A,
/// file A, file B.
fn encode(options: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + a.len() + b.len());
    out.push(options);
    out.extend_from_slice(&(a.len() as u32).to_le_bytes());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

/// A trace file as the chunk list the targets rebuild it from (`build_trace` in
/// `fuzz/src/lib.rs`): `CHUNKS` (`CHUNKSv1`, `CHUNKSv2`, `CHUNKSv3` for a file of that
/// version), then per chunk the separator,
/// its kind as one byte and its payload. Stops at the first chunk cut short.
fn chunk_list(trace: &[u8]) -> Vec<u8> {
    let mut out = match trace
        .get(8..12)
        .map(|v| u32::from_le_bytes(v.try_into().expect("4")))
    {
        Some(1) => b"CHUNKSv1".to_vec(),
        Some(2) => b"CHUNKSv2".to_vec(),
        Some(3) => b"CHUNKSv3".to_vec(),
        _ => b"CHUNKS".to_vec(),
    };
    let mut offset = 16;
    while let Some(head) = trace.get(offset..offset + 16) {
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (kind, len) = (word(0), word(4) as usize);
        let Some(payload) = trace.get(offset + 16..offset + 16 + len) else {
            break;
        };
        out.extend_from_slice(b"\xc4\xc4\xc4\xc4");
        out.push(kind as u8);
        match packed_columns(kind, head, payload) {
            Some(columns) => out.extend(columns),
            None => out.extend_from_slice(payload),
        }
        offset += 16 + len.div_ceil(8) * 8;
    }
    out
}

/// A compressed chunk of format version 3 as chunk lists hold it: its record count, then its
/// columns uncompressed (`tsync_fuzz::build_trace` compresses them again). None for other kinds.
fn packed_columns(kind: u32, head: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
    if kind != 8 && kind != 9 {
        return None;
    }
    let columns = zstd::bulk::decompress(payload, tsync_common::format::MAX_CHUNK_PAYLOAD as usize)
        .unwrap_or_default();
    let mut out = head[12..16].to_vec();
    out.extend(columns);
    Some(out)
}

/// At most [`MAX_SEED_BYTES`] of a seed.
fn cut(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.truncate(MAX_SEED_BYTES);
    bytes
}

/// The preamble and header chunk of a trace file (its length read from the chunk header).
fn header_only(trace: &[u8]) -> Vec<u8> {
    let len = u32::from_le_bytes(trace[20..24].try_into().expect("4 bytes")) as usize;
    let end = 32 + len.div_ceil(8) * 8;
    trace[..end.min(trace.len())].to_vec()
}

/// The trace at `path` rewritten with bracketed clock samples (start, middle, end), kernel clock
/// states and lost-event counters, as the agent writes them.
fn with_samples_and_losses(path: &Path, version: u32) -> Result<Vec<u8>> {
    let mut reader = TraceReader::open(path)?;
    let header = reader.header().clone();
    let mut events = Vec::new();
    while let Some(chunk) = reader.next_events()? {
        events.extend_from_slice(chunk);
    }
    let sample = |mono: u64| ClockSample {
        monotonic_ns: mono,
        monotonic_raw_ns: mono,
        realtime_ns: header
            .start_realtime_ns
            .saturating_add(mono as i64 - header.start_monotonic_ns as i64),
        tsc: mono.wrapping_mul(3),
        monotonic_after_ns: mono.saturating_add(47),
    };
    let kernel = |mono: u64, freq: i64| KernelClock {
        monotonic_ns: mono,
        freq,
        offset: 0,
        tick: 10_000,
        status: 0x2001, // STA_PLL | STA_NANO
        maxerror: 16_000,
        state: 0,
    };
    let mut w = TraceWriter::with_version(Vec::new(), &header, version)?;
    w.write_clock_sample(sample(header.start_monotonic_ns))?;
    w.write_kernel_clock(kernel(header.start_monotonic_ns, 0))?;
    let (first, second) = events.split_at(events.len() / 2);
    w.write_events(first)?;
    w.flush()?;
    let lost = LostCounts {
        send: 2,
        recv: 1,
        per_cpu: vec![[1, 1], [1, 0]],
        // Version 2 files cannot hold disk losses.
        disk: if version >= 3 { 3 } else { 0 },
    };
    w.write_lost(&lost)?;
    if let Some(e) = second.first() {
        w.write_clock_sample(sample(e.ts_ns))?;
        w.write_kernel_clock(kernel(e.ts_ns, -65_536 * 12))?;
    }
    w.write_events(second)?;
    let end = events.last().map_or(header.start_monotonic_ns, |e| e.ts_ns);
    w.write_clock_sample(sample(end))?;
    let footer = Footer {
        events: events.len() as u64,
        send_events: events.iter().filter(|e| e.direction == 0).count() as u64,
        recv_events: events.iter().filter(|e| e.direction == 1).count() as u64,
        lost,
        end_realtime_ns: sample(end).realtime_ns,
        end_monotonic_ns: end,
    };
    Ok(w.finish(&footer)?)
}

/// Seeds for what format versions 3 to 5 added, and for version 2 files, which the reader still
/// reads (the other seeds are files as this build writes them): version 2 files and their chunk
/// lists; a compressed file cut inside a compressed chunk; events whose rare columns are used
/// (UDP data, raw and hashed, CPUs above 255, header lengths above 15, many flows, tunnels'
/// flags, TTLs that change within a flow), written at a strong zstd level (other zstd block
/// types), as a file and as a chunk list, in the current version, in version 4 (flags and TTL
/// in the extras) and in version 3 (whose time differences are varints).
fn older_and_compressed_seeds(
    rich: &[Vec<u8>],
    rich_v2: &[Vec<u8>],
) -> Result<Vec<(String, Vec<u8>)>> {
    let mut seeds = Vec::new();
    for (k, t) in rich_v2.iter().enumerate() {
        seeds.push((format!("version-2-sim-node-{k}"), t.clone()));
        seeds.push((format!("chunks-version-2-sim-node-{k}"), chunk_list(t)));
    }
    let first = &rich[0];
    let packed = (16..first.len().saturating_sub(16))
        .step_by(8)
        .find(|&at| first[at..at + 4] == 8u32.to_le_bytes())
        .unwrap_or(first.len() / 2);
    seeds.push((
        "cut-in-compressed-chunk".into(),
        first[..packed + 40].to_vec(),
    ));
    let events: Vec<tsync_common::PacketEvent> = (0..600u32)
        .map(|i| tsync_common::PacketEvent {
            ts_ns: 1_000_000_000 + u64::from(i) * 1_000 + u64::from(i % 7),
            ifindex: 2,
            cpu: (i % 300) as u16,
            direction: (i % 2) as u8,
            kind: match i % 6 {
                0 => tsync_common::kind::UDP4,
                3 => tsync_common::kind::UDP6_HASHED,
                _ => tsync_common::kind::TCP6,
            },
            saddr: [(i % 40) as u8; 16],
            daddr: [9; 16],
            tot_len: 100 + (i % 50) as u16,
            source: 1000 + (i % 40) as u16,
            dest: 53,
            seq: i.wrapping_mul(2_654_435_761),
            ack_seq: i * 10,
            ihl: (i % 20) as u8,
            doff: 5,
            tcp_flags: (i % 64) as u8,
            udp_data: if i % 6 == 3 {
                tsync_common::udp_hashed_data(&i.to_le_bytes())
            } else {
                [i as u8; 8]
            },
            udp_len: (i % 3) as u16,
            flags: if i % 40 < 20 {
                0
            } else {
                tsync_common::flag::ENCAPSULATED
            },
            ttl: 64 - (i % 7 / 5) as u8,
            ..Default::default()
        })
        .collect();
    for (version, suffix) in [
        (tsync_common::format::VERSION, ""),
        (4, "-version-4"),
        (3, "-version-3"),
    ] {
        let header = tsync_common::format::Header::default();
        let mut w = TraceWriter::with_version(Vec::new(), &header, version)?;
        w.set_compression_level(19)?;
        w.write_events(&events[..300])?;
        w.flush()?;
        w.write_events(&events[300..])?;
        let rare = w.finish(&Footer::default())?;
        seeds.push((format!("chunks-rare-columns{suffix}"), chunk_list(&rare)));
        seeds.push((format!("rare-columns{suffix}"), rare));
    }
    Ok(seeds)
}

/// A version 2 trace file rewritten as format version 1 wrote it: version 1 in the preamble, clock
/// samples as 32-byte records in kind-3 chunks (without the second monotonic reading), no
/// kernel clock states; the other chunks as they are. Stops at the first chunk cut short.
fn version_1(trace: &[u8]) -> Vec<u8> {
    let mut out = trace[..16.min(trace.len())].to_vec();
    if out.len() == 16 {
        out[8..12].copy_from_slice(&1u32.to_le_bytes());
    }
    let mut offset = 16;
    while let Some(head) = trace.get(offset..offset + 16) {
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let (kind, len, count) = (word(0), word(4) as usize, word(12));
        let Some(payload) = trace.get(offset + 16..offset + 16 + len) else {
            break;
        };
        offset += 16 + len.div_ceil(8) * 8;
        let (kind, payload) = match kind {
            6 => (
                3,
                payload
                    .chunks_exact(40)
                    .flat_map(|record| &record[..32])
                    .copied()
                    .collect(),
            ),
            7 => continue,
            _ => (kind, payload.to_vec()),
        };
        for w in [kind, payload.len() as u32, crc32fast::hash(&payload), count] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&payload);
        out.resize(out.len() + (8 - payload.len() % 8) % 8, 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_lists_hold_every_chunk() {
        let header = tsync_common::format::Header {
            node: "n".into(),
            ..Default::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
        w.write_event(&tsync_common::PacketEvent::default())
            .unwrap();
        let file = w.finish(&Footer::default()).unwrap();
        let list = chunk_list(&file);
        assert!(list.starts_with(b"CHUNKS\xc4\xc4\xc4\xc4\x01"));
        let parts = list.windows(4).filter(|w| w == b"\xc4\xc4\xc4\xc4").count();
        assert_eq!(parts, 3, "header, events, end");
    }

    #[test]
    fn version_1_rewrites_samples_and_drops_kernel_states() {
        let header = tsync_common::format::Header {
            node: "n".into(),
            ..Default::default()
        };
        let mut w = TraceWriter::with_version(Vec::new(), &header, 2).unwrap();
        w.write_event(&tsync_common::PacketEvent::default())
            .unwrap();
        let sample = ClockSample {
            monotonic_ns: 10,
            monotonic_raw_ns: 7,
            realtime_ns: 5,
            tsc: 3,
            monotonic_after_ns: 12,
        };
        w.write_clock_sample(sample).unwrap();
        w.write_kernel_clock(KernelClock::default()).unwrap();
        let file = w.finish(&Footer::default()).unwrap();
        let old = version_1(&file);
        let mut r = TraceReader::new(old.as_slice()).unwrap();
        while r.next_events().unwrap().is_some() {}
        assert_eq!(r.version(), 1);
        assert!(r.damage().is_none(), "{:?}", r.damage());
        assert!(r.kernel_clock().is_empty());
        assert_eq!(
            r.clock_samples(),
            &[ClockSample {
                monotonic_after_ns: 10,
                ..sample
            }]
        );
        assert!(chunk_list(&old).starts_with(b"CHUNKSv1\xc4\xc4\xc4\xc4\x01"));
    }

    #[test]
    fn sync_seeds_follow_the_fuzz_targets_layout() {
        let v = encode(OPT_LINREG | OPT_ONE_FILE, b"abc", b"de");
        assert_eq!(v, [3, 3, 0, 0, 0, b'a', b'b', b'c', b'd', b'e']);
    }
}
