//! A source read and parsed on its own thread, its records handed over in batches.
//!
//! Parsing (validating each JSON line, reading its time and interval) is most of a merge's work,
//! and it is independent per file: with a thread per file the merge itself only picks heads and
//! writes. Batches keep the channel's cost per record small; the channel's bound keeps memory
//! at a few batches per file whatever the files' length.

use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};

use super::{MergeError, Next, Source};

/// Records per batch.
const BATCH: usize = 1024;
/// Batches in flight per file.
const IN_FLIGHT: usize = 4;

type Batch<T> = Vec<Result<Next<T>, MergeError>>;

/// `S` running on its own thread.
pub struct Threaded<T> {
    rx: Receiver<Batch<T>>,
    batch: std::vec::IntoIter<Result<Next<T>, MergeError>>,
    name: String,
    /// Written records on their way back to the thread (their memory is reused there).
    written: Vec<T>,
    back: Sender<Vec<T>>,
}

impl<T: Send + 'static> Threaded<T> {
    /// Starts reading `source` on a thread of its own.
    pub fn spawn<S: Source<Item = T> + Send + 'static>(mut source: S) -> Result<Self, MergeError> {
        let name = source.name().to_string();
        let (tx, rx) = sync_channel::<Batch<T>>(IN_FLIGHT);
        let (back, returned) = channel::<Vec<T>>();
        std::thread::Builder::new()
            .name(format!("merge {name}"))
            .spawn(move || {
                loop {
                    while let Ok(items) = returned.try_recv() {
                        items.into_iter().for_each(|i| source.recycle(i));
                    }
                    let mut batch = Vec::with_capacity(BATCH);
                    let mut last = false;
                    while batch.len() < BATCH && !last {
                        let r = source.next();
                        last = matches!(r, Ok(Next::End) | Err(_));
                        batch.push(r);
                    }
                    // The merge may have stopped (an error elsewhere): then so does this.
                    if tx.send(batch).is_err() || last {
                        break;
                    }
                }
            })
            .map_err(|e| MergeError::io("cannot start a reading thread", e))?;
        Ok(Threaded {
            rx,
            batch: Vec::new().into_iter(),
            name,
            written: Vec::with_capacity(BATCH),
            back,
        })
    }
}

impl<T> Source for Threaded<T> {
    type Item = T;

    fn next(&mut self) -> Result<Next<T>, MergeError> {
        loop {
            if let Some(r) = self.batch.next() {
                return r;
            }
            match self.rx.recv() {
                Ok(b) => self.batch = b.into_iter(),
                // The thread ended after handing over the end (or an error): nothing more.
                Err(_) => return Ok(Next::End),
            }
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn recycle(&mut self, item: T) {
        self.written.push(item);
        if self.written.len() >= BATCH {
            let full = std::mem::replace(&mut self.written, Vec::with_capacity(BATCH));
            // The thread may be done: then the records are simply freed.
            let _ = self.back.send(full);
        }
    }
}
