//! Evaluation of a synchronized trace set (Poirier §3.4.1, the LTTV `eval` module).
//!
//! The true offsets are unknown, so the quality of a synchronization is judged by what it
//! implies for the messages: per ordered trace pair, how many are received before they were
//! sent (*inversions*), how many travel faster than the minimum latency `l_min` (*too fast*,
//! the most reliable precision indicator), the distribution of transfer times, and the width of
//! the guaranteed accuracy interval over time.
//!
//! The [`Evaluator`] is fed one message at a time (constant memory per pair): first the
//! round trips give `l_min` ([`MinRtt`], [`PairLatency::from_min_rtt`]), then the corrected
//! messages are added, then [`Evaluator::finish`] gives the `eval --json` report.

pub mod histogram;

use crate::estimate::accuracy::AccuracyCurve;
use crate::eval::histogram::LogHistogram;
use crate::model::{Exchange, Message, PairLatency};
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;

/// Minimum round-trip time per unordered trace pair, from exchanges (streaming).
#[derive(Clone, Debug, PartialEq)]
pub struct MinRtt {
    traces: usize,
    min: BTreeMap<(usize, usize), i64>,
}

impl MinRtt {
    /// An empty table for `traces` traces.
    pub fn new(traces: usize) -> Self {
        MinRtt {
            traces,
            min: BTreeMap::new(),
        }
    }

    /// Counts one exchange. Negative round trips (possible only with broken timestamps) are
    /// kept: they show up in the report instead of being hidden.
    pub fn add(&mut self, e: &Exchange) {
        let (a, b) = (e.request.send_trace as usize, e.request.recv_trace as usize);
        let key = (a.min(b), a.max(b));
        let rtt = e.rtt_ns();
        self.min
            .entry(key)
            .and_modify(|m| *m = (*m).min(rtt))
            .or_insert(rtt);
    }

    /// The minimum round trip between `a` and `b` (either order), if any exchange was seen.
    pub fn get(&self, a: usize, b: usize) -> Option<i64> {
        self.min.get(&(a.min(b), a.max(b))).copied()
    }

    /// `(a, b, min_rtt_ns)` with `a < b`, for [`PairLatency::from_min_rtt`].
    pub fn iter(&self) -> impl Iterator<Item = (usize, usize, i64)> + '_ {
        self.min.iter().map(|(&(a, b), &rtt)| (a, b, rtt))
    }

    /// Number of traces the table was made for.
    pub fn traces(&self) -> usize {
        self.traces
    }
}

/// The guaranteed accuracy interval over time of the pair (a, b), as the synchronization computed
/// it ([`AccuracyCurve`]: the interval of b's time at each hull abscissa of a's).
///
/// In `eval --json` it reads `{a, b, best_ns, worst_ns, mean_ns, points: [{t_ns, lo_ns, hi_ns}]}`.
#[derive(Clone, Debug, PartialEq)]
pub struct PairAccuracy {
    /// The pair's first trace (the curve's abscissa is its clock).
    pub a: usize,
    /// The pair's second trace.
    pub b: usize,
    /// The interval over time, with its best, worst and time-weighted mean width.
    pub curve: AccuracyCurve,
}

impl Serialize for PairAccuracy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        #[derive(Serialize)]
        struct Point {
            t_ns: i64,
            lo_ns: f64,
            hi_ns: f64,
        }
        let points: Vec<Point> = self
            .curve
            .points
            .iter()
            .map(|p| Point {
                t_ns: p.t_a,
                lo_ns: p.lo,
                hi_ns: p.hi,
            })
            .collect();
        let stats = &self.curve.stats;
        let mut st = s.serialize_struct("PairAccuracy", 6)?;
        st.serialize_field("a", &self.a)?;
        st.serialize_field("b", &self.b)?;
        st.serialize_field("best_ns", &stats.best)?;
        st.serialize_field("worst_ns", &stats.worst)?;
        st.serialize_field("mean_ns", &stats.mean)?;
        st.serialize_field("points", &points)?;
        st.end()
    }
}

/// Transfer-time statistics of one direction, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TransferStats {
    /// Shortest transfer time (receive − send on the common timebase).
    pub min: f64,
    /// Mean transfer time.
    pub mean: f64,
    /// Longest transfer time.
    pub max: f64,
}

/// One ordered pair of the `eval --json` report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairEval {
    /// Sending trace.
    pub from: usize,
    /// Receiving trace.
    pub to: usize,
    /// Messages from `from` to `to` that were evaluated.
    pub messages: u64,
    /// Messages received before they were sent (`recv < send`).
    pub inversions: u64,
    /// Messages faster than `l_min_ns` (inversions included); 0 where `l_min` is unknown.
    pub too_fast: u64,
    /// The minimum latency used, `null` when neither measured nor given.
    pub l_min_ns: Option<f64>,
    /// Minimum round trip between the two traces, from exchanges; `null` without exchanges.
    pub min_rtt_ns: Option<f64>,
    /// Extra: `too_fast / messages`.
    pub too_fast_share: f64,
    /// Extra: transfer times after correction.
    pub transfer_ns: TransferStats,
    /// Extra: the transfer-time histogram (non-empty bins only in JSON).
    #[serde(serialize_with = "non_empty_bins")]
    pub histogram: LogHistogram,
}

fn non_empty_bins<S: Serializer>(h: &LogHistogram, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(h.non_empty())
}

/// The `eval --json` report (docs/json.md), with the accuracy curves.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EvalReport {
    /// Whether the controlled logical clock was applied after the clock maps.
    pub clc: bool,
    /// One entry per ordered pair with at least one message, sorted by (from, to).
    pub pairs: Vec<PairEval>,
    /// Extra: the accuracy interval over time of every pair that has one.
    pub accuracy: Vec<PairAccuracy>,
}

/// What the evaluation counts of one ordered pair, one message at a time.
#[derive(Default)]
struct PairCounts {
    messages: u64,
    inversions: u64,
    too_fast: u64,
    sum: f64,
    min: i64,
    max: i64,
    histogram: LogHistogram,
}

/// Accumulates the evaluation, one message at a time.
pub struct Evaluator {
    clc: bool,
    l_min: PairLatency,
    min_rtt: MinRtt,
    pairs: BTreeMap<(usize, usize), PairCounts>,
    accuracy: Vec<PairAccuracy>,
}

impl Evaluator {
    /// `l_min`: per ordered pair; only pairs marked known ([`PairLatency::known`]) are used for
    /// the too-fast count. `min_rtt` is reported as is. `clc` is echoed in the report.
    pub fn new(l_min: PairLatency, min_rtt: MinRtt, clc: bool) -> Self {
        Evaluator {
            clc,
            l_min,
            min_rtt,
            pairs: BTreeMap::new(),
            accuracy: Vec::new(),
        }
    }

    /// Counts one message, its times on the common timebase. Traces outside the `l_min` table
    /// have no known `l_min`.
    pub fn add_message(&mut self, m: &Message) {
        let tt = m.transfer_ns();
        let (from, to) = (m.send_trace as usize, m.recv_trace as usize);
        let l_min = self.l_min_of(from, to);
        let p = self.pairs.entry((from, to)).or_insert_with(|| PairCounts {
            min: i64::MAX,
            max: i64::MIN,
            ..PairCounts::default()
        });
        p.messages += 1;
        p.inversions += u64::from(tt < 0);
        p.too_fast += u64::from(l_min.is_some_and(|l| tt < l));
        p.sum += tt as f64;
        p.min = p.min.min(tt);
        p.max = p.max.max(tt);
        p.histogram.add(tt);
    }

    /// Records the accuracy curve of the pair (a, b) given by the hull analysis.
    pub fn add_accuracy(&mut self, a: usize, b: usize, curve: AccuracyCurve) {
        if !curve.points.is_empty() {
            self.accuracy.push(PairAccuracy { a, b, curve });
        }
    }

    fn l_min_of(&self, from: usize, to: usize) -> Option<i64> {
        let n = self.l_min.traces();
        (from < n && to < n)
            .then(|| self.l_min.known(from, to))
            .flatten()
    }

    /// The report: one entry per ordered pair with at least one message, sorted by pair.
    pub fn finish(self) -> EvalReport {
        let pairs = self
            .pairs
            .iter()
            .map(|(&(from, to), p)| PairEval {
                from,
                to,
                messages: p.messages,
                inversions: p.inversions,
                too_fast: p.too_fast,
                l_min_ns: self.l_min_of(from, to).map(|l| l as f64),
                min_rtt_ns: self.min_rtt.get(from, to).map(|r| r as f64),
                too_fast_share: p.too_fast as f64 / p.messages as f64,
                transfer_ns: TransferStats {
                    min: p.min as f64,
                    mean: p.sum / p.messages as f64,
                    max: p.max as f64,
                },
                histogram: p.histogram.clone(),
            })
            .collect();
        let mut accuracy = self.accuracy;
        accuracy.sort_by_key(|c| (c.a, c.b));
        EvalReport {
            clc: self.clc,
            pairs,
            accuracy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::estimate::accuracy::AccuracyPoint;

    fn m(from: u32, to: u32, send_ns: i64, recv_ns: i64) -> Message {
        Message {
            send_trace: from,
            recv_trace: to,
            send_ns,
            recv_ns,
        }
    }

    /// The exchange a→b (t1, t2), b→a (t3, t4).
    fn x(a: u32, b: u32, t1_ns: i64, t2_ns: i64, t3_ns: i64, t4_ns: i64) -> Exchange {
        Exchange {
            request: m(a, b, t1_ns, t2_ns),
            reply: m(b, a, t3_ns, t4_ns),
        }
    }

    fn point(t_a: i64, lo: f64, hi: f64) -> AccuracyPoint {
        AccuracyPoint {
            t_a,
            lo,
            hi,
            width: hi - lo,
        }
    }

    /// Three traces; l_min from exchanges: 0↔1 min RTT 42 µs (l_min 21 µs), 1↔2 none.
    #[test]
    fn hand_built_case_counts_inversions_and_too_fast_messages() {
        let mut rtt = MinRtt::new(3);
        // rtt = (t4 − t1) − (t3 − t2) = 100 − 58 = 42 µs; a worse one is ignored.
        rtt.add(&x(0, 1, 0, 1_000_000, 1_058_000, 100_000));
        rtt.add(&x(1, 0, 0, 0, 0, 90_000));
        assert_eq!(rtt.get(1, 0), Some(42_000));
        let l_min = PairLatency::from_min_rtt(3, 0, rtt.iter());
        let mut eval = Evaluator::new(l_min, rtt, true);
        // 0→1: 5 messages: 2 inversions (−5 µs, −1 ns), 1 more too fast (20 µs < 21 µs),
        // one exactly at l_min (not too fast), one slow.
        for tt in [-5_000, -1, 20_000, 21_000, 80_000] {
            eval.add_message(&m(0, 1, 1_000_000, 1_000_000 + tt));
        }
        // 1→0: 2 messages, none too fast; 1→2: 1 message, zero transfer time: not an inversion,
        // and l_min unknown.
        eval.add_message(&m(1, 0, 0, 30_000));
        eval.add_message(&m(1, 0, 0, 25_000));
        eval.add_message(&m(1, 2, 7, 7));
        eval.add_accuracy(
            0,
            1,
            AccuracyCurve::from_points(vec![
                point(10, 0.0, 4.0),
                point(0, 0.0, 2.0),
                point(30, 1.0, 3.0),
            ]),
        );
        let report = eval.finish();
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["clc"], true);
        let pairs = json["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 3);
        let p01 = &pairs[0];
        assert_eq!(
            (p01["from"].as_u64(), p01["to"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(p01["messages"], 5);
        assert_eq!(p01["inversions"], 2);
        assert_eq!(p01["too_fast"], 3);
        assert_eq!(p01["l_min_ns"], 21_000.0);
        assert_eq!(p01["min_rtt_ns"], 42_000.0);
        let p10 = &pairs[1];
        assert_eq!(
            (p10["inversions"].as_u64(), p10["too_fast"].as_u64()),
            (Some(0), Some(0))
        );
        assert_eq!(p10["transfer_ns"]["min"], 25_000.0);
        let p12 = &pairs[2];
        assert_eq!(p12["inversions"], 0);
        assert_eq!(p12["too_fast"], 0);
        assert!(p12["l_min_ns"].is_null() && p12["min_rtt_ns"].is_null());
        // Histogram: bin 0 holds the two inversions of 0→1.
        let bins = p01["histogram"].as_array().unwrap();
        assert_eq!(bins[0]["index"], 0);
        assert_eq!(bins[0]["count"], 2);
        let total: u64 = bins.iter().map(|b| b["count"].as_u64().unwrap()).sum();
        assert_eq!(total, 5);
        // Accuracy: widths 2, 4 (t = 10), 2 (t = 30): mean over time = (30 + 60) / 30 = 3.
        let acc = &report.accuracy[0];
        let stats = &acc.curve.stats;
        assert_eq!((stats.best, stats.worst, stats.mean), (2.0, 4.0, 3.0));
        assert_eq!(acc.curve.points[0].t_a, 0);
    }
}
