//! `tsync-agent check` on the real kernel (root only, `#[ignore]`d like the capture tests; `cargo
//! xtask test` runs them): with root's privileges every check that decides whether recording
//! works passes, and with the capabilities dropped (`setpriv`) the check fails naming them.
use std::process::{Command, Output};

/// Runs `tsync-agent check -o DIR`, through `setpriv` with no capabilities if `drop_caps`.
fn check(drop_caps: bool) -> Output {
    assert!(
        tsync_lab::is_root(),
        "the check tests need root (they load eBPF programs); run them as root, as CI does"
    );
    let agent = tsync_lab::agent_binary().expect("the agent builds");
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = if drop_caps {
        let mut c = Command::new("setpriv");
        c.args(["--inh-caps=-all", "--bounding-set=-all", "--"])
            .arg(&agent);
        c
    } else {
        Command::new(&agent)
    };
    cmd.args(["check", "-o"])
        .arg(dir.path())
        .output()
        .expect("cannot run the agent (is setpriv from util-linux installed?)")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root: loads and attaches eBPF programs"]
fn as_root_every_check_passes() {
    let out = check(false);
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "one line per check:\n{text}");
    for what in [
        "kernel:",
        "privileges:",
        "BTF:",
        "tracepoints:",
        "clocksource:",
        "NTP:",
        "disk:",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(what)),
            "no {what} line:\n{text}"
        );
    }
    assert!(
        lines.iter().all(|l| !l.starts_with("FAIL")),
        "a failed check with a zero exit status:\n{text}"
    );
    assert!(
        text.contains("loaded, attached and detached"),
        "the hooks were not really tried:\n{text}"
    );
}

#[test]
#[ignore = "needs root: drops its capabilities with setpriv"]
fn without_capabilities_the_check_fails_naming_them() {
    let out = check(true);
    let text = stdout(&out);
    assert!(
        !out.status.success(),
        "passed without capabilities:\n{text}"
    );
    let privileges = text
        .lines()
        .find(|l| l.contains("privileges:"))
        .unwrap_or_else(|| panic!("no privileges line:\n{text}"));
    assert!(
        privileges.starts_with("FAIL")
            && privileges.contains("CAP_BPF")
            && privileges.contains("CAP_PERFMON"),
        "{privileges}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("recording would fail"),
        "no verdict on stderr"
    );
}
