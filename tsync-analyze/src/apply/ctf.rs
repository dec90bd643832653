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
//! line. Rewriting every event timestamp (the analyzer's CTF reader, [`crate::ctf`], finds each
//! event) could overflow LTTng's compact 27/32-bit timestamps; this module does not do that. Instead, for a map with knots inside the trace's span it writes the single
//! line closest to the map over that span (the chord of the span's ends, shifted to balance the
//! largest deviations above and below at the knots) and reports the largest difference between
//! that line and the map over the span, rate rounding included, so that nobody takes the CTF
//! trace for more exact than it is. Use the JSON Lines, CSV or Chrome outputs where that
//! difference matters.

use std::fs;
use std::path::{Path, PathBuf};

use super::{ApplyError, CommonTimebase};
pub use crate::ctf::find_traces;
pub use crate::ctf::index::{PacketSpans, index_span};
pub use crate::ctf::metadata::{ClockClass, METADATA_MAGIC, Metadata, clock_classes};
use crate::model::PiecewiseMap;

fn bad(path: &Path, what: impl std::fmt::Display) -> ApplyError {
    ApplyError::Events(format!("{}: {what}", path.display()))
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
