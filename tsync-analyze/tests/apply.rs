//! `tsync-analyze apply` and `export --format chrome`, run as a user would: every output format
//! gives exactly the map `sync --json` reports, realtime stamps come back on the reference's
//! realtime clock, bad input names `file:line`, no input is ever written over, and memory does
//! not grow with the events file.

use std::io::Write;
use std::path::{Path, PathBuf};
mod common;

use common::{peak_rss_kib, realtime_base, run, s, stderr, two_traces};

/// Two clocks whose rate changes by 80 ppm halfway through two minutes: `sync` cuts the pair
/// into segments, so the map is piecewise. Times in seconds, messages both ways every 20 ms.
fn bent_text(dir: &Path) -> PathBuf {
    let mut text = String::from("2\n");
    let clock1 = |t: f64| {
        if t < 160.0 {
            t * (1.0 + 30e-6) + 0.004
        } else {
            160.0 * (1.0 + 30e-6) + 0.004 + (t - 160.0) * (1.0 - 50e-6)
        }
    };
    let mut jitter = 0u64;
    for i in 0..6000 {
        let t = 100.0 + i as f64 * 0.02;
        jitter = jitter
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let d = 40e-6 + (jitter >> 40) as f64 / (1u64 << 24) as f64 * 30e-6;
        text.push_str(&format!("0 1 {:.9} {:.9}\n", t, clock1(t + d)));
        text.push_str(&format!(
            "1 0 {:.9} {:.9}\n",
            clock1(t + 0.01),
            t + 0.01 + d
        ));
    }
    let path = dir.join("bent.txt");
    std::fs::write(&path, text).unwrap();
    path
}

/// The pieces of `trace`'s map as `sync --json` prints them: (start_ns, drift, offset_ns).
fn segments(inputs: &[&str], trace: usize) -> Vec<(f64, f64, f64)> {
    let mut args = vec!["sync", "--json", "--reference", "0"];
    args.extend_from_slice(inputs);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    doc["traces"][trace]["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["start_ns"].as_f64().unwrap(),
                p["drift"].as_f64().unwrap(),
                p["offset_ns"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The map as docs/json.md defines it: the last piece starting at or before t (the first one
/// before its start).
fn apply_segments(pieces: &[(f64, f64, f64)], t: i64) -> f64 {
    let t = t as f64;
    let p = pieces.iter().rev().find(|p| p.0 <= t).unwrap_or(&pieces[0]);
    p.2 + p.1 * t
}

#[test]
fn every_format_gives_exactly_the_map_sync_reports() {
    let dir = tempfile::tempdir().unwrap();
    let text = bent_text(dir.path());
    let pieces = segments(&[&s(&text)], 1);
    assert!(
        pieces.len() > 1,
        "the bent clock gives a piecewise map: {pieces:?}"
    );
    // Events of node 1 across the whole span (and a little beyond it), one every 7.3 ms.
    let times: Vec<i64> = (0..17_000)
        .map(|i| 99_000_000_000 + i * 7_300_000 + i % 997)
        .collect();
    let mut jsonl = String::new();
    let mut csv = String::from("level,ts_ns,msg\n");
    let mut chrome = String::from("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    for (i, t) in times.iter().enumerate() {
        jsonl.push_str(&format!(
            "{{\"msg\":\"event {i}\",\"ts_ns\":{t},\"nested\":{{\"ts_ns\":1}},\"f\":1.50}}\n"
        ));
        csv.push_str(&format!("info,{t},\"a, quoted \"\"{i}\"\"\"\n"));
        let sep = if i > 0 { ",\n" } else { "" };
        chrome.push_str(&format!(
            "{sep}{{\"name\":\"e{i}\",\"ph\":\"X\",\"ts\":{}.{:03},\"dur\":250,\"pid\":1,\"tid\":2}}",
            t / 1000,
            t % 1000
        ));
    }
    chrome.push_str(
        ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"n1\"}}]}\n",
    );
    for (name, body) in [("ev.jsonl", &jsonl), ("ev.csv", &csv), ("ev.json", &chrome)] {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let apply = |events: &str, out: &str| {
        let o = run(&[
            "apply",
            &s(&text),
            "--reference",
            "0",
            "--node",
            "1",
            "--events",
            &s(&dir.path().join(events)),
            "-o",
            &s(&dir.path().join(out)),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("outside 1's recorded span"), "{err}");
        std::fs::read_to_string(dir.path().join(out)).unwrap()
    };
    // JSON Lines: to 1 ns, the original kept, every other byte as it was.
    let out = apply("ev.jsonl", "out.jsonl");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), times.len());
    for (i, (line, &t)) in lines.iter().zip(&times).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let got = v["ts_ns"].as_i64().unwrap();
        let want = apply_segments(&pieces, t);
        assert!(
            (got as f64 - want).abs() <= 1.0,
            "line {i}: {got} vs {want}"
        );
        assert_eq!(v["ts_ns_local"].as_i64(), Some(t));
        assert_eq!(
            *line,
            format!(
                "{{\"msg\":\"event {i}\",\"ts_ns\":{got},\"ts_ns_local\":{t},\"nested\":{{\"ts_ns\":1}},\"f\":1.50}}"
            )
        );
    }
    // CSV: the same, a column added after the time.
    let out = apply("ev.csv", "out.csv");
    let mut rows = csv::Reader::from_reader(out.as_bytes());
    assert_eq!(
        rows.headers().unwrap().iter().collect::<Vec<_>>(),
        ["level", "ts_ns", "ts_ns_local", "msg"]
    );
    for (i, (row, &t)) in rows.records().zip(&times).enumerate() {
        let row = row.unwrap();
        let got: i64 = row[1].parse().unwrap();
        assert!((got as f64 - apply_segments(&pieces, t)).abs() <= 1.0);
        assert_eq!(row[2].parse::<i64>().unwrap(), t);
        assert_eq!(&row[3], format!("a, quoted \"{i}\""));
    }
    // Chrome: µs to the ns, `dur` following the end, metadata passed through.
    let out = apply("ev.json", "out.json");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["displayTimeUnit"], "ns");
    let events = doc["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), times.len() + 1);
    for (e, &t) in events.iter().zip(&times) {
        let ts_ns = (e["ts"].as_f64().unwrap() * 1000.0).round();
        let want = apply_segments(&pieces, t).round();
        assert!((ts_ns - want).abs() <= 1.0, "{ts_ns} vs {want}");
        let end = apply_segments(&pieces, t + 250_000).round();
        let dur_ns = (e["dur"].as_f64().unwrap() * 1000.0).round();
        assert!((dur_ns - (end - want)).abs() <= 1.0, "{dur_ns}");
        assert_eq!((e["ts_local"].as_f64().unwrap() * 1000.0).round() as i64, t);
    }
    assert_eq!(events.last().unwrap()["ph"], "M");
    // A bare array is a Chrome trace too.
    let bare = format!(
        "[{{\"ph\":\"i\",\"ts\":{},\"name\":\"x\"}}]",
        times[5] / 1000
    );
    std::fs::write(dir.path().join("bare.json"), bare).unwrap();
    let out = apply("bare.json", "bare.out.json");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(doc.as_array().unwrap()[0]["ts_local"].is_number());
}

#[test]
fn realtime_and_monotonic_stamps_land_on_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, w) = two_traces(dir.path());
    let traces: Vec<String> = traces.iter().map(|p| s(p)).collect();
    // The realtime the simulated nodes' samples carry: the true time after this base.
    let base = realtime_base(&traces[1], w.start_ns);
    // Node 1 logs at true times within its recording, stamped both ways.
    let true_times: Vec<f64> = (0..200).map(|i| 11e9 + i as f64 * 37e6).collect();
    let mut log = String::new();
    for &t in &true_times {
        log.push_str(&format!(
            "{{\"mono\":{},\"wall\":{}}}\n",
            w.clocks[1].local(t),
            base + t as i64
        ));
    }
    let events = dir.path().join("app.jsonl");
    std::fs::write(&events, log).unwrap();
    let apply = |field: &str, clock: &str, out: &str| {
        let out = dir.path().join(out);
        let mut args = vec!["apply", "--reference", "node0"];
        args.extend(traces.iter().map(String::as_str));
        let (e, o) = (s(&events), s(&out));
        args.extend([
            "--node", "node1", "--events", &e, "--field", field, "--clock", clock, "-o", &o,
        ]);
        let r = run(&args);
        assert!(r.status.success(), "{}", stderr(&r));
        std::fs::read_to_string(out)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()[field]
                    .as_i64()
                    .unwrap()
            })
            .collect::<Vec<i64>>()
    };
    let mono = apply("mono", "monotonic", "mono.jsonl");
    let wall = apply("wall", "realtime", "wall.jsonl");
    for (i, &t) in true_times.iter().enumerate() {
        // The reference's own clocks at the same true instant.
        let want_mono = w.clocks[0].local(t);
        let want_wall = base + t as i64;
        assert!(
            (mono[i] - want_mono).abs() < 2_000,
            "{i}: {} vs {want_mono}",
            mono[i]
        );
        assert!(
            (wall[i] - want_wall).abs() < 2_000,
            "{i}: {} vs {want_wall}",
            wall[i]
        );
    }
    // The library call gives the same, with an interval around it.
    let inputs = tsync_analyze::InputSet::open(&traces).unwrap();
    let options = tsync_analyze::SyncOptions {
        reference: Some("node0".into()),
        ..Default::default()
    };
    let result = tsync_analyze::sync(&inputs, &options, &mut |_| {}).unwrap();
    let tb = tsync_analyze::CommonTimebase::new(result, &inputs).unwrap();
    let node = tb.node("node1").unwrap();
    let m = tb
        .to_reference(
            node,
            tsync_analyze::NodeClock::Realtime,
            base + true_times[50] as i64,
        )
        .unwrap();
    assert_eq!(m.t_ns, wall[50]);
    let (lo, hi) = m.interval.expect("an accurate pair gives an interval");
    assert!(lo <= base + true_times[50] as i64 && base + true_times[50] as i64 <= hi);
    assert!(!m.outside_span);
    // Unknown nodes are named with the known ones.
    let err = tb.node("node7").err().unwrap().to_string();
    assert!(
        err.contains("node7") && err.contains("node0, node1"),
        "{err}"
    );
}

#[test]
fn bad_input_names_file_and_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let text = bent_text(dir.path());
    let out = dir.path().join("out.jsonl");
    std::fs::write(&out, "an earlier result").unwrap();
    let check = |name: &str, body: &str, field: Option<&str>, want: &[&str]| {
        let events = dir.path().join(name);
        std::fs::write(&events, body).unwrap();
        let (t, e, o) = (s(&text), s(&events), s(&out));
        let mut args = vec!["apply", &t, "--node", "1", "--events", &e, "-o", &o];
        if let Some(f) = field {
            args.extend(["--field", f]);
        }
        let r = run(&args);
        assert_eq!(r.status.code(), Some(1), "{name}: {}", stderr(&r));
        let err = stderr(&r);
        for w in want {
            assert!(err.contains(w), "{name}: `{w}` not in: {err}");
        }
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "an earlier result");
    };
    let good = "{\"ts_ns\":100000000000}\n";
    check(
        "a.jsonl",
        &format!("{good}{good}{{\"ts_ns\":1,\"x\":}}\n"),
        None,
        &["a.jsonl:3: not valid JSON"],
    );
    check(
        "b.jsonl",
        &format!("{good}\n{{\"t\":5}}\n"),
        None,
        &["b.jsonl:3: no top-level field `ts_ns`"],
    );
    check(
        "c.jsonl",
        &format!("{good}{{\"ts_ns\":1.5e9}}\n"),
        None,
        &["c.jsonl:2: `ts_ns` is 1.5e9, not an integer"],
    );
    check(
        "d.jsonl",
        good,
        Some("time"),
        &["d.jsonl:1: no top-level field `time`"],
    );
    check(
        "e.jsonl",
        "{\"ts_ns\":1,\"ts_ns_local\":1}\n",
        None,
        &["e.jsonl:1:", "applied already"],
    );
    check(
        "f.csv",
        "ts_ns,a\n5,x\nfive,y\n",
        None,
        &["f.csv:3: `ts_ns` is \"five\""],
    );
    check(
        "g.csv",
        "t,a\n5,x\n",
        None,
        &[
            "g.csv:1: the header row has no column `ts_ns`",
            "it has: t, a",
        ],
    );
    check(
        "h.csv",
        "ts_ns,a\n5,x\n6\n",
        None,
        &["h.csv:3: 1 columns where the header has 2"],
    );
    check(
        "i.json",
        "{\"traceEvents\":[\n{\"ph\":\"X\",\"ts\":1},\n{\"ph\":\"X\",\"name\":\"y\"}\n]}",
        None,
        &["i.json:3: event 2: no `ts`"],
    );
    check(
        "j.json",
        "{\"traceEvents\":[\n{\"ts\":1},\n{\"ts\":\n",
        None,
        &["j.json:", "not a Chrome trace"],
    );
    // An unknown node: the known ones are named.
    let r = run(&[
        "apply",
        &s(&text),
        "--node",
        "9x",
        "--events",
        &s(&dir.path().join("a.jsonl")),
        "-o",
        &s(&out),
    ]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        stderr(&r).contains("node `9x`") && stderr(&r).contains("they know: 0, 1"),
        "{}",
        stderr(&r)
    );
}

#[test]
fn an_input_is_never_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let text = bent_text(dir.path());
    let events = dir.path().join("ev.jsonl");
    std::fs::write(&events, "{\"ts_ns\":100000000000}\n").unwrap();
    let link = dir.path().join("link.jsonl");
    std::os::unix::fs::symlink(&events, &link).unwrap();
    let before = std::fs::read(&text).unwrap();
    for out in [&events, &link, &text] {
        let r = run(&[
            "apply",
            &s(&text),
            "--node",
            "1",
            "--events",
            &s(&events),
            "-o",
            &s(out),
        ]);
        assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
        assert!(
            stderr(&r).contains("would destroy that input"),
            "{}",
            stderr(&r)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&events).unwrap(),
        "{\"ts_ns\":100000000000}\n"
    );
    assert_eq!(std::fs::read(&text).unwrap(), before);
    // A CTF output is a new directory, never inside the trace read, never an existing one.
    let ctf = dir.path().join("ctf");
    copy_dir(&ctf_fixture(), &ctf);
    for (out, want) in [
        (ctf.join("ust").join("out"), "would destroy that input"),
        (dir.path().to_path_buf(), "it exists"),
    ] {
        let r = run(&[
            "apply",
            &s(&text),
            "--node",
            "1",
            "--events",
            &s(&ctf),
            "-o",
            &s(&out),
        ]);
        assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
        assert!(stderr(&r).contains(want), "{}", stderr(&r));
    }
    assert!(!ctf.join("ust").join("out").exists());
}

fn ctf_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/ctf-python")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A text input whose node 1 runs 50 ppm fast and 3 ms ahead around the fixture's times (a
/// Python program logging through LTTng, recorded at about 11815.8 s of CLOCK_MONOTONIC).
fn around_fixture(dir: &Path) -> PathBuf {
    let mut text = String::from("2\n");
    let f = |t: f64| t * (1.0 + 50e-6) + 0.003;
    for i in 0..6000 {
        let t = 11_785.0 + i as f64 * 0.01;
        let d = 50e-6 + (i % 7) as f64 * 3e-6;
        text.push_str(&format!(
            "0 1 {t:.9} {:.9}\n1 0 {:.9} {:.9}\n",
            f(t + d),
            f(t + 0.005),
            t + 0.005 + d
        ));
    }
    let path = dir.join("around.txt");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_ctf_trace_gets_its_clock_class_rewritten_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let text = around_fixture(dir.path());
    let out = dir.path().join("applied");
    let r = run(&[
        "apply",
        &s(&text),
        "--reference",
        "0",
        "--node",
        "1",
        "--events",
        &s(&ctf_fixture()),
        "-o",
        &s(&out),
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("one line covers the trace's span"),
        "{}",
        stderr(&r)
    );
    let rel = Path::new("ust/uid/65534/64-bit");
    // Stream files and index: byte for byte.
    for f in [
        "lttng_python_channel_0",
        "lttng_python_channel_1",
        "index/lttng_python_channel_0.idx",
    ] {
        assert_eq!(
            std::fs::read(ctf_fixture().join(rel).join(f)).unwrap(),
            std::fs::read(out.join(rel).join(f)).unwrap(),
            "{f}"
        );
    }
    let meta = tsync_analyze::apply::ctf::Metadata::read(&out.join(rel).join("metadata")).unwrap();
    let before =
        tsync_analyze::apply::ctf::Metadata::read(&ctf_fixture().join(rel).join("metadata"))
            .unwrap();
    assert!(meta.packet_header.is_some());
    assert_eq!(
        meta.packet_header.unwrap()[..20],
        before.packet_header.unwrap()[..20]
    );
    let class = &tsync_analyze::apply::ctf::clock_classes(&meta.text).unwrap()[0];
    // The reference (a text input) has no samples: the trace's own epoch offset is kept.
    let old = &tsync_analyze::apply::ctf::clock_classes(&before.text).unwrap()[0];
    let epoch = old.offset;
    let pieces = segments(&[&s(&text)], 1);
    assert_eq!(pieces.len(), 1);
    let line = tsync_analyze::apply::ctf::ClockLine {
        freq: class.freq,
        offset_s: class.offset_s,
        offset: class.offset,
    };
    assert_eq!(class.freq, (1e9 / pieces[0].1).round() as u64);
    // Every value in the trace's span reads as the map (to half a ns per second from the
    // middle, here a fraction of a ns).
    for v in [
        11_815_793_249_084u64,
        11_815_862_249_699,
        11_816_077_000_000,
    ] {
        let shown = line.show(v, epoch);
        let want = apply_segments(&pieces, v as i64);
        assert!((shown - want).abs() < 1.0, "{v}: {shown} vs {want}");
    }
    // --clock realtime and --field do not apply to CTF.
    for extra in [["--clock", "realtime"], ["--field", "ts"]] {
        let o2 = dir.path().join("again");
        let (t, e, o) = (s(&text), s(&ctf_fixture()), s(&o2));
        let mut args = vec!["apply", &t, "--node", "1"];
        args.extend(["--events", &e, "-o", &o]);
        args.extend(extra);
        let r = run(&args);
        assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    }
}

#[test]
fn memory_does_not_grow_with_the_events_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = bent_text(dir.path());
    let write = |name: &str, n: usize| {
        let path = dir.path().join(name);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..n {
            writeln!(
                f,
                "{{\"ts_ns\":{},\"level\":\"info\",\"msg\":\"request {i} handled in 1.25 ms\",\"span\":\"a1b2c3d4\"}}",
                100_000_000_000u64 + i as u64 * 1_000
            )
            .unwrap();
        }
        path
    };
    let small = write("small.jsonl", 20_000);
    let large = write("large.jsonl", 400_000); // 20× the lines, ~36 MB more
    let rss = |events: &Path| {
        peak_rss_kib(&[
            "apply",
            &s(&text),
            "--node",
            "1",
            "--events",
            &s(events),
            "-o",
            &s(&dir.path().join("o.jsonl")),
        ])
    };
    let (a, b) = (rss(&small), rss(&large));
    assert!(
        b - a < 4 * 1024,
        "peak RSS {a} KiB for 20k lines, {b} KiB for 400k lines"
    );
}

#[test]
fn export_chrome_shows_nodes_packets_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let (traces, _) = two_traces(dir.path());
    let out = dir.path().join("net.json");
    let r = run(&[
        "export",
        "--format",
        "chrome",
        "-o",
        &s(&out),
        &s(&traces[0]),
        &s(&traces[1]),
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["node0", "node1"]);
    let packets: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "packet").collect();
    assert_eq!(packets.len(), 80_000);
    // In corrected order, each matched message one flow: out at the send, in at the receive.
    let ts: Vec<f64> = packets.iter().map(|e| e["ts"].as_f64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]));
    let outs: std::collections::HashMap<&str, &serde_json::Value> = packets
        .iter()
        .filter(|e| e["flow_out"] == true)
        .map(|e| (e["bind_id"].as_str().unwrap(), *e))
        .collect();
    let ins: Vec<&&serde_json::Value> = packets.iter().filter(|e| e["flow_in"] == true).collect();
    assert_eq!((outs.len(), ins.len()), (40_000, 40_000));
    for e in ins {
        let send = outs[e["bind_id"].as_str().unwrap()];
        assert_eq!(send["args"]["direction"], "send");
        assert_eq!(e["args"]["peer_event_index"], send["args"]["event_index"]);
        assert_eq!(
            (e["ts"].as_f64().unwrap() * 1000.0).round(),
            e["args"]["corrected_ns"].as_f64().unwrap()
        );
    }
    let pairs = &doc["metadata"]["tsync"]["pairs"];
    assert_eq!(pairs[0]["quality"], "accurate");
    assert!(pairs[0]["accuracy_ns"]["mean"].as_f64().unwrap() > 0.0);
}
