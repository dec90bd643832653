//! Becker et al.'s controlled logical clock (CLC), run after the linear correction.
//!
//! A linear correction (convex hull or regression) leaves residual errors: with non-linear drift or
//! NTP slewing, some messages still appear to arrive before they were sent, or faster than the
//! minimum latency `l_min`. The CLC removes every such violation of `t_recv ≥ t_send + l_min` by
//! moving timestamps *forward only*, while keeping each trace's event order and, as far as
//! possible, the lengths of local intervals:
//!
//! - **forward amortization** (Becker eq. 4): after a receive is pushed forward by a jump `Δt`, the
//!   trace's clock runs at `γ` times its speed until it has caught up (`γ` = 0.999 by default), so
//!   the events that follow are not all shifted by the full jump;
//! - **backward amortization** (§3.2): the jump is built up gradually over an amortization interval
//!   `L_A = Δt / ρ` before the receive, with a piecewise-linear ramp that is capped so that no send
//!   in the window passes its own receive minus `l_min`. The interval stops at the previous moved
//!   receive of the same trace, so that every event is moved by at most one ramp.
//!
//! The input is deliberately minimal ([`ClcInput`]): per trace, the linearly corrected event times
//! in index order, and the messages as pairs of event references. The report
//! ([`ClcReport`]) serializes to exactly the `correct --json` shape of the contracts.
//!
//! Cost: the forward pass visits events in a global merge order (a heap over the traces' cursors,
//! O(n log T)), message look-ups use sorted indexes (O(m log m)), and each backward ramp touches only
//! the events inside its amortization window.

use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

/// One event: the `index`-th event (0-based, in time order) of trace `trace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct EventRef {
    pub trace: usize,
    pub index: usize,
}

/// A matched message: the send event and the receive event of the same packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    pub send: EventRef,
    pub recv: EventRef,
}

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
    /// The pairs set one by one, keyed (from, to): memory grows with the pairs that exchanged
    /// messages, not with the square of the trace count.
    set: FxHashMap<(u32, u32), i64>,
}

impl PairLatency {
    /// A table for `traces` traces where every pair has latency `default_ns` (not marked known).
    pub fn new(traces: usize, default_ns: i64) -> Self {
        PairLatency {
            traces,
            default_ns,
            uniform: false,
            set: FxHashMap::default(),
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
        self.set.insert(key, ns);
    }

    /// `l_min` of messages from `from` to `to` (the default where never set).
    pub fn get(&self, from: usize, to: usize) -> i64 {
        self.known(from, to).unwrap_or(self.default_ns)
    }

    /// `l_min` of messages from `from` to `to` if it was set (measured or given by the user).
    pub fn known(&self, from: usize, to: usize) -> Option<i64> {
        let key = self.key(from, to);
        match self.set.get(&key) {
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

/// Tuning of the controlled logical clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClcParams {
    /// Forward amortization factor γ ∈ (0, 1]: after a jump, the corrected clock advances at γ
    /// times the speed of the input clock until it meets it again. Becker: 0.99 or 0.999 is good
    /// enough because drift after a linear correction is below 10⁻⁴.
    pub gamma: f64,
    /// δ: the minimum spacing in ns kept between consecutive events of a trace once they have
    /// been moved. 0 keeps events with equal input times equal.
    pub delta_ns: i64,
    /// ρ = Δt / L_A: the slope of the backward amortization ramp (Becker: "a few percent").
    /// 0 disables backward amortization.
    pub rho: f64,
}

impl Default for ClcParams {
    fn default() -> Self {
        ClcParams {
            gamma: 0.999,
            delta_ns: 0,
            rho: 0.01,
        }
    }
}

/// What the CLC was given: linearly corrected times and the messages between them.
#[derive(Clone, Debug, Default)]
pub struct ClcInput {
    /// Per trace, its events' times in ns on the common timebase, in the trace's own order
    /// (non-decreasing; the order of the index is the order that is kept).
    pub traces: Vec<Vec<i64>>,
    /// The matched messages. A receive with several sends (e.g. one GRO segment) must follow all
    /// of them; a send with several receives must precede all of them.
    pub messages: Vec<Message>,
}

/// Average and largest forward displacement of the events, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Displacement {
    pub mean: f64,
    pub max: f64,
}

/// Share (0..1) of local intervals (between consecutive events of a trace) whose length the CLC
/// changed by more than 0.01 %, 1 % and 100 % (Becker Table 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct IntervalDeviationShare {
    pub gt_0_01_pct: f64,
    pub gt_1_pct: f64,
    pub gt_100_pct: f64,
}

/// The `correct --json` report (contracts.md), with a few extra fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClcReport {
    pub gamma: f64,
    /// Messages with `t_recv < t_send + l_min` before the CLC.
    pub violations_before: u64,
    /// The same after the CLC: always 0 unless the input was inconsistent.
    pub violations_after: u64,
    /// Receives moved by the forward pass (violations not already removed by earlier moves).
    pub corrected_explicitly: u64,
    pub displacement_ns: Displacement,
    pub interval_deviation_share: IntervalDeviationShare,
    /// Extra: messages received before they were sent (`t_recv < t_send`) before the CLC.
    pub reversed_before: u64,
    /// Extra: events and messages processed.
    pub events: u64,
    pub messages: u64,
    /// Extra: events the CLC moved.
    pub events_moved: u64,
    /// Extra: δ and ρ used.
    pub delta_ns: i64,
    pub rho: f64,
}

/// The corrected times, same shape as [`ClcInput::traces`], and the report.
#[derive(Clone, Debug)]
pub struct ClcOutcome {
    pub corrected: Vec<Vec<i64>>,
    pub report: ClcReport,
}

/// Why the CLC could not run.
#[derive(thiserror::Error, Debug, PartialEq)]
pub enum ClcError {
    #[error(
        "message {message} refers to event {index} of trace {trace}, which does not exist \
         (the trace has {len} events)"
    )]
    NoSuchEvent {
        message: usize,
        trace: usize,
        index: usize,
        len: usize,
    },
    #[error(
        "trace {trace} is not in time order at event {index} ({before} ns, then {after} ns); \
         sort each trace's events by time before correcting"
    )]
    Unsorted {
        trace: usize,
        index: usize,
        before: i64,
        after: i64,
    },
    #[error("{0} messages are more than one CLC run handles (2^32 − 1); correct in parts")]
    TooManyMessages(usize),
    #[error("the l_min table covers {table} traces but the input has {input}")]
    LatencyTableSize { table: usize, input: usize },
    #[error("invalid CLC parameter: {0} (γ must be in (0, 1], δ ≥ 0, ρ ≥ 0 and finite)")]
    Params(String),
    #[error(
        "the messages form a causal cycle: event {index} of trace {trace} is a receive that \
         would have to happen before its own send; the message matching is wrong for this trace set"
    )]
    CausalCycle { trace: usize, index: usize },
}

/// Message indexes sorted by their send event and by their receive event (flat event ids).
struct MessageIndex {
    by_send: Vec<(usize, u32)>,
    by_recv: Vec<(usize, u32)>,
}

impl MessageIndex {
    fn new(messages: &[Message], offsets: &[usize]) -> Self {
        let gid = |e: EventRef| offsets[e.trace] + e.index;
        let mut by_send: Vec<(usize, u32)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (gid(m.send), i as u32))
            .collect();
        let mut by_recv: Vec<(usize, u32)> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| (gid(m.recv), i as u32))
            .collect();
        by_send.sort_unstable();
        by_recv.sort_unstable();
        MessageIndex { by_send, by_recv }
    }

    fn range(list: &[(usize, u32)], gid: usize) -> &[(usize, u32)] {
        let lo = list.partition_point(|&(g, _)| g < gid);
        let hi = lo + list[lo..].partition_point(|&(g, _)| g == gid);
        &list[lo..hi]
    }

    /// The entries of `list` for event `gid`, searching forward from `from` (a per-trace cursor
    /// that only moves forward, as events are visited in index order): O(1) amortized and
    /// cache-friendly, where a binary search per event would miss the cache on every step.
    fn run_from(list: &[(usize, u32)], from: usize, gid: usize) -> std::ops::Range<usize> {
        let mut start = from;
        while start < list.len() && list[start].0 < gid {
            start += 1;
        }
        let mut end = start;
        while end < list.len() && list[end].0 == gid {
            end += 1;
        }
        start..end
    }

    fn sent_at(&self, gid: usize) -> impl Iterator<Item = usize> + '_ {
        Self::range(&self.by_send, gid)
            .iter()
            .map(|&(_, m)| m as usize)
    }
}

/// A receive the forward pass moved: the basis for one backward ramp.
struct Jump {
    trace: usize,
    index: usize,
    delta_t: i64,
    /// The previous moved receive of the same trace: the ramp does not reach back past it.
    previous: Option<usize>,
}

/// Runs the controlled logical clock over all traces and reports what it changed.
///
/// The result satisfies `t_recv ≥ t_send + l_min(from, to)` for every message, never moves a
/// timestamp backward and keeps every trace's order (`corrected[i]` is non-decreasing, like the
/// input must be). Errors name the message or event that makes the input unusable.
pub fn correct(
    input: &ClcInput,
    l_min: &PairLatency,
    params: &ClcParams,
) -> Result<ClcOutcome, ClcError> {
    validate(input, l_min, params)?;
    let offsets = flat_offsets(&input.traces);
    let index = MessageIndex::new(&input.messages, &offsets);
    let (violations_before, reversed_before) = count_violations(&input.traces, input, l_min);

    let mut corrected = input.traces.clone();
    let jumps = forward_pass(input, l_min, params, &offsets, &index, &mut corrected)?;
    if params.rho > 0.0 {
        for jump in jumps.iter().rev() {
            backward_ramp(input, l_min, params, &offsets, &index, jump, &mut corrected);
        }
    }
    let (violations_after, _) = count_violations(&corrected, input, l_min);
    let report = ClcReport {
        gamma: params.gamma,
        violations_before,
        violations_after,
        corrected_explicitly: jumps.len() as u64,
        displacement_ns: displacement(&input.traces, &corrected),
        interval_deviation_share: interval_deviation(&input.traces, &corrected),
        reversed_before,
        events: offsets[input.traces.len()] as u64,
        messages: input.messages.len() as u64,
        events_moved: moved(&input.traces, &corrected),
        delta_ns: params.delta_ns,
        rho: params.rho,
    };
    Ok(ClcOutcome { corrected, report })
}

fn validate(input: &ClcInput, l_min: &PairLatency, params: &ClcParams) -> Result<(), ClcError> {
    if !(params.gamma > 0.0 && params.gamma <= 1.0) {
        return Err(ClcError::Params(format!("γ = {}", params.gamma)));
    }
    if params.delta_ns < 0 {
        return Err(ClcError::Params(format!("δ = {} ns", params.delta_ns)));
    }
    if !(params.rho >= 0.0 && params.rho.is_finite()) {
        return Err(ClcError::Params(format!("ρ = {}", params.rho)));
    }
    if input.messages.len() > u32::MAX as usize {
        return Err(ClcError::TooManyMessages(input.messages.len()));
    }
    if l_min.traces() != input.traces.len() {
        return Err(ClcError::LatencyTableSize {
            table: l_min.traces(),
            input: input.traces.len(),
        });
    }
    for (trace, times) in input.traces.iter().enumerate() {
        if let Some(k) = times.windows(2).position(|w| w[1] < w[0]) {
            return Err(ClcError::Unsorted {
                trace,
                index: k + 1,
                before: times[k],
                after: times[k + 1],
            });
        }
    }
    for (message, m) in input.messages.iter().enumerate() {
        for e in [m.send, m.recv] {
            let len = input.traces.get(e.trace).map_or(0, Vec::len);
            if e.index >= len {
                return Err(ClcError::NoSuchEvent {
                    message,
                    trace: e.trace,
                    index: e.index,
                    len,
                });
            }
        }
    }
    Ok(())
}

fn flat_offsets(traces: &[Vec<i64>]) -> Vec<usize> {
    let mut offsets = Vec::with_capacity(traces.len() + 1);
    let mut total = 0;
    offsets.push(0);
    for t in traces {
        total += t.len();
        offsets.push(total);
    }
    offsets
}

/// (messages with `t_recv < t_send + l_min`, messages with `t_recv < t_send`).
fn count_violations(times: &[Vec<i64>], input: &ClcInput, l_min: &PairLatency) -> (u64, u64) {
    let mut violations = 0;
    let mut reversed = 0;
    for m in &input.messages {
        let send = times[m.send.trace][m.send.index];
        let recv = times[m.recv.trace][m.recv.index];
        if recv < send.saturating_add(l_min.get(m.send.trace, m.recv.trace)) {
            violations += 1;
        }
        if recv < send {
            reversed += 1;
        }
    }
    (violations, reversed)
}

/// Becker eq. (4a)/(4'a)/(4b) in a topological order: every receive after all its sends.
///
/// Traces are advanced in a global merge order by input time (a heap of cursors). A trace whose
/// next event is a receive with an unprocessed send waits, and is woken when that send is done.
fn forward_pass(
    input: &ClcInput,
    l_min: &PairLatency,
    params: &ClcParams,
    offsets: &[usize],
    index: &MessageIndex,
    corrected: &mut [Vec<i64>],
) -> Result<Vec<Jump>, ClcError> {
    let traces = &input.traces;
    let mut cursor = vec![0usize; traces.len()];
    let mut waiting = vec![false; traces.len()];
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = traces
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.is_empty())
        .map(|(i, t)| Reverse((t[0], i)))
        .collect();
    let messages = &input.messages;
    let all_sent = |cursor: &[usize], ms: &[(usize, u32)]| {
        ms.iter().all(|&(_, m)| {
            let s = messages[m as usize].send;
            cursor[s.trace] > s.index
        })
    };
    // Per trace: where its events' entries start in the receive and send indexes.
    let first_entry = |list: &[(usize, u32)]| -> Vec<usize> {
        offsets[..traces.len()]
            .iter()
            .map(|&o| list.partition_point(|&(g, _)| g < o))
            .collect()
    };
    let mut recv_cursor = first_entry(&index.by_recv);
    let mut send_cursor = first_entry(&index.by_send);
    let mut jumps = Vec::new();
    let mut last_jump: Vec<Option<usize>> = vec![None; traces.len()];
    while let Some(Reverse((_, i))) = heap.pop() {
        let j = cursor[i];
        let gid = offsets[i] + j;
        let received = MessageIndex::run_from(&index.by_recv, recv_cursor[i], gid);
        let received_here = &index.by_recv[received.clone()];
        if !all_sent(&cursor, received_here) {
            waiting[i] = true;
            continue;
        }
        let c = traces[i][j];
        let mut base = c;
        if j > 0 {
            let prev = corrected[i][j - 1];
            let amortized = prev + (params.gamma * (c - traces[i][j - 1]) as f64).floor() as i64;
            base = base.max(prev + params.delta_ns).max(amortized);
        }
        let need = received_here
            .iter()
            .map(|&(_, m)| {
                let s = messages[m as usize].send;
                corrected[s.trace][s.index].saturating_add(l_min.get(s.trace, i))
            })
            .max();
        corrected[i][j] = match need {
            Some(need) if need > base => {
                jumps.push(Jump {
                    trace: i,
                    index: j,
                    delta_t: need - base,
                    previous: last_jump[i].replace(j),
                });
                need
            }
            _ => base,
        };
        cursor[i] = j + 1;
        recv_cursor[i] = received.end;
        if j + 1 < traces[i].len() {
            heap.push(Reverse((traces[i][j + 1], i)));
        }
        // Wake the traces that wait on a receive of this send.
        let sent = MessageIndex::run_from(&index.by_send, send_cursor[i], gid);
        send_cursor[i] = sent.end;
        for &(_, m) in &index.by_send[sent] {
            let r = messages[m as usize].recv;
            if waiting[r.trace] && cursor[r.trace] == r.index {
                let rgid = offsets[r.trace] + r.index;
                let pending = MessageIndex::run_from(&index.by_recv, recv_cursor[r.trace], rgid);
                if all_sent(&cursor, &index.by_recv[pending]) {
                    waiting[r.trace] = false;
                    heap.push(Reverse((traces[r.trace][r.index], r.trace)));
                }
            }
        }
    }
    if let Some(trace) = (0..traces.len()).find(|&i| cursor[i] < traces[i].len()) {
        return Err(ClcError::CausalCycle {
            trace,
            index: cursor[trace],
        });
    }
    Ok(jumps)
}

/// Backward amortization of one jump (Becker §3.2): the step `Δt` at receive `r` is spread
/// over the amortization interval `[x_r − L_A, x_r)` before it, where `x_r` is the receive's time
/// without the jump and `L_A = Δt / ρ`.
///
/// The interval stops at the previous moved receive of the same trace (the ramp then gets
/// steeper). Windows of one trace are thus disjoint: every event is moved by at most one ramp and
/// the backward pass is linear, where Becker's independent ramps would touch the same events
/// once per nearby jump — quadratic when violations come in bursts.
///
/// The ideal ramp `f0(x) = Δt·(x − x_r + L_A)/L_A` is lowered where a send in the window cannot
/// move that far: going from right to left, each send gets `g = min(f0, cap, g_right)`, with `cap`
/// the distance to its receives' times minus `l_min`; sends where `g < f0` become anchors of a
/// piecewise-linear ramp. The result is ≤ f0 and ≤ every cap (no new violation) and
/// non-decreasing (order kept).
fn backward_ramp(
    input: &ClcInput,
    l_min: &PairLatency,
    params: &ClcParams,
    offsets: &[usize],
    index: &MessageIndex,
    jump: &Jump,
    corrected: &mut [Vec<i64>],
) {
    let i = jump.trace;
    let delta_t = jump.delta_t as f64;
    let x_r = corrected[i][jump.index] - jump.delta_t;
    let mut start = x_r as f64 - delta_t / params.rho;
    let mut lowest = 0;
    if let Some(p) = jump.previous {
        start = start.max(corrected[i][p] as f64);
        lowest = p + 1;
    }
    let length = x_r as f64 - start;
    let times = &corrected[i][lowest..jump.index];
    let first = lowest + times.partition_point(|&t| (t as f64) < start);
    if first == jump.index || length <= 0.0 {
        return;
    }
    let f0 = |x: i64| delta_t * (x as f64 - start) / length;

    // Right to left: the running cap and the anchors (index, x, offset), the receive first.
    let mut anchors: Vec<(usize, f64, f64)> = vec![(jump.index, x_r as f64, delta_t)];
    let mut running = delta_t;
    for j in (first..jump.index).rev() {
        let x = corrected[i][j];
        let gid = offsets[i] + j;
        let cap = index
            .sent_at(gid)
            .map(|m| {
                let r = input.messages[m].recv;
                corrected[r.trace][r.index] - l_min.get(i, r.trace) - x
            })
            .min();
        let Some(cap) = cap else { continue };
        let ideal = f0(x);
        running = running.min(ideal).min(cap.max(0) as f64);
        if running < ideal {
            anchors.push((j, x as f64, running));
        }
    }
    anchors.push((first.wrapping_sub(1), start, 0.0));
    anchors.reverse();

    // Left to right: interpolate between the anchors that surround each event.
    let mut next = 1;
    for (j, time) in corrected[i]
        .iter_mut()
        .enumerate()
        .take(jump.index)
        .skip(first)
    {
        while anchors[next].0 < j {
            next += 1;
        }
        let (right_j, right_x, right_g) = anchors[next];
        let offset = if right_j == j {
            right_g
        } else {
            let (_, left_x, left_g) = anchors[next - 1];
            let x = *time as f64;
            if right_x > left_x {
                left_g + (right_g - left_g) * (x - left_x) / (right_x - left_x)
            } else {
                left_g
            }
        };
        *time += offset.max(0.0).floor() as i64;
    }
}

fn displacement(before: &[Vec<i64>], after: &[Vec<i64>]) -> Displacement {
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

fn interval_deviation(before: &[Vec<i64>], after: &[Vec<i64>]) -> IntervalDeviationShare {
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

fn moved(before: &[Vec<i64>], after: &[Vec<i64>]) -> u64 {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| b.iter().zip(a).filter(|(x, y)| x != y).count() as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn msg(st: usize, si: usize, rt: usize, ri: usize) -> Message {
        Message {
            send: EventRef {
                trace: st,
                index: si,
            },
            recv: EventRef {
                trace: rt,
                index: ri,
            },
        }
    }

    /// A generated event: (true time, trace, Some((message id, is send))).
    type TrueEvent = (i64, usize, Option<(usize, bool)>);

    fn no_backward_ramp() -> ClcParams {
        ClcParams {
            rho: 0.0,
            ..ClcParams::default()
        }
    }

    #[test]
    fn forward_amortization_follows_becker_eq_4() {
        // Trace 0 sends at 100; trace 1 receives it at 50 (a violation), then has events at 1050
        // and 1_000_000.
        let input = ClcInput {
            traces: vec![vec![100], vec![50, 1050, 1_000_000]],
            messages: vec![msg(0, 0, 1, 0)],
        };
        let mut l_min = PairLatency::new(2, 0);
        l_min.set(0, 1, 10);
        let out = correct(&input, &l_min, &no_backward_ramp()).unwrap();
        // The receive jumps to 100 + 10; the next event keeps γ of its interval; the far one
        // has caught up and keeps its time.
        assert_eq!(out.corrected[1], vec![110, 110 + 999, 1_000_000]);
        assert_eq!(out.corrected[0], vec![100]);
        let r = &out.report;
        assert_eq!(
            (
                r.violations_before,
                r.violations_after,
                r.corrected_explicitly
            ),
            (1, 0, 1)
        );
        assert_eq!(r.reversed_before, 1);
        assert_eq!(r.displacement_ns.max, 60.0);
        assert_eq!(r.events_moved, 2);
    }

    #[test]
    fn receive_with_several_sends_follows_the_latest() {
        let input = ClcInput {
            traces: vec![vec![100], vec![300], vec![120]],
            messages: vec![msg(0, 0, 2, 0), msg(1, 0, 2, 0)],
        };
        let out = correct(&input, &PairLatency::new(3, 5), &no_backward_ramp()).unwrap();
        assert_eq!(out.corrected[2], vec![305]);
    }

    #[test]
    fn backward_ramp_spreads_the_jump_and_respects_send_caps() {
        // Trace 1 has events every 1000 ns up to its receive at 100_000, which must move to
        // 110_000 (Δt = 10_000; with ρ = 0.1, L_A = 100_000: the ramp covers all of them).
        // Trace 1's event at 95_000 is a send whose receive on trace 0 is at 96_000: it may move
        // by at most 1_000 − l_min.
        let t1: Vec<i64> = (0..=100).map(|k| k * 1000).collect();
        let input = ClcInput {
            traces: vec![vec![96_000, 109_990], t1.clone()],
            messages: vec![msg(1, 95, 0, 0), msg(0, 1, 1, 100)],
        };
        let params = ClcParams {
            rho: 0.1,
            ..ClcParams::default()
        };
        let out = correct(&input, &PairLatency::new(2, 10), &params).unwrap();
        let c = &out.corrected[1];
        assert_eq!(c[100], 110_000);
        assert_eq!(out.report.violations_after, 0);
        // The capped send moved exactly up to its cap.
        assert_eq!(c[95], 96_000 - 10);
        // Before the send, the ramp rises linearly from 0 (at the window start) to the cap.
        assert_eq!(c[0], 0);
        assert!(c[50] > t1[50] && c[50] - t1[50] < 990);
        // After the send the ramp rises to the full jump; order is kept everywhere.
        assert!(c.windows(2).all(|w| w[0] <= w[1]));
        assert!(c[99] > t1[99] + 990 && c[99] <= 110_000);
        // No event moved further than the jump, none backward.
        assert!(c.iter().zip(&t1).all(|(a, b)| a >= b && a - b <= 10_000));
    }

    #[test]
    fn ramps_stop_at_the_previous_moved_receive() {
        // Trace 1: events every 1_000 ns; receives at index 2 (1_000 ns too early) and 6 (about
        // 13 µs too early). With ρ = 0.01 the second ramp would reach back 1.3 ms, over the whole
        // trace; it stops at the first receive instead.
        let t1: Vec<i64> = (0..8).map(|k| k * 1000).collect();
        let input = ClcInput {
            traces: vec![vec![3_000, 20_000], t1.clone()],
            messages: vec![msg(0, 0, 1, 2), msg(0, 1, 1, 6)],
        };
        let forward = correct(&input, &PairLatency::new(2, 0), &no_backward_ramp()).unwrap();
        assert_eq!(
            forward.corrected[1],
            vec![0, 1000, 3000, 3999, 4998, 5997, 20_000, 20_999]
        );
        let out = correct(&input, &PairLatency::new(2, 0), &ClcParams::default()).unwrap();
        let c = &out.corrected[1];
        assert_eq!(out.report.corrected_explicitly, 2);
        // Before the first receive only its own ramp acts (Δt = 1000 over 100 µs: offsets 980
        // and 990); the second ramp would have moved these by thousands of ns.
        assert_eq!(&c[..3], &[980, 1990, 3000]);
        // Between the receives: the ramp from 3000 (offset 0) to 6996 (offset 13_004).
        let ramp = |x: f64| x + 13_004.0 * (x - 3000.0) / 3996.0;
        for (k, x) in [(3, 3999.0), (4, 4998.0), (5, 5997.0)] {
            assert_eq!(c[k], ramp(x).floor() as i64, "event {k}");
        }
        assert_eq!(&c[6..], &[20_000, 20_999]);
        assert_eq!(out.report.violations_after, 0);
    }

    #[test]
    fn causal_cycle_is_an_error_not_a_hang() {
        // Each trace receives, as its first event, what the other sends as its second.
        let input = ClcInput {
            traces: vec![vec![0, 10], vec![0, 10]],
            messages: vec![msg(0, 1, 1, 0), msg(1, 1, 0, 0)],
        };
        let err = correct(&input, &PairLatency::new(2, 0), &ClcParams::default()).unwrap_err();
        assert!(matches!(err, ClcError::CausalCycle { .. }), "{err}");
    }

    #[test]
    fn bad_input_is_named() {
        let input = ClcInput {
            traces: vec![vec![0, 10], vec![5]],
            messages: vec![msg(0, 2, 1, 0)],
        };
        let err = correct(&input, &PairLatency::new(2, 0), &ClcParams::default()).unwrap_err();
        assert_eq!(
            err,
            ClcError::NoSuchEvent {
                message: 0,
                trace: 0,
                index: 2,
                len: 2
            }
        );
        let unsorted = ClcInput {
            traces: vec![vec![10, 5]],
            messages: vec![],
        };
        let err = correct(&unsorted, &PairLatency::new(1, 0), &ClcParams::default());
        assert!(matches!(
            err,
            Err(ClcError::Unsorted {
                trace: 0,
                index: 1,
                ..
            })
        ));
        let bad_gamma = ClcParams {
            gamma: 1.5,
            ..ClcParams::default()
        };
        assert!(correct(&unsorted, &PairLatency::new(1, 0), &bad_gamma).is_err());
        assert!(matches!(
            correct(&input, &PairLatency::new(3, 0), &ClcParams::default()),
            Err(ClcError::LatencyTableSize { table: 3, input: 2 })
        ));
    }

    #[test]
    fn min_rtt_gives_half_in_both_directions() {
        let t = PairLatency::from_min_rtt(3, 0, [(0, 1, 42_000), (1, 0, 40_000), (1, 2, 7)]);
        assert_eq!(t.get(0, 1), 20_000);
        assert_eq!(t.get(1, 0), 20_000);
        assert_eq!(t.get(2, 1), 3);
        assert_eq!(t.known(0, 2), None);
        assert_eq!(PairLatency::uniform(2, 9).known(1, 0), Some(9));
    }

    /// A synthetic capture: `nodes` traces with an event every ~10 µs over one second, messages
    /// between random pairs with a true latency ≥ 20 µs, and clock errors: trace 1 runs 30 µs
    /// early between 0.4 s and 0.45 s (a local glitch that a linear correction would leave).
    struct Synthetic {
        input: ClcInput,
        /// Input times of the glitch window on trace 1.
        glitch: (i64, i64),
    }

    fn synthetic(seed: u64) -> Synthetic {
        let mut rng = seed;
        let mut next = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let nodes = 3;
        let glitch = (400_000_000, 450_000_000);
        let error = |trace: usize, t: i64| {
            if trace == 1 && t >= glitch.0 && t < glitch.1 {
                t - 30_000
            } else {
                t
            }
        };
        // True-time events: (true time, trace, message id, is_send).
        let mut events: Vec<TrueEvent> = Vec::new();
        let mut t = 0i64;
        let mut id = 0;
        while t < 1_000_000_000 {
            t += 5_000 + next(10_000) as i64;
            let from = next(nodes as u64) as usize;
            if next(4) == 0 {
                let to = (from + 1 + next(nodes as u64 - 1) as usize) % nodes;
                events.push((t, from, Some((id, true))));
                events.push((t + 20_000 + next(30_000) as i64, to, Some((id, false))));
                id += 1;
            } else {
                events.push((t, from, None));
            }
        }
        events.sort_by_key(|e| e.0);
        let mut traces = vec![Vec::new(); nodes];
        let mut ends = vec![
            (
                EventRef { trace: 0, index: 0 },
                EventRef { trace: 0, index: 0 }
            );
            id
        ];
        for (t, trace, role) in events {
            let e = EventRef {
                trace,
                index: traces[trace].len(),
            };
            traces[trace].push(error(trace, t));
            match role {
                Some((m, true)) => ends[m].0 = e,
                Some((m, false)) => ends[m].1 = e,
                None => {}
            }
        }
        for tr in &mut traces {
            // The glitch may reorder a trace around its edges; keep the input sorted as the
            // linear correction would deliver it.
            let mut prev = i64::MIN;
            for x in tr.iter_mut() {
                *x = (*x).max(prev);
                prev = *x;
            }
        }
        let messages = ends
            .into_iter()
            .map(|(send, recv)| Message { send, recv })
            .collect();
        Synthetic {
            input: ClcInput { traces, messages },
            glitch,
        }
    }

    #[test]
    fn injected_violations_are_removed_and_far_events_keep_their_time() {
        let s = synthetic(7);
        let l_min = PairLatency::new(3, 20_000);
        let params = ClcParams::default();
        let out = correct(&s.input, &l_min, &params).unwrap();
        let r = &out.report;
        assert!(
            r.violations_before > 10,
            "the glitch must cause violations: {r:?}"
        );
        assert_eq!(r.violations_after, 0);
        assert!(r.corrected_explicitly > 0 && r.corrected_explicitly <= r.violations_before);
        for (before, after) in s.input.traces.iter().zip(&out.corrected) {
            assert!(after.windows(2).all(|w| w[0] <= w[1]), "order kept");
            assert!(
                before.iter().zip(after).all(|(b, a)| a >= b),
                "forward only"
            );
        }
        // Jumps are ≤ 30 µs + l_min: ramps reach back ≤ 5 ms (ρ = 1 %), forward amortization
        // catches up within ≤ 50 ms (γ = 0.999). Far from the glitch nothing moves.
        let far_before = s.glitch.0 - 10_000_000;
        let far_after = s.glitch.1 + 100_000_000;
        let mut far = 0;
        for (before, after) in s.input.traces.iter().zip(&out.corrected) {
            for (b, a) in before.iter().zip(after) {
                if *b < far_before || *b > far_after {
                    assert_eq!(a, b, "event at {b} ns is far from the glitch but moved");
                    far += 1;
                }
            }
        }
        assert!(far > 100_000);
        let share = r.interval_deviation_share;
        assert!(
            share.gt_0_01_pct > 0.0 && share.gt_0_01_pct < 0.2,
            "{share:?}"
        );
        assert!(share.gt_100_pct <= share.gt_1_pct && share.gt_1_pct <= share.gt_0_01_pct);
        let json = serde_json::to_value(r).unwrap();
        for key in [
            "gamma",
            "violations_before",
            "violations_after",
            "corrected_explicitly",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert!(json["displacement_ns"]["mean"].is_number());
        assert!(json["displacement_ns"]["max"].is_number());
        assert!(json["interval_deviation_share"]["gt_0_01_pct"].is_number());
        assert!(json["interval_deviation_share"]["gt_1_pct"].is_number());
        assert!(json["interval_deviation_share"]["gt_100_pct"].is_number());
    }

    /// Random causal histories seen through random per-trace clock offsets.
    fn causal_input() -> impl Strategy<Value = (ClcInput, i64)> {
        (2usize..5, 1usize..60, 0i64..5_000).prop_flat_map(|(nodes, n, l_min)| {
            (
                proptest::collection::vec(-20_000i64..20_000, nodes),
                proptest::collection::vec(
                    (
                        0..nodes,
                        0..nodes,
                        0i64..10_000,
                        0i64..10_000,
                        any::<bool>(),
                    ),
                    n,
                ),
            )
                .prop_map(move |(offsets, steps)| {
                    let mut events: Vec<TrueEvent> = Vec::new();
                    let mut t = 0;
                    let mut id = 0;
                    for (from, to, gap, latency, is_message) in steps {
                        t += gap;
                        if is_message && from != to {
                            events.push((t, from, Some((id, true))));
                            events.push((t + l_min + latency, to, Some((id, false))));
                            id += 1;
                        } else {
                            events.push((t, from, None));
                        }
                    }
                    events.sort_by_key(|e| e.0);
                    let mut traces = vec![Vec::new(); nodes];
                    let mut ends = vec![[EventRef { trace: 0, index: 0 }; 2]; id];
                    for (t, trace, role) in events {
                        let e = EventRef {
                            trace,
                            index: traces[trace].len(),
                        };
                        traces[trace].push(t + offsets[trace]);
                        if let Some((m, is_send)) = role {
                            ends[m][usize::from(!is_send)] = e;
                        }
                    }
                    let messages = ends
                        .into_iter()
                        .map(|[send, recv]| Message { send, recv })
                        .collect();
                    (ClcInput { traces, messages }, l_min)
                })
        })
    }

    proptest! {
        #[test]
        fn clc_invariants_hold(
            (input, l_min) in causal_input(),
            rho in prop_oneof![Just(0.0), 0.001f64..0.5],
            gamma in 0.9f64..=1.0,
            delta in 0i64..3,
        ) {
            let table = PairLatency::new(input.traces.len(), l_min);
            let params = ClcParams { gamma, delta_ns: delta, rho };
            let out = correct(&input, &table, &params).unwrap();
            prop_assert_eq!(out.report.violations_after, 0);
            for m in &input.messages {
                let s = out.corrected[m.send.trace][m.send.index];
                let r = out.corrected[m.recv.trace][m.recv.index];
                prop_assert!(r >= s + l_min);
            }
            for (before, after) in input.traces.iter().zip(&out.corrected) {
                prop_assert_eq!(before.len(), after.len());
                prop_assert!(after.windows(2).all(|w| w[0] <= w[1]));
                prop_assert!(before.iter().zip(after).all(|(b, a)| a >= b));
            }
            if out.report.violations_before == 0 && delta == 0 {
                prop_assert_eq!(&out.corrected, &input.traces);
            }
        }
    }
}
