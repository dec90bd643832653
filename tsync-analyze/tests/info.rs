//! `info` on whole and damaged trace files.

use tsync_analyze::inspect;

/// What `tsync-analyze info FILE` prints.
fn info_text(path: &std::path::Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
        .arg("info")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
use tsync_common::format::{ClockSample, Footer, Header, LostCounts, TraceWriter};
use tsync_common::{PacketEvent, direction, kind};

fn write(path: &std::path::Path, finish: bool) {
    let header = Header {
        node: "n1".into(),
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header).unwrap();
    for i in 0..10u64 {
        w.write_event(&PacketEvent {
            ts_ns: 1_000_000_000 + i * 1000,
            direction: if i % 2 == 0 {
                direction::SEND
            } else {
                direction::RECV
            },
            kind: kind::TCP4,
            ..Default::default()
        })
        .unwrap();
    }
    // Two clock samples 1 s apart (raw), monotonic running 100 ppm fast, TSC at 2 GHz.
    w.write_clock_sample(ClockSample {
        monotonic_ns: 1_000_000_000,
        monotonic_raw_ns: 5_000_000_000,
        realtime_ns: 1_700_000_000_000_000_000,
        tsc: 10_000_000_000,
        monotonic_after_ns: 1_000_000_000,
    })
    .unwrap();
    w.write_clock_sample(ClockSample {
        monotonic_ns: 2_000_100_000,
        monotonic_raw_ns: 6_000_000_000,
        realtime_ns: 1_700_000_001_000_100_000,
        tsc: 12_000_000_000,
        monotonic_after_ns: 2_000_100_000,
    })
    .unwrap();
    w.write_lost(&LostCounts {
        send: 3,
        recv: 4,
        per_cpu: vec![[3, 4]],
    })
    .unwrap();
    w.flush().unwrap();
    if finish {
        w.finish(&Footer {
            events: 10,
            lost: LostCounts {
                send: 3,
                recv: 5,
                per_cpu: vec![[3, 5]],
            },
            ..Default::default()
        })
        .unwrap();
    }
}

#[test]
fn info_reports_counts_clocks_and_completeness() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.tsync");
    write(&path, true);
    let info = inspect(&path).unwrap();
    assert_eq!(info.header.node, "n1");
    assert_eq!(
        (info.events.total, info.events.send, info.events.recv),
        (10, 5, 5)
    );
    assert_eq!(info.events.out_of_order, 0);
    assert_eq!(info.lost.total(), 8, "the footer's final counts win");
    assert_eq!(info.first_ns, Some(1_000_000_000));
    assert_eq!(info.last_ns, Some(1_000_009_000));
    assert!(info.complete && info.damage.is_none());
    let ppm = info.clock.monotonic_vs_raw_ppm.unwrap();
    assert!((ppm - 100.0).abs() < 1e-6, "{ppm}");
    assert!((info.clock.tsc_hz.unwrap() - 2e9).abs() < 1.0);
    let text = info_text(&path);
    assert!(
        text.contains("complete") && text.contains("10 (5 sent, 5 received"),
        "{text}"
    );
}

#[test]
fn info_says_when_a_file_was_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.tsync");
    write(&path, false);
    let info = inspect(&path).unwrap();
    assert_eq!(info.events.total, 10);
    assert!(!info.complete);
    assert_eq!(
        info.lost.total(),
        7,
        "the last counters written before the cut"
    );
    assert!(info_text(&path).contains("DAMAGED"));
}

#[test]
fn info_on_a_non_trace_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.txt");
    std::fs::write(&path, "2\n0 1 1.0 2.0\n").unwrap();
    let err = format!("{:#}", inspect(&path).unwrap_err());
    assert!(
        err.contains("c.txt") && err.contains("not a tsync trace"),
        "{err}"
    );
}
