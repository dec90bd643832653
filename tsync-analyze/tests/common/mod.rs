//! Helpers shared by the integration tests: the LTTV case files, and reading exports back with
//! tshark. (Each test crate uses some of them.)
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tsync_sim::{Delay, DelayTail, LinearClock, Workload};

/// The path of one of the LTTV reference cases (`tests/data/lttv/NAME`).
pub fn lttv(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/lttv")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// Runs tshark and returns its stdout. tshark missing is a failure, not a skip: a green run must
/// mean the export was checked (`cargo xtask setup` installs it).
pub fn tshark(args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "tshark is needed to check the pcapng export but could not be run ({e}): install \
                 Debian's `tshark` package (apt-get install -y tshark)"
            )
        });
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Parses tshark's `frame.time_epoch` ("1700000000.000001030") into integer ns.
pub fn epoch_ns(s: &str) -> i128 {
    let (secs, frac) = s.split_once('.').unwrap_or((s, "0"));
    let frac = format!("{frac:0<9}");
    secs.parse::<i128>().unwrap() * 1_000_000_000 + frac[..9].parse::<i128>().unwrap()
}

/// A message of a `tsync_sim::Workload` as the analyzer's (tsync-sim, the analyzer's
/// dev-dependency, does not depend on it and has its own plain type).
pub fn message(m: tsync_sim::Message) -> tsync_analyze::Message {
    tsync_analyze::Message {
        send_trace: m.send_trace,
        recv_trace: m.recv_trace,
        send_ns: m.send_ns,
        recv_ns: m.recv_ns,
    }
}

/// Two trace files of nodes with skewed clocks, clock samples every simulated second (realtime
/// = the true time + 2026-01-01).
pub fn two_traces(dir: &Path) -> (Vec<PathBuf>, Workload) {
    two_traces_of(dir, 40_000)
}

/// [`two_traces`] with `messages` messages (one every 500 µs).
pub fn two_traces_of(dir: &Path, messages: u64) -> (Vec<PathBuf>, Workload) {
    let w = Workload {
        clocks: vec![
            LinearClock {
                offset_ns: 2e9,
                drift_ppm: 30.0,
            },
            LinearClock {
                offset_ns: 9e9,
                drift_ppm: -40.0,
            },
        ],
        links: vec![(0, 1)],
        messages,
        start_ns: 10e9,
        interval_ns: 500_000.0,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 30_000.0 },
            max_ns: 1_020_000.0,
        },
        seed: 5,
    };
    (w.write_traces(dir).unwrap(), w)
}

/// The analyzer binary of this build.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
}

/// Runs the analyzer with `args`.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run tsync-analyze")
}

/// What a run wrote to stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A path as an argument.
pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The realtime of the simulation's true time 0 in `trace` (its samples carry that + true time).
pub fn realtime_base(trace: &str, start_ns: f64) -> i64 {
    let out = run(&["info", "--json", trace]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc[0]["header"]["start_realtime_ns"].as_i64().unwrap() - start_ns as i64
}

/// Peak RSS (KiB) of `tsync-analyze ARGS` (wait4's rusage). The kernel starts a child's peak at
/// its parent's, so a test that measures should run in a test binary that holds little.
#[allow(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which gives its rusage"
)]
pub fn peak_rss_kib<A: AsRef<OsStr>>(args: &[A]) -> i64 {
    let child = bin()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    usage.ru_maxrss
}
