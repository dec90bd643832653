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
    /// The scheduling the thread got (sent once, as it starts).
    priority: Receiver<Priority>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts the thread; it takes its first sample (and reads the kernel's clock state) at once.
    pub fn start(skew: Option<ClockSkew>, period: Duration) -> std::io::Result<Sampler> {
        let (records_tx, records) = mpsc::channel();
        let (stop, stop_rx) = mpsc::channel();
        let (priority_tx, priority) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("tsync-clock".into())
            .spawn(move || run(skew, period, &records_tx, &stop_rx, &priority_tx))?;
        Ok(Sampler {
            records,
            priority,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The scheduling the thread got; waits for the thread to have asked (it does so first).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn priority(&self) -> Priority {
        self.priority.recv().unwrap_or(Priority::Normal)
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

/// The scheduling the sampler thread got, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// SCHED_FIFO 1: wakes ahead of every ordinary thread.
    RealTime,
    /// An ordinary thread at nice −20: the scheduler favours its wakeups over those of threads
    /// at nice 0 (what is left when the kernel refuses real-time scheduling, e.g. in a cgroup
    /// without a real-time budget, while CAP_SYS_NICE still allows a lower nice value).
    Nice,
    /// An ordinary thread: on a busy machine its wakeups may come tens of milliseconds late.
    Normal,
}

/// Asks for the lowest real-time priority (SCHED_FIFO 1) for the calling thread, so that its
/// wakeups are not delayed behind busy ordinary threads (on a loaded machine a normal thread can
/// wake 10 ms late) and its three clock reads are rarely cut into. It runs a few microseconds per
/// period, so it takes nothing measurable from anyone. Without it (no CAP_SYS_NICE or an
/// RLIMIT_RTPRIO of 0; or, with CONFIG_RT_GROUP_SCHED, a cgroup without a real-time budget,
/// which refuses even root) it asks for nice −20, and failing that stays an ordinary thread:
/// the period is then kept on average, and a late wakeup widens one gap.
fn ask_for_priority() -> Priority {
    // musl's sched_param has more fields than glibc's (the SCHED_SPORADIC ones, unused here):
    // start from all zeros, which is valid for both.
    // SAFETY: sched_param is plain old data; all zeros is a valid value.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = 1;
    // SAFETY: `param` is a valid sched_param; pthread_self() is the calling thread.
    let err =
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if err == 0 {
        return Priority::RealTime;
    }
    let refused = std::io::Error::from_raw_os_error(err);
    // On Linux, setpriority(PRIO_PROCESS, 0) sets the nice value of the calling thread only.
    // SAFETY: plain system call on the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) } == 0 {
        log::info!(
            "clock sampler: no real-time priority ({refused}); sampling at nice -20 instead"
        );
        return Priority::Nice;
    }
    log::warn!(
        "clock sampler: neither real-time priority ({refused}) nor a lower nice value ({}): on a \
         busy machine clock samples may come late, which widens the analyzer's bounds; run the \
         agent as root or with CAP_SYS_NICE",
        std::io::Error::last_os_error()
    );
    Priority::Normal
}

/// The thread: sample, then sleep until the next deadline or until told to stop (the stop
/// channel's sender is dropped), then one last sample.
fn run(
    skew: Option<ClockSkew>,
    period: Duration,
    out: &Sender<ClockRecord>,
    stop: &Receiver<()>,
    priority: &Sender<Priority>,
) {
    let _ = priority.send(ask_for_priority());
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

    /// Whether a new thread of this process may use SCHED_FIFO (root, CAP_SYS_NICE, or an
    /// RLIMIT_RTPRIO above 0, and a cgroup with a real-time budget).
    fn realtime_allowed() -> bool {
        thread::spawn(|| {
            // SAFETY: as in ask_for_priority.
            let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
            param.sched_priority = 1;
            // SAFETY: as in ask_for_priority.
            let err = unsafe {
                libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param)
            };
            err == 0
        })
        .join()
        .unwrap()
    }

    #[test]
    fn the_sampler_runs_real_time_wherever_the_process_may() {
        let sampler = Sampler::start(None, Duration::from_secs(3600)).unwrap();
        let got = sampler.priority();
        if realtime_allowed() {
            assert_eq!(got, Priority::RealTime);
        } else {
            assert_ne!(
                got,
                Priority::RealTime,
                "the kernel refused it to this process"
            );
        }
        // The thread asked for itself only: this thread is still an ordinary one.
        // The system call itself: musl's sched_getscheduler() always fails with ENOSYS (the
        // policy is per thread on Linux, and musl refuses to pretend otherwise).
        // SAFETY: sched_getscheduler(0) reads the calling thread's policy.
        let policy = unsafe { libc::syscall(libc::SYS_sched_getscheduler, 0) };
        assert_eq!(policy, libc::c_long::from(libc::SCHED_OTHER));
        drop(sampler);
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
