//! Fast deterministic message workloads with known clocks, for tests and benchmarks.
//!
//! Every trace has a [`LinearClock`]. Messages are sent at increasing true times between random
//! linked pairs, each one-way delay drawn from one [`Delay`]. The truth is known exactly, so a
//! test can check the estimate, the guaranteed interval and the absence of inversions. Unlike
//! the [simulator](crate::simulate), nothing here models a kernel: no slewing, no wander, one
//! segment per message. What it buys is speed (tens of millions of messages per second from
//! [`generate`](Workload::generate), as the benchmarks need) and a small, literal description.

use std::io::Write;
use std::path::{Path, PathBuf};

use tsync_common::direction;
use tsync_common::format::{ClockSample, FormatError, Header};

use crate::agent::{NodeWriter, Reading};
use crate::clock::LinearClock;
use crate::network::{Delay, DelayTail};
use crate::random::SplitMix64;
use crate::text::TextWriter;
use crate::traffic::Flows;

/// One message: sent on `send_trace` at `send_ns` (its local clock), received on `recv_trace`
/// at `recv_ns` (that trace's local clock). The analyzer's message has the same fields; its
/// tests convert (this crate does not depend on the analyzer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    /// Index of the sending trace.
    pub send_trace: u32,
    /// Index of the receiving trace.
    pub recv_trace: u32,
    /// Send time on the sender's clock, ns.
    pub send_ns: i64,
    /// Receive time on the receiver's clock, ns.
    pub recv_ns: i64,
}

/// A workload.
#[derive(Clone, Debug)]
pub struct Workload {
    /// One clock per trace; the truth the estimates are checked against.
    pub clocks: Vec<LinearClock>,
    /// Trace pairs that talk (unordered); each message picks one and a direction at random.
    pub links: Vec<(u32, u32)>,
    /// Number of messages.
    pub messages: u64,
    /// True time of the first message (ns); keep it large enough for local times to be ≥ 0.
    pub start_ns: f64,
    /// Mean true time between messages (ns).
    pub interval_ns: f64,
    /// One-way delay of every message (its cap bounds how far receive events trail sends).
    pub delay: Delay,
    /// Random seed: the same seed gives the same messages.
    pub seed: u64,
}

/// Base of the synthetic wall clock (ns since the epoch), for trace headers and clock samples.
const REALTIME_BASE_NS: i64 = 1_700_000_000_000_000_000;

impl Workload {
    /// A benchmark-style workload: `traces` traces with random clocks (offset within ±10 s, drift
    /// within ±200 ppm), all pairs linked, a message every 100 µs on average, one-way delays of
    /// 20 µs plus an exponential extra of mean 30 µs (capped at 5 ms).
    pub fn benchmark(traces: usize, messages: u64, seed: u64) -> Workload {
        let mut w = Workload::unlinked(traces, messages, seed);
        for a in 0..traces as u32 {
            for b in a + 1..traces as u32 {
                w.links.push((a, b));
            }
        }
        w
    }

    /// The benchmark's clocks, timing and delays, with no link yet.
    fn unlinked(traces: usize, messages: u64, seed: u64) -> Workload {
        let mut rng = SplitMix64::new(seed ^ 0x5EED);
        let clocks = (0..traces)
            .map(|_| LinearClock {
                offset_ns: (rng.unit() * 2.0 - 1.0) * 10e9,
                drift_ppm: (rng.unit() * 2.0 - 1.0) * 200.0,
            })
            .collect();
        Workload {
            clocks,
            links: Vec::new(),
            messages,
            start_ns: 20e9,
            interval_ns: 100_000.0,
            delay: Delay {
                min_ns: 20_000.0,
                tail: DelayTail::Exponential { mean_ns: 30_000.0 },
                max_ns: 5_020_000.0,
            },
            seed,
        }
    }

    /// [`benchmark`](Self::benchmark)'s clocks and delays on a sparse mesh, as clusters talk:
    /// each trace linked to its ring neighbour (so that the mesh is connected) and to
    /// `peers / 2` random others, about `peers` links per trace in all.
    pub fn sparse(traces: usize, peers: usize, messages: u64, seed: u64) -> Workload {
        let mut w = Workload::unlinked(traces, messages, seed);
        let mut rng = SplitMix64::new(seed ^ 0x5BA5E);
        let mut links = std::collections::BTreeSet::new();
        let n = traces as u32;
        for a in 0..n {
            if n > 1 {
                let b = (a + 1) % n;
                links.insert((a.min(b), a.max(b)));
            }
            for _ in 0..(peers / 2).saturating_sub(1) {
                let b = rng.below(n as u64) as u32;
                if b != a {
                    links.insert((a.min(b), a.max(b)));
                }
            }
        }
        w.links = links.into_iter().collect();
        w
    }

    /// True time (ns) by which every message has been sent: the expected span of the sends.
    pub fn end_ns(&self) -> f64 {
        self.start_ns + self.interval_ns * self.messages as f64
    }

    /// Generates the messages in true send-time order; `f` gets each message and its true send
    /// time.
    pub fn generate(&self, mut f: impl FnMut(Message, f64)) {
        self.generate_timed(|m, t, _| f(m, t));
    }

    /// Like [`generate`](Self::generate), with the true arrival time too.
    pub fn generate_timed(&self, mut f: impl FnMut(Message, f64, f64)) {
        let mut rng = SplitMix64::new(self.seed);
        let mut t = self.start_ns;
        for _ in 0..self.messages {
            t += self.interval_ns * 2.0 * rng.unit();
            let (a, b) = self.links[rng.below(self.links.len() as u64) as usize];
            let (s, r) = if rng.bits() & 1 == 0 { (a, b) } else { (b, a) };
            let arrive = t + self.delay.sample(&mut rng);
            let message = Message {
                send_trace: s,
                recv_trace: r,
                send_ns: self.clocks[s as usize].local(t),
                recv_ns: self.clocks[r as usize].local(arrive),
            };
            f(message, t, arrive);
        }
    }

    /// Writes the workload as a text message file.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let comment = format!("tsync synthetic workload, seed {}", self.seed);
        let mut w = TextWriter::new(out, self.clocks.len(), &comment)?;
        let mut result = Ok(());
        self.generate(|m, _| {
            if result.is_ok() {
                result = w.write(m.send_trace, m.recv_trace, m.send_ns, m.recv_ns);
            }
        });
        result?;
        w.finish()?.flush()
    }

    /// Writes the workload as agent trace files, one per trace (`node0.tsync`, …) in `dir`, and
    /// returns their paths. Every message is a TCP segment with a unique digest ([`Flows`]);
    /// events are written in each trace's time order, with a clock sample every simulated
    /// second (CLOCK_MONOTONIC_RAW = CLOCK_MONOTONIC: nothing slews these clocks).
    pub fn write_traces(&self, dir: &Path) -> Result<Vec<PathBuf>, FormatError> {
        let n = self.clocks.len();
        let paths: Vec<PathBuf> = (0..n).map(|k| dir.join(format!("node{k}.tsync"))).collect();
        let mut nodes = Vec::with_capacity(n);
        for (k, p) in paths.iter().enumerate() {
            let header = Header {
                node: format!("node{k}"),
                hostname: format!("node{k}"),
                clocksource: "synthetic".into(),
                start_realtime_ns: REALTIME_BASE_NS + self.start_ns as i64,
                start_monotonic_ns: self.clocks[k].local(self.start_ns) as u64,
                ..Header::default()
            };
            nodes.push(NodeWriter::create(p, &header)?);
        }
        let mut flows = Flows::default();
        let mut next_sample = self.start_ns;
        let mut error = None;
        self.generate_timed(|m, t, arrive| {
            if error.is_none()
                && let Err(e) = self.record(&mut nodes, &mut flows, &mut next_sample, m, t, arrive)
            {
                error = Some(e);
            }
        });
        if let Some(e) = error {
            return Err(e);
        }
        for node in nodes {
            node.finish(None)?;
        }
        Ok(paths)
    }

    /// Writes what is due before true time `t` on every trace (later events all happen after
    /// `t`), a clock sample per trace when a second has passed, and queues the message's two
    /// events.
    fn record(
        &self,
        nodes: &mut [NodeWriter],
        flows: &mut Flows,
        next_sample: &mut f64,
        m: Message,
        t: f64,
        arrive: f64,
    ) -> Result<(), FormatError> {
        for (node, clock) in nodes.iter_mut().zip(&self.clocks) {
            node.write_until(clock.local(t) as u64)?;
        }
        if t >= *next_sample {
            for (node, clock) in nodes.iter_mut().zip(&self.clocks) {
                let mono = clock.local(t) as u64;
                let sample = ClockSample {
                    monotonic_ns: mono,
                    monotonic_raw_ns: mono,
                    realtime_ns: REALTIME_BASE_NS + t as i64,
                    tsc: 0,
                    monotonic_after_ns: mono,
                };
                node.write_reading(Reading {
                    sample,
                    kernel: None,
                    flush: true,
                })?;
            }
            *next_sample += 1e9;
        }
        let mut event = flows.segment(m.send_trace, m.recv_trace, t, arrive);
        event.ifindex = 2;
        for (trace, ts, d) in [
            (m.send_trace, m.send_ns, direction::SEND),
            (m.recv_trace, m.recv_ns, direction::RECV),
        ] {
            event.ts_ns = ts as u64;
            event.direction = d;
            nodes[trace as usize].queue(event);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsync_common::format::TraceReader;

    #[test]
    fn messages_respect_the_delay_and_the_files_hold_every_one_in_order() {
        let w = Workload::benchmark(3, 20_000, 9);
        let (mut last, mut n) = (0.0, 0);
        w.generate_timed(|m, sent, arrived| {
            assert!(sent >= last, "true send order");
            last = sent;
            let delay = arrived - sent;
            assert!(
                delay >= w.delay.min_ns && delay <= w.delay.max_ns,
                "{delay}"
            );
            assert_eq!(m.send_ns, w.clocks[m.send_trace as usize].local(sent));
            assert_eq!(m.recv_ns, w.clocks[m.recv_trace as usize].local(arrived));
            n += 1;
        });
        assert_eq!(n, w.messages);
        let dir = tempfile::tempdir().unwrap();
        let mut events = 0;
        for path in w.write_traces(dir.path()).unwrap() {
            let mut reader = TraceReader::open(&path).unwrap();
            let mut previous = 0;
            while let Some(chunk) = reader.next_events().unwrap() {
                for e in chunk {
                    assert!(e.ts_ns >= previous, "time order in {}", path.display());
                    previous = e.ts_ns;
                    events += 1;
                }
            }
            assert!(reader.damage().is_none());
            assert!(reader.clock_samples().len() >= 2, "a sample per second");
        }
        assert_eq!(events, 2 * w.messages);
        let mut text = Vec::new();
        w.write_text(&mut text).unwrap();
        let lines = String::from_utf8(text).unwrap().lines().count() as u64;
        assert_eq!(lines, 2 + w.messages);
    }
}
