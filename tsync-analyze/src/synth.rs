//! Deterministic synthetic message workloads with known clocks, for tests and benchmarks.
//!
//! Every trace has a linear clock `local = true · (1 + drift_ppm·10⁻⁶) + offset_ns` (true time in
//! ns). Messages are sent at increasing true times between random pairs; each one-way delay is a
//! minimum plus an exponential (or Pareto heavy-tailed) extra. The truth is known exactly, so a
//! test can check the estimate, the guaranteed interval and the absence of inversions.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use tsync_common::format::{ClockSample, Footer, FormatError, Header, TraceWriter};
use tsync_common::{ETH_P_IP, IPPROTO_TCP, PacketEvent, direction, kind, tcp_flag};

use crate::model::Message;

/// A small, fast, deterministic PRNG (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator that gives the same sequence for the same seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// A linear clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clock {
    /// Local time at true time 0, ns.
    pub offset_ns: f64,
    /// How much faster than true time the clock runs, ppm.
    pub drift_ppm: f64,
}

impl Clock {
    /// Local time (ns, rounded) of a true time.
    #[inline]
    pub fn local(&self, true_ns: f64) -> i64 {
        (true_ns * (1.0 + self.drift_ppm * 1e-6) + self.offset_ns).round() as i64
    }

    /// True time of a local time.
    pub fn true_time(&self, local_ns: f64) -> f64 {
        (local_ns - self.offset_ns) / (1.0 + self.drift_ppm * 1e-6)
    }

    /// The exact map from this clock's local time to `other`'s.
    pub fn map_to(&self, other: &Clock, local_ns: f64) -> f64 {
        let t = self.true_time(local_ns);
        t * (1.0 + other.drift_ppm * 1e-6) + other.offset_ns
    }
}

/// Shape of the extra one-way delay beyond the minimum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DelayTail {
    /// Exponential with this mean (ns).
    Exponential {
        /// Mean extra delay, ns.
        mean_ns: f64,
    },
    /// Pareto with this scale (ns) and shape (heavy tail for shape ≤ 2).
    Pareto {
        /// Scale (the smallest extra delay), ns.
        scale_ns: f64,
        /// Shape α (heavier tail for smaller α).
        shape: f64,
    },
}

/// A workload.
#[derive(Clone, Debug)]
pub struct Workload {
    /// One clock per trace; the truth the estimates are checked against.
    pub clocks: Vec<Clock>,
    /// Trace pairs that talk (unordered); each message picks one and a direction at random.
    pub links: Vec<(u32, u32)>,
    /// Number of messages.
    pub messages: u64,
    /// True time of the first message (ns); keep it large enough for local times to be ≥ 0.
    pub start_ns: f64,
    /// Mean true time between messages (ns).
    pub interval_ns: f64,
    /// Smallest one-way delay (ns).
    pub min_delay_ns: f64,
    /// Distribution of the delay beyond the minimum.
    pub tail: DelayTail,
    /// Largest extra delay (ns): bounds how far receive events trail sends.
    pub max_extra_ns: f64,
    /// Random seed: the same seed gives the same messages.
    pub seed: u64,
}

impl Workload {
    /// A benchmark-style workload: `traces` traces with random clocks (offset within ±10 s, drift
    /// within ±200 ppm), all pairs linked (or a ring if `traces` > 2 and `all_pairs` is false).
    pub fn benchmark(traces: usize, messages: u64, seed: u64) -> Workload {
        let mut rng = Rng::new(seed ^ 0x5EED);
        let clocks = (0..traces)
            .map(|_| Clock {
                offset_ns: (rng.unit() * 2.0 - 1.0) * 10e9,
                drift_ppm: (rng.unit() * 2.0 - 1.0) * 200.0,
            })
            .collect();
        let mut links = Vec::new();
        for a in 0..traces as u32 {
            for b in a + 1..traces as u32 {
                links.push((a, b));
            }
        }
        Workload {
            clocks,
            links,
            messages,
            start_ns: 20e9,
            interval_ns: 100_000.0,
            min_delay_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 30_000.0 },
            max_extra_ns: 5_000_000.0,
            seed,
        }
    }

    /// Generates the messages in true send-time order; `f` gets each message and its true send
    /// time.
    pub fn generate(&self, mut f: impl FnMut(Message, f64)) {
        self.generate_timed(|m, t, _| f(m, t));
    }

    /// Like [`generate`](Self::generate), with the true arrival time too.
    pub fn generate_timed(&self, mut f: impl FnMut(Message, f64, f64)) {
        let mut rng = Rng::new(self.seed);
        let mut t = self.start_ns;
        for _ in 0..self.messages {
            t += self.interval_ns * 2.0 * rng.unit();
            let (a, b) = self.links[rng.below(self.links.len() as u64) as usize];
            let (s, r) = if rng.next_u64() & 1 == 0 {
                (a, b)
            } else {
                (b, a)
            };
            let extra = match self.tail {
                DelayTail::Exponential { mean_ns } => -mean_ns * (1.0 - rng.unit()).ln(),
                DelayTail::Pareto { scale_ns, shape } => {
                    scale_ns * ((1.0 - rng.unit()).powf(-1.0 / shape) - 1.0)
                }
            }
            .min(self.max_extra_ns);
            let arrive = t + self.min_delay_ns + extra;
            f(
                Message {
                    send_trace: s,
                    recv_trace: r,
                    send_ns: self.clocks[s as usize].local(t),
                    recv_ns: self.clocks[r as usize].local(arrive),
                },
                t,
                arrive,
            );
        }
    }

    /// Writes the workload as a text message file.
    pub fn write_text(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out);
        writeln!(w, "# tsync synthetic workload, seed {}", self.seed)?;
        writeln!(w, "{}", self.clocks.len())?;
        let mut line = String::with_capacity(64);
        let mut err = Ok(());
        self.generate(|m, _| {
            if err.is_err() {
                return;
            }
            line.clear();
            use std::fmt::Write as _;
            let _ = write!(line, "{} {} ", m.send_trace, m.recv_trace);
            crate::input::text::format_seconds(m.send_ns, &mut line);
            line.push(' ');
            crate::input::text::format_seconds(m.recv_ns, &mut line);
            line.push('\n');
            err = w.write_all(line.as_bytes());
        });
        err?;
        w.flush()
    }
}

/// Base of the synthetic wall clock (ns since the epoch), for trace headers and clock samples.
const REALTIME_BASE_NS: i64 = 1_700_000_000_000_000_000;

/// An event waiting to be written in its trace's time order.
struct Pending {
    ts: u64,
    seq: u64,
    event: PacketEvent,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.ts, self.seq) == (o.ts, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.ts, o.seq).cmp(&(self.ts, self.seq))
    }
}

/// One TCP connection per linked pair, carrying data both ways with cumulative ACKs, so that the
/// ACK rule of the matcher finds exchanges.
#[derive(Default)]
struct Flow {
    /// Next sequence number per direction (0: low→high trace, 1: high→low).
    next_seq: [u32; 2],
    /// Bytes of each direction delivered so far, and arrivals not yet delivered (min-heap).
    delivered: [u32; 2],
    arrivals: [BinaryHeap<Reverse<(u64, u32)>>; 2],
}

fn addr(trace: u32) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[10, (trace >> 16) as u8, (trace >> 8) as u8, trace as u8 + 1]);
    a
}

impl Workload {
    /// Writes the workload as agent trace files, one per trace (`node0.tsync`, …) in `dir`, and
    /// returns their paths. Every message is a TCP segment with a unique digest; events are
    /// written in each trace's time order, with a clock sample every simulated second.
    pub fn write_traces(&self, dir: &Path) -> Result<Vec<PathBuf>, FormatError> {
        let n = self.clocks.len();
        let paths: Vec<PathBuf> = (0..n).map(|k| dir.join(format!("node{k}.tsync"))).collect();
        let mut writers = Vec::with_capacity(n);
        for (k, p) in paths.iter().enumerate() {
            let header = Header {
                node: format!("node{k}"),
                hostname: format!("node{k}"),
                clocksource: "synthetic".into(),
                start_realtime_ns: REALTIME_BASE_NS + self.start_ns as i64,
                start_monotonic_ns: self.clocks[k].local(self.start_ns) as u64,
                ..Header::default()
            };
            writers.push(TraceWriter::create(p, &header)?);
        }
        let mut pending: Vec<BinaryHeap<Pending>> = (0..n).map(|_| BinaryHeap::new()).collect();
        let mut flows: HashMap<(u32, u32), Flow> = HashMap::new();
        let mut seq = 0u64;
        let mut next_sample = self.start_ns;
        let mut counts = vec![(0u64, 0u64); n];
        let mut error = None;
        self.generate_timed(|m, t, arrive| {
            if error.is_some() {
                return;
            }
            // Everything due before t can be written: later events all happen after t.
            for k in 0..n {
                let now = self.clocks[k].local(t) as u64;
                while pending[k].peek().is_some_and(|p| p.ts <= now) {
                    let p = pending[k].pop().expect("peeked");
                    if let Err(e) = writers[k].write_event(&p.event) {
                        error = Some(e);
                        return;
                    }
                }
            }
            if t >= next_sample {
                for (k, w) in writers.iter_mut().enumerate() {
                    let mono = self.clocks[k].local(t) as u64;
                    let sample = ClockSample {
                        monotonic_ns: mono,
                        monotonic_raw_ns: mono,
                        realtime_ns: REALTIME_BASE_NS + t as i64,
                        tsc: 0,
                        monotonic_after_ns: mono,
                    };
                    // Flushed at once, as the agent does: a reader then aligns each part of
                    // the file with the sample taken during it.
                    if let Err(e) = w.write_clock_sample(sample).and_then(|()| w.flush()) {
                        error = Some(e);
                        return;
                    }
                }
                next_sample += 1e9;
            }
            let (s, r) = (m.send_trace, m.recv_trace);
            let key = (s.min(r), s.max(r));
            let dir = usize::from(s > r);
            let flow = flows.entry(key).or_default();
            // Deliver what the sender has received of the other direction by now.
            let back = 1 - dir;
            while flow.arrivals[back]
                .peek()
                .is_some_and(|a| a.0.0 <= t as u64)
            {
                let Reverse((_, end)) = flow.arrivals[back].pop().expect("peeked");
                if end.wrapping_sub(flow.delivered[back]) as i32 > 0 {
                    flow.delivered[back] = end;
                }
            }
            let payload: u16 = 100;
            let event = PacketEvent {
                ts_ns: 0,
                ifindex: 2,
                cpu: 0,
                direction: direction::SEND,
                kind: kind::TCP4,
                saddr: addr(s),
                daddr: addr(r),
                network_protocol: ETH_P_IP,
                tot_len: 40 + payload,
                source: 40000 + (key.0 as u16) * 2 + dir as u16,
                dest: 40000 + (key.0 as u16) * 2 + back as u16,
                seq: flow.next_seq[dir],
                ack_seq: flow.delivered[back],
                transport_protocol: IPPROTO_TCP,
                ihl: 5,
                doff: 5,
                tcp_flags: tcp_flag::ACK | tcp_flag::PSH,
                ..PacketEvent::default()
            };
            flow.next_seq[dir] = flow.next_seq[dir].wrapping_add(u32::from(payload));
            flow.arrivals[dir].push(Reverse((arrive as u64, flow.next_seq[dir])));
            for (trace, ts, d) in [
                (s, m.send_ns, direction::SEND),
                (r, m.recv_ns, direction::RECV),
            ] {
                seq += 1;
                let mut e = event;
                e.ts_ns = ts as u64;
                e.direction = d;
                let c = &mut counts[trace as usize];
                if d == direction::SEND {
                    c.0 += 1;
                } else {
                    c.1 += 1;
                }
                pending[trace as usize].push(Pending {
                    ts: e.ts_ns,
                    seq,
                    event: e,
                });
            }
        });
        if let Some(e) = error {
            return Err(e);
        }
        for (k, mut w) in writers.into_iter().enumerate() {
            while let Some(p) = pending[k].pop() {
                w.write_event(&p.event)?;
            }
            let footer = Footer {
                events: counts[k].0 + counts[k].1,
                send_events: counts[k].0,
                recv_events: counts[k].1,
                ..Footer::default()
            };
            w.finish(&footer)?;
        }
        Ok(paths)
    }
}
