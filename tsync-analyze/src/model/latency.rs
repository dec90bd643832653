//! Lower bounds of message latency per ordered trace pair (`l_min`): what the controlled logical
//! clock enforces and what the evaluation counts messages against.

use crate::model::PairTable;

/// Minimum message latency `l_min` in nanoseconds per ordered trace pair (from, to).
///
/// Becker's clock condition is `t_recv ≥ t_send + l_min`; `l_min` is a *lower bound* of the real
/// latency, so a too large value overcorrects. Pairs that were never set use the default given
/// to [`PairLatency::new`] (0 is the safe choice: it only forbids inversions).
#[derive(Clone, Debug, PartialEq)]
pub struct PairLatency {
    traces: usize,
    default_ns: i64,
    /// Whether `default_ns` was given by the user for every pair (then every pair is known).
    uniform: bool,
    /// The pairs set one by one, keyed (from, to).
    set: PairTable<i64>,
}

impl PairLatency {
    /// A table for `traces` traces where every pair has latency `default_ns` (not marked known).
    pub fn new(traces: usize, default_ns: i64) -> Self {
        PairLatency {
            traces,
            default_ns,
            uniform: false,
            set: PairTable::default(),
        }
    }

    /// A table where every ordered pair has the user-given latency `ns` (marked known).
    pub fn uniform(traces: usize, ns: i64) -> Self {
        PairLatency {
            uniform: true,
            ..PairLatency::new(traces, ns)
        }
    }

    /// Sets `l_min` of messages from `from` to `to`.
    ///
    /// # Panics
    /// If a trace number is out of range (a programming error, not bad input).
    pub fn set(&mut self, from: usize, to: usize, ns: i64) {
        let key = self.key(from, to);
        self.set.insert(key.0, key.1, ns);
    }

    /// `l_min` of messages from `from` to `to` (the default where never set).
    pub fn get(&self, from: usize, to: usize) -> i64 {
        self.known(from, to).unwrap_or(self.default_ns)
    }

    /// `l_min` of messages from `from` to `to` if it was set (measured or given by the user).
    pub fn known(&self, from: usize, to: usize) -> Option<i64> {
        let key = self.key(from, to);
        match self.set.get(key.0, key.1) {
            Some(&ns) => Some(ns),
            None => self.uniform.then_some(self.default_ns),
        }
    }

    /// Number of traces the table covers.
    pub fn traces(&self) -> usize {
        self.traces
    }

    /// `l_min = min RTT / 2` in both directions for every pair with a measured round trip
    /// (the symmetric-network assumption of Poirier §3.4.1); other pairs get `default_ns`.
    /// `min_rtt` yields `(a, b, rtt_ns)`; the smallest value per unordered pair wins.
    pub fn from_min_rtt(
        traces: usize,
        default_ns: i64,
        min_rtt: impl IntoIterator<Item = (usize, usize, i64)>,
    ) -> Self {
        let mut table = PairLatency::new(traces, default_ns);
        for (a, b, rtt) in min_rtt {
            let half = rtt.max(0) / 2;
            for (from, to) in [(a, b), (b, a)] {
                if table.known(from, to).is_none_or(|old| half < old) {
                    table.set(from, to, half);
                }
            }
        }
        table
    }

    fn key(&self, from: usize, to: usize) -> (u32, u32) {
        assert!(
            from < self.traces && to < self.traces,
            "trace out of range in PairLatency"
        );
        (from as u32, to as u32)
    }
}
