//! The programs' per-CPU batches of events (`tsync_common::batch`): which events the ring buffer
//! has not received yet, and having a quiet CPU's batch written out.
//!
//! A hook writes its CPU's batch into the ring buffer only when it fills, so a CPU that goes
//! quiet holds up to 31 events. The agent reads each CPU's `PENDING` timestamp (the oldest event
//! its batch holds) to know what it has not seen, and runs the flush program on every CPU whose
//! batch has waited longer than [`STALE_NS`]: `BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU`
//! runs a program on a given CPU (by an inter-processor interrupt, or directly on the agent's
//! own), the only way to reach a per-CPU value without racing the hooks that write it.
use std::{collections::BTreeSet, os::fd::RawFd};

use anyhow::{Context as _, Result, bail};
use aya::maps::{MapData, PerCpuArray};
use tsync_common::batch::{self, Batch};

/// A batch older than this is written out by the agent (ns). Busy CPUs fill theirs much sooner;
/// this bounds how long a quiet CPU's events wait, well inside the reorder window.
pub const STALE_NS: u64 = 10_000_000;

/// Retries of a flush that found the batch busy, at the end of a recording.
const FINAL_RETRIES: u32 = 100;

/// The batches' side of the loaded programs.
pub struct Batches {
    pending: PerCpuArray<MapData, u64>,
    batches: PerCpuArray<MapData, BatchValue>,
    /// The flush program (owned by the loaded object, which outlives this).
    flush_fd: RawFd,
    /// CPUs found offline with a batch (told once; flushed again should they come back).
    offline: BTreeSet<u32>,
}

/// A CPU's batch as aya reads it from the map.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct BatchValue(Batch);

// SAFETY: `Batch` is plain old data (`bytemuck::Pod`): any bytes are a valid value.
unsafe impl aya::Pod for BatchValue {}

/// What running the flush program on a CPU did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flushed {
    Written,
    /// It interrupted a program working on the batch: try again later.
    Busy,
    /// The CPU is offline: nothing runs there, nothing can be written.
    Offline,
}

/// Events the batches of offline CPUs held at the end: never written, so counted as lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stranded {
    pub send: u64,
    pub recv: u64,
}

impl Batches {
    pub fn new(
        pending: PerCpuArray<MapData, u64>,
        batches: PerCpuArray<MapData, BatchValue>,
        flush_fd: RawFd,
    ) -> Self {
        Self {
            pending,
            batches,
            flush_fd,
            offline: BTreeSet::new(),
        }
    }

    /// Per CPU (index = CPU number), the oldest event its batch holds; 0 for an empty batch.
    fn pending(&self) -> Result<Vec<u64>> {
        let values = self
            .pending
            .get(&0, 0)
            .context("cannot read the programs' per-CPU batch state")?;
        Ok(values.iter().copied().collect())
    }

    /// The timestamp of the oldest event the batches hold (u64::MAX: none).
    pub fn held(&self) -> Result<u64> {
        let oldest = self.pending()?.into_iter().filter(|&t| t != 0).min();
        Ok(oldest.unwrap_or(u64::MAX))
    }

    /// Writes out every batch whose oldest event is older than `now_ns - STALE_NS`, and returns
    /// the timestamp of the oldest event still held afterwards (batches that were busy, or too
    /// young; u64::MAX: none).
    pub fn flush_stale(&mut self, now_ns: u64) -> Result<u64> {
        let mut oldest = u64::MAX;
        for (cpu, since) in self.pending()?.into_iter().enumerate() {
            if since == 0 {
                continue;
            }
            let stale = since.saturating_add(STALE_NS) <= now_ns;
            // An offline CPU's batch waits for the CPU, not for us: it does not hold the
            // others back.
            if stale && self.flush(cpu as u32)? != Flushed::Busy {
                continue;
            }
            oldest = oldest.min(since);
        }
        Ok(oldest)
    }

    /// Writes out every batch (at the end of a recording, once the hooks are detached), retrying
    /// one that a hook still running was working on. Returns the CPUs whose batch could not be
    /// written because it stayed busy, and the events of offline CPUs' batches, which are lost.
    pub fn flush_all(&mut self) -> Result<(Vec<u32>, Stranded)> {
        let mut busy = Vec::new();
        for (cpu, since) in self.pending()?.into_iter().enumerate() {
            if since == 0 {
                continue;
            }
            let cpu = cpu as u32;
            let mut flushed = Flushed::Busy;
            for _ in 0..FINAL_RETRIES {
                flushed = self.flush(cpu)?;
                if flushed != Flushed::Busy {
                    break;
                }
                std::thread::yield_now();
            }
            if flushed == Flushed::Busy {
                busy.push(cpu);
            }
        }
        Ok((busy, self.stranded()?))
    }

    /// The events held by the batches of CPUs that are offline now. Nothing runs on an offline
    /// CPU, so its batch can be read from here without racing a program.
    fn stranded(&self) -> Result<Stranded> {
        let mut stranded = Stranded::default();
        if self.offline.is_empty() {
            return Ok(stranded);
        }
        let values = self
            .batches
            .get(&0, 0)
            .context("cannot read the programs' per-CPU batches")?;
        for &cpu in &self.offline {
            let Some(BatchValue(b)) = values.get(cpu as usize) else {
                continue;
            };
            let held = u64::from(b.count.min(batch::EVENTS as u32));
            let sends = u64::from(b.sends).min(held);
            stranded.send += sends;
            stranded.recv += held - sends;
        }
        Ok(stranded)
    }

    /// Runs the flush program on `cpu`.
    fn flush(&mut self, cpu: u32) -> Result<Flushed> {
        match test_run_on_cpu(self.flush_fd, cpu) {
            Ok(retval) => {
                self.offline.remove(&cpu);
                Ok(if retval == batch::FLUSH_BUSY {
                    Flushed::Busy
                } else {
                    Flushed::Written
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if self.offline.insert(cpu) {
                    log::warn!(
                        "CPU {cpu} went offline holding a batch of events: they will be written \
                         if it comes back, and counted as lost otherwise"
                    );
                }
                Ok(Flushed::Offline)
            }
            Err(e) => bail!(
                "cannot run the flush program on CPU {cpu}: {e} (BPF_PROG_TEST_RUN on a given \
                 CPU needs Linux {}.{} or later)",
                batch::MIN_KERNEL.0,
                batch::MIN_KERNEL.1
            ),
        }
    }
}

/// True if this kernel release can run a program on a given CPU (see [`batch::MIN_KERNEL`]).
pub fn kernel_supports(release: &str) -> bool {
    crate::node::kernel_version(release).is_some_and(|version| version >= batch::MIN_KERNEL)
}

/// The `test` member of `union bpf_attr` (uapi `linux/bpf.h`, up to `cpu`; the kernel reads the
/// members a caller's size covers and takes the rest as zero).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
}

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// `bpf(BPF_PROG_TEST_RUN)` of a raw tracepoint program on `cpu`, without a context; its return
/// value. aya 0.14 has no call for it.
fn test_run_on_cpu(prog_fd: RawFd, cpu: u32) -> std::io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: prog_fd as u32,
        flags: BPF_F_TEST_RUN_ON_CPU,
        cpu,
        ..TestRunAttr::default()
    };
    // SAFETY: a valid, initialized attribute of the size passed; the kernel writes `retval` only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestRunAttr,
            std::mem::size_of::<TestRunAttr>() as u32,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr.retval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attribute_has_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<TestRunAttr>(), 72);
        assert_eq!(std::mem::offset_of!(TestRunAttr, flags), 64);
    }

    #[test]
    fn batching_needs_5_10() {
        assert!(kernel_supports("6.18.44-fc-v657"));
        assert!(kernel_supports("5.10.0-28-amd64"));
        assert!(!kernel_supports("5.9.16"));
        assert!(!kernel_supports("5.8.0"));
        assert!(!kernel_supports("garbage"));
    }
}
