//! What the report says the clock changed: how far events moved, how many moved, and how much
//! the intervals between consecutive events of a trace were stretched or shrunk.

use super::{Displacement, IntervalDeviationShare};

pub(super) fn displacement(before: &[Vec<i64>], after: &[Vec<i64>]) -> Displacement {
    let mut sum = 0.0;
    let mut max = 0i64;
    let mut n = 0u64;
    for (b, a) in before.iter().zip(after) {
        for (x, y) in b.iter().zip(a) {
            let d = y - x;
            sum += d as f64;
            max = max.max(d);
            n += 1;
        }
    }
    Displacement {
        mean: if n == 0 { 0.0 } else { sum / n as f64 },
        max: max as f64,
    }
}

pub(super) fn interval_deviation(
    before: &[Vec<i64>],
    after: &[Vec<i64>],
) -> IntervalDeviationShare {
    let mut counts = [0u64; 3];
    let mut total = 0u64;
    for (b, a) in before.iter().zip(after) {
        for k in 1..b.len() {
            let old = (b[k] - b[k - 1]) as f64;
            let new = (a[k] - a[k - 1]) as f64;
            total += 1;
            let deviation = if old == 0.0 {
                if new == 0.0 { 0.0 } else { f64::INFINITY }
            } else {
                (new - old).abs() / old.abs()
            };
            for (count, threshold) in counts.iter_mut().zip([1e-4, 1e-2, 1.0]) {
                if deviation > threshold {
                    *count += 1;
                }
            }
        }
    }
    let share = |c: u64| {
        if total == 0 {
            0.0
        } else {
            c as f64 / total as f64
        }
    };
    IntervalDeviationShare {
        gt_0_01_pct: share(counts[0]),
        gt_1_pct: share(counts[1]),
        gt_100_pct: share(counts[2]),
    }
}

pub(super) fn moved(before: &[Vec<i64>], after: &[Vec<i64>]) -> u64 {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| b.iter().zip(a).filter(|(x, y)| x != y).count() as u64)
        .sum()
}
