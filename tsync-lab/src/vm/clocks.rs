//! The guest's clocks against its TSC, and the slew: what the ground truth is made of on the
//! guest's side (the TSC offset to the host's comes from the shared page, [`super::tscpage`]).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::bail;

use super::report::{AppliedSlew, ClockPair, HANDSHAKE_EVERY};
use super::tscpage::{Handshake, TscPage, tsc};

/// Applies `adjtimex(ADJ_FREQUENCY)`: CLOCK_MONOTONIC then runs `ppm` faster than
/// CLOCK_MONOTONIC_RAW (on top of the frequency before, which is read first).
pub fn slew(ppm: f64) -> anyhow::Result<AppliedSlew> {
    // SAFETY: timex is plain data; modes 0 reads only.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: a valid timex.
    if unsafe { libc::adjtimex(&mut tx) } < 0 {
        bail!("adjtimex: {}", std::io::Error::last_os_error());
    }
    let before = tx.freq as f64 / 65536.0;
    // SAFETY: as above.
    let mut set: libc::timex = unsafe { std::mem::zeroed() };
    set.modes = libc::ADJ_FREQUENCY;
    set.freq = ((before + ppm) * 65536.0).round() as libc::c_long;
    let at_mono_ns = clock(libc::CLOCK_MONOTONIC);
    // SAFETY: a valid timex.
    if unsafe { libc::adjtimex(&mut set) } < 0 {
        bail!(
            "adjtimex(ADJ_FREQUENCY): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(AppliedSlew {
        freq_before_ppm: before,
        freq_after_ppm: set.freq as f64 / 65536.0,
        at_mono_ns,
    })
}

/// A clock's reading in ns (the guest's clock pairs, the traffic generator's application log).
pub fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The tightest of three readings of both clocks between TSC reads.
pub fn clock_pair() -> ClockPair {
    let mut best: Option<ClockPair> = None;
    for _ in 0..3 {
        let t1 = tsc();
        let mono = clock(libc::CLOCK_MONOTONIC);
        let t2 = tsc();
        let raw = clock(libc::CLOCK_MONOTONIC_RAW);
        let t3 = tsc();
        let p = ClockPair {
            t1,
            mono,
            t2,
            raw,
            t3,
        };
        if best.is_none_or(|b| p.t3 - p.t1 < b.t3 - b.t1) {
            best = Some(p);
        }
    }
    best.expect("three tries")
}

/// A thread reading [`clock_pair`] every 10 ms.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<ClockPair>>,
}

impl Sampler {
    pub fn start() -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut pairs = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                pairs.push(clock_pair());
                std::thread::sleep(Duration::from_millis(10));
            }
            pairs.push(clock_pair());
            pairs
        });
        Sampler { stop, thread }
    }

    /// Stops the thread; every pair read, in time order.
    pub fn stop(self) -> Vec<ClockPair> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler panicked")
    }
}

/// A thread measuring the guest's counter against the host's TSC every [`HANDSHAKE_EVERY`]
/// (20 tries each, the tightest kept): on a guest whose counter runs at another rate than the
/// host's TSC (aarch64), the points a line through them maps the counter with.
pub struct HandshakeLoop {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<Vec<Handshake>>>,
}

impl HandshakeLoop {
    pub fn start(page: Arc<TscPage>, k: usize) -> HandshakeLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let patience = Duration::from_secs(30);
            let mut points = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                points.push(page.measure_handshake(k, 20, patience)?);
                std::thread::sleep(HANDSHAKE_EVERY);
            }
            points.push(page.measure_handshake(k, 300, patience)?);
            Ok(points)
        });
        HandshakeLoop { stop, thread }
    }

    /// Stops the thread; every handshake, in time order.
    pub fn stop(self) -> anyhow::Result<Vec<Handshake>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the handshake thread panicked"))?
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn a_pair_reads_monotonic_then_raw_between_tsc_reads() {
        let p = clock_pair();
        assert!(p.t1 <= p.t2 && p.t2 <= p.t3, "{p:?}");
        let q = clock_pair();
        assert!(
            q.mono >= p.mono && q.raw >= p.raw && q.t1 >= p.t3,
            "{p:?} then {q:?}"
        );
    }

    #[test]
    fn the_sampler_returns_its_pairs_in_time_order() {
        let pairs = Sampler::start().stop();
        assert!(!pairs.is_empty());
        assert!(
            pairs
                .windows(2)
                .all(|w| w[0].t3 <= w[1].t1 && w[0].mono <= w[1].mono)
        );
    }
}
