//! `tsync-analyze apply --format ctf` on real LTTng traces, read back with babeltrace2 (the
//! issue's measured commands): a Python program logs through LTTng-UST into two sessions, one
//! per "node"; each trace gets its node's map; babeltrace2 must show every event at its mapped
//! time, and the two applied traces merged in the corrected order.
//!
//! Needs Debian's `lttng-tools`, `babeltrace2`, `python3-lttngust` and `liblttng-ust1`
//! (`cargo xtask setup` installs them) and is `#[ignore]`d with the other tests that need the
//! machine set up; `cargo xtask test` runs it (`cargo test -p tsync-lab -- --ignored`). It starts
//! its own session daemon (`lttng-sessiond --no-kernel`, no kernel modules) with a private
//! `LTTNG_HOME`, as `nobody` when run as root, so that it neither uses nor disturbs a daemon of
//! the machine; sessions get unique names, and the daemon is stopped and the sessions destroyed
//! even when the test fails.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use tsync_lab::unique_name;

/// The Python interpreter the Debian package `python3-lttngust` installs into.
const PYTHON: &str = "/usr/bin/python3";

fn need(tool: &str) {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "`{tool}` is missing: this test needs lttng-tools, babeltrace2, python3-lttngust and \
         liblttng-ust1 (run `cargo xtask setup` as root, or apt-get install them)"
    );
}

/// The workspace's `tsync-analyze`, built now (release when this test is).
fn analyzer() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
            let mut cargo =
                Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
            cargo
                .current_dir(workspace)
                .args([
                    "build",
                    "-p",
                    "tsync-analyze",
                    "--message-format=json-render-diagnostics",
                ])
                .stderr(Stdio::inherit());
            if !cfg!(debug_assertions) {
                cargo.arg("--release");
            }
            let out = cargo.output().expect("run cargo");
            assert!(out.status.success(), "cargo build -p tsync-analyze failed");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["target"]["name"] == "tsync-analyze")
                .find_map(|v| v["executable"].as_str().map(PathBuf::from))
                .expect("cargo built a tsync-analyze executable")
        })
        .clone()
}

/// Runs LTTng's commands as one user with a private LTTng home; stops its daemon and destroys its
/// sessions when dropped.
struct Lttng {
    home: PathBuf,
    /// Drop to `nobody` (when run as root).
    unprivileged: bool,
    daemon: Option<Child>,
    sessions: Vec<String>,
}

impl Lttng {
    fn command(&self, program: &str) -> Command {
        let mut c = if self.unprivileged {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                program,
            ]);
            c
        } else {
            Command::new(program)
        };
        c.env("LTTNG_HOME", &self.home).env("HOME", &self.home);
        c
    }

    fn run(&self, args: &[&str]) -> String {
        let out = self
            .command("lttng")
            .args(args)
            .output()
            .expect("run lttng");
        assert!(
            out.status.success(),
            "lttng {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a session daemon (userspace only) and waits until it answers.
    fn start(home: &Path) -> Lttng {
        let unprivileged = tsync_lab::is_root();
        if unprivileged {
            let ok = Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(home)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "cannot hand {} to nobody", home.display());
        }
        let mut l = Lttng {
            home: home.to_path_buf(),
            unprivileged,
            daemon: None,
            sessions: Vec::new(),
        };
        let daemon = l
            .command("lttng-sessiond")
            .arg("--no-kernel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lttng-sessiond");
        l.daemon = Some(daemon);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = home.join(".lttng/agent.port").exists()
                && l.command("lttng")
                    .arg("list")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
            if ready {
                return l;
            }
            if let Some(status) = l.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("lttng-sessiond exited at once: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "lttng-sessiond did not answer in 20 s"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// A session recording the Python logger `logger` into `dir`.
    fn session(&mut self, logger: &str, dir: &Path) -> String {
        let name = unique_name("tsync-apply-");
        self.run(&["create", &name, "--output", dir.to_str().unwrap()]);
        self.sessions.push(name.clone());
        self.run(&["enable-event", "--python", logger, "--session", &name]);
        self.run(&["start", &name]);
        name
    }
}

impl Drop for Lttng {
    fn drop(&mut self) {
        for s in std::mem::take(&mut self.sessions) {
            let _ = self
                .command("lttng")
                .args(["destroy", &s])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if let Some(mut d) = self.daemon.take() {
            // SIGTERM lets the daemon stop its consumer daemons; SIGKILL if it hangs.
            unsafe { libc::kill(d.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while d.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Events as babeltrace2 prints them: (message, time). `--clock-seconds` gives
/// `[SECONDS.NANOSECONDS]`, `--clock-cycles` the raw clock value `[CYCLES]`.
fn babeltrace(args: &[&Path], cycles: bool) -> Vec<(String, i128)> {
    let mut cmd = Command::new("babeltrace2");
    cmd.arg(if cycles {
        "--clock-cycles"
    } else {
        "--clock-seconds"
    });
    cmd.args(args);
    let out = cmd.output().expect("run babeltrace2");
    assert!(
        out.status.success(),
        "babeltrace2 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let stamp = &l[1..l.find(']').expect("a bracketed time")];
            let t = match stamp.split_once('.') {
                Some((s, ns)) => {
                    s.parse::<i128>().unwrap() * 1_000_000_000 + ns.parse::<i128>().unwrap()
                }
                None => stamp.parse::<i128>().unwrap(),
            };
            let msg = l
                .split("msg = \"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .expect("a Python event's msg");
            (msg.to_string(), t)
        })
        .collect()
}

#[test]
#[ignore = "needs lttng-tools, babeltrace2, python3-lttngust: cargo xtask test runs it"]
fn applied_ctf_traces_read_back_at_the_mapped_times_and_merge_in_corrected_order() {
    for tool in ["lttng", "babeltrace2"] {
        need(tool);
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut lttng = Lttng::start(&home);
    let (trace_a, trace_b) = (home.join("node-a"), home.join("node-b"));
    let (logger_a, logger_b) = (unique_name("tsync_a"), unique_name("tsync_b"));
    lttng.session(&logger_a, &trace_a);
    lttng.session(&logger_b, &trace_b);
    // Node a logs, 2 ms later node b, 2 ms later node a again, …: a0 b0 a1 b1 … in truth.
    let program = home.join("app.py");
    std::fs::write(
        &program,
        format!(
            "import lttngust, logging, time\n\
             a, b = logging.getLogger('{logger_a}'), logging.getLogger('{logger_b}')\n\
             a.setLevel(logging.DEBUG); b.setLevel(logging.DEBUG)\n\
             for i in range(60):\n\
             \x20   a.info('a %d', i); time.sleep(0.002)\n\
             \x20   b.info('b %d', i); time.sleep(0.002)\n"
        ),
    )
    .unwrap();
    let ran = lttng
        .command(PYTHON)
        .arg(&program)
        .output()
        .expect("run python3");
    assert!(
        ran.status.success(),
        "the Python program failed (is python3-lttngust installed?): {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    for s in lttng.sessions.clone() {
        lttng.run(&["stop", &s]);
    }
    let recorded_a = babeltrace(&[&trace_a], true);
    let recorded_b = babeltrace(&[&trace_b], true);
    assert_eq!(
        (recorded_a.len(), recorded_b.len()),
        (60, 60),
        "every event recorded"
    );
    drop(lttng);

    // Synchronization inputs around the recording: node 1's clock runs 20 ppm fast and, at the
    // recording, 10 ms ahead of node 0's (a text message file; its traces are named 0 and 1).
    let first = recorded_a[0].1 as f64 / 1e9;
    let f = |t: f64| first + (t - first) * (1.0 + 20e-6) + 0.010;
    let mut text = String::from("2\n");
    for i in 0..4000 {
        let t = first - 20.0 + i as f64 * 0.01;
        let d = 60e-6 + (i % 5) as f64 * 4e-6;
        text.push_str(&format!(
            "0 1 {t:.9} {:.9}\n1 0 {:.9} {:.9}\n",
            f(t + d),
            f(t + 0.005),
            t + 0.005 + d
        ));
    }
    let messages = dir.path().join("messages.txt");
    std::fs::write(&messages, text).unwrap();
    let sync = Command::new(analyzer())
        .args(["sync", "--json", "--reference", "0"])
        .arg(&messages)
        .output()
        .unwrap();
    assert!(
        sync.status.success(),
        "{}",
        String::from_utf8_lossy(&sync.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&sync.stdout).unwrap();
    let piece = &doc["traces"][1]["segments"][0];
    let (drift, offset) = (
        piece["drift"].as_f64().unwrap(),
        piece["offset_ns"].as_f64().unwrap(),
    );
    assert_eq!(doc["traces"][1]["segments"].as_array().unwrap().len(), 1);

    let apply = |node: &str, trace: &Path, out: &Path| {
        let o = Command::new(analyzer())
            .arg("apply")
            .arg(&messages)
            .args([
                "--reference",
                "0",
                "--node",
                node,
                "--format",
                "ctf",
                "--events",
            ])
            .arg(trace)
            .arg("-o")
            .arg(out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (applied_a, applied_b) = (dir.path().join("a.ctf"), dir.path().join("b.ctf"));
    apply("0", &trace_a, &applied_a);
    apply("1", &trace_b, &applied_b);

    // Every event at its mapped time: what babeltrace2 shows moved by exactly map(v) − v (the
    // reference is a text input, so each trace keeps its own epoch offset).
    for (original, applied, map) in [
        (&trace_a, &applied_a, (1.0, 0.0)),
        (&trace_b, &applied_b, (drift, offset)),
    ] {
        let cycles: HashMap<String, i128> = babeltrace(&[original], true).into_iter().collect();
        let before: HashMap<String, i128> = babeltrace(&[original], false).into_iter().collect();
        let after = babeltrace(&[applied], false);
        assert_eq!(after.len(), 60);
        for (msg, shown) in after {
            let v = cycles[&msg] as f64;
            let moved = (shown - before[&msg]) as f64;
            let want = map.0 * v + map.1 - v;
            assert!(
                (moved - want).abs() <= 3.0,
                "{msg}: moved by {moved} ns, the map says {want} ns"
            );
        }
    }
    // Merged: in truth a0 b0 a1 b1 …, 2 ms apart; node 1's map moves b's events 10 ms
    // earlier, so babeltrace2's merge of the applied traces must follow the mapped times, an
    // order that differs from the recorded one.
    let mapped = |events: &[(String, i128)], (d, o): (f64, f64)| {
        events
            .iter()
            .map(|(m, v)| (m.clone(), d * *v as f64 + o))
            .collect::<Vec<_>>()
    };
    let mut expected = mapped(&recorded_a, (1.0, 0.0));
    expected.extend(mapped(&recorded_b, (drift, offset)));
    expected.sort_by(|x, y| x.1.total_cmp(&y.1));
    let expected: Vec<String> = expected.into_iter().map(|e| e.0).collect();
    let raw: Vec<String> = babeltrace(&[&trace_a, &trace_b], false)
        .into_iter()
        .map(|e| e.0)
        .collect();
    let merged = babeltrace(&[&applied_a, &applied_b], false);
    let order: Vec<String> = merged.iter().map(|e| e.0.clone()).collect();
    assert_eq!(raw[..2], ["a 0", "b 0"], "as recorded");
    assert_eq!(order, expected, "merged in the corrected order");
    assert_ne!(order, raw, "the map changed the order");
    assert!(merged.windows(2).all(|w| w[0].1 <= w[1].1));
}
