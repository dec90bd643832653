//! The programs' per-CPU batches of events (`tsync_common::batch`): which events the ring buffer
//! has not received yet, and having a quiet CPU's batch written out.
//!
//! A hook writes its CPU's batch into the ring buffer only when it fills, so a CPU that goes
//! quiet holds up to 31 events. The agent reads each CPU's `PENDING` timestamp (the oldest event
//! its batch holds) to know what it has not seen, and runs the flush program on every CPU whose
//! batch has waited longer than [`STALE_NS`]: `BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU`
//! runs a program on a given CPU (by an inter-processor interrupt, or directly on the agent's
//! own), the only way to reach a per-CPU value without racing the hooks that write it.
use std::os::fd::RawFd;

use anyhow::{Context as _, Result, bail};
use aya::maps::{MapData, PerCpuArray};
use tsync_common::batch;

/// A batch older than this is written out by the agent (ns). Busy CPUs fill theirs much sooner;
/// this bounds how long a quiet CPU's events wait, well inside the reorder window.
pub const STALE_NS: u64 = 10_000_000;

/// Retries of a flush that found the batch busy, at the end of a recording.
const FINAL_RETRIES: u32 = 100;

/// The batches' side of the loaded programs.
pub struct Batches {
    pending: PerCpuArray<MapData, u64>,
    /// The flush program (owned by the loaded object, which outlives this).
    flush_fd: RawFd,
}

/// What a flush of the stale batches left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Timestamp of the oldest event still in a batch (u64::MAX: none).
    pub oldest_ns: u64,
}

impl Batches {
    pub fn new(pending: PerCpuArray<MapData, u64>, flush_fd: RawFd) -> Self {
        Self { pending, flush_fd }
    }

    /// Per CPU (index = CPU number), the oldest event its batch holds; 0 for an empty batch.
    fn pending(&self) -> Result<Vec<u64>> {
        let values = self
            .pending
            .get(&0, 0)
            .context("cannot read the programs' per-CPU batch state")?;
        Ok(values.iter().copied().collect())
    }

    /// The oldest event the batches hold.
    pub fn held(&self) -> Result<Held> {
        let oldest = self.pending()?.into_iter().filter(|&t| t != 0).min();
        Ok(Held {
            oldest_ns: oldest.unwrap_or(u64::MAX),
        })
    }

    /// Writes out every batch whose oldest event is older than `now_ns - STALE_NS`, and returns
    /// the oldest event still held afterwards (batches that were busy, or too young).
    pub fn flush_stale(&self, now_ns: u64) -> Result<Held> {
        let mut oldest = u64::MAX;
        for (cpu, since) in self.pending()?.into_iter().enumerate() {
            if since == 0 {
                continue;
            }
            if since.saturating_add(STALE_NS) <= now_ns && self.flush(cpu as u32)? {
                continue;
            }
            oldest = oldest.min(since);
        }
        Ok(Held { oldest_ns: oldest })
    }

    /// Writes out every batch (at the end of a recording, once the hooks are detached), retrying
    /// one that a hook still running was working on. Returns the CPUs whose batch could not be
    /// written (offline, or busy all along).
    pub fn flush_all(&self) -> Result<Vec<u32>> {
        let mut left = Vec::new();
        for (cpu, since) in self.pending()?.into_iter().enumerate() {
            if since == 0 {
                continue;
            }
            let cpu = cpu as u32;
            let mut done = false;
            for _ in 0..FINAL_RETRIES {
                if self.flush(cpu)? {
                    done = true;
                    break;
                }
                std::thread::yield_now();
            }
            if !done {
                left.push(cpu);
            }
        }
        Ok(left)
    }

    /// Runs the flush program on `cpu`: true if the batch was written (or the CPU went offline,
    /// so that no program runs there to add to it), false if it was busy.
    fn flush(&self, cpu: u32) -> Result<bool> {
        match test_run_on_cpu(self.flush_fd, cpu) {
            Ok(retval) => Ok(retval != batch::FLUSH_BUSY),
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                log::warn!(
                    "CPU {cpu} went offline holding a batch of events; they are not in the file"
                );
                Ok(true)
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
