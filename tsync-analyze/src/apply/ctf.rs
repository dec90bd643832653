//! LTTng's CTF 1.8 traces: the map is written into the trace's clock class, so that every CTF
//! reader (babeltrace2, Trace Compass) shows corrected times without a byte of event data
//! changing.
//!
//! **How.** A CTF reader shows an event at `offset_s·10⁹ + (offset + value)·10⁹/freq` ns after
//! the epoch, where `value` is the clock counter the event carries. LTTng's `monotonic` clock
//! counts CLOCK_MONOTONIC nanoseconds (`freq = 1000000000`) and its offset is the node's
//! realtime − monotonic at session creation. A line `t_ref = drift·value + offset_ns` of the
//! node's map, made absolute with the reference's realtime − monotonic `E` (from its clock
//! samples), becomes `freq = round(10⁹/drift)` and the offsets that make the line exact at the
//! middle of the trace's span. Everything else — stream files, packet headers, the index — is
//! copied as it is; the metadata (packetized, magic 0x75D11D57, or plain text) is rewritten with
//! its packet headers kept consistent (same UUID and byte order, new content and packet sizes).
//!
//! **What integer `freq` costs.** The rate `10⁹/freq` can only take steps of about 10⁻⁹ near
//! 1, so the written rate is off by at most half of that: 0.5 ns per second away from the
//! middle of the trace's span (≤ 15 ns at the ends of a one-minute trace, ≤ 0.9 µs for an hour).
//! The readers add their own truncation of the offset and of each value to whole ns (≤ 2 ns).
//! The reference's own trace (identity map) keeps `freq = 10⁹` and is exact.
//!
//! **A piecewise map** cannot be one clock class: CTF 1.8 maps a stream's counter through one
//! line. Rewriting every event timestamp would need a decoder of the whole TSDL type system (to
//! find each event's end) and could overflow LTTng's compact 27/32-bit timestamps; this module
//! does not do that. Instead, for a map with knots inside the trace's span it writes the single
//! line closest to the map over that span (the chord of the span's ends, shifted to balance the
//! largest deviations above and below at the knots) and reports the largest difference between
//! that line and the map over the span, rate rounding included, so that nobody takes the CTF
//! trace for more exact than it is. Use the JSON Lines, CSV or Chrome outputs where that
//! difference matters.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ApplyError, CommonTimebase};
use crate::model::PiecewiseMap;

/// The packet magic of packetized CTF metadata.
pub const METADATA_MAGIC: u32 = 0x75D1_1D57;
/// Header of a metadata packet: magic, UUID, checksum, content size, packet size, compression,
/// encryption, checksum scheme, major, minor.
const PACKET_HEADER_LEN: usize = 37;
/// Metadata packet size written (LTTng writes 4096-byte packets).
const PACKET_LEN: usize = 4096;
/// The index files' magic (big-endian).
const INDEX_MAGIC: u32 = 0xC1F1_DCC1;

/// One CTF trace's metadata as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The TSDL text.
    pub text: String,
    /// For packetized metadata: the first packet's header (uuid, byte order, versions), kept
    /// for the packets written back.
    pub packet_header: Option<[u8; PACKET_HEADER_LEN]>,
    /// Byte order of the packet headers (true: little-endian).
    pub little_endian: bool,
}

fn bad(path: &Path, what: impl std::fmt::Display) -> ApplyError {
    ApplyError::Events(format!("{}: {what}", path.display()))
}

impl Metadata {
    /// Reads a `metadata` file, packetized or plain.
    pub fn read(path: &Path) -> Result<Metadata, ApplyError> {
        let bytes = fs::read(path)
            .map_err(|e| ApplyError::io(format!("cannot read {}", path.display()), e))?;
        Self::parse(&bytes, path)
    }

    /// Parses the bytes of a `metadata` file (`path` names it in errors).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Metadata, ApplyError> {
        let magic_le = bytes
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()));
        let magic_be = bytes
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
        let little_endian = match (magic_le, magic_be) {
            (Some(METADATA_MAGIC), _) => true,
            (_, Some(METADATA_MAGIC)) => false,
            _ => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| bad(path, "neither packetized CTF metadata nor TSDL text"))?;
                if !text.trim_start().starts_with("/* CTF") {
                    return Err(bad(
                        path,
                        "not CTF metadata (no packet magic 0x75D11D57, no `/* CTF` text header)",
                    ));
                }
                return Ok(Metadata {
                    text: text.to_string(),
                    packet_header: None,
                    little_endian: true,
                });
            }
        };
        let u32_at = |b: &[u8], at: usize| {
            let v: [u8; 4] = b[at..at + 4].try_into().unwrap();
            if little_endian {
                u32::from_le_bytes(v)
            } else {
                u32::from_be_bytes(v)
            }
        };
        let mut text = Vec::new();
        let mut at = 0;
        let mut first = None;
        while at < bytes.len() {
            let p = &bytes[at..];
            if p.len() < PACKET_HEADER_LEN || u32_at(p, 0) != METADATA_MAGIC {
                return Err(bad(
                    path,
                    format!("metadata packet at byte {at}: bad header"),
                ));
            }
            let content = u32_at(p, 24) as usize / 8;
            let size = u32_at(p, 28) as usize / 8;
            if content < PACKET_HEADER_LEN || size < content || size > p.len() {
                return Err(bad(
                    path,
                    format!("metadata packet at byte {at}: sizes {content}/{size} do not fit"),
                ));
            }
            if p[32] != 0 || p[33] != 0 {
                return Err(bad(
                    path,
                    "compressed or encrypted metadata is not supported",
                ));
            }
            first.get_or_insert_with(|| {
                let mut h = [0u8; PACKET_HEADER_LEN];
                h.copy_from_slice(&p[..PACKET_HEADER_LEN]);
                h
            });
            text.extend_from_slice(&p[PACKET_HEADER_LEN..content]);
            at += size;
        }
        let text = String::from_utf8(text).map_err(|_| bad(path, "metadata text is not UTF-8"))?;
        Ok(Metadata {
            text,
            packet_header: first,
            little_endian,
        })
    }

    /// The bytes of the metadata file: packets as read (same header) around the text, or the
    /// text alone.
    pub fn to_bytes(&self) -> Vec<u8> {
        let Some(header) = self.packet_header else {
            return self.text.as_bytes().to_vec();
        };
        let mut out = Vec::new();
        let put = |v: u32| {
            if self.little_endian {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        for chunk in self.text.as_bytes().chunks(PACKET_LEN - PACKET_HEADER_LEN) {
            let mut h = header;
            h[20..24].copy_from_slice(&put(0)); // checksum: none
            h[24..28].copy_from_slice(&put(((PACKET_HEADER_LEN + chunk.len()) * 8) as u32));
            h[28..32].copy_from_slice(&put((PACKET_LEN * 8) as u32));
            out.extend_from_slice(&h);
            out.extend_from_slice(chunk);
            out.resize(out.len() + PACKET_LEN - PACKET_HEADER_LEN - chunk.len(), 0);
        }
        out
    }
}

/// A clock class of the metadata: where its block is and its attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClockClass {
    /// Byte range of the whole `clock { ... };` declaration in the text.
    pub range: (usize, usize),
    /// `name` (unquoted).
    pub name: String,
    /// `freq` (Hz; 10⁹ when absent, as CTF says).
    pub freq: u64,
    /// `offset_s` (s).
    pub offset_s: i64,
    /// `offset` (cycles).
    pub offset: i64,
    /// The other attributes, as written (`uuid = "…"`, `description = "…"`, …).
    pub others: Vec<String>,
}

/// Splits TSDL text into tokens' positions: yields (start, end) of everything outside comments,
/// and tells where comments and strings are, so that a keyword inside them is not taken.
fn skip_comment_or_string(t: &[u8], i: usize) -> Option<usize> {
    if t[i..].starts_with(b"/*") {
        return Some(
            t[i + 2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(t.len(), |p| i + 2 + p + 2),
        );
    }
    if t[i..].starts_with(b"//") {
        return Some(
            t[i..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(t.len(), |p| i + p),
        );
    }
    if t[i] == b'"' {
        let mut j = i + 1;
        while j < t.len() && t[j] != b'"' {
            j += if t[j] == b'\\' { 2 } else { 1 };
        }
        return Some((j + 1).min(t.len()));
    }
    None
}

/// The clock classes declared at the top level of `text`.
pub fn clock_classes(text: &str) -> Result<Vec<ClockClass>, String> {
    let t = text.as_bytes();
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        if let Some(next) = skip_comment_or_string(t, i) {
            i = next;
            continue;
        }
        match t[i] {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b'c' if depth == 0
                && t[i..].starts_with(b"clock")
                && (i == 0 || !(t[i - 1].is_ascii_alphanumeric() || t[i - 1] == b'_')) =>
            {
                let mut j = i + 5;
                while j < t.len() && t[j].is_ascii_whitespace() {
                    j += 1;
                }
                if t.get(j) == Some(&b'{') {
                    let (class, end) = parse_clock(text, i, j + 1)?;
                    found.push(class);
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(found)
}

/// Parses a clock block whose body starts at `body` (after `{`); returns it and the end of the
/// declaration (after `};`).
fn parse_clock(text: &str, start: usize, body: usize) -> Result<(ClockClass, usize), String> {
    let t = text.as_bytes();
    let mut statements = Vec::new();
    let mut i = body;
    let mut stmt_start = body;
    let close = loop {
        if i >= t.len() {
            return Err("a clock declaration is not closed".into());
        }
        if let Some(next) = skip_comment_or_string(t, i) {
            if t[i] == b'"' {
                i = next;
                continue;
            }
            // A comment: not part of any statement.
            let before = text[stmt_start..i].trim();
            if before.is_empty() {
                stmt_start = next;
            }
            i = next;
            continue;
        }
        match t[i] {
            b';' => {
                statements.push(text[stmt_start..i].trim().to_string());
                stmt_start = i + 1;
            }
            b'}' => break i,
            _ => {}
        }
        i += 1;
    };
    let mut end = close + 1;
    while end < t.len() && t[end].is_ascii_whitespace() && t[end] != b'\n' {
        end += 1;
    }
    if t.get(end) == Some(&b';') {
        end += 1;
    }
    let mut class = ClockClass {
        range: (start, end),
        name: String::new(),
        freq: 1_000_000_000,
        offset_s: 0,
        offset: 0,
        others: Vec::new(),
    };
    let int = |v: &str, key: &str| -> Result<i128, String> {
        let v = v.trim();
        let parsed = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            i128::from_str_radix(h, 16)
        } else {
            v.trim_end_matches(['u', 'U', 'l', 'L']).parse::<i128>()
        };
        parsed.map_err(|_| format!("clock `{key}` is `{v}`, not an integer"))
    };
    for s in statements.iter().filter(|s| !s.is_empty()) {
        let Some((key, value)) = s.split_once('=') else {
            class.others.push(s.clone());
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "name" => class.name = value.trim_matches('"').to_string(),
            "freq" => {
                class.freq = u64::try_from(int(value, key)?)
                    .ok()
                    .filter(|&f| f > 0)
                    .ok_or_else(|| format!("clock `freq` is {value}"))?
            }
            "offset_s" => {
                class.offset_s =
                    i64::try_from(int(value, key)?).map_err(|_| format!("offset_s {value}"))?
            }
            "offset" => {
                class.offset =
                    i64::try_from(int(value, key)?).map_err(|_| format!("offset {value}"))?
            }
            _ => class.others.push(s.clone()),
        }
    }
    Ok((class, end))
}

/// A clock class as the readers will use it: `D(v) = offset_s·10⁹ + (offset + v)·10⁹/freq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockLine {
    /// Hz.
    pub freq: u64,
    /// Seconds.
    pub offset_s: i64,
    /// Cycles, in `[0, freq)`.
    pub offset: i64,
}

impl ClockLine {
    /// The time a reader shows for `value`, in ns after `epoch_ns` (so that a double holds it
    /// to well below a ns), computed exactly (the readers truncate the offset's and the value's
    /// ns separately: at most 2 ns less).
    pub fn show(&self, value: u64, epoch_ns: i64) -> f64 {
        let cycles = self.offset as i128 + value as i128;
        let whole = cycles * 1_000_000_000 / self.freq as i128;
        let frac = (cycles * 1_000_000_000 % self.freq as i128) as f64 / self.freq as f64;
        (self.offset_s as i128 * 1_000_000_000 + whole - epoch_ns as i128) as f64 + frac
    }

    /// The clock class giving `epoch_ns + line(v)` exactly at `anchor`, at the rate closest to
    /// the line's that an integer `freq` allows.
    pub fn for_line(drift: f64, offset_ns: f64, epoch_ns: i64, anchor: u64) -> ClockLine {
        let freq = (1e9 / drift).round().max(1.0) as u64;
        // K = E + line(anchor) − anchor·10⁹/freq, split into whole ns (exact) and a fraction.
        let mapped = drift.mul_add(anchor as f64, offset_ns);
        let mapped_whole = mapped.floor();
        let mapped_frac = mapped - mapped_whole;
        let scaled = anchor as i128 * 1_000_000_000;
        let q = scaled / freq as i128;
        let q_frac = (scaled % freq as i128) as f64 / freq as f64;
        let k_whole = epoch_ns as i128 + mapped_whole as i128 - q;
        let frac = mapped_frac - q_frac; // in (−1, 1)
        let mut offset_s = k_whole.div_euclid(1_000_000_000) as i64;
        let rem_ns = k_whole.rem_euclid(1_000_000_000) as f64 + frac;
        let mut offset = (rem_ns * freq as f64 / 1e9).round() as i64;
        while offset >= freq as i64 {
            offset -= freq as i64;
            offset_s += 1;
        }
        while offset < 0 {
            offset += freq as i64;
            offset_s -= 1;
        }
        ClockLine {
            freq,
            offset_s,
            offset,
        }
    }
}

/// A trace's packets as its index lists them: `(timestamp_begin, timestamp_end)` in clock cycles.
pub type PacketSpans = Vec<(u64, u64)>;

/// The timestamps' span of a trace, in clock cycles, from its index files (min
/// `timestamp_begin`, max `timestamp_end`, packets), or None without an index.
pub fn index_span(trace_dir: &Path) -> Result<Option<(u64, u64, PacketSpans)>, ApplyError> {
    let dir = trace_dir.join("index");
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(None);
    };
    let mut packets = Vec::new();
    for e in entries {
        let e = e.map_err(|e| ApplyError::io(format!("cannot list {}", dir.display()), e))?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != "idx") {
            continue;
        }
        let b = fs::read(&path)
            .map_err(|e| ApplyError::io(format!("cannot read {}", path.display()), e))?;
        let be32 = |at: usize| {
            b.get(at..at + 4)
                .map(|s| u32::from_be_bytes(s.try_into().unwrap()))
        };
        if be32(0) != Some(INDEX_MAGIC) {
            return Err(bad(&path, "not a CTF index file (magic 0xC1F1DCC1)"));
        }
        let entry = be32(12).unwrap_or(0) as usize;
        if entry < 56 {
            return Err(bad(&path, format!("index entries of {entry} bytes")));
        }
        let be64 = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap());
        let mut at = 16;
        while at + entry <= b.len() {
            packets.push((be64(at + 24), be64(at + 32)));
            at += entry;
        }
    }
    let begin = packets.iter().map(|p| p.0).min();
    let end = packets.iter().map(|p| p.1).max();
    Ok(begin.zip(end).map(|(b, e)| (b, e, packets)))
}

/// The line written for `map` over `[v0, v1]` and the largest distance (ns) between it and the
/// map there: the piece itself when one piece covers the span (0), else the chord shifted to
/// balance the deviations at the knots inside.
pub fn line_over(map: &PiecewiseMap, v0: f64, v1: f64) -> (f64, f64, f64) {
    let inside: Vec<f64> = map
        .pieces()
        .iter()
        .map(|p| p.start_ns)
        .filter(|&s| s > v0 && s < v1)
        .collect();
    if inside.is_empty() {
        let p = map.piece_at((v0 + v1) / 2.0);
        return (p.line.drift, p.line.offset_ns, 0.0);
    }
    let (y0, y1) = (map.apply(v0), map.apply(v1));
    let drift = (y1 - y0) / (v1 - v0);
    let offset = y0 - drift * v0;
    // Deviation map − chord at the knots (0 at the ends): balance the largest above and below.
    let dev: Vec<f64> = inside
        .iter()
        .map(|&x| map.apply(x) - (drift * x + offset))
        .chain([0.0])
        .collect();
    let hi = dev.iter().cloned().fold(f64::MIN, f64::max);
    let lo = dev.iter().cloned().fold(f64::MAX, f64::min);
    (drift, offset + (hi + lo) / 2.0, (hi - lo) / 2.0)
}

/// The CTF traces under `dir`: every directory holding a `metadata` file.
pub fn find_traces(dir: &Path) -> Result<Vec<PathBuf>, ApplyError> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = fs::read_dir(&d)
            .map_err(|e| ApplyError::io(format!("cannot list {}", d.display()), e))?;
        for e in entries {
            let e = e.map_err(|e| ApplyError::io(format!("cannot list {}", d.display()), e))?;
            let ty = e
                .file_type()
                .map_err(|e| ApplyError::io(format!("cannot inspect {}", e), e))?;
            if ty.is_dir() {
                stack.push(e.path());
            } else if e.file_name() == "metadata" {
                found.push(d.clone());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// What the rewrite of one CTF trace did.
#[derive(Clone, Debug, PartialEq)]
pub struct CtfTraceSummary {
    /// The trace's directory, relative to the input.
    pub trace: PathBuf,
    /// The clock class written.
    pub clock: ClockLine,
    /// The trace's span in clock values (from the index, else the node's recorded span).
    pub span: (u64, u64),
    /// Knots of the node's map inside the span (0: the map is one line there, written exactly).
    pub knots_inside: usize,
    /// Largest difference (ns) between what readers show and the map over the span: the line's
    /// distance from a piecewise map plus the integer `freq`'s rate rounding.
    pub max_error_ns: f64,
    /// Packets (of all) that lie at least partly outside the node's recorded span.
    pub packets_outside: u64,
    /// Packets in the index.
    pub packets: u64,
}

/// Rewrites the clock class of the CTF trace at `src` into `dst` (a new directory; everything
/// else copied). `epoch_ns` makes the reference's monotonic time absolute.
pub fn apply_trace(
    src: &Path,
    dst: &Path,
    relative: &Path,
    timebase: &CommonTimebase,
    node: u32,
    epoch: Option<i64>,
) -> Result<CtfTraceSummary, ApplyError> {
    let meta_path = src.join("metadata");
    let mut meta = Metadata::read(&meta_path)?;
    let classes = clock_classes(&meta.text).map_err(|e| bad(&meta_path, e))?;
    let class = match classes.as_slice() {
        [one] => one.clone(),
        [] => return Err(bad(&meta_path, "no clock declaration")),
        _ => {
            return Err(bad(
                &meta_path,
                format!(
                    "{} clock declarations; only traces with one clock are supported",
                    classes.len()
                ),
            ));
        }
    };
    if class.name != "monotonic" || class.freq != 1_000_000_000 {
        return Err(bad(
            &meta_path,
            format!(
                "clock `{}` at {} Hz: only LTTng's `monotonic` clock (CLOCK_MONOTONIC in ns, \
                 freq 1000000000) can be mapped",
                class.name, class.freq
            ),
        ));
    }
    let map = timebase.map(node);
    let index = index_span(src)?;
    let recorded = timebase.span(node);
    let (span, packets) = match (&index, recorded) {
        (Some((b, e, packets)), _) => ((*b, *e), packets.clone()),
        (None, Some((a, b))) => ((a.max(0) as u64, b.max(0) as u64), Vec::new()),
        (None, None) => {
            let m = map
                .pieces()
                .iter()
                .map(|p| p.start_ns)
                .filter(|s| s.is_finite())
                .fold(0.0, f64::max);
            ((m as u64, m as u64), Vec::new())
        }
    };
    let (v0, v1) = (span.0 as f64, span.1.max(span.0 + 1) as f64);
    let knots_inside = map
        .pieces()
        .iter()
        .filter(|p| p.start_ns > v0 && p.start_ns < v1)
        .count();
    let (drift, offset_ns, line_error) = line_over(map, v0, v1);
    let anchor = span.0 / 2 + span.1 / 2;
    // Without the reference's samples, the trace's own realtime − monotonic.
    let epoch_ns = match epoch {
        Some(e) => e,
        None => class
            .offset_s
            .saturating_mul(1_000_000_000)
            .saturating_add(class.offset),
    };
    let clock = ClockLine::for_line(drift, offset_ns, epoch_ns, anchor);
    // Worst difference between what readers show and E + map, at the ends and the knots.
    let max_error_ns = [v0, v1]
        .into_iter()
        .chain(
            map.pieces()
                .iter()
                .map(|p| p.start_ns)
                .filter(|&s| s > v0 && s < v1),
        )
        .map(|v| (clock.show(v as u64, epoch_ns) - map.apply(v)).abs())
        .fold(line_error, f64::max);
    let packets_outside = match recorded {
        Some((a, b)) => packets
            .iter()
            .filter(|&&(pb, pe)| (pb as i64) < a || (pe as i64) > b)
            .count() as u64,
        None => 0,
    };
    // The new clock declaration, the other attributes as they were.
    let mut block = String::from("clock {\n");
    for o in &class.others {
        block.push_str(&format!("\t{o};\n"));
    }
    block.push_str(&format!(
        "\tname = \"{}\";\n\t/* tsync apply: node {} mapped onto the timebase of {} (was freq = \
         {}, offset_s = {}, offset = {}); readers show offset_s + (offset + value) / freq */\n\
         \tfreq = {};\n\toffset_s = {};\n\toffset = {};\n}};",
        class.name,
        timebase.names()[node as usize],
        timebase.names()[timebase.reference(node) as usize],
        class.freq,
        class.offset_s,
        class.offset,
        clock.freq,
        clock.offset_s,
        clock.offset
    ));
    meta.text
        .replace_range(class.range.0..class.range.1, &block);
    copy_tree(src, dst)?;
    let out = dst.join("metadata");
    fs::write(&out, meta.to_bytes())
        .map_err(|e| ApplyError::io(format!("cannot write {}", out.display()), e))?;
    Ok(CtfTraceSummary {
        trace: relative.to_path_buf(),
        clock,
        span,
        knots_inside,
        max_error_ns,
        packets_outside,
        packets: packets.len() as u64,
    })
}

/// The reference's realtime − monotonic (ns) to make the map's output absolute, at the mapped
/// middle of the node's recorded span; None when the reference has no clock samples.
pub fn epoch(timebase: &CommonTimebase, node: u32) -> Option<i64> {
    let reference = timebase.realtime_clock(timebase.reference(node))?;
    let mid = timebase.span(node).map_or(0, |(a, b)| a / 2 + b / 2);
    let m = timebase.map(node).apply(mid as f64).round() as i64;
    let mut cursor = super::realtime::RealtimeCursor::default();
    Some(reference.to_realtime(m, &mut cursor) - m)
}

/// Rewrites every CTF trace under `src` (a directory) into `dst`, keeping the layout
/// (`ust/uid/1000/64-bit/...`). Fails when `src` holds no trace.
pub fn apply_dir(
    src: &Path,
    dst: &Path,
    timebase: &CommonTimebase,
    node: u32,
) -> Result<Vec<CtfTraceSummary>, ApplyError> {
    let traces = find_traces(src)?;
    if traces.is_empty() {
        return Err(bad(
            src,
            "no CTF trace here (no directory holds a `metadata` file); give the directory \
             `lttng create --output` wrote",
        ));
    }
    let epoch = epoch(timebase, node);
    traces
        .iter()
        .map(|t| {
            let relative = t.strip_prefix(src).unwrap_or(Path::new(""));
            apply_trace(t, &dst.join(relative), relative, timebase, node, epoch)
        })
        .collect()
}

/// Copies the files of one trace directory (not its subdirectories, except `index`).
fn copy_tree(src: &Path, dst: &Path) -> Result<(), ApplyError> {
    fs::create_dir_all(dst)
        .map_err(|e| ApplyError::io(format!("cannot create {}", dst.display()), e))?;
    for e in fs::read_dir(src)
        .map_err(|e| ApplyError::io(format!("cannot list {}", src.display()), e))?
    {
        let e = e.map_err(|e| ApplyError::io(format!("cannot list {}", src.display()), e))?;
        let from = e.path();
        let to = dst.join(e.file_name());
        let ty = e
            .file_type()
            .map_err(|e| ApplyError::io(format!("cannot inspect {}", from.display()), e))?;
        if ty.is_file() && e.file_name() != "metadata" {
            fs::copy(&from, &to).map_err(|e| {
                ApplyError::io(
                    format!("cannot copy {} to {}", from.display(), to.display()),
                    e,
                )
            })?;
        } else if ty.is_dir() && e.file_name() == "index" {
            copy_tree(&from, &to)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Affine, Piece};

    const LTTNG: &str = "/* CTF 1.8 */\n\ntrace {\n\tmajor = 1;\n};\n\nclock {\n\tname = \"monotonic\";\n\tuuid = \"fe86b8a5-851c-4323-bd58-7c77bca6e697\";\n\tdescription = \"Monotonic Clock\";\n\tfreq = 1000000000; /* Frequency, in Hz */\n\t/* clock value offset from Epoch is: offset * (1/freq) */\n\toffset = 1795441370960180768;\n};\n\ntypealias integer {\n\tsize = 27; align = 1; signed = false;\n\tmap = clock.monotonic.value;\n} := uint27_clock_monotonic_t;\n";

    #[test]
    fn finds_lttngs_clock_and_nothing_in_comments() {
        let classes = clock_classes(LTTNG).unwrap();
        assert_eq!(classes.len(), 1);
        let c = &classes[0];
        assert_eq!(c.name, "monotonic");
        assert_eq!(c.freq, 1_000_000_000);
        assert_eq!(c.offset, 1_795_441_370_960_180_768);
        assert_eq!(c.offset_s, 0);
        assert_eq!(c.others.len(), 2, "{:?}", c.others);
        assert!(LTTNG[c.range.0..c.range.1].starts_with("clock {"));
        assert!(LTTNG[c.range.0..c.range.1].ends_with("};"));
        let commented = format!("/* clock {{ name = x; }}; */\n{LTTNG}");
        assert_eq!(clock_classes(&commented).unwrap().len(), 1);
    }

    #[test]
    fn packetized_metadata_reads_back_the_same() {
        let mut header = [0u8; PACKET_HEADER_LEN];
        header[..4].copy_from_slice(&METADATA_MAGIC.to_le_bytes());
        header[4..20].copy_from_slice(&[7; 16]);
        header[35] = 1;
        header[36] = 8;
        let text: String = LTTNG.repeat(40); // more than one packet
        let m = Metadata {
            text: text.clone(),
            packet_header: Some(header),
            little_endian: true,
        };
        let bytes = m.to_bytes();
        assert_eq!(bytes.len() % PACKET_LEN, 0);
        assert!(bytes.len() / PACKET_LEN > 1);
        let back = Metadata::parse(&bytes, Path::new("metadata")).unwrap();
        assert!(back.text == m.text && back.little_endian);
        // Every packet keeps the UUID and versions, with its own sizes.
        for p in bytes.chunks(PACKET_LEN) {
            assert_eq!(&p[..20], &header[..20]);
            assert_eq!(&p[32..37], &header[32..37]);
            assert_eq!(u32::from_le_bytes(p[28..32].try_into().unwrap()), 4096 * 8);
        }
    }

    #[test]
    fn a_line_becomes_a_clock_class_exact_at_its_anchor_and_within_half_a_ppb() {
        let epoch = 1_795_441_370_960_180_768i64;
        for (drift, offset) in [
            (1.0, 0.0),
            (1.000_020_456_648_326, -4_013_443.319_921_752),
            (0.999_962_316_285_593_4, 9_742_490_916.843_921),
        ] {
            let anchor = 12_164_471_992_576u64;
            let c = ClockLine::for_line(drift, offset, epoch, anchor);
            assert!(c.offset >= 0 && (c.offset as u64) < c.freq);
            let want = |v: u64| drift.mul_add(v as f64, offset);
            assert!((c.show(anchor, epoch) - want(anchor)).abs() <= 1.0, "{c:?}");
            // One minute either side: within 0.5 ns per second (+1 ns of rounding).
            for d in [-60_000_000_000i64, 60_000_000_000] {
                let v = (anchor as i64 + d) as u64;
                let err = c.show(v, epoch) - want(v);
                assert!(err.abs() <= 31.0, "{drift}: {err}");
            }
            if drift == 1.0 {
                assert_eq!(c.freq, 1_000_000_000);
                assert_eq!(c.show(anchor, epoch), want(anchor));
            }
        }
    }

    #[test]
    fn a_piecewise_map_gets_the_closest_line_and_its_distance() {
        let line = |drift: f64, at: f64, y: f64| Affine {
            drift,
            offset_ns: y - drift * at,
        };
        // Two pieces meeting at 100 s: rate +100 ppm, then −100 ppm.
        let map = PiecewiseMap::from_pieces(vec![
            Piece {
                start_ns: f64::NEG_INFINITY,
                line: line(1.0001, 100e9, 100e9),
            },
            Piece {
                start_ns: 100e9,
                line: line(0.9999, 100e9, 100e9),
            },
        ]);
        let (d, o, err) = line_over(&map, 50e9, 150e9);
        // Map − chord peaks at the knot: 100 ppm × 50 s = 5 ms; the balanced line is 2.5 ms off.
        assert!((err - 2.5e6).abs() < 1.0, "{err}");
        assert!((d - 1.0).abs() < 1e-12);
        for x in [50e9, 100e9, 150e9] {
            assert!(((d * x + o) - map.apply(x)).abs() <= err + 1e-3);
        }
        // A span inside one piece: that piece, exactly.
        let (d, o, err) = line_over(&map, 110e9, 150e9);
        assert_eq!((d, o, err), (0.9999, map.pieces()[1].line.offset_ns, 0.0));
    }
}
