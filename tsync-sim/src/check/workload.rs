//! A message workload's messages synchronized and compared with its clocks: each trace's map and
//! network-wide interval against the truth, and the path composition's interval beside it
//! (`cargo xtask bench mesh`).

use tsync_analyze::{Message, ReductionChoice, SyncOptions, SyncResult, sync_messages};

use crate::Workload;

/// One mesh, one reduction.
#[derive(Debug, Clone, Copy, Default)]
pub struct MeshError {
    /// Worst |map − truth| over the traces at the middle of the run (ns).
    pub worst_mid_ns: f64,
    /// Mean |map − truth| over the traces at the middle (ns).
    pub mean_mid_ns: f64,
    /// Worst |map − truth| over the traces and 101 points across the run (ns).
    pub worst_ns: f64,
    /// Checked points where the truth lies outside the trace's interval.
    pub outside: usize,
    /// Checked points with an interval.
    pub with_interval: usize,
    /// Mean network-wide interval width at the middle (ns).
    pub mean_width_ns: f64,
    /// Mean path-composed interval width at the middle (ns).
    pub mean_path_width_ns: f64,
}

/// The workload's messages as the analyzer's.
pub fn messages(w: &Workload) -> Vec<Message> {
    let mut messages = Vec::with_capacity(w.messages as usize);
    w.generate(|m, _| {
        messages.push(Message {
            send_trace: m.send_trace,
            recv_trace: m.recv_trace,
            send_ns: m.send_ns,
            recv_ns: m.recv_ns,
        })
    });
    messages
}

/// A mesh whose pairs with trace 0 (the reference) carry 20 times fewer messages than the others:
/// their own intervals are wide, and the network's detours are what bounds those traces.
pub fn uneven(traces: usize, messages: u64, seed: u64) -> Workload {
    let mut w = Workload::benchmark(traces, messages, seed);
    let others: Vec<(u32, u32)> = w.links.iter().copied().filter(|l| l.0 != 0).collect();
    for _ in 0..19 {
        w.links.extend_from_slice(&others);
    }
    w
}

/// Synchronizes the workload's messages with `reduction` (trace 0 the reference) and compares.
pub fn measure(w: &Workload, reduction: ReductionChoice) -> MeshError {
    let names: Vec<String> = (0..w.clocks.len()).map(|i| i.to_string()).collect();
    let options = SyncOptions {
        reduction,
        ..Default::default()
    };
    let sync = sync_messages(&names, messages(w), &options, Some(0));
    compare(w, &sync)
}

/// Each trace's map and interval against the truth (on its group's reference's clock), from 1 s
/// after the first message to 1 s before the last.
pub fn compare(w: &Workload, sync: &SyncResult) -> MeshError {
    let (start, end) = (w.start_ns + 1e9, w.end_ns() - 1e9);
    let mid = (start + end) / 2.0;
    let others = (w.clocks.len() - 1) as f64;
    let mut e = MeshError::default();
    for (k, clock) in w.clocks.iter().enumerate() {
        let r = sync.traces[k].reference as usize;
        if r == k {
            continue;
        }
        let reference = &w.clocks[r];
        let at = |t: f64| {
            let local = clock.local(t);
            let truth = reference.local(t) as f64;
            (
                sync.to_reference(k as u32, local) - truth,
                sync.interval(k as u32, local),
                truth,
            )
        };
        let (mid_err, mid_interval, _) = at(mid);
        e.worst_mid_ns = e.worst_mid_ns.max(mid_err.abs());
        e.mean_mid_ns += mid_err.abs() / others;
        if let Some((lo, hi)) = mid_interval {
            e.mean_width_ns += (hi - lo) / others;
        }
        if let Some((lo, hi)) = sync.path_interval(k as u32, clock.local(mid)) {
            e.mean_path_width_ns += (hi - lo) / others;
        }
        for i in 0..=100 {
            let (err, interval, truth) = at(start + (end - start) * i as f64 / 100.0);
            e.worst_ns = e.worst_ns.max(err.abs());
            if let Some((lo, hi)) = interval {
                e.with_interval += 1;
                if truth < lo - 1.0 || truth > hi + 1.0 {
                    e.outside += 1;
                }
            }
        }
    }
    e
}
