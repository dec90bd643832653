//! The message pass of text message files spread over threads: the calling thread parses the
//! lines and hands each message to the worker that owns its pair (a hash of the pair), each
//! worker feeds its own [`PairAccumulator`], whose pairs are then gathered into one.
//!
//! Why. A text file's messages are already matched, so the one-thread pass is parsing plus the
//! per-pair accumulation, and on a large mesh the accumulation dominates (a cache miss or
//! three per message: 180,000 pairs of a 600-trace mesh do not fit in a cache). Split by pair,
//! it runs on every core while the parser feeds it.
//!
//! Same result whatever the number of threads: a pair lives on one worker, which sees its
//! messages (and exchanges) in input order, so every pair's state is exactly the one-thread
//! pass's (the order of the pairs themselves differs, and does not matter: the finishing sorts
//! them by trace indices). Memory: the pairs are split, not copied; what is in flight is
//! bounded ([`BATCH`] messages, and at most as many exchanges, × [`IN_FLIGHT`] per worker).
//!
//! Trace files already spread their matching over the threads (`matching/parallel.rs`), which
//! leaves no core to spare: inputs with a trace file keep the one-thread accumulation.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::estimate::accumulate::PairAccumulator;
use crate::input::InputSet;
use crate::input::error::InputError;
use crate::matching::{MatchOptions, MatchStats};
use crate::model::{Exchange, MatchedMessage, Message, MessageSink};

/// Messages per batch handed to a worker.
const BATCH: usize = 4096;
/// Batches queued per worker before the parser waits.
const IN_FLIGHT: usize = 4;

/// Whether [`pass`] applies: several threads, and only text message files.
pub(super) fn applies(inputs: &InputSet, options: &MatchOptions) -> bool {
    options.thread_count() > 1
        && !inputs.sources.is_empty()
        && inputs.sources.iter().all(|s| !s.kind.is_trace())
}

/// The message pass of `inputs` into `acc` (which must be empty) on
/// `options.thread_count()` workers; the result is the one-thread pass's.
pub(super) fn pass(
    inputs: &InputSet,
    options: &MatchOptions,
    acc: &mut PairAccumulator,
    progress: &mut dyn FnMut(u64),
) -> Result<MatchStats, InputError> {
    let threads = options.thread_count().max(1);
    std::thread::scope(|scope| {
        let mut senders = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let (tx, rx) = sync_channel::<Batch>(IN_FLIGHT);
            let part = acc.clone();
            // A thread that cannot start leaves its share to the others.
            if let Ok(worker) = std::thread::Builder::new()
                .name(format!("tsync-pass-{i}"))
                .spawn_scoped(scope, move || work(rx, part))
            {
                senders.push(tx);
                workers.push(worker);
            }
        }
        if workers.is_empty() {
            return inputs.for_each_message_in(options, acc, progress);
        }
        let mut dispatch = Dispatch {
            batches: (0..senders.len()).map(|_| Batch::default()).collect(),
            senders,
        };
        let stats = inputs.for_each_message_in(options, &mut dispatch, progress);
        dispatch.flush_all();
        // Dropping the senders ends the workers' loops.
        drop(dispatch);
        let parts: Vec<PairAccumulator> = workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        let stats = stats?;
        acc.adopt(parts);
        Ok(stats)
    })
}

/// Messages and exchanges for one worker, in input order.
#[derive(Default)]
struct Batch {
    messages: Vec<Message>,
    exchanges: Vec<Exchange>,
}

/// The sink on the parsing thread: batches each message for the worker that owns its pair.
struct Dispatch {
    senders: Vec<SyncSender<Batch>>,
    batches: Vec<Batch>,
}

impl Dispatch {
    /// The worker that owns pair {a, b} (either order).
    #[inline]
    fn owner(&self, a: u32, b: u32) -> usize {
        let key = u64::from(a.min(b)) << 32 | u64::from(a.max(b));
        let mixed = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((mixed >> 32) % self.senders.len() as u64) as usize
    }

    fn flush(&mut self, w: usize) {
        let batch = std::mem::take(&mut self.batches[w]);
        // A worker stops early only by panicking, which the join reports.
        let _ = self.senders[w].send(batch);
    }

    fn flush_all(&mut self) {
        for w in 0..self.senders.len() {
            let b = &self.batches[w];
            if !b.messages.is_empty() || !b.exchanges.is_empty() {
                self.flush(w);
            }
        }
    }
}

impl MessageSink for Dispatch {
    #[inline]
    fn message(&mut self, m: &MatchedMessage<'_>) {
        let m = m.message;
        let w = self.owner(m.send_trace, m.recv_trace);
        let batch = &mut self.batches[w];
        if batch.messages.capacity() == 0 {
            batch.messages.reserve_exact(BATCH);
        }
        batch.messages.push(m);
        if batch.messages.len() == BATCH {
            self.flush(w);
        }
    }

    fn exchange(&mut self, x: &Exchange) {
        let w = self.owner(x.request.send_trace, x.request.recv_trace);
        self.batches[w].exchanges.push(*x);
    }

    fn wants_events(&self) -> bool {
        false
    }
}

/// One worker: accumulates its pairs' messages in the order they come.
fn work(rx: Receiver<Batch>, mut acc: PairAccumulator) -> PairAccumulator {
    for batch in rx {
        // An exchange touches only its pair's regression, which its messages do not: a batch's
        // exchanges may come after its messages.
        for m in &batch.messages {
            acc.add(m);
        }
        for x in &batch.exchanges {
            acc.add_exchange(x);
        }
    }
    acc
}
