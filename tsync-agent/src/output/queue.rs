//! The queue between the drain and the writer thread: chunks of events bounded by a memory budget,
//! and what goes with a flush (clock records, lost counters), coalesced while the writer is busy.
use std::{
    collections::VecDeque,
    sync::{Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tsync_common::format::{AddressTable, Footer, LostCounts};

use super::chunk;
use crate::sampler::ClockRecord;

/// Written chunks' buffers kept for the drain to fill again ([`chunk::recycle`]): enough for the
/// chunks one drain fills at the highest rates, little memory (1.25 MiB) beside the budget.
const MAX_SPARE: usize = 4;

/// Shared by the drain side ([`super::Output`]) and the writer thread.
pub struct Queue {
    state: Mutex<State>,
    /// The writer waits on it for work.
    work: Condvar,
    /// The drain side waits on it (only when finishing) for room, or for the writer to stop.
    progress: Condvar,
    /// Bytes of events that may be queued or being written at once (`--buffer-size`).
    pub limit: u64,
}

/// What is queued, and how the writer is doing.
#[derive(Default)]
pub struct State {
    chunks: VecDeque<Bytes>,
    /// Bytes of the chunks queued, plus those the writer has taken and not written yet: the
    /// memory the budget bounds.
    pub held: u64,
    /// The most `held` has been.
    pub peak: u64,
    /// Empty chunk buffers to fill again, at most [`MAX_SPARE`]; not counted in `held`.
    pub(super) spare: Vec<BytesMut>,
    /// Clock records waiting for the next flush (never dropped: ~2 KB/s, and the analyzer needs
    /// every one).
    clock: Vec<ClockRecord>,
    /// The node's address tables waiting for the next flush (never dropped: one per change).
    addresses: Vec<AddressTable>,
    /// The newest lost counters (cumulative: only the newest matters).
    lost: Option<LostCounts>,
    /// A flush was asked for.
    flush: bool,
    /// The end: write this footer after everything queued, and stop.
    footer: Option<Footer>,
    /// The drain side went away without finishing (an error): write what is queued, flush, stop.
    closed: bool,
    /// Since when the writer has been in its current write or flush, if it is in one.
    pub blocked_since: Option<Instant>,
    /// The longest time one write or flush took.
    pub longest_block: Duration,
    /// The error the writer stopped on, until the drain side takes it.
    pub failed: Option<anyhow::Error>,
    /// The writer thread has stopped (finished, failed or closed).
    pub stopped: bool,
}

/// What the writer takes from the queue in one go.
#[derive(Default)]
pub struct Batch {
    pub chunks: VecDeque<Bytes>,
    pub clock: Vec<ClockRecord>,
    pub addresses: Vec<AddressTable>,
    pub lost: Option<LostCounts>,
    pub flush: bool,
    pub footer: Option<Footer>,
    pub closed: bool,
}

impl Queue {
    pub fn new(limit: u64) -> Self {
        Queue {
            state: Mutex::new(State::default()),
            work: Condvar::new(),
            progress: Condvar::new(),
            limit,
        }
    }

    /// The state, also after a thread panicked holding the lock (the counters stay meaningful).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a chunk if the budget has room for it; gives it back if not.
    pub fn push(&self, state: &mut State, bytes: Bytes) -> Result<(), Bytes> {
        let len = bytes.len() as u64;
        if state.held + len > self.limit {
            return Err(bytes);
        }
        state.held += len;
        state.peak = state.peak.max(state.held);
        state.chunks.push_back(bytes);
        self.work.notify_one();
        Ok(())
    }

    /// Queues what goes with a flush and asks for one.
    pub fn flush(
        &self,
        state: &mut State,
        clock: impl IntoIterator<Item = ClockRecord>,
        lost: LostCounts,
    ) {
        state.clock.extend(clock);
        state.lost = Some(lost);
        state.flush = true;
        self.work.notify_one();
    }

    /// Queues address tables for the next flush (which [`flush`](Self::flush) asks for).
    pub fn add_addresses(&self, state: &mut State, tables: impl IntoIterator<Item = AddressTable>) {
        state.addresses.extend(tables);
    }

    /// Queues the footer: the writer stops after it.
    pub fn finish(&self, state: &mut State, footer: Footer) {
        state.footer = Some(footer);
        self.work.notify_one();
    }

    /// Tells the writer to write what it has and stop (the drain side gives up).
    pub fn close(&self) {
        self.lock().closed = true;
        self.work.notify_one();
    }

    /// Waits (drain side, at the end only) until `f` holds or the writer stopped.
    pub fn wait_until<'a>(
        &self,
        state: MutexGuard<'a, State>,
        mut f: impl FnMut(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        self.progress
            .wait_while(state, |s| !s.stopped && !f(s))
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (writer) for work and takes all of it.
    pub fn next_batch(&self) -> Batch {
        let state = self.lock();
        let mut state = self
            .work
            .wait_while(state, |s| {
                s.chunks.is_empty() && !s.flush && s.footer.is_none() && !s.closed
            })
            .unwrap_or_else(|e| e.into_inner());
        Batch {
            chunks: std::mem::take(&mut state.chunks),
            clock: std::mem::take(&mut state.clock),
            addresses: std::mem::take(&mut state.addresses),
            lost: state.lost.take(),
            flush: std::mem::take(&mut state.flush),
            footer: state.footer.take(),
            closed: state.closed,
        }
    }

    /// Runs one write or flush of the writer, recording how long it blocked.
    pub fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        self.lock().blocked_since = Some(start);
        let out = f();
        let mut state = self.lock();
        state.blocked_since = None;
        state.longest_block = state.longest_block.max(start.elapsed());
        out
    }

    /// The writer wrote the chunk `bytes`: its memory is free, its buffer kept for reuse.
    pub fn written(&self, bytes: Bytes) {
        let len = bytes.len() as u64;
        let spare = chunk::recycle(bytes);
        let mut state = self.lock();
        state.held -= len;
        self.keep(&mut state, spare);
        drop(state);
        self.progress.notify_all();
    }

    /// Keeps an emptied chunk buffer for reuse, if fewer than [`MAX_SPARE`] are kept.
    pub fn keep(&self, state: &mut State, spare: Option<BytesMut>) {
        if let Some(buf) = spare
            && state.spare.len() < MAX_SPARE
        {
            state.spare.push(buf);
        }
    }

    /// A kept chunk buffer, if there is one.
    pub fn spare(&self, state: &mut State) -> Option<BytesMut> {
        state.spare.pop()
    }

    /// The writer stopped, with `error` if it failed.
    pub fn stopped(&self, error: Option<anyhow::Error>) {
        let mut state = self.lock();
        state.stopped = true;
        state.failed = error;
        self.progress.notify_all();
    }
}
