//! Clock-sample chunks as columns.
//!
//! ```text
//! monotonic   per sample, the change of (monotonic_ns − previous) from the sample before,
//!             zigzag varint: samples come at a steady period, so what is left is its jitter
//! bracket     per sample, monotonic_after_ns − monotonic_ns, zigzag varint
//! raw         per sample, the change of (monotonic_raw_ns − monotonic_ns), zigzag varint:
//!             the two clocks differ by a slowly moving offset (NTP's slewing)
//! realtime    per sample, the change of (realtime_ns − monotonic_ns), zigzag varint: constant
//!             but for clock steps
//! tsc         per sample, the change of (tsc − previous) from the sample before, zigzag varint
//! ```
//!
//! Each column is a section; the first sample's "previous" values are zero. Differences wrap, so
//! any sample round-trips exactly.

use super::{DecodeError, Section, put_section, put_varint, zigzag};
use crate::format::ClockSample;

/// Largest number of columnar bytes one sample can take (five varints of 10 bytes).
pub const MAX_BYTES_PER_SAMPLE: usize = 50;
/// Bytes of an encoded chunk besides its samples: five section lengths.
pub const MAX_FIXED_BYTES: usize = 5 * 10;

/// The five differences a sample is stored as, from the sample before it.
struct Residuals {
    monotonic: u64,
    bracket: u64,
    raw: u64,
    realtime: u64,
    tsc: u64,
}

/// What the samples so far predict of the next one.
#[derive(Default)]
struct Track {
    monotonic: u64,
    monotonic_step: u64,
    raw_offset: u64,
    realtime_offset: u64,
    tsc: u64,
    tsc_step: u64,
}

impl Track {
    fn residuals(&self, s: &ClockSample) -> Residuals {
        let step = s.monotonic_ns.wrapping_sub(self.monotonic);
        let tsc_step = s.tsc.wrapping_sub(self.tsc);
        Residuals {
            monotonic: step.wrapping_sub(self.monotonic_step),
            bracket: s.monotonic_after_ns.wrapping_sub(s.monotonic_ns),
            raw: raw_offset(s).wrapping_sub(self.raw_offset),
            realtime: realtime_offset(s).wrapping_sub(self.realtime_offset),
            tsc: tsc_step.wrapping_sub(self.tsc_step),
        }
    }

    fn sample(&self, r: &Residuals) -> ClockSample {
        let monotonic_ns = self
            .monotonic
            .wrapping_add(self.monotonic_step.wrapping_add(r.monotonic));
        ClockSample {
            monotonic_ns,
            monotonic_raw_ns: monotonic_ns.wrapping_add(self.raw_offset.wrapping_add(r.raw)),
            realtime_ns: monotonic_ns.wrapping_add(self.realtime_offset.wrapping_add(r.realtime))
                as i64,
            tsc: self.tsc.wrapping_add(self.tsc_step.wrapping_add(r.tsc)),
            monotonic_after_ns: monotonic_ns.wrapping_add(r.bracket),
        }
    }

    fn saw(&mut self, s: &ClockSample) {
        *self = Track {
            monotonic: s.monotonic_ns,
            monotonic_step: s.monotonic_ns.wrapping_sub(self.monotonic),
            raw_offset: raw_offset(s),
            realtime_offset: realtime_offset(s),
            tsc: s.tsc,
            tsc_step: s.tsc.wrapping_sub(self.tsc),
        };
    }
}

fn raw_offset(s: &ClockSample) -> u64 {
    s.monotonic_raw_ns.wrapping_sub(s.monotonic_ns)
}

fn realtime_offset(s: &ClockSample) -> u64 {
    (s.realtime_ns as u64).wrapping_sub(s.monotonic_ns)
}

/// Appends the columnar encoding of `samples` to `out`.
pub fn encode(samples: &[ClockSample], out: &mut Vec<u8>) {
    let mut columns: [Vec<u8>; 5] = Default::default();
    let mut track = Track::default();
    for s in samples {
        let r = track.residuals(s);
        for (column, value) in
            columns
                .iter_mut()
                .zip([r.monotonic, r.bracket, r.raw, r.realtime, r.tsc])
        {
            put_varint(column, zigzag(value as i64));
        }
        track.saw(s);
    }
    for column in &columns {
        put_section(out, column);
    }
}

/// Decodes the `count` samples of an encoded chunk and appends them to `out` (nothing, on an
/// error).
pub fn decode(bytes: &[u8], count: usize, out: &mut Vec<ClockSample>) -> Result<(), DecodeError> {
    let mut chunk = Section::whole(bytes, "clock-sample chunk");
    let mut columns = [
        chunk.section("monotonic")?,
        chunk.section("bracket")?,
        chunk.section("raw")?,
        chunk.section("realtime")?,
        chunk.section("tsc")?,
    ];
    chunk.finish()?;
    let mut track = Track::default();
    let start = out.len();
    let decoded = decode_into(&mut columns, count, &mut track, out);
    if decoded.is_err() {
        out.truncate(start);
    }
    decoded
}

fn decode_into(
    columns: &mut [Section<'_>; 5],
    count: usize,
    track: &mut Track,
    out: &mut Vec<ClockSample>,
) -> Result<(), DecodeError> {
    out.reserve(count);
    for _ in 0..count {
        let [m, b, r, t, c] = columns;
        let residuals = Residuals {
            monotonic: m.try_signed().ok_or_else(|| m.varint_error())? as u64,
            bracket: b.try_signed().ok_or_else(|| b.varint_error())? as u64,
            raw: r.try_signed().ok_or_else(|| r.varint_error())? as u64,
            realtime: t.try_signed().ok_or_else(|| t.varint_error())? as u64,
            tsc: c.try_signed().ok_or_else(|| c.varint_error())? as u64,
        };
        let s = track.sample(&residuals);
        track.saw(&s);
        out.push(s);
    }
    columns.iter().try_for_each(Section::finish)
}
