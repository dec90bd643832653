//! Agent trace files decoded ahead of their reader, on a pool of threads.
//!
//! Decoding (checksums, zstd, the columns) is most of what reading a trace file costs, and the
//! matcher reads files on one thread (their merge is sequential). With [`Decoders`], each file's
//! next chunks are decoded on the pool while the merge uses the current one, and several files
//! decode at once: the merge only swaps buffers.
//!
//! * **Demand, not a thread per file.** Up to [`MAX_FILES`] files, a file asks for one chunk
//!   each time it takes one ([`Demand::Ahead`]), so each file has at most [`AHEAD`] chunks
//!   decoded and waiting: memory stays bounded by the file count (at most `AHEAD` + 3 chunk
//!   buffers per file: the reader's, those waiting, the one in use and one on its way back),
//!   whatever the trace length, and the pool's threads are as many as asked, not one per file.
//!   The requests go to one queue that the pool's threads take in order, which is the order in
//!   which the merge used the files' chunks, the best guess of the order it will need the next
//!   ones in.
//! * **Beyond [`MAX_FILES`], a budget shared by all files.** A thousand files holding five
//!   buffers each would hold gigabytes. There a file's next chunk is decoded only when asked for
//!   ([`Demand::Requested`], [`Ahead::request`]): the merge asks for the chunks of the files whose
//!   chunk in hand ends first on its axis, up to half the files at once (`matching::merge`), and
//!   the buffers go back to one shared pile of spares. A file then holds one buffer, the chunk in
//!   use, as when it was decoded on the merge's own thread, plus those in flight.
//! * **Nothing changes but where the work runs.** A file's chunks come in file order (one chunk
//!   decoded at a time per file, under its lock) with the clock samples, kernel clock states and
//!   lost counts read up to each, so a [`TraceFile`] shows what the same calls would show reading
//!   inline; at the end the pool hands the reader itself back (footer, damage, every count).
//!   Whatever the number of threads, the events and everything derived from them are the same.
//! * **The per-event work that needs no order goes with the decoding.** The pool also computes
//!   each event's hash with the function it was made with (the matcher's packet-key hash): the
//!   merge's thread is one of the few that cannot be spread over the cores, so what it does per
//!   event bounds what many cores can do.
//! * **Errors and panics travel with the chunks**: an I/O error reaches the caller of
//!   [`TraceFile::next_chunk`], in order; a panic while decoding is resumed there.
//! * **Nothing waits on a full queue**: results go to unbounded channels (bounded by the
//!   requests), so a thread never blocks on one file while another needs it. The pool's threads
//!   end when the pool and every file opened through it are dropped.

use std::any::Any;
use std::fs::File;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use tsync_common::PacketEvent;
use tsync_common::format::{ClockSample, FormatError, KernelClock, LostCounts, TraceReader};

use super::tracefile::TraceHeader;

/// Chunks each file keeps decoded ahead: two, so that a file's thread goes on while the merge
/// takes from another file.
pub const AHEAD: usize = 2;

/// The most files decoded [`Demand::Ahead`]: up to `AHEAD` + 3 chunk buffers (up to 320 KiB
/// each) per file instead of one. More are decoded [`Demand::Requested`].
pub const MAX_FILES: usize = 64;

/// When a file's chunks are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demand {
    /// [`AHEAD`] chunks decoded ahead of the one in use, each with buffers of its own.
    Ahead,
    /// A chunk when [`Ahead::request`] or the file's reader asks for it, into the pool's shared
    /// buffers.
    Requested,
}

impl Demand {
    /// The demand for a set of `files` files.
    pub fn for_files(files: usize) -> Demand {
        if files <= MAX_FILES {
            Demand::Ahead
        } else {
            Demand::Requested
        }
    }
}

/// The spare buffers shared by the files decoded on request.
type SharedSpares = Arc<Mutex<Vec<Vec<PacketEvent>>>>;

/// A pool of threads decoding trace files ahead of their readers.
pub struct Decoders {
    jobs: Option<Sender<Arc<Slot>>>,
    workers: Vec<JoinHandle<()>>,
    hash: HashFn,
    /// The spares of the files decoded on request.
    spares: SharedSpares,
}

/// What the pool computes for every chunk, beside decoding it: each event's hash, appended to
/// the vector (a function per chunk, not per event, so that its loop inlines the hash), and
/// whatever its caller reads after them (the merge's pads them for its prefetch).
pub type HashFn = fn(&[PacketEvent], &mut Vec<u64>);

/// One file on the pool: its reader (until it is handed back) and where its chunks go.
struct Slot {
    state: Mutex<SlotState>,
}

struct SlotState {
    /// `None` once the end or an error was reached.
    reader: Option<TraceReader<File>>,
    chunks: Sender<Decoded>,
    /// Buffers to decode into again.
    spares: Spares,
    hash: HashFn,
    /// What was already sent of the reader's clock samples and kernel clock states.
    samples_sent: usize,
    kernel_sent: usize,
    lost_sent: LostCounts,
}

/// Where a file's buffers come back to, and are decoded into again from.
enum Spares {
    /// Its own ([`Demand::Ahead`]).
    Own(Receiver<Vec<PacketEvent>>),
    /// The pool's ([`Demand::Requested`]).
    Shared(SharedSpares),
}

/// [`Spares`], seen from the file's reader.
enum GiveBack {
    Own(Sender<Vec<PacketEvent>>),
    Shared(SharedSpares),
}

impl GiveBack {
    /// Hands a buffer the file is done with back.
    fn give(&self, used: Vec<PacketEvent>) {
        match self {
            GiveBack::Own(tx) => {
                let _ = tx.send(used);
            }
            // Not capped: a buffer comes back only after it was decoded into, so the pile holds
            // no more than the chunks that were in flight at once.
            GiveBack::Shared(spares) => lock(spares).push(used),
        }
    }
}

/// What the pool sends a file.
pub(super) enum Decoded {
    /// A chunk, and what the reader met before it: new clock samples and kernel clock states,
    /// the lost counts if they changed.
    Chunk {
        events: Vec<PacketEvent>,
        /// Each event's hash.
        hashes: Vec<u64>,
        samples: Vec<ClockSample>,
        kernel_clock: Vec<KernelClock>,
        lost: Option<LostCounts>,
    },
    /// The end (or the damage where reading stopped): the reader, with everything it read.
    End(Box<TraceReader<File>>),
    Failed(FormatError),
    Panicked(Box<dyn Any + Send>),
}

impl Decoders {
    /// A pool of `threads` threads (at least one) that also hashes every chunk's events with
    /// `hash`.
    pub fn new(threads: usize, hash: HashFn) -> Self {
        let (jobs, queue) = channel::<Arc<Slot>>();
        let queue = Arc::new(Mutex::new(queue));
        let workers = (0..threads.max(1))
            .map(|_| {
                let queue = Arc::clone(&queue);
                std::thread::spawn(move || work(&queue))
            })
            .collect();
        Decoders {
            jobs: Some(jobs),
            workers,
            hash,
            spares: SharedSpares::default(),
        }
    }

    /// Puts `reader` on the pool: with [`Demand::Ahead`], its first chunks are decoded from now.
    pub(super) fn start(&self, reader: TraceReader<File>, demand: Demand) -> Ahead {
        let (chunks, rx) = channel();
        let (spares, give_back) = match demand {
            Demand::Ahead => {
                let (tx, rx) = channel();
                (Spares::Own(rx), GiveBack::Own(tx))
            }
            Demand::Requested => (
                Spares::Shared(Arc::clone(&self.spares)),
                GiveBack::Shared(Arc::clone(&self.spares)),
            ),
        };
        let header = reader.header().clone();
        let (version, bracketed) = (reader.version(), reader.samples_bracketed());
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState {
                reader: Some(reader),
                chunks,
                spares,
                hash: self.hash,
                samples_sent: 0,
                kernel_sent: 0,
                lost_sent: LostCounts::default(),
            }),
        });
        let jobs = self.jobs.clone().expect("the pool runs until dropped");
        if demand == Demand::Ahead {
            for _ in 0..AHEAD {
                let _ = jobs.send(Arc::clone(&slot));
            }
        }
        Ahead {
            slot,
            jobs,
            rx,
            give_back,
            demand,
            requested: false,
            header,
            version,
            bracketed,
            events: Vec::new(),
            hashes: Vec::new(),
            samples: Vec::new(),
            kernel_clock: Vec::new(),
            lost: LostCounts::default(),
            failed: false,
        }
    }
}

impl Drop for Decoders {
    /// Waits for the threads, which end once every file opened through the pool is dropped too.
    fn drop(&mut self) {
        self.jobs = None;
        for w in self.workers.drain(..) {
            // A panic was sent to the file it happened on.
            let _ = w.join();
        }
    }
}

/// A pool thread: decodes one chunk per request until the queue closes.
fn work(queue: &Mutex<Receiver<Arc<Slot>>>) {
    loop {
        let job = lock(queue).recv();
        let Ok(slot) = job else { return };
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| decode(&slot))) {
            let _ = lock(&slot.state).chunks.send(Decoded::Panicked(panic));
        }
    }
}

/// Locks `m`, also after a panic while it was held (which is reported through the file).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Decodes the next chunk of `slot`'s file and sends it (nothing once the file ended).
fn decode(slot: &Slot) {
    let mut guard = lock(&slot.state);
    let st = &mut *guard;
    let Some(reader) = st.reader.as_mut() else {
        return;
    };
    // A file decoded on request decodes into a shared spare and keeps no buffer between chunks
    // (its reader's is swapped out empty); one decoded ahead decodes into its own and swaps its
    // own spare in.
    if let Spares::Shared(spares) = &st.spares {
        let mut buffer = lock(spares).pop().unwrap_or_default();
        reader.swap_events(&mut buffer);
    }
    let message = match reader.next_events() {
        Ok(Some(_)) => {
            let mut events = match &st.spares {
                Spares::Own(spare) => spare.try_recv().unwrap_or_default(),
                Spares::Shared(_) => Vec::new(),
            };
            reader.swap_events(&mut events);
            // (The function reserves what it writes: the merge's writes more hashes than events.)
            let mut hashes = Vec::new();
            (st.hash)(&events, &mut hashes);
            let samples = reader.clock_samples()[st.samples_sent..].to_vec();
            let kernel_clock = reader.kernel_clock()[st.kernel_sent..].to_vec();
            st.samples_sent += samples.len();
            st.kernel_sent += kernel_clock.len();
            let lost = (*reader.lost() != st.lost_sent).then(|| {
                st.lost_sent = reader.lost().clone();
                st.lost_sent.clone()
            });
            Decoded::Chunk {
                events,
                hashes,
                samples,
                kernel_clock,
                lost,
            }
        }
        Ok(None) => Decoded::End(Box::new(st.reader.take().expect("checked above"))),
        Err(e) => {
            st.reader = None;
            Decoded::Failed(e)
        }
    };
    let _ = st.chunks.send(message);
}

/// A file being decoded on the pool, seen from its reader: the chunk taken last and what was
/// read up to it.
pub(super) struct Ahead {
    slot: Arc<Slot>,
    jobs: Sender<Arc<Slot>>,
    rx: Receiver<Decoded>,
    give_back: GiveBack,
    demand: Demand,
    /// Whether a chunk was asked for ([`Demand::Requested`]) and not taken yet.
    requested: bool,
    pub(super) header: TraceHeader,
    pub(super) version: u32,
    pub(super) bracketed: bool,
    pub(super) events: Vec<PacketEvent>,
    /// The hash of each of `events`.
    pub(super) hashes: Vec<u64>,
    pub(super) samples: Vec<ClockSample>,
    pub(super) kernel_clock: Vec<KernelClock>,
    pub(super) lost: LostCounts,
    /// Set once a read failed: the pool stopped decoding the file, so nothing would come.
    failed: bool,
}

impl Ahead {
    /// Gives the current chunk's buffer back, asks for one more chunk and waits for the next
    /// one. `Ok(Some(reader))` at the end: the caller reads on from it (it returns no more
    /// chunks, and holds the footer, the damage and every count).
    pub(super) fn next(&mut self) -> Result<Option<TraceReader<File>>, FormatError> {
        if self.failed {
            return Err(stopped("an earlier read of this file failed"));
        }
        let used = std::mem::take(&mut self.events);
        if used.capacity() > 0 {
            self.give_back.give(used);
        }
        if self.demand == Demand::Ahead || !self.requested {
            let _ = self.jobs.send(Arc::clone(&self.slot));
        }
        self.requested = false;
        match self.rx.recv() {
            Ok(Decoded::Chunk {
                events,
                hashes,
                samples,
                kernel_clock,
                lost,
            }) => {
                self.events = events;
                self.hashes = hashes;
                self.samples.extend(samples);
                self.kernel_clock.extend(kernel_clock);
                if let Some(lost) = lost {
                    self.lost = lost;
                }
                Ok(None)
            }
            Ok(Decoded::End(reader)) => Ok(Some(*reader)),
            Ok(Decoded::Failed(e)) => {
                self.failed = true;
                Err(e)
            }
            Ok(Decoded::Panicked(panic)) => {
                self.failed = true;
                std::panic::resume_unwind(panic)
            }
            // Cannot happen (the slot holds the sender, and the pool outlives its files).
            Err(_) => Err(stopped("its decoding thread stopped")),
        }
    }

    /// Asks for the next chunk of a file decoded on request, to be decoded now, before
    /// [`next`](Self::next) takes it; true if that was asked (not for a file decoded ahead, one
    /// whose chunk was asked for already, or one whose reading failed).
    pub(super) fn request(&mut self) -> bool {
        if self.demand != Demand::Requested || self.requested || self.failed {
            return false;
        }
        let _ = self.jobs.send(Arc::clone(&self.slot));
        self.requested = true;
        true
    }
}

/// The error of a file whose decoding stopped.
fn stopped(why: &str) -> FormatError {
    FormatError::Io {
        context: "cannot read trace file".into(),
        error: std::io::Error::other(why.to_string()),
    }
}
