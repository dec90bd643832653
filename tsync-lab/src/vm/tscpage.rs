//! The ground truth's channel: a page of host memory that every guest maps (QEMU's
//! `ivshmem-plain` device over a file in `/dev/shm`), through which a guest learns its TSC's
//! offset from the host's, and through which the guests meet at the start and the end.
//!
//! Under TCG a guest's TSC is the host's TSC plus a constant (QEMU reads the host's counter for
//! every `rdtsc`). A guest measures that constant with a handshake: it reads its TSC (g1), writes
//! a fresh nonce into its slot, and spins until the host has answered that nonce with the host
//! TSC it read after seeing it (h); then it reads its TSC again (g2). The host's reading happened
//! between the guest's two, so the offset lies in `[g1 − h, g2 − h]` — a bracket that holds
//! whatever the scheduling, and is tight when both sides spin. The tightest of many tries is kept.
//!
//! The host answers only while some guest asks (`session`), sleeping a millisecond between looks
//! otherwise: three guests and the host share two cores.
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of the shared file (ivshmem needs a power of two).
pub const PAGE_BYTES: usize = 1 << 20;
/// Guests one page serves.
pub const MAX_GUESTS: usize = 16;
/// Byte offset of guest k's slot: `SLOT_BYTES * k`.
const SLOT_BYTES: usize = 64;
/// Byte offset of the words all guests share (barriers).
const GLOBAL: usize = 4096;

/// Words of a guest's slot (u64 index within the slot).
#[derive(Clone, Copy)]
#[repr(usize)]
pub enum SlotWord {
    /// Nonce the guest wants answered.
    Request = 0,
    /// Last nonce the host answered.
    Response = 1,
    /// The host TSC read for that answer.
    HostTsc = 2,
    /// Non-zero while the guest wants the host to spin.
    Session = 3,
    /// Set by the guest once its agent records (the start barrier).
    Ready = 4,
    /// Set by the guest once its traffic is over (the stop barrier).
    Done = 5,
    /// Set by the guest once it has booted and its NIC is up (the first barrier).
    Booted = 6,
    /// Set by the guest once its agent has stopped (the last barrier).
    Finished = 7,
}

/// Words every guest reads, the host writes.
#[derive(Clone, Copy)]
#[repr(usize)]
pub enum GlobalWord {
    /// Host TSC at which every guest was ready: the traffic starts.
    Go = 0,
    /// Host TSC at which every guest was done: the agents stop.
    Stop = 1,
    /// Host TSC at which every guest had booted: the agents start. Under TCG a booting guest
    /// takes a whole host core, and guests that recorded while others booted were starved for
    /// up to 160 ms at a time.
    AllBooted = 2,
    /// Host TSC at which every agent had stopped: the guests measure their TSC offset again,
    /// all idle (guests powering off starve the others' handshakes).
    AllFinished = 3,
}

/// A mapping of the shared page (host: the `/dev/shm` file; guest: the PCI BAR).
pub struct TscPage {
    base: *mut u8,
    len: usize,
}

// SAFETY: the page is only accessed through atomics.
unsafe impl Send for TscPage {}
// SAFETY: as above.
unsafe impl Sync for TscPage {}

impl TscPage {
    /// Maps `len` bytes of `file` shared.
    pub fn map(file: &std::fs::File, len: usize) -> anyhow::Result<TscPage> {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of a file we hold open; checked for failure.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            anyhow::bail!(
                "cannot map the shared TSC page: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(TscPage {
            base: base.cast(),
            len,
        })
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= self.len && offset.is_multiple_of(8));
        // SAFETY: in bounds and aligned (checked), the mapping lives as long as self, and every
        // access to the page is atomic.
        unsafe { &*(self.base.add(offset).cast::<AtomicU64>()) }
    }

    /// A word of guest `k`'s slot.
    pub fn slot(&self, k: usize, w: SlotWord) -> &AtomicU64 {
        assert!(k < MAX_GUESTS);
        self.word(SLOT_BYTES * k + 8 * w as usize)
    }

    /// A shared word.
    pub fn global(&self, w: GlobalWord) -> &AtomicU64 {
        self.word(GLOBAL + 8 * w as usize)
    }

    /// Host side, one look: answers every pending request of guests `0..n`; returns whether any
    /// guest holds a session (then the caller should look again at once).
    pub fn serve(&self, n: usize) -> bool {
        let mut busy = false;
        for k in 0..n {
            if self.slot(k, SlotWord::Session).load(Ordering::Acquire) == 0 {
                continue;
            }
            busy = true;
            let req = self.slot(k, SlotWord::Request).load(Ordering::Acquire);
            if req != self.slot(k, SlotWord::Response).load(Ordering::Relaxed) {
                let h = tsc();
                self.slot(k, SlotWord::HostTsc).store(h, Ordering::Relaxed);
                self.slot(k, SlotWord::Response)
                    .store(req, Ordering::Release);
            }
        }
        busy
    }

    /// Host side: sets `word` to the host TSC once every guest of `0..n` has set `flag`.
    pub fn barrier(&self, n: usize, flag: SlotWord, word: GlobalWord) {
        let all = (0..n).all(|k| self.slot(k, flag).load(Ordering::Acquire) != 0);
        if all && self.global(word).load(Ordering::Relaxed) == 0 {
            self.global(word).store(tsc(), Ordering::Release);
        }
    }

    /// Guest side: waits until the host sets a shared word (a barrier among the guests).
    pub fn wait_global(&self, w: GlobalWord, patience: std::time::Duration) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + patience;
        while self.global(w).load(Ordering::Acquire) == 0 {
            if std::time::Instant::now() > deadline {
                anyhow::bail!("the other guests did not reach the barrier within {patience:?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Ok(())
    }

    /// Guest side: measures this guest's TSC offset from the host's with `tries` handshakes;
    /// the tightest bracket, or an error when the host does not answer within `timeout`.
    pub fn measure_offset(
        &self,
        k: usize,
        tries: usize,
        timeout: std::time::Duration,
    ) -> anyhow::Result<OffsetBracket> {
        self.measure_handshake(k, tries, timeout)
            .map(Handshake::offset)
    }

    /// Guest side: the tightest of `tries` handshakes (the guest's counter read before and after
    /// the host read its TSC), or an error when the host does not answer within `timeout`.
    pub fn measure_handshake(
        &self,
        k: usize,
        tries: usize,
        timeout: std::time::Duration,
    ) -> anyhow::Result<Handshake> {
        self.slot(k, SlotWord::Session).store(1, Ordering::Release);
        let result = self.handshakes(k, tries, timeout);
        self.slot(k, SlotWord::Session).store(0, Ordering::Release);
        result
    }

    fn handshakes(
        &self,
        k: usize,
        tries: usize,
        timeout: std::time::Duration,
    ) -> anyhow::Result<Handshake> {
        let start = std::time::Instant::now();
        let mut best: Option<Handshake> = None;
        let mut nonce = self.slot(k, SlotWord::Response).load(Ordering::Acquire);
        for _ in 0..tries {
            nonce += 1;
            let g1 = tsc();
            self.slot(k, SlotWord::Request)
                .store(nonce, Ordering::Release);
            while self.slot(k, SlotWord::Response).load(Ordering::Acquire) != nonce {
                if start.elapsed() > timeout {
                    anyhow::bail!(
                        "the host did not answer on the shared TSC page within {timeout:?} \
                         (is the ivshmem device the host's page?)"
                    );
                }
                std::hint::spin_loop();
            }
            let host = self.slot(k, SlotWord::HostTsc).load(Ordering::Acquire);
            let g2 = tsc();
            let h = Handshake { g1, host, g2 };
            if best.is_none_or(|b| h.g2 - h.g1 < b.g2 - b.g1) {
                best = Some(h);
            }
        }
        best.ok_or_else(|| anyhow::anyhow!("no handshake tried"))
    }
}

/// One handshake: the host read its TSC (`host`) while the guest's counter went from `g1` to
/// `g2`. On an x86_64 guest the counter is the host's TSC plus a constant ([`Handshake::offset`]);
/// on an aarch64 guest it is QEMU's virtual clock (the host's CLOCK_MONOTONIC) in generic-timer
/// ticks, another rate: a line through handshakes over the run maps it onto the host's TSC
/// ([`super::report::GuestReport::handshakes`]).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Handshake {
    pub g1: u64,
    pub host: u64,
    pub g2: u64,
}

impl Handshake {
    /// Guest TSC − host TSC as a bracket (meaningful where both count the same ticks).
    pub fn offset(self) -> OffsetBracket {
        OffsetBracket {
            lo: self.g1 as i128 - self.host as i128,
            hi: self.g2 as i128 - self.host as i128,
            guest_tsc: self.g2,
        }
    }
}

impl Drop for TscPage {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Guest TSC − host TSC, known to lie in `[lo, hi]` (ticks), measured at guest TSC `guest_tsc`.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct OffsetBracket {
    pub lo: i128,
    pub hi: i128,
    pub guest_tsc: u64,
}

impl OffsetBracket {
    pub fn width(&self) -> i128 {
        self.hi - self.lo
    }

    pub fn mid(&self) -> f64 {
        (self.lo + self.hi) as f64 / 2.0
    }
}

/// The CPU's counter, read once every earlier instruction has completed. On x86_64 the time
/// stamp counter (`lfence; rdtsc`, as the kernel's `rdtsc_ordered`): a bare `rdtsc` may execute
/// before the load that saw the other side's word, and the bracket would then exclude the truth
/// (measured on this host: [−286, −52] ticks around a true 0). On aarch64 (the lab's arm64
/// guest) the generic timer's virtual count, `isb; mrs cntvct_el0` (as the kernel's
/// `arch_timer_read_cntvct_el0`). The lab's host is x86_64: `cargo xtask lab` refuses to start
/// elsewhere.
#[inline]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence and rdtsc have no preconditions on x86_64 (SSE2 is baseline).
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(target_arch = "aarch64")]
    {
        let count: u64;
        // SAFETY: reads a system register (readable at EL0 on Linux), no memory access.
        unsafe {
            core::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) count,
                             options(nostack, preserves_flags));
        }
        count
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    unreachable!("the lab's guests are x86_64 or aarch64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn page() -> (tempfile::NamedTempFile, Arc<TscPage>) {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(PAGE_BYTES as u64).unwrap();
        let p = TscPage::map(f.as_file(), PAGE_BYTES).unwrap();
        (f, Arc::new(p))
    }

    #[test]
    fn a_handshake_with_the_same_clock_brackets_zero() {
        // Host and "guest" share one TSC here, so the true offset is 0 and must be bracketed.
        let (_f, p) = page();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let host = {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if !p.serve(2) {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
            })
        };
        let b = p
            .measure_offset(1, 50, std::time::Duration::from_secs(10))
            .unwrap();
        stop.store(true, Ordering::Relaxed);
        host.join().unwrap();
        assert!(b.lo <= 0 && 0 <= b.hi, "{b:?}");
        assert_eq!(p.slot(1, SlotWord::Session).load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_silent_host_is_a_clear_error() {
        let (_f, p) = page();
        let err = p
            .measure_offset(0, 1, std::time::Duration::from_millis(20))
            .unwrap_err();
        assert!(err.to_string().contains("did not answer"), "{err}");
    }

    #[test]
    fn barriers_wait_for_every_guest() {
        let (_f, p) = page();
        p.slot(0, SlotWord::Ready).store(1, Ordering::Relaxed);
        p.barrier(2, SlotWord::Ready, GlobalWord::Go);
        assert_eq!(p.global(GlobalWord::Go).load(Ordering::Relaxed), 0);
        p.slot(1, SlotWord::Ready).store(1, Ordering::Relaxed);
        p.barrier(2, SlotWord::Ready, GlobalWord::Go);
        assert_ne!(p.global(GlobalWord::Go).load(Ordering::Relaxed), 0);
    }
}
