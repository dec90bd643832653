//! Bad input and careless command lines, tried as a user would: no file is ever destroyed, pipes
//! and standard input work, resources stay bounded, every message names the real cause, and the
//! exit status tells scripts whether the traces are on one timebase.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::{bin, lttv, run, s, stderr};

/// Runs with `stdin` as standard input.
fn run_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // The command may stop reading early on an error: a closed pipe is fine.
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Everything the command said (the human report carries its warnings on stdout).
fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Two agent trace files of nodes with different clocks.
fn two_traces(dir: &Path) -> Vec<PathBuf> {
    common::two_traces_of(dir, 2000).0
}

#[test]
fn an_export_never_replaces_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let traces = two_traces(dir.path());
    let (a, b) = (s(&traces[0]), s(&traces[1]));
    let before = std::fs::read(&traces[0]).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&traces[0], &link).unwrap();
    for out in [a.clone(), s(&link)] {
        let o = run(&["export", "--format", "pcapng", "-o", &out, &a, &b]);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(err.contains("is the input") && err.contains(&a), "{err}");
        assert_eq!(std::fs::read(&traces[0]).unwrap(), before);
    }
    // A text input named as the output.
    let text = dir.path().join("messages.txt");
    std::fs::copy(lttv("test1.txt"), &text).unwrap();
    let text_before = std::fs::read(&text).unwrap();
    let o = run(&["export", "--format", "csv", "-o", &s(&text), &s(&text)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(std::fs::read(&text).unwrap(), text_before);
}

#[test]
fn a_full_disk_is_said_as_such_and_the_device_stays() {
    // /dev/full is 0666 on most systems, 0600 on some: only a user who may write to it can run this.
    if std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .is_err()
    {
        eprintln!("/dev/full is not writable here: skipped (CI runs it as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let traces = two_traces(dir.path());
    let o = run(&[
        "export",
        "--format",
        "pcapng",
        "-o",
        "/dev/full",
        &s(&traces[0]),
        &s(&traces[1]),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("the disk is full"), "{err}");
    assert!(Path::new("/dev/full").exists());
}

#[test]
fn an_export_replaces_an_earlier_one_whole() {
    let dir = tempfile::tempdir().unwrap();
    let traces = two_traces(dir.path());
    let out = dir.path().join("out.csv");
    std::fs::write(&out, "an earlier export\n").unwrap();
    let o = run(&[
        "export",
        "--format",
        "csv",
        "-o",
        &s(&out),
        &s(&traces[0]),
        &s(&traces[1]),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = std::fs::read_to_string(&out).unwrap();
    assert!(csv.lines().count() > 4000, "every event exported");
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".tmp")), "{names:?}");
}

#[test]
fn inputs_may_be_pipes_or_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let traces = two_traces(dir.path());
    let direct = run(&["sync", "--json", &s(&traces[0]), &s(&traces[1])]);
    assert!(direct.status.success(), "{}", stderr(&direct));
    // A trace file on standard input (as from `zstdcat a.tsync.zst | tsync-analyze ... -`).
    let bytes = std::fs::read(&traces[0]).unwrap();
    for cmd in ["sync", "eval", "correct"] {
        let o = run_with_stdin(&[cmd, "--json", "-", &s(&traces[1])], &bytes);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        if cmd == "sync" {
            assert_eq!(o.stdout, direct.stdout, "the same result as from the file");
        }
    }
    // A FIFO, as a process substitution gives.
    let fifo = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(&fifo, bytes).unwrap())
    };
    let o = run(&["sync", "--json", &s(&fifo), &s(&traces[1])]);
    writer.join().unwrap();
    assert_eq!(o.stdout, direct.stdout, "{}", stderr(&o));
    let o = run_with_stdin(&["info", "-"], &std::fs::read(&traces[1]).unwrap());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("- (standard input)") && !out.contains("input-0"),
        "{out}"
    );
    // Text on standard input; a bad one is named as the user gave it.
    let text = std::fs::read(lttv("test1.txt")).unwrap();
    let o = run_with_stdin(&["sync", "-"], &text);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run_with_stdin(&["sync", "-"], b"2\n0 1 x 2\n");
    let err = stderr(&o);
    assert!(
        err.contains("- (standard input):2") && !err.contains("tsync-analyze-input"),
        "{err}"
    );
    let o = run(&["sync", "-", "-"]);
    assert_eq!(o.status.code(), Some(2));
    // An endless stream that is neither format is refused from its first bytes, not copied.
    let o = run(&["sync", "/dev/urandom"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/dev/urandom: neither"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_huge_declared_trace_count_is_refused_and_memory_follows_the_real_traces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.txt");
    for n in ["65536", "4294967296", "99999999999999999999999"] {
        std::fs::write(&path, format!("{n}\n0 1 1.0 1.5\n1 0 2.0 2.4\n")).unwrap();
        let o = run(&["sync", &s(&path)]);
        assert_eq!(o.status.code(), Some(1), "{n}");
        let err = stderr(&o);
        assert!(err.contains("at most 4096 traces"), "{n}: {err}");
    }
    // 4000 traces declared, 2 used: runs, and the warning lists a few names, not 3998.
    let mut text = String::from("4000\n");
    for i in 0..20 {
        text.push_str(&format!("0 1 {}.0 {}.5\n1 0 {}.7 {}.9\n", i, i, i, i));
    }
    std::fs::write(&path, text).unwrap();
    let o = run(&["sync", &s(&path)]);
    let err = said(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("3998 traces could not be related") && err.contains("and 3990 more"),
        "{err}"
    );
}

#[test]
fn bad_tokens_and_lines_are_shown_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.txt");
    let token = "7".repeat(10 << 20);
    std::fs::write(&path, format!("2\n0 1 1.0{token}x 2.0\n")).unwrap();
    let o = run(&["sync", &s(&path)]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.len() < 1000 && err.contains('…'),
        "{}",
        &err[..err.len().min(2000)]
    );
    // A "line" that never ends is refused, not buffered whole.
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"2\n0 1 ").unwrap();
    let chunk = vec![b'9'; 1 << 20];
    for _ in 0..20 {
        f.write_all(&chunk).unwrap();
    }
    drop(f);
    let o = run(&["sync", &s(&path)]);
    assert!(stderr(&o).contains("longer than 16 MiB"), "{}", stderr(&o));
}

#[test]
fn nothing_synchronized_is_said_and_seen_in_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let traces = two_traces(dir.path());
    // A single input.
    let o = run(&["sync", &s(&traces[0])]);
    assert_eq!(o.status.code(), Some(3));
    assert!(said(&o).contains("only one trace"), "{}", said(&o));
    // The same recording twice (a copy under another name).
    let copy = dir.path().join("copy.tsync");
    std::fs::copy(&traces[0], &copy).unwrap();
    let o = run(&["sync", &s(&traces[0]), &s(&copy)]);
    assert_eq!(o.status.code(), Some(3));
    assert!(said(&o).contains("same recording"), "{}", said(&o));
    // Two traces that synchronize: 0.
    let o = run(&["sync", &s(&traces[0]), &s(&traces[1])]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // --strict: an approximate pair (LTTV case 6) is an error for scripts, 0 without it.
    assert_eq!(run(&["sync", &lttv("test6.txt")]).status.code(), Some(0));
    let o = run(&["sync", "--strict", &lttv("test6.txt")]);
    assert_eq!(o.status.code(), Some(3));
    assert!(said(&o).contains("approximate"), "{}", said(&o));
    assert_eq!(
        run(&["eval", "--strict", &lttv("test1.txt")]).status.code(),
        Some(0)
    );
}

#[test]
fn options_that_would_do_nothing_are_refused() {
    let t = lttv("test1.txt");
    for (args, needs) in [
        (vec!["sync", "--filter", "1.64", &t], "--algorithm linreg"),
        (vec!["sync", "--plot-format", "png", &t], "--plot"),
        (vec!["eval", "--gamma", "0.5", &t], "--clc"),
        (vec!["eval", "--rho", "0", "--delta-ns", "5", &t], "--clc"),
        (
            vec!["export", "--format", "csv", "-o", "-", "--gamma", "0.5", &t],
            "--clc",
        ),
        (
            vec![
                "export",
                "--format",
                "csv",
                "-o",
                "-",
                "--l-min-ns",
                "5",
                &t,
            ],
            "--clc",
        ),
        (
            vec!["export", "--format", "csv", "-o", "-", "--no-comments", &t],
            "pcapng",
        ),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needs), "{args:?}: {}", stderr(&o));
    }
    // With what they need, they run.
    let dir = tempfile::tempdir().unwrap();
    let traces = two_traces(dir.path());
    let (a, b) = (s(&traces[0]), s(&traces[1]));
    let o = run(&["sync", "--algorithm", "linreg", "--filter", "1.64", &a, &b]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["eval", "--clc", "--gamma", "0.5", &t]);
    assert!(o.status.success(), "{}", stderr(&o));
}
