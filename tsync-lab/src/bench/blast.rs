//! A UDP blaster for the capture benchmark: small datagrams as fast as `sendmmsg(2)` sends
//! them, one sender per CPU, pinned.
//!
//! Why not iperf3: its UDP client (3.12, one thread) spends most of its time on pacing and
//! bookkeeping, and two of them offer ~1.4 M events/s on the 2-vCPU development VM, about what
//! the agent is asked to sustain (1 M events/s), so that a run with agents shows iperf3's limit
//! more than the agent's. A batch of 64 datagrams per system call costs the sender little besides
//! the kernel's own path (send, veth, receive), which is what the agent's programs hook.
//!
//! The receiver is a bound socket nobody reads: every datagram still goes through
//! `netif_receive_skb` (it is recorded there) and is then dropped when the socket's buffer is
//! full, without the ICMP "port unreachable" an unbound port would answer with.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd as _;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::Netns;

/// Datagrams per `sendmmsg` call.
const BATCH: usize = 64;
/// Payload bytes per datagram: 8 of them are a counter (the agent records UDP's first 8 payload
/// bytes, so every datagram's digest differs, as iperf3's do).
const PAYLOAD: usize = 18;

/// Sends datagrams from `from` to `to` (an address in `to_ns`) for `duration`, one sender per
/// CPU; returns how many datagrams the kernel accepted.
pub fn blast(from: &Netns, to_ns: &Netns, to: SocketAddr, duration: Duration) -> Result<u64> {
    let receiver = to_ns
        .run_in(move || UdpSocket::bind(to))
        .with_context(|| format!("cannot bind the blaster's receiver to {to}"))?;
    let mut senders = Vec::new();
    for cpu in allowed_cpus()? {
        // A socket's namespace is the one it was created in, whichever thread then uses it.
        let socket = from
            .run_in(move || {
                let s = UdpSocket::bind(("0.0.0.0", 0))?;
                s.connect(to)?;
                Ok::<_, std::io::Error>(s)
            })
            .context("cannot open the blaster's sockets")?;
        senders.push(thread::spawn(move || send(&socket, cpu, duration)));
    }
    let mut sent = 0;
    for sender in senders {
        sent += sender
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
    }
    drop(receiver);
    Ok(sent)
}

/// One sender, pinned to `cpu`: batches of datagrams until `duration` has passed.
fn send(socket: &UdpSocket, cpu: usize, duration: Duration) -> Result<u64> {
    pin_thread(cpu)?;
    let mut payloads = [[0u8; PAYLOAD]; BATCH];
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(BATCH);
    let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(BATCH);
    let started = Instant::now();
    let mut sent = 0u64;
    let mut counter = (cpu as u64) << 56;
    while started.elapsed() < duration {
        iov.clear();
        msgs.clear();
        for p in &mut payloads {
            p[..8].copy_from_slice(&counter.to_le_bytes());
            counter += 1;
            iov.push(libc::iovec {
                iov_base: p.as_mut_ptr().cast(),
                iov_len: PAYLOAD,
            });
        }
        for v in &mut iov {
            // SAFETY: a zeroed msghdr is valid (no name, no control data).
            let mut hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
            hdr.msg_hdr.msg_iov = v;
            hdr.msg_hdr.msg_iovlen = 1;
            msgs.push(hdr);
        }
        // SAFETY: `msgs` holds BATCH headers pointing at live iovecs and payloads.
        let n = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            // A full device queue or socket buffer is what blasting is about: try again.
            match err.raw_os_error() {
                Some(libc::ENOBUFS | libc::EAGAIN | libc::EINTR) => continue,
                _ => bail!("sendmmsg: {err}"),
            }
        }
        sent += n as u64;
    }
    Ok(sent)
}

/// The CPUs this process may run on (its affinity mask, which a container or `taskset` may
/// narrow): one sender for each.
fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel fills it; CPU_ISSET reads inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            bail!(
                "cannot read this process's CPU affinity: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect())
    }
}

/// Pins the calling thread to `cpu`.
fn pin_thread(cpu: usize) -> Result<()> {
    super::set_affinity(cpu).with_context(|| format!("cannot pin a blaster thread to CPU {cpu}"))
}
