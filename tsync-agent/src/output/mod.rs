//! The way out: the drain never waits for the disk.
//!
//! The recording loop (the drain) copies events off the ring buffer, restores their time order and
//! appends them to a [`chunk::Chunk`] (`bytes::BytesMut`). A full chunk is frozen and queued for
//! the writer thread ([`writer`]), the only code that touches the file, whose buffer comes back
//! to be filled again once written (no allocation per chunk); at every flush period the
//! partial chunk, the clock records and the lost counters follow, with a request to flush. A
//! `write()` that blocks (a saturated disk: Linux's dirty-page throttling blocks writers for
//! seconds; a network or FUSE file system) then blocks only the writer, while the drain goes on
//! emptying the ring buffer, which holds about a second of a busy node's traffic.
//!
//! The queue is bounded by a memory budget (`--buffer-size`): the bytes of the chunks queued or
//! being written. When the next chunk does not fit, it is dropped and its events are counted as
//! lost to the output ([`LostCounts::disk`]), apart from the ring buffer's losses: in the file's
//! lost counters, the summary and a warning that names the longest write. Clock records are never
//! dropped (2 KB/s). At the end, with the programs detached, the last chunk waits for room
//! instead.
//!
//! What a `kill -9` loses: what the queue held and the last flush period (the writer flushes
//! once it has written everything queued before the request).
mod chunk;
mod queue;
mod writer;

#[cfg(test)]
mod tests;

use std::{
    io::Write,
    path::Path,
    sync::Arc,
    thread::{self, JoinHandle},
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow};
use tsync_common::{
    EVENT_SIZE, PacketEvent,
    format::{AddressTable, ClockSample, Footer, LostCounts, TraceWriter},
};

#[cfg(test)]
use self::chunk::CHUNK_BYTES;
pub use self::chunk::Counts;
pub use self::writer::write_error;
use self::{
    chunk::{Chunk, Frozen},
    queue::{Queue, State},
};
use crate::sampler::ClockRecord;

/// The smallest `--buffer-size`: a few chunks.
pub const MIN_BUFFER: u64 = 1 << 20;

/// The drain side of the output: takes events in file order, hands them to the writer thread.
pub struct Output {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
    chunk: Chunk,
    /// Events queued for writing.
    queued: Counts,
    /// Events dropped because the budget was full.
    dropped: u64,
    /// Whether the last chunk was dropped (a warning starts and ends each run of drops).
    dropping: bool,
    path: String,
}

/// How the output did, for the summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutputStats {
    /// Events written to the file.
    pub written: Counts,
    /// Events dropped because the budget was full.
    pub lost: u64,
    /// The most memory the queued chunks held, and the budget.
    pub peak_bytes: u64,
    pub budget_bytes: u64,
    /// The longest time one write or flush of the file took.
    pub longest_block: Duration,
}

impl Output {
    /// Starts the writer thread on `writer` (which has written the header), with `budget` bytes
    /// for queued events.
    pub fn start<W: Write + Send + 'static>(
        writer: TraceWriter<W>,
        path: &Path,
        budget: u64,
    ) -> Result<Self> {
        let queue = Arc::new(Queue::new(budget));
        let thread = thread::Builder::new()
            .name("tsync-writer".into())
            .spawn({
                let queue = Arc::clone(&queue);
                let path = path.to_owned();
                move || writer::run(writer, &queue, &path)
            })
            .context("cannot start the writer thread")?;
        Ok(Output {
            queue,
            thread: Some(thread),
            chunk: Chunk::new(),
            queued: Counts::default(),
            dropped: 0,
            dropping: false,
            path: path.display().to_string(),
        })
    }

    /// Takes events (in time order, skew applied); full chunks go to the writer, or are dropped
    /// and counted when the budget is full. Fails if the writer has failed.
    pub fn write(&mut self, mut events: &[PacketEvent]) -> Result<()> {
        while !events.is_empty() {
            let n = self.chunk.fill(events);
            events = &events[n..];
            if self.chunk.is_full()
                && let Some(chunk) = self.chunk.take()
            {
                self.hand_over(chunk)?;
            }
        }
        Ok(())
    }

    /// Hands over the partial chunk, the clock records and the lost counters (the kernel's, to
    /// which the drops are added) and asks the writer to flush.
    pub fn flush(
        &mut self,
        clock: impl IntoIterator<Item = ClockRecord>,
        kernel_lost: LostCounts,
    ) -> Result<()> {
        if let Some(chunk) = self.chunk.take() {
            self.hand_over(chunk)?;
        }
        let lost = self.with_drops(kernel_lost);
        let mut state = self.queue.lock();
        take_failure(&mut state)?;
        if let Some(since) = state.blocked_since {
            log::debug!(
                "the writer has been blocked for {:.1} s; {} events ({}) wait for it",
                since.elapsed().as_secs_f64(),
                state.held / EVENT_SIZE as u64,
                mib(state.held)
            );
        }
        self.queue.flush(&mut state, clock, lost);
        Ok(())
    }

    /// Hands over the node's address tables; they are written at the next flush (or the end).
    pub fn add_addresses(&mut self, tables: impl IntoIterator<Item = AddressTable>) {
        let mut state = self.queue.lock();
        self.queue.add_addresses(&mut state, tables);
    }

    /// Ends the file: the last events (waiting for room rather than dropping them: nothing new
    /// comes once the programs are detached), the last clock records and counters, the footer;
    /// waits for the writer to write it all.
    pub fn finish(
        mut self,
        clock: Vec<ClockRecord>,
        kernel_lost: LostCounts,
        end: &ClockSample,
    ) -> Result<OutputStats> {
        if let Some(chunk) = self.chunk.take() {
            let mut state = self.queue.lock();
            let len = chunk.bytes.len() as u64;
            state = self
                .queue
                .wait_until(state, |s| s.held + len <= self.queue.limit);
            take_failure(&mut state)?;
            let queued = self.queue.push(&mut state, chunk.bytes);
            debug_assert!(queued.is_ok(), "room was waited for");
            self.queued.add(chunk.counts);
        }
        let footer = Footer {
            events: self.queued.total(),
            send_events: self.queued.send,
            recv_events: self.queued.recv,
            lost: self.with_drops(kernel_lost),
            end_realtime_ns: end.realtime_ns,
            end_monotonic_ns: end.monotonic_ns,
        };
        {
            let mut state = self.queue.lock();
            take_failure(&mut state)?;
            self.queue.flush(&mut state, clock, footer.lost.clone());
            self.queue.finish(&mut state, footer);
        }
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            return Err(anyhow!("the writer thread panicked"));
        }
        let mut state = self.queue.lock();
        if let Some(err) = state.failed.take() {
            return Err(err);
        }
        Ok(OutputStats {
            written: self.queued,
            lost: self.dropped,
            peak_bytes: state.peak,
            budget_bytes: self.queue.limit,
            longest_block: state.longest_block,
        })
    }

    /// Events taken so far (queued or written).
    pub fn events(&self) -> u64 {
        self.queued.total() + self.chunk.len() as u64
    }

    /// Events dropped so far.
    pub fn lost(&self) -> u64 {
        self.dropped
    }

    fn with_drops(&self, kernel_lost: LostCounts) -> LostCounts {
        LostCounts {
            disk: self.dropped,
            ..kernel_lost
        }
    }

    /// Queues a chunk, or drops and counts it when the budget is full; gives the drain's chunk
    /// a buffer again if this one was full (a written one's, when the writer has returned one).
    fn hand_over(&mut self, chunk: Frozen) -> Result<()> {
        let mut state = self.queue.lock();
        take_failure(&mut state)?;
        let counts = chunk.counts;
        let queued = match self.queue.push(&mut state, chunk.bytes) {
            Ok(()) => true,
            Err(dropped) => {
                // Nothing else holds a dropped chunk: its buffer is as good as a written one's.
                self.queue.keep(&mut state, chunk::recycle(dropped));
                false
            }
        };
        self.chunk.restock(|| self.queue.spare(&mut state));
        if queued {
            self.queued.add(counts);
            if std::mem::take(&mut self.dropping) {
                log::warn!(
                    "{} accepts writes again; {} events were dropped so far",
                    self.path,
                    self.dropped
                );
            }
            return Ok(());
        }
        self.dropped += counts.total();
        if !std::mem::replace(&mut self.dropping, true) {
            let blocked = state
                .blocked_since
                .map_or(0.0, |since| since.elapsed().as_secs_f64());
            log::warn!(
                "{} has not accepted a write for {blocked:.1} s and the buffer of events waiting \
                 for it is full ({}, --buffer-size): dropping events, counted as lost to the \
                 output, until it accepts writes again",
                self.path,
                mib(self.queue.limit)
            );
        }
        Ok(())
    }
}

impl Drop for Output {
    /// Without [`Output::finish`] (the recording stopped on an error): the writer writes what it
    /// has and stops; nobody waits for it (it may be blocked for good).
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.queue.close();
        }
    }
}

/// Fails with the writer's error if it stopped on one.
fn take_failure(state: &mut State) -> Result<()> {
    match state.failed.take() {
        Some(err) => Err(err),
        None if state.stopped => Err(anyhow!("the writer thread stopped")),
        None => Ok(()),
    }
}

/// `12.3 MiB`.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}
