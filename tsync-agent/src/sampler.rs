//! The clock sampler: a thread of its own that takes a clock sample every [`SAMPLE_PERIOD`] and
//! checks the kernel's clock discipline with it, handing both to the recording loop through a
//! channel.
//!
//! Why a thread: the recording loop drains the ring buffer in batches of up to 65 536 events and
//! polls the ring before its timers, so under load a sample tick on that loop would come late or
//! not at all, and the analyzer needs samples at least every 100 ms to undo NTP slewing with a
//! known bound. On its own thread the sampler wakes on time whatever the loop does, and the loop
//! never waits for it: it picks the records up when it flushes (every 0.5 s). The sampler costs
//! one wakeup, nine vDSO clock reads and one `adjtimex` per period (a few microseconds of CPU
//! every 20 ms). It asks for the lowest real-time priority so that it wakes on time on a busy
//! machine too.
use std::{
    sync::mpsc::{self, Receiver, RecvTimeoutError, Sender},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use tsync_common::format::{ClockSample, ClockSkew, KernelClock};

use crate::clock::{self, KernelClockWatch};

/// Period of clock samples: dense enough that the analyzer can undo NTP slewing between two of
/// them (it refuses gaps over 100 ms), sparse enough to cost ~7 MB per hour of recording.
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(20);

/// What the sampler hands over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClockRecord {
    Sample(ClockSample),
    /// The kernel's clock discipline, at the start and whenever it changed.
    Kernel(KernelClock),
}

/// The running sampler thread. Dropping it stops the thread.
pub struct Sampler {
    records: Receiver<ClockRecord>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts the thread; it takes its first sample (and reads the kernel's clock state) at once.
    pub fn start(skew: Option<ClockSkew>, period: Duration) -> std::io::Result<Sampler> {
        let (records_tx, records) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("tsync-clock".into())
            .spawn(move || run(skew, period, &records_tx, &stop_rx))?;
        Ok(Sampler {
            records,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The records taken since the last call, oldest first, without waiting.
    pub fn take(&self) -> impl Iterator<Item = ClockRecord> + '_ {
        self.records.try_iter()
    }

    /// Stops the thread, which takes one last sample first, and returns what it left.
    pub fn stop(mut self) -> Vec<ClockRecord> {
        self.halt();
        self.records.try_iter().collect()
    }

    fn halt(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::warn!("the clock sampler thread panicked");
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Asks for the lowest real-time priority (SCHED_FIFO 1) for the calling thread, so that its
/// wakeups are not delayed behind busy ordinary threads (on a loaded machine a normal thread can
/// wake 10 ms late) and its three clock reads are rarely cut into. It runs a few microseconds per
/// period, so it takes nothing measurable from anyone. Without the privilege (CAP_SYS_NICE, or
/// an RLIMIT_RTPRIO of 0) it stays an ordinary thread: the period is then kept on average, and a
/// late wakeup only widens one gap.
fn ask_for_realtime_priority() {
    // musl's sched_param has more fields than glibc's (the SCHED_SPORADIC ones, unused here):
    // start from all zeros, which is valid for both.
    // SAFETY: sched_param is plain old data; all zeros is a valid value.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = 1;
    // SAFETY: `param` is a valid sched_param; pthread_self() is the calling thread.
    let err =
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if err != 0 {
        log::debug!(
            "clock sampler: no real-time priority ({}); sampling as an ordinary thread",
            std::io::Error::from_raw_os_error(err)
        );
    }
}

/// The thread: sample, then sleep until the next deadline or until told to stop (the stop
/// channel's sender is dropped), then one last sample.
fn run(skew: Option<ClockSkew>, period: Duration, out: &Sender<ClockRecord>, stop: &Receiver<()>) {
    ask_for_realtime_priority();
    let mut watch = KernelClockWatch::default();
    let mut kernel_readable = true;
    let mut next = Instant::now();
    loop {
        if kernel_readable {
            match clock::kernel_clock(skew.as_ref()) {
                Ok(state) => {
                    if let Some(state) = watch.changed(state)
                        && out.send(ClockRecord::Kernel(state)).is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    log::warn!("cannot read the kernel's clock state (adjtimex): {e}");
                    kernel_readable = false;
                }
            }
        }
        if out
            .send(ClockRecord::Sample(clock::sample(skew.as_ref())))
            .is_err()
        {
            return; // the recording loop is gone
        }
        next += period;
        let now = Instant::now();
        // Late (the machine was suspended or very busy): sample at once, then keep the period.
        if next < now {
            next = now;
        }
        match stop.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = out.send(ClockRecord::Sample(clock::sample(skew.as_ref())));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_come_every_period_with_a_kernel_state_first() {
        let sampler = Sampler::start(None, Duration::from_millis(5)).unwrap();
        thread::sleep(Duration::from_millis(200));
        let mut records: Vec<ClockRecord> = sampler.take().collect();
        records.extend(sampler.stop());
        assert!(
            matches!(records[0], ClockRecord::Kernel(_)),
            "{:?}",
            records[0]
        );
        let samples: Vec<ClockSample> = records
            .iter()
            .filter_map(|r| match r {
                ClockRecord::Sample(s) => Some(*s),
                ClockRecord::Kernel(_) => None,
            })
            .collect();
        // ~40 in 200 ms; a loaded test machine may delay some wakeups.
        assert!(samples.len() >= 10, "{} samples", samples.len());
        assert!(
            samples
                .windows(2)
                .all(|w| w[1].monotonic_ns > w[0].monotonic_ns
                    && w[1].monotonic_raw_ns > w[0].monotonic_raw_ns)
        );
    }

    #[test]
    fn stopping_is_prompt_and_leaves_a_last_sample() {
        let sampler = Sampler::start(None, Duration::from_secs(3600)).unwrap();
        thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        let records = sampler.stop();
        assert!(started.elapsed() < Duration::from_secs(1));
        let samples = records
            .iter()
            .filter(|r| matches!(r, ClockRecord::Sample(_)))
            .count();
        assert_eq!(samples, 2, "the first sample and the last one: {records:?}");
    }
}
