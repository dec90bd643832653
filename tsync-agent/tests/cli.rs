//! The agent's command line, checked without privileges: bad options and an existing output are
//! refused before anything is loaded. The real captures (root) are in `tsync-lab/tests`.
use std::process::Command;

const AGENT: &str = env!("CARGO_BIN_EXE_tsync-agent");

#[test]
fn an_existing_output_is_kept_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("earlier.trace");
    std::fs::write(&file, "an earlier recording").unwrap();
    let out = Command::new(AGENT)
        .args(["record", "--duration", "1", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "an earlier recording"
    );
}

#[test]
fn bad_options_are_rejected_with_usage_errors() {
    for (args, expect) in [
        (&["--ring-size", "1000"][..], "power of two"),
        (&["--ring-size", "16Q"][..], "number of bytes"),
        (&["--buffer-size", "4096"][..], "at least"),
        (&["--buffer-size", "lots"][..], "number of bytes"),
        (&["--duration", "-3"][..], "duration"),
        (&["--clock-skew", "12"][..], "OFFSET_NS,DRIFT_PPM"),
        (&["--clock-skew", "0,-2000000"][..], "DRIFT_PPM"),
    ] {
        let out = Command::new(AGENT)
            .args(["record", "-o", "/nonexistent/never-written.trace"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
}

#[test]
fn verbosity_is_accepted_before_and_after_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("earlier.trace");
    std::fs::write(&file, "an earlier recording").unwrap();
    for args in [
        &["-v", "record"][..],
        &["record", "-vvv"],
        &["record", "--verbose"],
    ] {
        let out = Command::new(AGENT)
            .args(args)
            .arg("-o")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Parsed: the run gets as far as refusing the existing output.
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("exists"), "{args:?}: {stderr}");
    }
}
