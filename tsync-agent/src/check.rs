//! `tsync-agent check`: can this node record? One line per precondition, in the order a failure
//! would hit a recording (kernel, privileges, BTF, the hooks), then what makes a recording good
//! or bad without stopping it (clocksource, NTP, free disk). The exit status is non-zero exactly
//! when `record` would fail.
use std::{ffi::CString, fmt, os::unix::ffi::OsStrExt as _, path::Path};

use crate::{
    batches,
    btf::{Btf, VMLINUX},
    clock,
    loader::{self, Capture, LoadOptions},
    node,
    offsets::KernelOffsets,
    privileges,
};

/// A typical busy node: 10 000 packets/s, the rate the free-disk estimate is given for.
const TYPICAL_EVENTS_PER_S: u64 = 10_000;
/// Bytes per recorded packet in the file (the event record; chunk framing is negligible).
const BYTES_PER_EVENT: u64 = tsync_common::EVENT_SIZE as u64;
/// The oldest kernel with everything tsync loads: BPF ring buffers (5.8) and tp_btf (5.5).
const MIN_KERNEL: (u32, u32) = (5, 8);

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Fine.
    Ok,
    /// Recording works, but something lowers its quality or its duration.
    Warn,
    /// Recording would fail.
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub status: Status,
    pub what: &'static str,
    pub detail: String,
}

impl Line {
    fn new(status: Status, what: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            what,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        write!(f, "{tag} {}: {}", self.what, self.detail)
    }
}

/// Runs every check; `output_dir` is where the trace would be written.
pub fn run(output_dir: &Path) -> Vec<Line> {
    let privileges = privileges_line();
    let btf = btf_line();
    let hooks = if privileges.status == Status::Fail || btf.status == Status::Fail {
        Line::new(
            Status::Fail,
            "tracepoints",
            "not tried: needs the privileges and the BTF above",
        )
    } else {
        hooks_line()
    };
    vec![
        kernel_line(&node::kernel_release()),
        privileges,
        btf,
        hooks,
        clocksource_line(&node::clocksource()),
        ntp_line(),
        disk_line(output_dir),
    ]
}

/// The kernel release against [`MIN_KERNEL`].
fn kernel_line(release: &str) -> Line {
    let version = match node::kernel_version(release) {
        Some(version) => version,
        None => {
            return Line::new(
                Status::Warn,
                "kernel",
                format!("release {release:?} not understood; tsync needs Linux 5.8 or later"),
            );
        }
    };
    if version < MIN_KERNEL {
        return Line::new(
            Status::Fail,
            "kernel",
            format!("Linux {release}: tsync needs 5.8 or later (BPF ring buffer, tp_btf)"),
        );
    }
    let batches = if batches::kernel_supports(release) {
        "events batched per CPU"
    } else {
        "before 5.10 each event is written on its own, ~40 % dearer per packet"
    };
    Line::new(
        Status::Ok,
        "kernel",
        format!("Linux {release} (5.8 or later; {batches})"),
    )
}

/// Root, or CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), naming what is missing.
fn privileges_line() -> Line {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let missing = privileges::missing_capabilities();
    if missing.is_empty() {
        return Line::new(
            Status::Ok,
            "privileges",
            format!("uid {uid}, with CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"),
        );
    }
    Line::new(
        Status::Fail,
        "privileges",
        format!(
            "uid {uid}, missing {}: run as root or grant them \
             (setcap cap_bpf,cap_perfmon+ep tsync-agent)",
            missing.join(" and ")
        ),
    )
}

/// The kernel's BTF and the struct members the programs read.
fn btf_line() -> Line {
    let found = Btf::from_kernel().and_then(|btf| KernelOffsets::resolve(&btf));
    match found {
        Ok(offsets) => Line::new(
            Status::Ok,
            "BTF",
            format!(
                "{VMLINUX}, the {} struct members tsync reads found",
                offsets.globals().len()
            ),
        ),
        Err(e) => Line::new(Status::Fail, "BTF", e.to_string()),
    }
}

/// Loads both programs, attaches them, and detaches them again (dropping the capture): the only
/// proof that this kernel's verifier and tracepoints accept them.
fn hooks_line() -> Line {
    let page = loader::check_ring_size(1 << 16).unwrap_or(1 << 16);
    let netns = node::netns_inode().ok().map(|own| vec![own]);
    match Capture::load(
        &LoadOptions {
            ring_size: page,
            netns,
        },
        || Ok(()),
    ) {
        Ok(capture) => {
            drop(capture);
            Line::new(
                Status::Ok,
                "tracepoints",
                format!(
                    "{} loaded, attached and detached",
                    tsync_common::names::PROGRAMS
                        .map(|p| format!("net:{p}"))
                        .join(" and ")
                ),
            )
        }
        Err(e) => Line::new(Status::Fail, "tracepoints", format!("{e:#}")),
    }
}

/// The kernel's clocksource, and the CPU counter the clock samples read beside it.
fn clocksource_line(source: &str) -> Line {
    let counter = match clock::cpu_counter_hz() {
        Some(hz) => format!("{} at {:.3} MHz", clock::CPU_COUNTER_NAME, hz as f64 / 1e6),
        None => clock::CPU_COUNTER_NAME.to_owned(),
    };
    // Counters read in a few nanoseconds with a fine resolution; the others (hpet, acpi_pm,
    // jiffies) make every clock read slow or coarse, and the clock samples less precise.
    let good = matches!(
        source,
        "tsc" | "arch_sys_counter" | "kvm-clock" | "hyperv_clocksource_tsc_page"
    );
    let status = if good { Status::Ok } else { Status::Warn };
    let note = if good {
        ""
    } else {
        " (slow or coarse: clock samples will be less precise)"
    };
    Line::new(
        status,
        "clocksource",
        format!("{source}{note}; CPU counter {counter}"),
    )
}

/// STA_UNSYNC in adjtimex's status: the kernel clock is not synchronized.
const STA_UNSYNC: i32 = 0x0040;
/// STA_NANO: the offset is in nanoseconds, not microseconds.
const STA_NANO: i32 = 0x2000;
/// TIME_ERROR, adjtimex's return value when the clock is not synchronized.
const TIME_ERROR: i32 = 5;

/// The kernel clock discipline: synchronized or not, and whether NTP is slewing it now.
fn ntp_line() -> Line {
    match clock::kernel_clock(None) {
        Ok(k) => Line::new(
            Status::Ok,
            "NTP",
            describe_ntp(k.state, k.status, k.offset, k.freq),
        ),
        Err(e) => Line::new(Status::Warn, "NTP", format!("adjtimex failed: {e}")),
    }
}

/// Words for an adjtimex reading (`freq` in 2^-16 ppm, `offset` in ns or µs per STA_NANO).
fn describe_ntp(state: i32, status: i32, offset: i64, freq: i64) -> String {
    let synced = state != TIME_ERROR && status & STA_UNSYNC == 0;
    let offset_ns = if status & STA_NANO != 0 {
        offset
    } else {
        offset * 1000
    };
    let ppm = freq as f64 / 65536.0;
    let slewing = if offset_ns != 0 {
        format!("slewing a {:.1} µs offset away", offset_ns as f64 / 1e3)
    } else {
        "not slewing".to_owned()
    };
    if synced {
        format!("synchronized, frequency {ppm:+.3} ppm, {slewing} (tsync records the slewing)")
    } else {
        format!(
            "not synchronized (the clock runs free, frequency {ppm:+.3} ppm, {slewing}): \
             fine for tsync, which estimates the offsets itself"
        )
    }
}

/// Free space where the trace would go, and how long it lasts at [`TYPICAL_EVENTS_PER_S`].
fn disk_line(dir: &Path) -> Line {
    let Ok(c_dir) = CString::new(dir.as_os_str().as_bytes()) else {
        return Line::new(
            Status::Fail,
            "disk",
            format!("{} is not a valid path", dir.display()),
        );
    };
    // SAFETY: a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let err = std::io::Error::last_os_error();
        return Line::new(
            Status::Fail,
            "disk",
            format!(
                "cannot write to {}: {err} (choose another --output)",
                dir.display()
            ),
        );
    }
    // SAFETY: statvfs is plain old data; all zeros is a valid value to be filled in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and a valid, writable statvfs.
    if unsafe { libc::statvfs(c_dir.as_ptr(), &mut st) } != 0 {
        let err = std::io::Error::last_os_error();
        return Line::new(
            Status::Warn,
            "disk",
            format!("cannot tell the free space of {}: {err}", dir.display()),
        );
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    disk_verdict(dir, free)
}

/// The verdict for `free` bytes: fail under a minute of typical recording, warn under an hour.
fn disk_verdict(dir: &Path, free: u64) -> Line {
    let rate = TYPICAL_EVENTS_PER_S * BYTES_PER_EVENT;
    let secs = free / rate;
    let status = match secs {
        s if s < 60 => Status::Fail,
        s if s < 3600 => Status::Warn,
        _ => Status::Ok,
    };
    Line::new(
        status,
        "disk",
        format!(
            "{:.1} GiB free at {}: about {} at {TYPICAL_EVENTS_PER_S} packets/s, counted as raw \
             events ({} kB/s; the worst case: trace files are compressed, the demo's traffic \
             about 17 times)",
            free as f64 / (1u64 << 30) as f64,
            dir.display(),
            duration_words(secs),
            rate / 1000
        ),
    )
}

/// "45 s", "12 min", "3.5 h", "9 days".
fn duration_words(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 3 * 86_400 => format!("{:.1} h", s as f64 / 3600.0),
        s => format!("{} days", s / 86_400),
    }
}

#[cfg(test)]
mod tests;
