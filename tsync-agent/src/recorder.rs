//! The recording loop: drains the ring buffer as it fills, restores time order, applies the clock
//! skew, hands events, the clock sampler's records and lost counters to the output (which writes
//! them on a thread of its own: this loop never waits for the disk), and stops on a signal or the
//! duration.
use std::{
    os::fd::AsRawFd as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use tokio::{
    io::{
        Interest,
        unix::{AsyncFd, AsyncFdReadyMutGuard},
    },
    signal::unix::{SignalKind, signal},
    time::{MissedTickBehavior, interval},
};
use tsync_common::format::{ClockSkew, Header, LostCounts, TraceWriter};

use crate::{
    batches::Stranded,
    clock, console,
    loader::{Capture, Logger},
    netns::Watcher,
    output::{Output, write_error},
    progress::Progress,
    reorder::{Reorder, WINDOW_NS},
    sampler::Sampler,
    summary::Summary,
};

/// Period of flushes: the pending events and clock records go to the writer, with the lost
/// counters, and the file is flushed once they are written, so a file cut short (kill -9, power
/// loss) loses at most this much plus what the writer had not written yet. Clock samples are
/// taken more often (the sampler's period) on a thread of their own.
const FLUSH_PERIOD: Duration = Duration::from_millis(500);
/// Period of ring buffer drains. The programs wake the agent only when the ring fills up (a wakeup
/// per event would cost an interrupt per packet), so the agent mostly drains on this timer.
const DRAIN_PERIOD: Duration = Duration::from_millis(10);
/// Period of progress line redraws.
const PROGRESS_PERIOD: Duration = Duration::from_millis(250);

/// The drain side after the ring buffer: reorder buffer, skew, output.
struct Sink {
    reorder: Reorder,
    skew: Option<ClockSkew>,
    output: Output,
}

impl Sink {
    /// Hands the events released up to `cutoff` (raw monotonic ns) to the output.
    fn release(&mut self, cutoff: u64) -> Result<()> {
        let Sink {
            reorder,
            skew,
            output,
        } = self;
        reorder.release(cutoff, |events| {
            if let Some(skew) = skew {
                for ev in events.iter_mut() {
                    ev.ts_ns = skew.apply(ev.ts_ns);
                }
            }
            output.write(events)
        })
    }

    /// Hands over every held-back event (at the end).
    fn release_all(&mut self) -> Result<()> {
        self.release(u64::MAX)
    }
}

/// Copies every event currently in the ring buffer into the reorder buffer. Returns true if the
/// ring was drained empty (false if it stopped after `max` records to let other work run).
///
/// A record is one event or a CPU's batch of them (`tsync_common::batch`), in time order.
fn drain(capture: &mut Capture, reorder: &mut Reorder, max: usize) -> bool {
    for _ in 0..max {
        let Some(item) = capture.events.next() else {
            return true;
        };
        reorder.push_record(&item);
    }
    false
}

/// Drains the ring buffer and hands over what can be written: first, with `flush`, has the
/// batches of quiet CPUs written into the ring (see [`crate::batches`]). Returns true if the ring
/// was drained empty.
fn drain_and_release(
    capture: &mut Capture,
    sink: &mut Sink,
    max: usize,
    flush: bool,
) -> Result<bool> {
    let now = clock::monotonic_ns();
    let held = match &mut capture.batches {
        Some(batches) if flush => batches.flush_stale(now)?,
        Some(batches) => batches.held()?,
        None => u64::MAX,
    };
    let empty = drain(capture, &mut sink.reorder, max);
    sink.release(cutoff(empty, now, held, &sink.reorder))?;
    Ok(empty)
}

/// Waits until the programs' log has records (forever when there is no log).
async fn log_ready(
    log: &mut Option<AsyncFd<Logger>>,
) -> std::io::Result<AsyncFdReadyMutGuard<'_, Logger>> {
    match log {
        Some(log) => log.readable_mut().await,
        None => std::future::pending().await,
    }
}

/// What a recording needs besides the loaded programs.
pub struct RecordPlan {
    pub path: PathBuf,
    pub header: Header,
    pub skew: Option<ClockSkew>,
    /// The clock sampler, started before the programs were loaded; its records so far go into
    /// the file at the first flush.
    pub sampler: Sampler,
    /// The address watcher, started before the programs were loaded; its tables go into the
    /// file at each flush.
    pub addresses: Watcher,
    pub duration: Option<Duration>,
    /// Bytes of events that may wait for the writer (`--buffer-size`).
    pub buffer_size: u64,
    pub ready_message: String,
}

/// Records until SIGINT/SIGTERM or the duration, then finishes the file and returns the summary.
pub async fn record(mut capture: Capture, plan: RecordPlan) -> Result<Summary> {
    let mut sigint = signal(SignalKind::interrupt()).context("cannot install a SIGINT handler")?;
    let mut sigterm =
        signal(SignalKind::terminate()).context("cannot install a SIGTERM handler")?;
    let writer =
        TraceWriter::create(&plan.path, &plan.header).map_err(|e| write_error(&plan.path, e))?;
    let mut sink = Sink {
        reorder: Reorder::new(),
        skew: plan.skew,
        output: Output::start(writer, &plan.path, plan.buffer_size)?,
    };
    let sampler = plan.sampler;
    let addresses = plan.addresses;
    let started = Instant::now();
    let mut progress = Progress::new();
    console::err(&plan.ready_message);

    // SAFETY: the ring buffer map owns the fd and keeps it open for as long as `ring` lives:
    // `ring` is declared after `capture` and dropped before it on every path.
    let ring =
        unsafe { AsyncFd::register_with_interest(capture.events.as_raw_fd(), Interest::READABLE) }
            .context("cannot poll the ring buffer")?;
    // The programs log rarely (see tsync-ebpf): forward their records as they come. Without
    // their log the recording goes on, as when the log could not be opened.
    // SAFETY: the logger owns its ring buffer's fd and returns that same fd until it is dropped.
    let mut ebpf_log = capture.take_logger().and_then(|logger| {
        unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) }
            .inspect_err(|e| log::warn!("the eBPF programs' messages will not be shown: {e}"))
            .ok()
    });
    let mut flushes = interval(FLUSH_PERIOD);
    flushes.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut drains = interval(DRAIN_PERIOD);
    drains.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut redraw = interval(PROGRESS_PERIOD);
    redraw.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let deadline = tokio::time::sleep(plan.duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    let limited = plan.duration.is_some();
    // Per wakeup, read at most this many events before looking at timers and signals again.
    let batch_max = 1 << 16;

    loop {
        tokio::select! {
            biased;
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            () = &mut deadline, if limited => break,
            guard = ring.readable() => {
                let mut guard = guard.context("cannot poll the ring buffer")?;
                if drain_and_release(&mut capture, &mut sink, batch_max, false)? {
                    guard.clear_ready();
                }
            }
            _ = drains.tick() => {
                drain_and_release(&mut capture, &mut sink, batch_max, true)?;
            }
            _ = flushes.tick() => {
                drain_and_release(&mut capture, &mut sink, usize::MAX, true)?;
                sink.output.add_addresses(addresses.take());
                sink.output.flush(sampler.take(), capture.lost()?)?;
            }
            guard = log_ready(&mut ebpf_log) => {
                let mut guard = guard.context("cannot poll the eBPF log")?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
            _ = redraw.tick(), if progress.visible() => {
                let lost = capture.lost()?.total() + sink.output.lost();
                progress.update(sink.output.events(), lost);
            }
        }
    }

    // Stop: detach the hooks, have the batches written, take what is left in the ring, hand
    // everything over, free the programs, and wait for the writer to close the file with its
    // footer.
    drop(ring);
    capture.detach()?;
    let stranded = match &mut capture.batches {
        Some(batches) => {
            let (busy, stranded) = batches.flush_all()?;
            if !busy.is_empty() {
                log::warn!(
                    "the batches of events of CPU {busy:?} could not be written: a program \
                     still running there held them"
                );
            }
            stranded
        }
        None => Stranded::default(),
    };
    drain(&mut capture, &mut sink.reorder, usize::MAX);
    if let Some(ebpf_log) = &mut ebpf_log {
        ebpf_log.get_mut().flush();
    }
    sink.release_all()?;
    let mut lost = capture.lost()?;
    // A batch left on a CPU that went offline was never written: lost in the kernel.
    lost.send += stranded.send;
    lost.recv += stranded.recv;
    let clock_records = sampler.stop();
    sink.output.add_addresses(addresses.stop());
    drop(capture); // free the programs and maps before the (possibly slow) last writes
    progress.finish();
    let end = clock::sample(sink.skew.as_ref());
    let late = sink.reorder.late();
    let output = sink.output.finish(clock_records, lost.clone(), &end)?;
    Ok(Summary {
        path: plan.path,
        seconds: started.elapsed().as_secs_f64(),
        lost: LostCounts {
            disk: output.lost,
            ..lost
        },
        output,
        late,
    })
}

/// The newest raw timestamp that can be written now. After the ring was drained empty, every event
/// stamped more than the window before `now` (taken before the drain) has been read, but for those
/// still in a CPU's batch, the oldest of which is `held`; otherwise hold a window behind the newest
/// read.
fn cutoff(ring_empty: bool, now: u64, held: u64, reorder: &Reorder) -> u64 {
    let base = if ring_empty { now } else { reorder.newest() };
    base.min(held).saturating_sub(WINDOW_NS)
}
