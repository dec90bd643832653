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
//! ([`ClcReport`]) serializes to exactly the `correct --json` document (docs/json.md).
//!
//! Cost: the forward pass visits events in a global merge order (a heap over the traces' cursors,
//! O(n log T)), message look-ups use sorted indexes (O(m log m)), and each backward ramp touches only
//! the events inside its amortization window.

use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub use crate::model::PairLatency;

mod statistics;
use crate::model::{EventRef, MessageRef};
use statistics::{displacement, interval_deviation, moved};

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
    pub messages: Vec<MessageRef>,
}

/// Average and largest forward displacement of the events, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Displacement {
    /// Mean over all events (moved or not), in ns.
    pub mean: f64,
    /// Largest displacement of any single event, in ns.
    pub max: f64,
}

/// Share (0..1) of local intervals (between consecutive events of a trace) whose length the CLC
/// changed by more than 0.01 %, 1 % and 100 % (Becker Table 4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct IntervalDeviationShare {
    /// Share of intervals changed by more than 0.01 % (relative deviation > 10⁻⁴).
    pub gt_0_01_pct: f64,
    /// Share of intervals changed by more than 1 %.
    pub gt_1_pct: f64,
    /// Share of intervals changed by more than 100 % (including zero-length intervals made
    /// non-zero).
    pub gt_100_pct: f64,
}

/// The `correct --json` report (docs/json.md).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClcReport {
    /// Forward amortization factor γ used ([`ClcParams::gamma`]).
    pub gamma: f64,
    /// Messages with `t_recv < t_send + l_min` before the CLC.
    pub violations_before: u64,
    /// The same after the CLC: always 0 unless the input was inconsistent.
    pub violations_after: u64,
    /// Receives moved by the forward pass (violations not already removed by earlier moves).
    pub corrected_explicitly: u64,
    /// How far events were moved forward, in ns.
    pub displacement_ns: Displacement,
    /// How many local intervals the CLC changed in length, by threshold.
    pub interval_deviation_share: IntervalDeviationShare,
    /// Extra: messages received before they were sent (`t_recv < t_send`) before the CLC.
    pub reversed_before: u64,
    /// Extra: events and messages processed.
    pub events: u64,
    /// Extra: messages processed (all of [`ClcInput::messages`]).
    pub messages: u64,
    /// Extra: events the CLC moved.
    pub events_moved: u64,
    /// Extra: δ and ρ used.
    pub delta_ns: i64,
    /// Extra: ρ used (0: no backward amortization).
    pub rho: f64,
}

/// The corrected times, same shape as [`ClcInput::traces`], and the report.
#[derive(Clone, Debug)]
pub struct ClcOutcome {
    /// Per trace, the corrected times in ns on the common timebase, never earlier than the
    /// input times.
    pub corrected: Vec<Vec<i64>>,
    /// What the CLC changed.
    pub report: ClcReport,
}

/// Why the CLC could not run.
#[derive(thiserror::Error, Debug, PartialEq)]
pub enum ClcError {
    /// A message refers to an event past the end of its trace.
    #[error(
        "message {message} refers to event {index} of trace {trace}, which does not exist \
         (the trace has {len} events)"
    )]
    NoSuchEvent {
        /// Index of the message in [`ClcInput::messages`].
        message: usize,
        /// Trace the message refers to.
        trace: usize,
        /// Index of the missing event in that trace.
        index: usize,
        /// Number of events the trace has.
        len: usize,
    },
    /// A trace's input times decrease somewhere.
    #[error(
        "trace {trace} is not in time order at event {index} ({before} ns, then {after} ns); \
         sort each trace's events by time before correcting"
    )]
    Unsorted {
        /// Trace that is out of order.
        trace: usize,
        /// First event whose time is earlier than its predecessor's.
        index: usize,
        /// Time of event `index - 1`, in ns.
        before: i64,
        /// Time of event `index`, in ns (less than `before`).
        after: i64,
    },
    /// More messages than the `u32` message ids of one run can address (the count).
    #[error("{0} messages are more than one CLC run handles (2^32 − 1); correct in parts")]
    TooManyMessages(usize),
    /// The `l_min` table was built for a different number of traces.
    #[error("the l_min table covers {table} traces but the input has {input}")]
    LatencyTableSize {
        /// Traces covered by the `l_min` table.
        table: usize,
        /// Traces in [`ClcInput::traces`].
        input: usize,
    },
    /// A [`ClcParams`] value is out of range (the offending parameter and value).
    #[error("invalid CLC parameter: {0} (γ must be in (0, 1], δ ≥ 0, ρ ≥ 0 and finite)")]
    Params(String),
    /// No order puts every receive after its sends: the matching pairs events inconsistently.
    #[error(
        "the messages form a causal cycle: event {index} of trace {trace} is a receive that \
         would have to happen before its own send; the message matching is wrong for this trace set"
    )]
    CausalCycle {
        /// First trace whose events the forward pass could not all place.
        trace: usize,
        /// Index of the first receive in that trace that could not be placed after its sends.
        index: usize,
    },
}

/// Message indexes sorted by their send event and by their receive event (flat event ids).
struct MessageIndex {
    by_send: Vec<(usize, u32)>,
    by_recv: Vec<(usize, u32)>,
}

impl MessageIndex {
    fn new(messages: &[MessageRef], offsets: &[usize]) -> Self {
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

#[cfg(test)]
mod tests;
