//! The checks' logic on synthetic inputs: reports as guests write them, no QEMU.
use super::*;
use crate::vm::report::{AppliedSlew, ClockPair};
use crate::vm::tscpage::OffsetBracket;

fn report(k: usize, kernel: &str, slew: Option<f64>) -> GuestReport {
    let bracket = OffsetBracket {
        lo: 100,
        hi: 900,
        guest_tsc: 0,
    };
    GuestReport {
        index: k,
        arch: "x86_64".into(),
        kernel: kernel.into(),
        clocksource: "tsc".into(),
        offset_start: bracket,
        offset_end: OffsetBracket {
            lo: 300,
            hi: 1100,
            guest_tsc: 1,
        },
        tsc_hz: 2e9,
        handshakes: Vec::new(),
        agent_check: Some(("exit status: 0".into(), "ok".into())),
        pairs: vec![ClockPair {
            t1: 0,
            mono: 0,
            t2: 10,
            raw: 0,
            t3: 20,
        }],
        slew: slew.map(|ppm| AppliedSlew {
            freq_before_ppm: 1.5,
            freq_after_ppm: 1.5 + ppm,
            at_mono_ns: 5,
        }),
        agent_events: 7000,
        agent_lost: 0,
        agent_status: "exit status: 0".into(),
        programs_left: 0,
        exchanges: 500,
        offloads: vec!["generic-receive-offload".into()],
    }
}

fn outcome(dir: &Path, reports: Vec<Result<GuestReport, String>>) -> LabOutcome<'_> {
    LabOutcome {
        out: dir,
        kernels: vec!["6.1".into(), "6.12".into(), "6.1".into()][..reports.len()].to_vec(),
        arches: vec![GuestArch::Amd64; reports.len()],
        reports,
        slewed: 1,
        slew_ppm: 334.0,
        leftovers: Vec::new(),
    }
}

fn passed(checks: &[Check], name: &str) -> Option<bool> {
    checks.iter().find(|c| c.name == name).map(|c| c.passed)
}

#[test]
fn without_traces_the_agents_and_the_synchronization_fail_and_the_rest_is_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    let reports = vec![
        Ok(report(0, "6.1.0-56-amd64", None)),
        Ok(report(1, "6.12.117+deb12-amd64", Some(334.0))),
        Err("no report; see guest-2.log".into()),
    ];
    let mut o = outcome(dir.path(), reports);
    o.leftovers = vec!["processes of guest-2".into()];
    let (rows, checks, sync) = evaluate(&o);
    assert!(sync.is_none());
    assert_eq!(rows.len(), 2);
    // The trace files are missing: "recorded" fails for each guest, with the reason.
    let agent = checks
        .iter()
        .find(|c| c.name.starts_with("guest-0: agent"))
        .unwrap();
    assert!(
        !agent.passed && agent.detail.contains("incomplete or damaged"),
        "{}",
        agent.detail
    );
    let missing = checks
        .iter()
        .find(|c| c.name.starts_with("guest-2: agent"))
        .unwrap();
    assert_eq!(
        (missing.passed, missing.detail.as_str()),
        (false, "no report; see guest-2.log")
    );
    assert_eq!(passed(&checks, "synchronization ran"), Some(false));
    // The brackets [100, 900] and [300, 1100] overlap: the offset held, 200 ticks apart.
    let offset = "guest-1: TSC offset to the host constant (ground truth valid)";
    assert_eq!(passed(&checks, offset), Some(true));
    assert_eq!(rows[1].offset_drift_ticks, 200.0);
    // guest-1 was slewed but `info` could not read its trace: the slew is not confirmed.
    assert_eq!(
        passed(&checks, "guest-1: info reports the slew applied (±1 ppm)"),
        Some(false)
    );
    assert_eq!(
        passed(
            &checks,
            "guest-0: info reports the absence of slewing (±1 ppm)"
        ),
        Some(true)
    );
    assert_eq!(
        passed(
            &checks,
            "nothing left behind (guests, QEMU, shared page, helper)"
        ),
        Some(false)
    );
}

#[test]
fn an_agent_passes_only_on_the_kernel_asked_for_with_nothing_lost_or_left() {
    let file = Path::new("/nonexistent/guest-0.tsync");
    let good = Ok(report(0, "6.12.117+deb12-amd64", None));
    let c = agent_check(0, &good, "6.1", GuestArch::Amd64, file);
    assert_eq!(
        c.name,
        "guest-0: agent checked the node and recorded on Linux 6.1 x86_64"
    );
    assert!(!c.passed, "6.12 is not 6.1: {}", c.detail);
    assert!(
        c.detail.starts_with(
            "x86_64 kernel 6.12.117+deb12-amd64, `tsync-agent check` exit status: 0, 7000 \
             events, 0 lost"
        ),
        "{}",
        c.detail
    );
}

#[test]
fn an_agent_fails_on_another_architecture_or_when_its_check_failed() {
    let file = Path::new("/nonexistent/guest-0.tsync");
    let good = Ok(report(0, "6.12.117+deb12-arm64", None));
    let c = agent_check(0, &good, "6.12", GuestArch::Arm64, file);
    assert!(
        !c.passed && c.detail.starts_with("x86_64 kernel"),
        "{}",
        c.detail
    );
    let mut r = report(0, "6.12.117+deb12-arm64", None);
    r.arch = "aarch64".into();
    r.agent_check = Some(("exit status: 1".into(), "FAIL btf".into()));
    let c = agent_check(0, &Ok(r), "6.12", GuestArch::Arm64, file);
    assert!(
        !c.passed && c.detail.contains("check` exit status: 1"),
        "{}",
        c.detail
    );
}

#[test]
fn brackets_that_do_not_overlap_invalidate_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = report(0, "6.1.0-56-amd64", None);
    r.offset_end = OffsetBracket {
        lo: 2000,
        hi: 2100,
        guest_tsc: 1,
    };
    let (rows, checks, _) = evaluate(&outcome(dir.path(), vec![Ok(r)]));
    assert!(rows[0].offset_drift_ticks.is_nan());
    let c = checks
        .iter()
        .find(|c| c.name.contains("TSC offset"))
        .unwrap();
    assert!(
        !c.passed && c.detail.ends_with("do not overlap"),
        "{}",
        c.detail
    );
}

#[test]
fn the_table_has_a_row_per_guest_with_the_slew_and_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let reports = vec![
        Ok(report(0, "6.1.0-56-amd64", None)),
        Ok(report(1, "6.12.117+deb12-amd64", Some(334.0))),
    ];
    let (mut rows, _, _) = evaluate(&outcome(dir.path(), reports));
    rows[1].truth = Some(TruthFit {
        points: 21,
        with_interval: 20,
        inside: 20,
        max_error_ns: 42_700.0,
        widest_ns: 1_719_600.0,
        uncertainty_ns: 1_000.0,
    });
    let t = table(&rows);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[2].starts_with("| guest-0 | 6.1.0-56-amd64 | tsc | reference |"));
    assert!(lines[3].contains("| slewed +334 ppm |"), "{}", lines[3]);
    assert!(
        lines[3].contains("| +334.000 / unavailable |"),
        "{}",
        lines[3]
    );
    assert!(
        lines[3].contains("| 42.7 | 1719.6 | 1.000 | 20/20 |"),
        "{}",
        lines[3]
    );
    // Every row has as many cells as the header.
    let cells = |l: &str| l.matches('|').count();
    assert!(lines.iter().all(|l| cells(l) == cells(lines[0])));
}
