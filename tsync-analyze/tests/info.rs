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
use tsync_common::format::{ClockSample, Footer, Header, KernelClock, LostCounts, TraceWriter};
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
        disk: 0,
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
                disk: 0,
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
    // Two samples 1 s apart are too sparse to undo slewing with a bound.
    assert!(info.clock.slew.is_none());
    let why = info.clock.slew_unavailable.as_deref().unwrap();
    assert!(why.contains("1000.0 ms apart"), "{why}");
    assert!(
        text.contains("slew           not undone: clock samples 0 and 1"),
        "{text}"
    );
    assert_eq!(info.format_version, tsync_common::format::VERSION);
}

#[test]
fn info_shows_events_dropped_on_the_way_to_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.tsync");
    let mut w = TraceWriter::create(&path, &Header::default()).unwrap();
    let footer = Footer {
        lost: LostCounts {
            send: 1,
            recv: 2,
            per_cpu: vec![[1, 2]],
            disk: 40,
        },
        ..Default::default()
    };
    w.write_lost(&footer.lost).unwrap();
    w.finish(&footer).unwrap();
    let info = inspect(&path).unwrap();
    assert_eq!((info.lost.disk, info.lost.total()), (40, 43));
    let text = info_text(&path);
    assert!(
        text.contains("lost           43 (1 send, 2 receive, 40 on the way to disk)"),
        "{text}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
        .args(["info", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json[0]["lost"]["disk"], 40);
}

#[test]
fn info_shows_the_slewing_undone_and_the_kernel_clock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dense.tsync");
    let header = Header {
        node: "n2".into(),
        ..Default::default()
    };
    let mut w = TraceWriter::create(&path, &header).unwrap();
    // 2 s of samples every 20 ms, 60 ns brackets; the rate steps from +10 to +510 ppm at 1 s.
    let mono_at = |raw: u64| {
        let t = raw as f64 - 5e9;
        5e9 + 1e9 + t * (1.0 + 10e-6) + (t - 1e9).max(0.0) * 500e-6
    };
    for i in 0..=100u64 {
        let raw = 5_000_000_000 + i * 20_000_000 + i % 7 * 1000;
        let mono = mono_at(raw);
        w.write_clock_sample(ClockSample {
            monotonic_ns: (mono - 30.0).floor() as u64,
            monotonic_raw_ns: raw,
            realtime_ns: 1_700_000_000_000_000_000 + i as i64 * 20_000_000,
            tsc: 0,
            monotonic_after_ns: (mono + 30.0).ceil() as u64,
        })
        .unwrap();
    }
    w.write_kernel_clock(KernelClock {
        monotonic_ns: 6_000_000_000,
        freq: 10 * 65536,
        tick: 10_000,
        status: 0x2001,
        ..Default::default()
    })
    .unwrap();
    w.finish(&Footer::default()).unwrap();
    let info = inspect(&path).unwrap();
    let slew = info.clock.slew.as_ref().expect("dense bracketed samples");
    assert_eq!(slew.pieces, 2, "{slew:?}");
    assert!((slew.rate_min_ppm - 10.0).abs() < 0.5, "{slew:?}");
    assert!((slew.rate_max_ppm - 510.0).abs() < 0.5, "{slew:?}");
    assert!(slew.bound_ns < 500.0, "{slew:?}");
    assert_eq!(slew.bracket_ns[1], 61);
    let text = info_text(&path);
    assert!(
        text.contains("kernel clock   1 state(s); at start frequency +10.000 ppm"),
        "{text}"
    );
    assert!(text.contains("slew undone    rate +"), "{text}");
    assert!(text.contains("2 piece(s)"), "{text}");
    assert!(
        text.contains("rate history   ppm per 10 s from 6.000 s:"),
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

#[test]
fn info_shows_the_bytes_per_event_and_the_compression_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let events: Vec<PacketEvent> = (0..5000u64)
        .map(|i| PacketEvent {
            ts_ns: 1_000_000_000 + i * 100_000,
            direction: (i % 2) as u8,
            kind: kind::TCP4,
            seq: i as u32 * 100,
            tot_len: 152,
            ..Default::default()
        })
        .collect();
    let mut sizes = Vec::new();
    for version in [2, 3] {
        let path = dir.path().join(format!("v{version}.tsync"));
        let file = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::with_version(file, &Header::default(), version).unwrap();
        w.write_events(&events).unwrap();
        w.finish(&Footer::default()).unwrap();
        let info = inspect(&path).unwrap();
        let bytes = std::fs::metadata(&path).unwrap().len();
        assert_eq!(info.size.bytes, bytes);
        let per_event = info.size.bytes_per_event.unwrap();
        assert!((per_event - bytes as f64 / 5000.0).abs() < 1e-9);
        assert!((info.size.compression_ratio.unwrap() * per_event - 80.0).abs() < 1e-9);
        let text = info_text(&path);
        assert!(
            text.contains(&format!(
                "size           {bytes} bytes, {per_event:.2} bytes per event"
            )),
            "{text}"
        );
        sizes.push(per_event);
    }
    assert!(sizes[0] > 80.0, "version 2: raw records and framing");
    assert!(
        sizes[1] < 12.0,
        "version 3 compresses: {} bytes per event",
        sizes[1]
    );
    let path = dir.path().join("empty.tsync");
    TraceWriter::create(&path, &Header::default())
        .unwrap()
        .finish(&Footer::default())
        .unwrap();
    let info = inspect(&path).unwrap();
    assert_eq!(
        (info.size.bytes_per_event, info.size.compression_ratio),
        (None, None)
    );
}
