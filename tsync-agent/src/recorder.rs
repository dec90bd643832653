//! The recording loop: drains the ring buffer as it fills, restores time order, applies the clock
//! skew, writes events, the clock sampler's records and lost counters, and stops on a signal or
//! the duration.
use std::{
    fs::File,
    io::BufWriter,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
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
use tsync_common::{
    EVENT_SIZE, direction,
    format::{ClockSkew, Footer, FormatError, Header, LostCounts, TraceWriter},
};

use crate::{
    clock, console,
    loader::{Capture, Logger},
    progress::Progress,
    reorder::{Reorder, WINDOW_NS},
    sampler::{ClockRecord, Sampler},
    summary::Summary,
};

/// Period of flushes: the pending events and clock records go out, with the lost counters, so a
/// file cut short (kill -9, power loss) loses at most this much. Clock samples are taken more
/// often (the sampler's period) on a thread of their own.
const FLUSH_PERIOD: Duration = Duration::from_millis(500);
/// Period of ring buffer drains. The programs wake the agent only when the ring fills up (a wakeup
/// per event would cost an interrupt per packet), so the agent mostly drains on this timer.
const DRAIN_PERIOD: Duration = Duration::from_millis(10);
/// Period of progress line redraws.
const PROGRESS_PERIOD: Duration = Duration::from_millis(250);

/// Describes a write error, naming a full disk when that is the cause.
fn write_error(path: &Path, err: FormatError) -> anyhow::Error {
    let full = matches!(&err, FormatError::Io { error, .. }
        if error.raw_os_error() == Some(libc::ENOSPC) || error.raw_os_error() == Some(libc::EDQUOT));
    let err = anyhow::Error::new(err);
    if full {
        err.context(format!(
            "the disk holding {} is full: free space or write elsewhere (the file is readable up to its last complete chunk)",
            path.display()
        ))
    } else {
        // The format error names the file and the operation already.
        err
    }
}

/// The writer side: reorder buffer, skew, file, counters.
struct Sink {
    writer: TraceWriter<BufWriter<File>>,
    path: PathBuf,
    skew: Option<ClockSkew>,
    reorder: Reorder,
    send_events: u64,
    recv_events: u64,
}

impl Sink {
    /// Writes the events released up to `cutoff` (raw monotonic ns).
    fn release(&mut self, cutoff: u64) -> Result<()> {
        let Sink {
            writer,
            path,
            skew,
            reorder,
            send_events,
            recv_events,
        } = self;
        reorder.release(cutoff, |events| {
            for ev in events.iter_mut() {
                if ev.direction == direction::SEND {
                    *send_events += 1;
                } else {
                    *recv_events += 1;
                }
                if let Some(skew) = skew {
                    ev.ts_ns = skew.apply(ev.ts_ns);
                }
            }
            writer
                .write_events(events)
                .map_err(|e| write_error(path, e))
        })
    }

    /// Writes every held-back event (at the end).
    fn release_all(&mut self) -> Result<()> {
        self.release(u64::MAX)
    }

    fn events(&self) -> u64 {
        self.send_events + self.recv_events
    }

    /// Writes the sampler's records, the current lost counters, and flushes, so that a file cut
    /// short (kill -9, power loss) loses at most one flush period.
    fn flush(
        &mut self,
        clock: impl IntoIterator<Item = ClockRecord>,
        lost: &LostCounts,
    ) -> Result<()> {
        for record in clock {
            match record {
                ClockRecord::Sample(s) => self.writer.write_clock_sample(s),
                ClockRecord::Kernel(k) => self.writer.write_kernel_clock(k),
            }
            .map_err(|e| write_error(&self.path, e))?;
        }
        self.writer
            .write_lost(lost)
            .and_then(|()| self.writer.flush())
            .map_err(|e| write_error(&self.path, e))
    }
}

/// Copies every event currently in the ring buffer into the reorder buffer. Returns true if the
/// ring was drained empty (false if it stopped at `max` events to let other work run).
fn drain(capture: &mut Capture, reorder: &mut Reorder, max: usize) -> bool {
    for _ in 0..max {
        let Some(item) = capture.events.next() else {
            return true;
        };
        if item.len() >= EVENT_SIZE {
            // The ring buffer only guarantees 8-byte alignment of entries; copy, do not cast.
            reorder.push(bytemuck::pod_read_unaligned(&item[..EVENT_SIZE]));
        }
    }
    false
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
    pub duration: Option<Duration>,
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
        writer,
        path: plan.path.clone(),
        skew: plan.skew,
        reorder: Reorder::new(),
        send_events: 0,
        recv_events: 0,
    };
    let sampler = plan.sampler;
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
                let empty = drain(&mut capture, &mut sink.reorder, batch_max);
                if empty {
                    guard.clear_ready();
                }
                sink.release(cutoff(empty, &sink.reorder))?;
            }
            _ = drains.tick() => {
                let empty = drain(&mut capture, &mut sink.reorder, batch_max);
                sink.release(cutoff(empty, &sink.reorder))?;
            }
            _ = flushes.tick() => {
                let empty = drain(&mut capture, &mut sink.reorder, usize::MAX);
                sink.release(cutoff(empty, &sink.reorder))?;
                let lost = capture.lost()?;
                sink.flush(sampler.take(), &lost)?;
            }
            guard = log_ready(&mut ebpf_log) => {
                let mut guard = guard.context("cannot poll the eBPF log")?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
            _ = redraw.tick(), if progress.visible() => {
                let lost = capture.lost()?.total();
                progress.update(sink.events(), lost);
            }
        }
    }

    // Stop: take what is left in the ring, write everything, close the file with its footer.
    drop(ring);
    drain(&mut capture, &mut sink.reorder, usize::MAX);
    if let Some(ebpf_log) = &mut ebpf_log {
        ebpf_log.get_mut().flush();
    }
    sink.release_all()?;
    let lost = capture.lost()?;
    sink.flush(sampler.stop(), &lost)?;
    drop(capture); // detach the programs before the (possibly slow) final flush
    progress.finish();
    let end = clock::sample(sink.skew.as_ref());
    let footer = Footer {
        events: sink.events(),
        send_events: sink.send_events,
        recv_events: sink.recv_events,
        lost: lost.clone(),
        end_realtime_ns: end.realtime_ns,
        end_monotonic_ns: end.monotonic_ns,
    };
    let late = sink.reorder.late();
    let (send_events, recv_events) = (sink.send_events, sink.recv_events);
    sink.writer
        .finish(&footer)
        .map_err(|e| write_error(&plan.path, e))?;
    Ok(Summary {
        path: plan.path,
        seconds: started.elapsed().as_secs_f64(),
        send_events,
        recv_events,
        lost,
        late,
    })
}

/// The newest raw timestamp that can be written now. After the ring was drained empty, every event
/// stamped more than the window ago has been read; otherwise hold a window behind the newest read.
fn cutoff(ring_empty: bool, reorder: &Reorder) -> u64 {
    let base = if ring_empty {
        clock::monotonic_ns()
    } else {
        reorder.newest()
    };
    base.saturating_sub(WINDOW_NS)
}
