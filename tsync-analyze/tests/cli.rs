//! The command line: outputs users script against, and clear errors on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tsync-analyze"))
}

fn case(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/lttv")
        .join(name)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run tsync-analyze")
}

fn write(dir: &Path, name: &str, content: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

fn fails_with(args: &[&str], needles: &[&str]) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks {n:?}:\n{err}");
    }
}

#[test]
fn bad_inputs_give_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let malformed = write(d.path(), "m.txt", "# c\n2\n0 1 1.0 2.0\n0 1 x 2.0\n");
    fails_with(
        &["sync", &malformed],
        &["m.txt:4", "expected the send time"],
    );
    let short = write(d.path(), "s.txt", "2\n0 1 1.0\n");
    fails_with(&["sync", &short], &["s.txt:2", "ends early"]);
    let range = write(d.path(), "r.txt", "2\n0 1 1.0 2.0\n1 2 1.0 2.0\n");
    fails_with(&["sync", &range], &["r.txt:3", "out of range", "2 traces"]);
    let negative = write(d.path(), "n.txt", "2\n0 1 -1.0 2.0\n");
    fails_with(&["messages", &negative], &["n.txt:2", "negative"]);
    let empty = write(d.path(), "e.txt", "# nothing\n");
    fails_with(&["sync", &empty], &["e.txt", "number of traces"]);
    let missing = d.path().join("missing.txt");
    fails_with(
        &["sync", missing.to_str().unwrap()],
        &["missing.txt", "cannot read"],
    );
    let binary = d.path().join("b.bin");
    std::fs::write(&binary, [0u8, 1, 2, 3, 255]).unwrap();
    fails_with(
        &["sync", binary.to_str().unwrap()],
        &["neither a tsync trace file"],
    );
    let t1 = case("test1.txt");
    fails_with(
        &["sync", t1.to_str().unwrap(), "--reference", "zz"],
        &["--reference zz"],
    );
}

#[test]
fn sync_json_follows_the_contract() {
    let o = run(&["sync", "--json", case("test1.txt").to_str().unwrap()]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["algorithm"], "chull");
    let t = &v["traces"][1];
    for k in [
        "index",
        "name",
        "group",
        "reference",
        "drift",
        "offset_ns",
        "synchronized",
    ] {
        assert!(!t[k].is_null(), "trace field {k}");
    }
    assert_eq!(t["name"], "1");
    let p = &v["pairs"][0];
    for k in [
        "a",
        "b",
        "quality",
        "a0_ns",
        "a1",
        "minslope",
        "maxslope",
        "messages_ab",
        "messages_ba",
        "hull_points_ab",
        "hull_points_ba",
        "accuracy_ns",
    ] {
        assert!(p.get(k).is_some(), "pair field {k}");
    }
    assert_eq!(p["quality"], "accurate");
    assert_eq!(p["messages_ab"], 2);
    for k in ["best", "worst", "mean"] {
        assert!(p["accuracy_ns"][k].as_f64().unwrap() > 0.0);
    }
    // Full precision: the offset keeps its sub-nanosecond digits.
    let a0 = p["a0_ns"].as_f64().unwrap();
    assert!((a0 - 6586423541.478967).abs() < 1e-3, "{a0}");
    for k in ["events", "matched", "unmatched", "same_trace", "ambiguous"] {
        assert!(v["matching"][k].is_u64(), "matching field {k}");
    }
    // Incomplete pair: null factors, unsynchronized trace, warning on stderr; the document is
    // printed, and the exit status (3) tells scripts that nothing was synchronized.
    let o = run(&["sync", "--json", case("test4.txt").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["pairs"][0]["a0_ns"].is_null() && v["pairs"][0]["maxslope"].is_null());
    assert!(v["pairs"][0]["accuracy_ns"].is_null());
    assert_eq!(v["traces"][1]["synchronized"], false);
    assert!(String::from_utf8_lossy(&o.stderr).contains("NOT synchronized"));
}

#[test]
fn human_report_names_quality_and_factors() {
    let o = run(&["sync", case("test6.txt").to_str().unwrap()]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(s.contains("approximate"), "{s}");
    assert!(
        s.contains("WARNING") && s.contains("WITHOUT any guarantee"),
        "{s}"
    );
    let o = run(&["sync", case("test12.txt").to_str().unwrap()]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("accurate") && s.contains("ppm") && s.contains("µs"),
        "{s}"
    );
}

#[test]
fn messages_round_trip_exactly() {
    let d = tempfile::tempdir().unwrap();
    let src = write(
        d.path(),
        "in.txt",
        "3\n0 1 1.000000001 2.5\n1 0 3 2.000000007\n2 1 86400123.456789012 86400123.456790013\n",
    );
    let o = run(&["messages", &src]);
    assert!(o.status.success());
    let first = String::from_utf8(o.stdout).unwrap();
    assert!(first.contains("0 1 1.000000001 2.500000000"), "{first}");
    assert!(
        first.contains("2 1 86400123.456789012 86400123.456790013"),
        "{first}"
    );
    let again = write(d.path(), "again.txt", &first);
    let o = run(&["messages", &again]);
    assert_eq!(String::from_utf8(o.stdout).unwrap(), first);
}

#[test]
fn linreg_runs_on_text_inputs() {
    let d = tempfile::tempdir().unwrap();
    let mut s = String::from("2\n");
    for k in 0..50 {
        let t = 10.0 + k as f64 * 0.1;
        s += &format!("0 1 {:.9} {:.9}\n", t, t + 5.0 + 0.0001);
        s += &format!("1 0 {:.9} {:.9}\n", t + 5.0 + 0.0002, t + 0.0003);
    }
    let f = write(d.path(), "l.txt", &s);
    let o = run(&["sync", "--json", "--algorithm", "linreg", &f]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["algorithm"], "linreg");
    let a0 = v["pairs"][0]["a0_ns"].as_f64().unwrap();
    assert!((a0 - 5e9).abs() < 1000.0, "{a0}");
    assert!(v["pairs"][0]["linreg"]["samples"].as_u64().unwrap() >= 40);
}

#[test]
fn trace_files_by_name_and_reference_by_name() {
    use tsync_sim::{Delay, DelayTail, LinearClock, Workload};
    let d = tempfile::tempdir().unwrap();
    let w = Workload {
        clocks: vec![
            LinearClock {
                offset_ns: 1e9,
                drift_ppm: 50.0,
            },
            LinearClock {
                offset_ns: 2e9,
                drift_ppm: -50.0,
            },
            LinearClock {
                offset_ns: 3e9,
                drift_ppm: 0.0,
            },
        ],
        links: vec![(0, 1), (1, 2)],
        messages: 5000,
        start_ns: 20e9,
        interval_ns: 100_000.0,
        delay: Delay {
            min_ns: 20_000.0,
            tail: DelayTail::Exponential { mean_ns: 20_000.0 },
            max_ns: 1_020_000.0,
        },
        seed: 5,
    };
    let paths = w.write_traces(d.path()).unwrap();
    let mut args: Vec<String> = vec![
        "sync".into(),
        "--json".into(),
        "--reference".into(),
        "node2".into(),
    ];
    args.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
    let o = bin().args(&args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["traces"][0]["name"], "node0");
    for t in v["traces"].as_array().unwrap() {
        assert_eq!(t["reference"], 2);
        assert_eq!(t["synchronized"], true);
    }
    assert_eq!(v["traces"][0]["path"], serde_json::json!([2, 1, 0]));
    assert_eq!(v["matching"]["matched"], 5000);
    // `messages` on trace files, read back as text, gives the same factors.
    let mut margs: Vec<String> = vec!["messages".into()];
    margs.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
    let o = bin().args(&margs).output().unwrap();
    assert!(o.status.success());
    let txt = write(d.path(), "m.txt", &String::from_utf8(o.stdout).unwrap());
    let o = run(&["sync", "--json", "--reference", "2", &txt]);
    let t: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in 0..3 {
        assert_eq!(t["traces"][k]["drift"], v["traces"][k]["drift"]);
        assert_eq!(t["traces"][k]["offset_ns"], v["traces"][k]["offset_ns"]);
    }
}
