//! Loads the eBPF programs with the kernel offsets and filter set, and attaches them.
//!
//! Everything the kernel holds for us (programs, links, maps) is owned by [`Capture`]: dropping it,
//! or the process exiting for any reason, detaches and frees it all.
use std::os::fd::{AsFd as _, AsRawFd as _, RawFd};

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, RawTracePoint, tp_btf::BtfTracePointLinkId},
};
use aya_log::EbpfLogger;
use tsync_common::{
    MAX_NETNS,
    format::LostCounts,
    names::{BATCHES_MAP, EVENTS_MAP, FLUSH_PROGRAM, LOST_MAP, PENDING_MAP, PROGRAMS, global},
};

use crate::{
    batches::{self, Batches},
    btf::Btf,
    logging, node,
    offsets::KernelOffsets,
    privileges,
};

/// The object file built from `tsync-ebpf` by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tsync"));

/// The embedded eBPF object file (for its hash in `--version`).
pub fn ebpf_object() -> &'static [u8] {
    EBPF_OBJECT
}

/// Forwards the programs' log records to the `log` crate (see [`crate::logging`]).
pub type Logger = EbpfLogger<&'static dyn log::Log>;

/// Loaded and attached programs with their maps.
pub struct Capture {
    /// Keeps programs and links alive; dropping it detaches them.
    ebpf: Ebpf,
    /// The hooks' links, until [`Capture::detach`].
    links: Vec<(&'static str, BtfTracePointLinkId)>,
    pub events: RingBuf<MapData>,
    /// The programs' per-CPU batches; None on kernels too old to flush them (no batching).
    pub batches: Option<Batches>,
    lost: PerCpuArray<MapData, u64>,
    /// The programs' log, until the recorder takes it; None if it could not be opened.
    logger: Option<Logger>,
    /// File descriptors of the send and receive programs (owned by `_ebpf`), for their
    /// `recursion_misses` counters.
    program_fds: [RawFd; 2],
}

/// What to load.
pub struct LoadOptions {
    pub ring_size: u32,
    /// Inode numbers of the network namespaces to record; None records every namespace.
    pub netns: Option<Vec<u64>>,
}

/// Rings at least this large are drained by the agent's timer alone (every 10 ms): a quarter of
/// one holds 47 ms of 1 M events/s.
const TIMER_ONLY_RING: u32 = 1 << 24;

/// When the programs wake the agent: once a quarter of the ring has filled, for rings small
/// enough to fill between two timer drains; never (0) for larger ones, so the programs do not
/// even ask how full the ring is (a helper call per event).
fn wakeup_bytes(ring_size: u32) -> u32 {
    if ring_size >= TIMER_ONLY_RING {
        0
    } else {
        ring_size / 4
    }
}

/// Checks the ring buffer size the kernel accepts: a power of two, a multiple of the page size.
pub fn check_ring_size(bytes: u64) -> Result<u32, String> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    if !bytes.is_power_of_two() || bytes < page || bytes > (1 << 31) {
        return Err(format!(
            "--ring-size must be a power of two between {page} and 2147483648 bytes, got {bytes}"
        ));
    }
    Ok(bytes as u32)
}

impl Capture {
    /// Loads and attaches both programs, calling `before_attach` once both are verified and
    /// before either is attached. Fails with what is missing: BTF, capabilities, kernel support.
    pub fn load(opts: &LoadOptions, before_attach: impl FnOnce() -> Result<()>) -> Result<Self> {
        let btf = Btf::from_kernel()?;
        let offsets = KernelOffsets::resolve(&btf).context(
            "this kernel's struct layout is not what tsync knows how to read (see README)",
        )?;
        let missing = privileges::missing_capabilities();
        if !missing.is_empty() {
            bail!(
                "missing capability {}: loading eBPF tracing programs needs CAP_BPF and CAP_PERFMON \
                 (or CAP_SYS_ADMIN); run tsync-agent as root or grant them \
                 (e.g. setcap cap_bpf,cap_perfmon+ep tsync-agent)",
                missing.join(" and ")
            );
        }
        raise_memlock_limit();
        let aya_btf = aya::Btf::from_sys_fs().context("cannot read the kernel BTF for aya")?;
        // Inode numbers of namespaces are 32-bit in the kernel (ns_common.inum).
        let inodes = opts
            .netns
            .iter()
            .flatten()
            .map(|&ino| {
                u32::try_from(ino)
                    .with_context(|| format!("network namespace inode {ino} does not fit 32 bits"))
            })
            .collect::<Result<Vec<u32>>>()?;
        // One namespace is one compare in the programs; several, a list they go through.
        let mut netns_list = [0u32; MAX_NETNS];
        let netns = match inodes.as_slice() {
            [] => 0,
            [one] => *one,
            several => {
                anyhow::ensure!(
                    several.len() <= MAX_NETNS,
                    "at most {MAX_NETNS} network namespaces can be recorded by name, not {}",
                    several.len()
                );
                netns_list[..several.len()].copy_from_slice(several);
                0
            }
        };
        let mut loader = EbpfLoader::new();
        loader.btf(Some(&aya_btf));
        for (name, value) in offsets.globals() {
            loader.override_global(name, value, true);
        }
        let wakeup_bytes = wakeup_bytes(opts.ring_size);
        let release = node::kernel_release();
        let batching = u32::from(batches::kernel_supports(&release));
        // Log statements above the level the user will see are dead code for the verifier.
        let log_level = logging::ebpf_level();
        loader
            .override_global(global::NETNS_INUM, &netns, true)
            .override_global(global::NETNS_LIST, &netns_list, true)
            .override_global(global::WAKEUP_BYTES, &wakeup_bytes, true)
            .override_global(global::BATCHING, &batching, true)
            .override_global(global::LOG_LEVEL, &log_level, false)
            .map_max_entries(EVENTS_MAP, opts.ring_size);
        log::info!(
            "kernel offsets from BTF: {offsets:?}; ring buffer {} bytes, wakeup at {wakeup_bytes} \
             bytes; namespace filter {}; eBPF messages up to {}; {}",
            opts.ring_size,
            match &opts.netns {
                None => "off (--all-netns)".to_owned(),
                Some(list) => format!("inode {list:?}"),
            },
            log::max_level(),
            if batching == 1 {
                format!("events batched per CPU by {}", tsync_common::batch::EVENTS)
            } else {
                format!("events not batched (Linux {release} cannot flush a CPU's batch)")
            },
        );
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(|e| {
            anyhow::Error::new(e).context("the kernel refused tsync's eBPF maps or programs")
        })?;

        // Like aya's template: without the log, the programs still run (their records stay in
        // the kernel's log ring buffer, which exists whether or not it is read).
        let logger = match EbpfLogger::init(&mut ebpf) {
            Ok(logger) => Some(logger),
            Err(e) => {
                log::warn!("the eBPF programs' messages will not be shown: {e}");
                None
            }
        };
        // Both programs are verified before either is attached, and `before_attach` (the clock
        // sampler) runs in between: on a one-CPU machine the verifier holds the CPU for hundreds
        // of milliseconds (measured: 160–216 ms on Linux 6.1 under QEMU's TCG, in
        // `cargo xtask lab`), which left a gap in the clock samples too wide to undo slewing
        // across. No event can come before the attachment.
        for hook in PROGRAMS {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(hook)
                .with_context(|| format!("program {hook} missing from the eBPF object"))?
                .try_into()?;
            prog.load(hook, &aya_btf)
                .with_context(|| format!("the kernel refused the {hook} program"))?;
        }
        let flush_fd = if batching == 1 {
            let prog: &mut RawTracePoint = ebpf
                .program_mut(FLUSH_PROGRAM)
                .with_context(|| format!("program {FLUSH_PROGRAM} missing from the eBPF object"))?
                .try_into()?;
            prog.load()
                .with_context(|| format!("the kernel refused the {FLUSH_PROGRAM} program"))?;
            Some(prog.fd()?.as_fd().as_raw_fd())
        } else {
            None
        };
        before_attach()?;
        let mut program_fds = [0; 2];
        let mut links = Vec::new();
        for (fd, hook) in program_fds.iter_mut().zip(PROGRAMS) {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(hook)
                .with_context(|| format!("program {hook} missing from the eBPF object"))?
                .try_into()?;
            links.push((
                hook,
                prog.attach()
                    .with_context(|| format!("cannot attach to tracepoint net:{hook}"))?,
            ));
            *fd = prog.fd()?.as_fd().as_raw_fd();
            log::info!(
                "attached {hook} to tracepoint net:{hook} (program id {})",
                prog.info().map_or(0, |info| info.id())
            );
        }
        let events = RingBuf::try_from(
            ebpf.take_map(EVENTS_MAP)
                .with_context(|| format!("no {EVENTS_MAP} map"))?,
        )?;
        let lost = PerCpuArray::try_from(
            ebpf.take_map(LOST_MAP)
                .with_context(|| format!("no {LOST_MAP} map"))?,
        )?;
        let batches = match flush_fd {
            Some(fd) => Some(Batches::new(
                PerCpuArray::try_from(
                    ebpf.take_map(PENDING_MAP)
                        .with_context(|| format!("no {PENDING_MAP} map"))?,
                )?,
                PerCpuArray::try_from(
                    ebpf.take_map(BATCHES_MAP)
                        .with_context(|| format!("no {BATCHES_MAP} map"))?,
                )?,
                fd,
            )),
            None => None,
        };
        Ok(Self {
            ebpf,
            links,
            events,
            batches,
            lost,
            logger,
            program_fds,
        })
    }

    /// Detaches the hooks (at the end of a recording): no event comes after this, and the batches
    /// can be written out for good. The programs and maps stay until the capture is dropped.
    pub fn detach(&mut self) -> Result<()> {
        for (hook, link) in self.links.drain(..) {
            let prog: &mut BtfTracePoint = self
                .ebpf
                .program_mut(hook)
                .with_context(|| format!("program {hook} missing from the eBPF object"))?
                .try_into()?;
            prog.detach(link)
                .with_context(|| format!("cannot detach from tracepoint net:{hook}"))?;
        }
        Ok(())
    }

    /// The programs' log, for the recorder to poll (once; None if it could not be opened).
    pub fn take_logger(&mut self) -> Option<Logger> {
        self.logger.take()
    }

    /// The in-kernel lost counters, cumulative since loading.
    pub fn lost(&self) -> Result<LostCounts> {
        let send = self
            .lost
            .get(&0, 0)
            .context("cannot read the lost counters")?;
        let recv = self
            .lost
            .get(&1, 0)
            .context("cannot read the lost counters")?;
        let per_cpu: Vec<[u64; 2]> = send
            .iter()
            .zip(recv.iter())
            .map(|(&s, &r)| [s, r])
            .collect();
        let [send_skipped, recv_skipped] = self.program_fds.map(recursion_misses);
        Ok(LostCounts {
            send: per_cpu.iter().map(|c| c[0]).sum::<u64>() + send_skipped?,
            recv: per_cpu.iter().map(|c| c[1]).sum::<u64>() + recv_skipped?,
            per_cpu,
            // Counted by the recorder, not the kernel.
            disk: 0,
        })
    }
}

/// How many times the kernel skipped a program because it was already running on that CPU (a
/// tracepoint hit again from an interrupt while the program ran): packets the program never saw,
/// counted as lost so that no loss is silent. The kernel keeps no CPU for them, so they are in the
/// totals only, and may include packets the program would have skipped anyway (an upper bound).
fn recursion_misses(fd: RawFd) -> Result<u64> {
    let path = format!("/proc/self/fdinfo/{fd}");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    Ok(parse_recursion_misses(&text))
}

/// The `recursion_misses` field of a BPF program's fdinfo; 0 on kernels that do not report it.
fn parse_recursion_misses(fdinfo: &str) -> u64 {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("recursion_misses:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; lift it (best effort).
fn raise_memlock_limit() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit struct; failure is harmless on kernels with memcg accounting.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_size_must_suit_the_kernel() {
        assert_eq!(check_ring_size(1 << 24), Ok(1 << 24));
        assert!(check_ring_size(1000).unwrap_err().contains("power of two"));
        assert!(check_ring_size(1 << 40).is_err());
        assert!(check_ring_size(0).is_err());
    }

    /// The names the loader and the lab use (`tsync_common::names`) are those the programs
    /// declare: aya-ebpf's macros need literals, so `tsync-ebpf` spells them once more.
    #[test]
    fn the_object_declares_the_shared_names() {
        use tsync_common::names::{MAPS, PROGRAMS, global};
        let object = aya_obj::Object::parse(EBPF_OBJECT).unwrap();
        for name in PROGRAMS {
            assert!(object.programs.contains_key(name), "no program {name}");
        }
        for name in MAPS {
            assert!(object.maps.contains_key(name), "no map {name}");
        }
        let btf = object.btf.as_ref().expect("the object has BTF");
        for name in global::ALL {
            assert!(
                btf.id_by_type_name_kind(name, aya_obj::btf::BtfKind::Var)
                    .is_ok(),
                "no global {name}"
            );
        }
    }

    #[test]
    fn recursion_misses_are_read_from_fdinfo() {
        let fdinfo = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nrun_cnt:\t12\n\
                      recursion_misses:\t7\nverified_insns:\t650\n";
        assert_eq!(parse_recursion_misses(fdinfo), 7);
        assert_eq!(parse_recursion_misses("prog_type:\t26\n"), 0);
    }
}
