//! Chunks of events on their way from the drain to the writer thread.
use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use tsync_common::{EVENT_SIZE, PacketEvent, direction};

/// Events per chunk: as many as one event chunk of the file holds, so that a full chunk goes to
/// the file as one. Also the unit of what is dropped when the output cannot keep up.
pub const CHUNK_EVENTS: usize = tsync_common::format::EVENTS_PER_CHUNK;
/// Bytes of a full chunk (320 KiB).
pub const CHUNK_BYTES: usize = CHUNK_EVENTS * EVENT_SIZE;

/// Events per hook.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub send: u64,
    pub recv: u64,
}

impl Counts {
    pub fn total(&self) -> u64 {
        self.send + self.recv
    }

    pub fn add(&mut self, other: Counts) {
        self.send += other.send;
        self.recv += other.recv;
    }
}

/// Events handed over: a whole number of [`PacketEvent`]s as immutable bytes, and how many of
/// each hook they hold (what is counted as written, or as lost if the chunk is dropped).
pub struct Frozen {
    pub bytes: Bytes,
    pub counts: Counts,
}

/// The chunk the drain is filling: events in time order, the clock skew applied.
pub struct Chunk {
    buf: BytesMut,
    counts: Counts,
}

impl Chunk {
    pub fn new() -> Self {
        Chunk {
            buf: BytesMut::with_capacity(CHUNK_BYTES),
            counts: Counts::default(),
        }
    }

    /// Appends events from the front of `events` until the chunk is full; returns how many it took.
    pub fn fill(&mut self, events: &[PacketEvent]) -> usize {
        let n = (CHUNK_EVENTS - self.len()).min(events.len());
        let taken = &events[..n];
        let send = taken
            .iter()
            .filter(|e| e.direction == direction::SEND)
            .count() as u64;
        self.counts.send += send;
        self.counts.recv += n as u64 - send;
        self.buf.extend_from_slice(bytemuck::cast_slice(taken));
        n
    }

    /// Where the chunk's buffer is (tests of its reuse).
    #[cfg(test)]
    pub fn buffer(&self) -> *const u8 {
        self.buf.as_ptr()
    }

    /// Events in the chunk.
    pub fn len(&self) -> usize {
        self.buf.len() / EVENT_SIZE
    }

    pub fn is_full(&self) -> bool {
        self.len() == CHUNK_EVENTS
    }

    /// Takes the events, None if there are none. A full chunk hands its buffer over as it is,
    /// leaving the chunk without one until [`Chunk::restock`]; a partial one (at a flush) is
    /// copied into a buffer of its own size, so that the memory a queued chunk holds is exactly
    /// its length, and the buffer is kept.
    pub fn take(&mut self) -> Option<Frozen> {
        if self.buf.is_empty() {
            return None;
        }
        let bytes = if self.is_full() {
            std::mem::take(&mut self.buf).freeze()
        } else {
            let copy = Bytes::copy_from_slice(&self.buf);
            self.buf.clear();
            copy
        };
        Some(Frozen {
            bytes,
            counts: std::mem::take(&mut self.counts),
        })
    }

    /// Gives a chunk whose full buffer was taken a buffer to fill: what `spare` returns (a
    /// written chunk's, [`recycle`]d), or a new one. `spare` is not called when the chunk has a
    /// buffer (after a partial chunk was taken): a spare taken then would be freed.
    ///
    /// Why reuse: a chunk's 320 KiB are above the size at which an allocator maps fresh pages
    /// for each allocation and unmaps them when freed (musl's always, glibc's until its
    /// threshold adapts), and filling fresh pages costs a page fault and a page zeroed per 4 KiB:
    /// that made the static (musl) agent cost 25–40 % more CPU per event than the glibc one
    /// (docs/benchmarks.md).
    pub fn restock(&mut self, spare: impl FnOnce() -> Option<BytesMut>) {
        if self.buf.capacity() == 0 {
            self.buf = spare().unwrap_or_else(|| BytesMut::with_capacity(CHUNK_BYTES));
        }
    }
}

/// The buffer of a chunk that was written or dropped, emptied, if it is a full chunk's and
/// nothing else holds it: what [`Chunk::restock`] takes.
pub fn recycle(bytes: Bytes) -> Option<BytesMut> {
    if bytes.len() != CHUNK_BYTES {
        return None;
    }
    let mut buf = bytes.try_into_mut().ok()?;
    buf.clear();
    (buf.capacity() >= CHUNK_BYTES).then_some(buf)
}

/// The events of a handed-over chunk: the bytes themselves when they are aligned for
/// [`PacketEvent`] (the allocator's blocks are, and chunks are whole events), a copy otherwise.
pub fn events(bytes: &[u8]) -> Cow<'_, [PacketEvent]> {
    match bytemuck::try_cast_slice(bytes) {
        Ok(events) => Cow::Borrowed(events),
        Err(_) => Cow::Owned(
            bytes
                .chunks_exact(EVENT_SIZE)
                .map(bytemuck::pod_read_unaligned)
                .collect(),
        ),
    }
}
