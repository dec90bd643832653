//! Per-CPU batches of events: one ring-buffer record per [`BATCH_EVENTS`] events.
//!
//! The ring buffer's `reserve` and `submit` are the dearest part of a hook run (~150 ns of a
//! ~400 ns run on the developers' AMD host: a spinlock with interrupts off, the producer position
//! shared by every CPU, a helper call each). A hook therefore appends its event to its CPU's
//! batch, a plain per-CPU map value no other CPU touches, and only the event that fills the batch
//! copies it into the ring buffer, with one `bpf_ringbuf_output`.
//!
//! Two things follow, and both are the agent's side of the contract:
//! - A batch a quiet CPU has begun may wait indefinitely. [`PENDING`] holds, per CPU, the time of
//!   the oldest event of its batch (0: empty); the agent reads it to know which events it has not
//!   seen yet, and has a batch that waited too long written by running [`tsync_flush`] on that
//!   CPU (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU`, Linux 5.10 and later). Older kernels
//!   record without batches (`BATCHING` 0, and the verifier drops this path).
//! - A program on the CPU may be interrupted by another that appends to the same batch (the flush
//!   run by the agent from process context, interrupted by the receive softirq; a hook reached
//!   from an interrupt). `busy` marks a batch being worked on; an interrupting program finds it
//!   set and writes its event directly (`reserve`/`submit`) or, for a flush, reports
//!   [`batch::FLUSH_BUSY`] so the agent retries later. Only the same CPU ever touches a batch, and an
//!   interrupt sees that CPU's earlier stores in order, so the flag needs no atomics: volatile
//!   accesses keep the compiler from moving the stores across it.
use aya_ebpf::{
    macros::{map, raw_tracepoint},
    maps::PerCpuArray,
    programs::RawTracePointContext,
};
use tsync_common::{
    batch::{self, Batch},
    direction,
};

use crate::{EVENT_WORDS, EVENTS, Words, count_lost, global, wakeup_flag};

/// Events per batch: 32 × 80 bytes = 2,560 bytes per CPU; 1/32 of a ring-buffer write per event.
const BATCH_EVENTS: usize = batch::EVENTS;
// A power of two, so that `% BATCH_EVENTS` is one mask the verifier reads as a bound.
const _: () = assert!(BATCH_EVENTS.is_power_of_two());

/// The batches, one per CPU.
#[map]
static BATCHES: PerCpuArray<Batch> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU, the timestamp of the oldest event in its batch; 0 when the batch is empty. Kept apart
/// from the batch so that the agent reads 8 bytes per CPU, not 2.5 KiB.
#[map]
static PENDING: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// 1 when the agent can flush a quiet CPU's batch (it sets this global before loading).
#[unsafe(no_mangle)]
static BATCHING: u32 = 0;

/// The next free slot of this CPU's batch, claimed: the hook writes its event's words straight
/// into it, then commits or abandons it (either releases the batch).
pub struct Slot {
    batch: *mut Batch,
    n: usize,
}

impl Slot {
    /// Claims this CPU's batch; `None` when batching is off or the batch is being worked on by
    /// the program this one interrupted (the event is then written on its own, [`direct`]).
    #[inline(always)]
    pub fn claim() -> Option<Slot> {
        if global(&BATCHING) == 0 {
            return None;
        }
        let batch = BATCHES.get_ptr_mut(0)?;
        // SAFETY: this CPU's value of a per-CPU map; see the module's doc for who else runs here.
        let b = unsafe { &mut *batch };
        if !claim(b) {
            return None;
        }
        let mut n = b.count as usize;
        if n >= BATCH_EVENTS {
            // Never left so by a program; a bound the verifier needs.
            flush(b);
            n = 0;
        }
        Some(Slot { batch, n })
    }

    /// The slot's words; all of them must be written before [`Slot::commit`].
    #[inline(always)]
    pub fn words(&mut self) -> &mut Words {
        // The index is the count loaded again and masked, not `n`: the compiler may keep `n` on
        // the stack from before its bound was tested, and Linux 6.1's verifier does not carry a
        // bound learned on a register over to the stack copy ("unbounded memory access"). A
        // mask bounds the very register the address is computed from; the count is unchanged
        // since `claim` (only this CPU touches the batch, and the batch is busy) and below
        // BATCH_EVENTS, so the mask changes nothing.
        // SAFETY: claimed in `claim`; a field of a live map value.
        let i = unsafe { core::ptr::read_volatile(&(*self.batch).count) } as usize;
        // SAFETY: as above; the index is below BATCH_EVENTS.
        unsafe { &mut (*self.batch).events[i % BATCH_EVENTS] }
    }

    /// Adds the written event (`dir`, taken at `ts_ns`) to the batch; the event that fills the
    /// batch writes it out.
    #[inline(always)]
    pub fn commit(self, dir: u8, ts_ns: u64) {
        // SAFETY: claimed in `claim`.
        let batch = unsafe { &mut *self.batch };
        let n = self.n;
        if n == 0 {
            set_pending(ts_ns);
        }
        batch.sends += u32::from(dir == direction::SEND);
        batch.count = n as u32 + 1;
        if n + 1 == BATCH_EVENTS {
            flush(batch);
        }
        release(batch);
    }

    /// Leaves the batch as it was (the packet is not recorded).
    #[inline(always)]
    pub fn abandon(self) {
        // SAFETY: claimed in `claim`.
        release(unsafe { &mut *self.batch });
    }
}

/// Writes one event as a record of its own (the unbatched path).
#[inline(always)]
pub fn direct(ev: &Words, dir: u8) {
    match EVENTS.reserve::<[u64; EVENT_WORDS]>(0) {
        Some(mut entry) => {
            // Ten 8-byte stores into the reserved record (it is 8-aligned).
            let at = entry.as_mut_ptr().cast::<u64>();
            let mut i = 0;
            while i < EVENT_WORDS {
                // SAFETY: the reserved record is EVENT_WORDS words long.
                unsafe { at.add(i).write(ev[i]) };
                i += 1;
            }
            entry.submit(wakeup_flag(EVENT_WORDS * 8));
        }
        None => count_lost(dir, 1),
    }
}

/// Marks the batch busy; false if a program this one interrupted already had.
#[inline(always)]
fn claim(batch: &mut Batch) -> bool {
    // SAFETY: a field of a live map value.
    unsafe {
        if core::ptr::read_volatile(&batch.busy) != 0 {
            return false;
        }
        core::ptr::write_volatile(&mut batch.busy, 1);
    }
    true
}

#[inline(always)]
fn release(batch: &mut Batch) {
    // SAFETY: a field of a live map value.
    unsafe { core::ptr::write_volatile(&mut batch.busy, 0) };
}

/// Writes the held events as one ring-buffer record (counted as lost, per direction, if the ring
/// is full) and empties the batch.
#[inline(always)]
fn flush(batch: &mut Batch) {
    // SAFETY (both loads): a field of a live map value.
    if unsafe { core::ptr::read_volatile(&batch.count) } != 0 {
        // Loaded again, and tested on its own, so that the verifier sees a bound on this very
        // register: LLVM turns `0 < n <= 32` on one load into one comparison of `n - 1`.
        let n = unsafe { core::ptr::read_volatile(&batch.count) } as usize;
        if n <= BATCH_EVENTS {
            // SAFETY: the first n of the batch's events, written by `append`.
            let held = unsafe { core::slice::from_raw_parts(batch.events.as_ptr(), n) };
            let flags = wakeup_flag(n * EVENT_WORDS * 8);
            if EVENTS.output::<[[u64; EVENT_WORDS]]>(held, flags).is_err() {
                let sends = u64::from(batch.sends).min(n as u64);
                count_lost(direction::SEND, sends);
                count_lost(direction::RECV, n as u64 - sends);
            }
        }
    }
    batch.count = 0;
    batch.sends = 0;
    set_pending(0);
}

/// Records when this CPU's batch got its first event (0: empty again).
#[inline(always)]
fn set_pending(ts_ns: u64) {
    if let Some(pending) = PENDING.get_ptr_mut(0) {
        // SAFETY: this CPU's value of a per-CPU map.
        unsafe { core::ptr::write_volatile(pending, ts_ns) };
    }
}

/// Writes out this CPU's batch. Never attached: the agent runs it on a chosen CPU with
/// `BPF_PROG_TEST_RUN`. Returns 0, or [`batch::FLUSH_BUSY`] when it interrupted a program that was
/// working on the batch. The tracepoint name is only the section's; nothing attaches it.
#[raw_tracepoint(tracepoint = "tsync_flush")]
pub fn tsync_flush(_ctx: RawTracePointContext) -> i32 {
    let Some(batch) = BATCHES.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: as in `submit`.
    let batch = unsafe { &mut *batch };
    if !claim(batch) {
        return batch::FLUSH_BUSY as i32;
    }
    flush(batch);
    release(batch);
    0
}
