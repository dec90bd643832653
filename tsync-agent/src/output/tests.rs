use std::{
    io::{self, Write},
    sync::{Arc, Condvar, Mutex},
};

use tsync_common::{
    EVENT_SIZE, PacketEvent, direction,
    format::{ClockSample, Header, LostCounts, TraceReader, TraceWriter},
};

use super::{chunk::CHUNK_EVENTS, *};
use crate::sampler::ClockRecord;

/// An output file whose writes block while its gate is closed (a stalled file system), or fail
/// with ENOSPC once `fail` is set.
#[derive(Clone, Default)]
struct Gated(Arc<(Mutex<Disk>, Condvar)>);

#[derive(Default)]
struct Disk {
    closed: bool,
    fail: bool,
    data: Vec<u8>,
    /// Writes that found the gate closed.
    blocked: usize,
}

impl Gated {
    fn set(&self, f: impl FnOnce(&mut Disk)) {
        f(&mut self.0.0.lock().unwrap());
        self.0.1.notify_all();
    }

    fn data(&self) -> Vec<u8> {
        self.0.0.lock().unwrap().data.clone()
    }

    /// Waits until a write is blocked at the gate.
    fn wait_blocked(&self) {
        let disk = self.0.0.lock().unwrap();
        drop(self.0.1.wait_while(disk, |d| d.blocked == 0).unwrap());
    }
}

impl Write for Gated {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (disk, cv) = &*self.0;
        let mut disk = disk.lock().unwrap();
        if disk.closed {
            disk.blocked += 1;
            cv.notify_all();
            disk = cv.wait_while(disk, |d| d.closed).unwrap();
        }
        if disk.fail {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        disk.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn start(disk: &Gated, budget: u64) -> Output {
    let writer = TraceWriter::new(disk.clone(), &Header::default()).unwrap();
    Output::start(writer, Path::new("/test/out.trace"), budget).unwrap()
}

/// `n` events from `first` on, alternating send and receive.
fn events(first: u64, n: usize) -> Vec<PacketEvent> {
    (first..first + n as u64)
        .map(|i| PacketEvent {
            ts_ns: i,
            direction: if i % 2 == 0 {
                direction::SEND
            } else {
                direction::RECV
            },
            ..PacketEvent::default()
        })
        .collect()
}

fn sample(t: u64) -> ClockSample {
    ClockSample {
        monotonic_ns: t,
        monotonic_raw_ns: t,
        realtime_ns: t as i64,
        tsc: t,
        monotonic_after_ns: t,
    }
}

fn read(disk: &Gated) -> (Vec<PacketEvent>, TraceReader<io::Cursor<Vec<u8>>>) {
    let mut r = TraceReader::new(io::Cursor::new(disk.data())).unwrap();
    let mut all = Vec::new();
    while let Some(chunk) = r.next_events().unwrap() {
        all.extend_from_slice(chunk);
    }
    (all, r)
}

fn kernel_lost(send: u64) -> LostCounts {
    LostCounts {
        send,
        per_cpu: vec![[send, 0]],
        ..LostCounts::default()
    }
}

#[test]
fn events_reach_the_file_in_order_with_clock_records_and_counters() {
    let disk = Gated::default();
    let mut out = start(&disk, 16 * MIN_BUFFER);
    let all = events(1, 3 * CHUNK_EVENTS + 100);
    // In pieces of uneven sizes, as the reorder buffer releases them.
    for piece in all.chunks(1000) {
        out.write(piece).unwrap();
    }
    out.flush([ClockRecord::Sample(sample(5))], kernel_lost(2))
        .unwrap();
    out.write(&events(1_000_000, 7)).unwrap();
    assert_eq!(out.events(), all.len() as u64 + 7);
    let stats = out
        .finish(
            vec![ClockRecord::Sample(sample(9))],
            kernel_lost(3),
            &sample(10),
        )
        .unwrap();
    let (written, r) = read(&disk);
    assert_eq!(written[..all.len()], all[..]);
    assert_eq!(written.len(), all.len() + 7);
    assert_eq!(stats.written.total(), written.len() as u64);
    assert_eq!(
        stats.written.send,
        written.iter().filter(|e| e.ts_ns % 2 == 0).count() as u64
    );
    assert_eq!(stats.lost, 0);
    assert!(stats.peak_bytes > 0 && stats.peak_bytes <= 16 * MIN_BUFFER);
    let footer = r.footer().expect("footer");
    assert_eq!(footer.events, written.len() as u64);
    assert_eq!(footer.lost, kernel_lost(3));
    assert_eq!(footer.end_monotonic_ns, 10);
    let times: Vec<u64> = r.clock_samples().iter().map(|s| s.monotonic_ns).collect();
    assert_eq!(times, [5, 9]);
}

#[test]
fn a_stalled_disk_never_blocks_the_drain_and_losses_beyond_the_budget_are_counted() {
    let disk = Gated::default();
    let mut out = start(&disk, MIN_BUFFER);
    disk.set(|d| d.closed = true);
    // The first chunk is taken by the writer, which blocks in its write.
    out.write(&events(0, CHUNK_EVENTS)).unwrap();
    disk.wait_blocked();
    // Ten more chunks while the disk takes nothing: returns at once. The budget (1 MiB) holds
    // three 320 KiB chunks, the one being written included: the other eight are dropped, whatever
    // the threads' timing.
    out.write(&events(CHUNK_EVENTS as u64, 10 * CHUNK_EVENTS))
        .unwrap();
    out.flush([ClockRecord::Sample(sample(1))], kernel_lost(0))
        .unwrap();
    let dropped = 8 * CHUNK_EVENTS as u64;
    assert_eq!(out.lost(), dropped);
    disk.set(|d| d.closed = false);
    let stats = out
        .finish(
            vec![ClockRecord::Sample(sample(2))],
            kernel_lost(1),
            &sample(3),
        )
        .unwrap();
    assert_eq!(stats.lost, dropped);
    assert_eq!(stats.peak_bytes, 3 * CHUNK_BYTES as u64);
    assert_eq!(stats.budget_bytes, MIN_BUFFER);
    let (written, r) = read(&disk);
    assert_eq!(written.len(), 3 * CHUNK_EVENTS);
    assert_eq!(stats.written.total(), written.len() as u64);
    // Whole chunks were dropped: what is written is the first three, in order.
    assert_eq!(written, events(0, 3 * CHUNK_EVENTS));
    let footer = r.footer().expect("footer");
    assert_eq!(footer.lost.disk, dropped);
    assert_eq!(footer.lost.send, 1, "the kernel's counters are kept");
    assert_eq!(footer.events, written.len() as u64);
    assert_eq!(r.lost().disk, dropped);
    assert_eq!(
        r.clock_samples().len(),
        2,
        "clock records are never dropped"
    );
}

#[test]
fn the_last_events_wait_for_room_instead_of_being_dropped() {
    let disk = Gated::default();
    // Room for exactly three chunks.
    let mut out = start(&disk, 3 * CHUNK_BYTES as u64);
    disk.set(|d| d.closed = true);
    out.write(&events(0, CHUNK_EVENTS)).unwrap();
    disk.wait_blocked();
    out.write(&events(CHUNK_EVENTS as u64, 2 * CHUNK_EVENTS + 10))
        .unwrap();
    assert_eq!(out.lost(), 0, "three chunks fit");
    // The budget is full: the partial chunk waits for the disk to take writes again.
    let opener = std::thread::spawn({
        let disk = disk.clone();
        move || disk.set(|d| d.closed = false)
    });
    let stats = out.finish(Vec::new(), kernel_lost(0), &sample(3)).unwrap();
    opener.join().unwrap();
    assert_eq!(stats.lost, 0);
    assert_eq!(read(&disk).0.len(), 3 * CHUNK_EVENTS + 10);
}

#[test]
fn a_full_disk_stops_the_recording_with_its_error() {
    let disk = Gated::default();
    let mut out = start(&disk, MIN_BUFFER);
    disk.set(|d| d.fail = true);
    // The writer may fail on the first chunk before the second is handed over: then the drain
    // side hears of it at once, else when finishing.
    let err = match out.write(&events(0, 2 * CHUNK_EVENTS)) {
        Err(err) => err,
        Ok(()) => out
            .finish(Vec::new(), kernel_lost(0), &sample(1))
            .unwrap_err(),
    };
    let text = format!("{err:#}");
    assert!(text.contains("/test/out.trace is full"), "{text}");
}

#[test]
fn chunks_count_hooks_and_partial_chunks_hold_only_their_events() {
    let mut chunk = Chunk::new();
    assert!(chunk.take().is_none());
    let some = events(0, 5);
    assert_eq!(chunk.fill(&some), 5);
    let partial = chunk.take().unwrap();
    assert_eq!(partial.bytes.len(), 5 * EVENT_SIZE);
    assert_eq!(partial.counts, Counts { send: 3, recv: 2 });
    assert_eq!(chunk::events(&partial.bytes)[..], some[..]);
    let many = events(0, CHUNK_EVENTS + 1);
    assert_eq!(chunk.fill(&many), CHUNK_EVENTS);
    assert!(chunk.is_full());
    let full = chunk.take().unwrap();
    assert_eq!(full.bytes.len(), CHUNK_BYTES);
    // An unaligned view is copied, not refused.
    let mut words = [0u64; EVENT_SIZE / 8 + 1];
    let raw: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
    raw[1..=EVENT_SIZE].copy_from_slice(bytemuck::bytes_of(&some[3]));
    assert_eq!(chunk::events(&raw[1..=EVENT_SIZE])[..], some[3..4]);
}

#[test]
fn written_and_dropped_chunks_buffers_are_filled_again() {
    let disk = Gated::default();
    let mut out = start(&disk, MIN_BUFFER);
    let first = out.chunk.buffer();
    out.write(&events(0, CHUNK_EVENTS)).unwrap();
    let second = out.chunk.buffer();
    assert_ne!(
        second, first,
        "a buffer of its own while the first is queued"
    );
    // Once written, the first chunk's buffer is kept, then filled by the drain again.
    drop(out.queue.wait_until(out.queue.lock(), |s| s.held == 0));
    assert_eq!(out.queue.lock().spare.len(), 1);
    out.write(&events(CHUNK_EVENTS as u64, CHUNK_EVENTS))
        .unwrap();
    assert_eq!(out.chunk.buffer(), first);
    // A chunk dropped for want of room gives its buffer back at once: the drain fills it again.
    drop(out.queue.wait_until(out.queue.lock(), |s| s.held == 0));
    disk.set(|d| d.closed = true);
    out.write(&events(2 * CHUNK_EVENTS as u64, CHUNK_EVENTS))
        .unwrap();
    disk.wait_blocked();
    // The budget (1 MiB) holds three chunks, the one being written included.
    out.write(&events(3 * CHUNK_EVENTS as u64, 2 * CHUNK_EVENTS))
        .unwrap();
    let filling = out.chunk.buffer();
    out.write(&events(5 * CHUNK_EVENTS as u64, CHUNK_EVENTS))
        .unwrap();
    assert_eq!(out.lost(), CHUNK_EVENTS as u64);
    assert_eq!(out.chunk.buffer(), filling);
    disk.set(|d| d.closed = false);
    let stats = out.finish(Vec::new(), kernel_lost(0), &sample(1)).unwrap();
    assert_eq!(stats.written.total(), 5 * CHUNK_EVENTS as u64);
    assert_eq!(read(&disk).0, events(0, 5 * CHUNK_EVENTS));
}

#[test]
fn only_whole_chunks_buffers_are_kept() {
    let mut chunk = Chunk::new();
    chunk.fill(&events(0, 5));
    assert!(chunk::recycle(chunk.take().unwrap().bytes).is_none());
    chunk.fill(&events(0, CHUNK_EVENTS));
    let full = chunk.take().unwrap();
    let at = full.bytes.as_ptr();
    let held = full.bytes.clone();
    assert!(chunk::recycle(full.bytes).is_none(), "still held elsewhere");
    let buf = chunk::recycle(held).expect("the only holder now");
    assert_eq!((buf.as_ptr(), buf.len()), (at, 0));
    chunk.restock(|| Some(buf));
    assert_eq!(chunk.buffer(), at);
    // A chunk that has a buffer keeps it, and takes no spare.
    chunk.fill(&events(0, 5));
    chunk.take().unwrap();
    chunk.restock(|| panic!("a spare taken for a chunk that has a buffer"));
    assert_eq!(chunk.buffer(), at);
    assert_eq!(chunk.fill(&events(0, CHUNK_EVENTS + 1)), CHUNK_EVENTS);
}

#[test]
fn a_flush_leaves_the_spare_buffers_alone() {
    let disk = Gated::default();
    let mut out = start(&disk, MIN_BUFFER);
    out.write(&events(0, CHUNK_EVENTS)).unwrap();
    drop(out.queue.wait_until(out.queue.lock(), |s| s.held == 0));
    assert_eq!(out.queue.lock().spare.len(), 1);
    out.write(&events(CHUNK_EVENTS as u64, 10)).unwrap();
    out.flush(Vec::new(), kernel_lost(0)).unwrap();
    assert_eq!(
        out.queue.lock().spare.len(),
        1,
        "the partial chunk keeps the drain's buffer"
    );
    out.finish(Vec::new(), kernel_lost(0), &sample(1)).unwrap();
    assert_eq!(read(&disk).0, events(0, CHUNK_EVENTS + 10));
}
