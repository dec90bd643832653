//! Benchmarks that run on the lab: [`capture`] (what recording costs under load, agents in
//! namespaces; its traffic from iperf3 or the `blast` sender) and [`machine`] (what machine a
//! benchmark ran on, for every report).
mod blast;
pub mod capture;
pub mod machine;

/// Restricts the calling thread (or, between fork and exec, the child) to `cpu`. Async-signal-safe:
/// one system call, the set built on the stack.
fn set_affinity(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
