//! tsync's BPF programs as the kernel lists them (the `bpf(2)` system call, as `bpftool prog
//! show` does — read directly, so that a node without bpftool, such as the VM lab's arm64 guest,
//! checks the same way).
use std::{
    collections::BTreeSet,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Result, bail};
use tsync_common::names::{FLUSH_PROGRAM, PROGRAMS};

/// A loaded program's identity and, when `kernel.bpf_stats_enabled` is on, its statistics.
pub struct Program {
    pub id: u32,
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// Loaded programs named like tsync's: the hooks (tracing programs) and the batch flush (a raw
/// tracepoint program the agent runs itself); every agent's, also other processes'.
pub fn programs() -> Result<Vec<Program>> {
    Ok(loaded()?
        .into_iter()
        .filter_map(|p| {
            let name = match p.prog_type {
                sys::PROG_TYPE_TRACING => PROGRAMS.into_iter().find(|n| kernel_name(n) == p.name),
                sys::PROG_TYPE_RAW_TRACEPOINT => {
                    Some(FLUSH_PROGRAM).filter(|n| kernel_name(n) == p.name)
                }
                _ => None,
            }?;
            Some((p, name))
        })
        .map(|(p, name)| Program {
            id: p.id,
            name: name.to_owned(),
            run_time_ns: p.run_time_ns,
            run_cnt: p.run_cnt,
        })
        .collect())
}

/// A program's name as the kernel keeps it: at most 15 bytes (`BPF_OBJ_NAME_LEN` with its NUL;
/// `netif_receive_skb` is `netif_receive_s` there — bpftool shows the whole name from BTF).
fn kernel_name(name: &str) -> &str {
    &name[..name.len().min(sys::OBJ_NAME_LEN - 1)]
}

/// Every program loaded in the kernel, whatever its type and name (for messages).
pub fn loaded() -> Result<Vec<Loaded>> {
    let mut found = Vec::new();
    let mut id = 0;
    while let Some(next) = sys::next_prog_id(id)? {
        id = next;
        // A program unloaded between the two calls is simply gone.
        if let Some(p) = sys::prog_info(id)? {
            found.push(p);
        }
    }
    Ok(found)
}

/// A loaded program as `bpf(BPF_OBJ_GET_INFO_BY_FD)` describes it.
#[derive(Debug)]
pub struct Loaded {
    pub id: u32,
    /// `enum bpf_prog_type` (26: tracing, as tp_btf programs are).
    pub prog_type: u32,
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// The three `bpf(2)` commands that list programs (uapi `linux/bpf.h`; the layout of
/// `bpf_prog_info` is append-only, the kernel fills as much as both sides know).
mod sys {
    use super::{Loaded, Result, bail};

    const PROG_GET_NEXT_ID: libc::c_long = 11;
    const PROG_GET_FD_BY_ID: libc::c_long = 13;
    const OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    pub const PROG_TYPE_TRACING: u32 = 26;
    pub const PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
    pub const OBJ_NAME_LEN: usize = 16;

    /// `bpf_prog_info` up to `run_cnt` (232 bytes in 6.x; offsets from the uapi header).
    const INFO_BYTES: usize = 232;

    fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> libc::c_long {
        // SAFETY: attr is a zeroed 128-byte union bpf_attr the command reads and writes within.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr)) }
    }

    fn failure(what: &str) -> anyhow::Error {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EPERM) {
            anyhow::anyhow!("cannot list BPF programs ({what}): {e}; it needs CAP_SYS_ADMIN")
        } else {
            anyhow::anyhow!("cannot list BPF programs ({what}): {e}")
        }
    }

    /// The next loaded program's id after `id`, None after the last.
    pub fn next_prog_id(id: u32) -> Result<Option<u32>> {
        let mut attr = [0u64; 16];
        attr[0] = u64::from(id);
        if bpf(PROG_GET_NEXT_ID, &mut attr) < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            return Err(failure("BPF_PROG_GET_NEXT_ID"));
        }
        Ok(Some((attr[0] >> 32) as u32))
    }

    /// Program `id`'s type, name and statistics; None when it is gone.
    pub fn prog_info(id: u32) -> Result<Option<Loaded>> {
        let mut attr = [0u64; 16];
        attr[0] = u64::from(id);
        let fd = bpf(PROG_GET_FD_BY_ID, &mut attr);
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT) {
                return Ok(None);
            }
            return Err(failure("BPF_PROG_GET_FD_BY_ID"));
        }
        let mut info = [0u8; INFO_BYTES];
        let mut attr = [0u64; 16];
        attr[0] = fd as u64 | ((INFO_BYTES as u64) << 32);
        attr[1] = info.as_mut_ptr() as u64;
        let rc = bpf(OBJ_GET_INFO_BY_FD, &mut attr);
        let err = (rc < 0).then(|| failure("BPF_OBJ_GET_INFO_BY_FD"));
        // SAFETY: fd is the descriptor the kernel just returned, closed once.
        unsafe { libc::close(fd as libc::c_int) };
        if let Some(e) = err {
            bail!(e);
        }
        let u32_at = |o: usize| u32::from_ne_bytes(info[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().expect("8 bytes"));
        let name = &info[64..64 + OBJ_NAME_LEN];
        let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(Some(Loaded {
            id,
            prog_type: u32_at(0),
            name: String::from_utf8_lossy(&name[..len]).into_owned(),
            run_time_ns: u64_at(192),
            run_cnt: u64_at(200),
        }))
    }
}

/// Ids of the loaded programs named like tsync's.
pub fn program_ids() -> Result<BTreeSet<u32>> {
    Ok(programs()?.into_iter().map(|p| p.id).collect())
}

/// Waits (up to 10 s) until none of `ids` is loaded and returns those still loaded: the kernel
/// frees programs asynchronously (RCU, workqueue) after their last reference goes, so they may
/// linger a moment after the agent's exit.
pub fn wait_unloaded(ids: &BTreeSet<u32>) -> Result<BTreeSet<u32>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: BTreeSet<u32> = program_ids()?.intersection(ids).copied().collect();
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left);
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_compare_as_the_kernel_truncates_them() {
        assert_eq!(kernel_name("netif_receive_skb"), "netif_receive_s");
        assert_eq!(kernel_name("net_dev_queue"), "net_dev_queue");
    }
}
