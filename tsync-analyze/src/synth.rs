//! Deterministic synthetic message workloads with known clocks, for tests and benchmarks.
//!
//! Every trace has a linear clock `local = true · (1 + drift_ppm·10⁻⁶) + offset_ns` (true time in
//! ns). Messages are sent at increasing true times between random pairs; each one-way delay is a
//! minimum plus an exponential (or Pareto heavy-tailed) extra. The truth is known exactly, so a
//! test can check the estimate, the guaranteed interval and the absence of inversions.

use std::io::Write;

use crate::message::Message;

/// A small, fast, deterministic PRNG (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

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
    pub offset_ns: f64,
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
    Exponential { mean_ns: f64 },
    /// Pareto with this scale (ns) and shape (heavy tail for shape ≤ 2).
    Pareto { scale_ns: f64, shape: f64 },
}

/// A workload.
#[derive(Clone, Debug)]
pub struct Workload {
    pub clocks: Vec<Clock>,
    /// Trace pairs that talk (unordered); each message picks one and a direction at random.
    pub links: Vec<(u32, u32)>,
    pub messages: u64,
    /// True time of the first message (ns); keep it large enough for local times to be ≥ 0.
    pub start_ns: f64,
    /// Mean true time between messages (ns).
    pub interval_ns: f64,
    pub min_delay_ns: f64,
    pub tail: DelayTail,
    /// Largest extra delay (ns): bounds how far receive events trail sends.
    pub max_extra_ns: f64,
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
            crate::text::format_seconds(m.send_ns, &mut line);
            line.push(' ');
            crate::text::format_seconds(m.recv_ns, &mut line);
            line.push('\n');
            err = w.write_all(line.as_bytes());
        });
        err?;
        w.flush()
    }
}
