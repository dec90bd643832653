//! Helpers shared by the integration tests: the LTTV case files, and reading exports back with
//! tshark. (Each test crate uses some of them.)
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

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
