//! `tsync-analyze merge`, as a user runs it after `apply --interval`: every record of every
//! node, in corrected order, each flagged as the intervals say (checked against the definition
//! on every earlier record), every other byte kept; bad or unsorted input names `file:line`.
//! (Memory: `merge_memory.rs`.)

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{bin, realtime_base, run, s, stderr, two_traces};
use serde_json::Value;

/// Two nodes' logs applied with `--interval` (realtime stamps; the nodes share realtime, so
/// the stamp is the truth), as JSON Lines, CSV and Chrome. Returns the applied files per format.
struct Applied {
    dir: tempfile::TempDir,
    jsonl: Vec<PathBuf>,
    csv: Vec<PathBuf>,
    chrome: Vec<PathBuf>,
}

fn applied() -> Applied {
    let dir = tempfile::tempdir().unwrap();
    let (traces, w) = two_traces(dir.path());
    let traces: Vec<String> = traces.iter().map(|p| s(p)).collect();
    let base = realtime_base(&traces[1], w.start_ns);
    let (mut jsonl, mut csv, mut chrome) = (Vec::new(), Vec::new(), Vec::new());
    for node in 0..2 {
        // Events every 0.7 ms of true time, the two nodes 0.2 ms apart: some close enough to
        // overlap, some not; a few before the recording (no interval).
        let times: Vec<i64> = (0..6000)
            .map(|i| base + 9_995_000_000 + i * 700_000 + (i * 7919 + node * 3571) % 400_000)
            .collect();
        let mut j = String::new();
        let mut c = String::from("ts_ns,level,msg\n");
        let mut h = String::from("{\"traceEvents\":[\n");
        h.push_str(&format!(
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{node},\"args\":{{\"name\":\"node{node}\"}}}}"
        ));
        let mut sorted = times.clone();
        sorted.sort();
        for (i, t) in sorted.iter().enumerate() {
            j.push_str(&format!(
                "{{\"ts_ns\":{t},\"node\":\"node{node}\",\"msg\":\"event {i}\",\"f\":1.50}}\n"
            ));
            c.push_str(&format!("{t},info,\"n{node}, event {i}\"\n"));
            h.push_str(&format!(
                ",\n{{\"name\":\"e{i}\",\"ph\":\"i\",\"pid\":{node},\"tid\":1,\"ts\":{}.{:03}}}",
                t / 1000,
                t % 1000
            ));
        }
        h.push_str("],\"displayTimeUnit\":\"ns\"}\n");
        for (name, body, list) in [
            (format!("n{node}.jsonl"), &j, &mut jsonl),
            (format!("n{node}.csv"), &c, &mut csv),
            (format!("n{node}.json"), &h, &mut chrome),
        ] {
            let events = dir.path().join(&name);
            std::fs::write(&events, body).unwrap();
            let out = dir.path().join(format!("applied-{name}"));
            let mut args = vec!["apply", "--reference", "node0"];
            args.extend(traces.iter().map(String::as_str));
            let (e, o, n) = (s(&events), s(&out), format!("node{node}"));
            args.extend(["--node", &n, "--events", &e, "--clock", "realtime"]);
            args.extend(["--interval", "-o", &o]);
            let r = run(&args);
            assert!(r.status.success(), "{}", stderr(&r));
            list.push(out);
        }
    }
    Applied {
        dir,
        jsonl,
        csv,
        chrome,
    }
}

/// The verdict the definition gives each record, from every earlier record: `certain` when all
/// earlier records of the other file that have an interval end before this one's begins.
fn definition(records: &[(usize, Option<(i64, i64)>)]) -> Vec<&'static str> {
    let mut max_hi: [Option<i64>; 2] = [None, None];
    records
        .iter()
        .map(|&(file, interval)| match interval {
            None => "unknown",
            Some((lo, hi)) => {
                let other = max_hi[1 - file];
                max_hi[file] = Some(max_hi[file].map_or(hi, |m| m.max(hi)));
                if other.is_none_or(|h| h < lo) {
                    "certain"
                } else {
                    "uncertain"
                }
            }
        })
        .collect()
}

fn merge(files: &[PathBuf], out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["merge".to_string()];
    args.extend(files.iter().map(|f| s(f)));
    args.extend(["-o".into(), s(out)]);
    args.extend(extra.iter().map(|e| e.to_string()));
    bin().args(&args).output().unwrap()
}

#[test]
fn jsonl_every_record_in_order_flagged_as_the_intervals_say() {
    let a = applied();
    let out = a.dir.path().join("merged.jsonl");
    let r = merge(&a.jsonl, &out, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12_000);
    // Every applied line is there once, with the verdict spliced in before its closing brace.
    let mut originals: std::collections::HashMap<String, usize> = Default::default();
    for (k, f) in a.jsonl.iter().enumerate() {
        for l in std::fs::read_to_string(f).unwrap().lines() {
            originals.insert(l.to_string(), k);
        }
    }
    let mut records = Vec::new();
    let mut verdicts = Vec::new();
    let mut last = i64::MIN;
    for line in &lines {
        let (body, verdict) = line.rsplit_once(",\"tsync_order\":\"").unwrap();
        let verdict = verdict.strip_suffix("\"}").unwrap();
        let original = format!("{body}}}");
        let file = originals
            .remove(&original)
            .expect("an applied line, byte for byte");
        let v: Value = serde_json::from_str(line).unwrap();
        let t = v["ts_ns"].as_i64().unwrap();
        assert!(t >= last, "out of order");
        last = t;
        let interval = v["ts_ns_lo"].as_i64().zip(v["ts_ns_hi"].as_i64());
        if let Some((lo, hi)) = interval {
            // Shared realtime: the truth is the stamp.
            let truth = v["ts_ns_local"].as_i64().unwrap();
            assert!(lo <= truth && truth <= hi, "{truth} ∉ [{lo}, {hi}]");
        }
        records.push((file, interval));
        verdicts.push(verdict.to_string());
    }
    assert!(originals.is_empty());
    assert_eq!(verdicts, definition(&records));
    let count = |w: &str| verdicts.iter().filter(|v| *v == w).count();
    let (c, u, k) = (count("certain"), count("uncertain"), count("unknown"));
    assert!(
        c > 1000 && u > 1000 && k > 0,
        "{c} certain, {u} uncertain, {k} unknown"
    );
    assert!(
        stderr(&r).contains(&format!("{c} certain, {u} uncertain, {k} unknown")),
        "{}",
        stderr(&r)
    );
    // Merged again: refused.
    let again = a.dir.path().join("again.jsonl");
    let r = merge(&[out.clone(), a.jsonl[0].clone()], &again, &[]);
    assert_eq!(r.status.code(), Some(1));
    assert!(stderr(&r).contains("merged.jsonl:1: the line already has `tsync_order`"));
    assert!(!again.exists());
}

#[test]
fn csv_and_chrome_are_merged_too() {
    let a = applied();
    let out = a.dir.path().join("merged.csv");
    let r = merge(&a.csv, &out, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    let mut rows = csv::Reader::from_path(&out).unwrap();
    assert_eq!(
        rows.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "ts_ns",
            "ts_ns_local",
            "ts_ns_lo",
            "ts_ns_hi",
            "level",
            "msg",
            "tsync_order"
        ]
    );
    let mut records = Vec::new();
    let mut verdicts = Vec::new();
    for row in rows.records() {
        let row = row.unwrap();
        let file = usize::from(row[5].starts_with("n1"));
        let b = |k: usize| row[k].parse::<i64>().ok();
        records.push((file, b(2).zip(b(3))));
        verdicts.push(row[6].to_string());
    }
    assert_eq!(records.len(), 12_000);
    assert_eq!(verdicts, definition(&records));
    // Chrome: metadata kept, the verdict in args, the other members after the events.
    let out = a.dir.path().join("merged.json");
    let r = merge(&a.chrome, &out, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("2 records without a time"),
        "{}",
        stderr(&r)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["displayTimeUnit"], "ns");
    let events = doc["traceEvents"].as_array().unwrap();
    assert_eq!(events.len(), 12_002);
    let mut records = Vec::new();
    let mut verdicts = Vec::new();
    for e in events.iter().filter(|e| e["ph"] != "M") {
        let b = |k: &str| e["args"][k].as_i64().map(|us| us * 1000);
        records.push((
            e["pid"].as_u64().unwrap() as usize,
            b("ts_lo").zip(b("ts_hi")),
        ));
        verdicts.push(e["args"]["tsync_order"].as_str().unwrap().to_string());
    }
    assert_eq!(verdicts, definition(&records));
    // Headers that differ are two tables: refused.
    let other = a.dir.path().join("other.csv");
    std::fs::write(&other, "ts_ns,x\n1,a\n").unwrap();
    let r = merge(&[a.csv[0].clone(), other], &a.dir.path().join("x.csv"), &[]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        stderr(&r).contains("other.csv: its header (ts_ns,x)"),
        "{}",
        stderr(&r)
    );
}

#[test]
fn disorder_beyond_the_window_and_bad_lines_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    std::fs::write(&out, "an earlier result").unwrap();
    let check = |body: &str, extra: &[&str], want: &str| {
        let f = dir.path().join("in.jsonl");
        std::fs::write(&f, body).unwrap();
        let r = merge(&[f], &out, extra);
        assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
        assert!(stderr(&r).contains(want), "`{want}` not in {}", stderr(&r));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "an earlier result");
    };
    let lines: String = [5, 6, 7, 8, 1]
        .iter()
        .map(|t| format!("{{\"ts_ns\":{t}}}\n"))
        .collect();
    check(
        &lines,
        &["--window", "2"],
        "in.jsonl:5: the time 1 comes before",
    );
    check(
        "{\"ts_ns\":1}\n{\"t\":2}\n",
        &[],
        "in.jsonl:2: no top-level field `ts_ns`",
    );
    check(
        "{\"ts_ns\":1}\n{\"ts_ns\":2,}\n",
        &[],
        "in.jsonl:2: not valid JSON",
    );
    check(
        "{\"ts_ns\":1,\"ts_ns_lo\":\"x\",\"ts_ns_hi\":2}\n",
        &[],
        "in.jsonl:1: `ts_ns_lo` is \"x\"",
    );
    // Within the window: put in place, and said.
    let f = dir.path().join("ok.jsonl");
    std::fs::write(&f, &lines).unwrap();
    let ok = dir.path().join("ok.out.jsonl");
    let r = merge(&[f], &ok, &[]);
    assert!(r.status.success(), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("1 records came later"),
        "{}",
        stderr(&r)
    );
    assert!(
        stderr(&r).contains("no record has `ts_ns_lo`"),
        "{}",
        stderr(&r)
    );
    let first = std::fs::read_to_string(&ok).unwrap();
    assert!(
        first.starts_with("{\"ts_ns\":1,\"tsync_order\":\"unknown\"}\n"),
        "{first}"
    );
}
