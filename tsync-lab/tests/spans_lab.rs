//! Spans plus agent traces of the same nodes on the namespace lab (issue 34): three network
//! namespaces on a bridge, one `tsync-agent` per namespace with a known `--clock-skew` (node0
//! none), and OpenTelemetry's own Python SDK services (`tsync-analyze/tests/otel_services.py
//! serve`), one per namespace, making real HTTP calls to each other across the bridge (node0 →
//! node1 → node2, node0 → node2 → node0), their spans stamped with the shared CLOCK_REALTIME.
//! `tsync-analyze sync` must join every span node (`host.name` = the agent's `--node`) to its
//! agent's trace, and `apply --format otlp` must put every span time back within 1 µs of the
//! truth, every interval holding it, with no cross-host child before its parent.
//!
//! The truth: the namespaces share one clock and the spans were stamped with the true realtime,
//! and the reference node0 has no skew, so the truth of a corrected span time is its original
//! time; what is checked is the path realtime → the node's skewed monotonic (through its agent's
//! samples) → the map from the packets and spans → node0's monotonic → realtime. The map's own
//! intervals (`sync --json`) are checked against the skews: node k's recorded clock reads
//! `t + OFFSET + t·PPM·1e-6` when node0's reads `t`.
//!
//! Root only, `#[ignore]`d like the other real-kernel tests; `cargo xtask test` runs it (`cargo
//! test -p tsync-lab -- --ignored`). Needs the venv `target/otel-venv` that `cargo xtask setup`
//! makes.
use std::{
    collections::HashMap,
    fs,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tsync_lab::{Agent, Bridge, record_command, unique_name};

/// Root calls driven into node0's `/root`; each makes 9 spans, 4 of them cross-host children.
const CALLS: usize = 300;
const SPANS_PER_CALL: usize = 9;
/// Cross-host calls per root call: each gives a request and a response message.
const CROSS_PER_CALL: usize = 4;
/// Every service's port, on its namespace's bridge address.
const PORT: u16 = 8080;
/// Each node's `--clock-skew` (offset ns, drift ppm); node0 (the reference) none.
const SKEWS: [(i64, f64); 3] = [(0, 0.0), (25_000_000, 30.0), (-40_000_000, -50.0)];
/// How long a step may take on a loaded machine before the test gives up.
const PATIENCE: Duration = Duration::from_secs(120);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tsync-lab is inside the workspace")
        .to_path_buf()
}

/// The venv `cargo xtask setup` makes (`$CARGO_TARGET_DIR` or the workspace's `target/`).
fn venv_python() -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace().join("target"), Into::into);
    let python = target.join("otel-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: `cargo xtask setup` installs OpenTelemetry's Python SDK there",
        python.display()
    );
    python
}

/// The workspace's `tsync-analyze`, built now (release when this test is).
fn analyzer() -> PathBuf {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(workspace())
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
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"]["name"] == "tsync-analyze")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .expect("cargo built a tsync-analyze executable")
}

fn run(bin: &Path, args: &[String]) -> Output {
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("run tsync-analyze");
    assert!(
        out.status.success(),
        "tsync-analyze {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// One service process (`ip netns exec NS python otel_services.py serve …`); killed on drop if
/// it was not stopped.
struct Service {
    child: Option<Child>,
    log: PathBuf,
}

impl Service {
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails with its log if it has exited.
    fn check_running(&mut self) {
        let child = self.child.as_mut().unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            panic!("service exited early ({status}):\n{}", self.log());
        }
    }

    /// SIGTERM (the script flushes its spans and exits 0), waited for.
    fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on the pid of a child we own and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("service did not exit after SIGTERM:\n{}", self.log());
            }
            thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "service: {status}\n{}", self.log());
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One span as a file holds it.
struct Span {
    node: usize,
    parent: Option<String>,
    start: i64,
    end: i64,
    /// `tsync.{start,end}.{lo,hi}_unix_nano`, where `apply` wrote them.
    start_interval: Option<(i64, i64)>,
    end_interval: Option<(i64, i64)>,
}

fn int_attribute(span: &Value, key: &str) -> Option<i64> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| {
            let v = &a["value"]["intValue"];
            v.as_str().map_or_else(|| v.as_i64(), |t| t.parse().ok())
        })
}

fn interval(span: &Value, which: &str) -> Option<(i64, i64)> {
    Some((
        int_attribute(span, &format!("tsync.{which}.lo_unix_nano"))?,
        int_attribute(span, &format!("tsync.{which}.hi_unix_nano"))?,
    ))
}

/// Every span of an OTLP/JSON file by id (a line not yet complete while it is being written is
/// skipped).
fn read_spans(path: &Path) -> HashMap<String, Span> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let mut spans = HashMap::new();
    for doc in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        for rs in doc["resourceSpans"].as_array().into_iter().flatten() {
            let host = rs["resource"]["attributes"]
                .as_array()
                .and_then(|attrs| attrs.iter().find(|a| a["key"] == "host.name"))
                .and_then(|a| a["value"]["stringValue"].as_str())
                .expect("host.name");
            let node: usize = host.strip_prefix("node").unwrap().parse().unwrap();
            for scope in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in scope["spans"].as_array().into_iter().flatten() {
                    let time = |field: &str| sp[field].as_str().unwrap().parse::<i64>().unwrap();
                    spans.insert(
                        sp["spanId"].as_str().unwrap().to_string(),
                        Span {
                            node,
                            parent: sp["parentSpanId"]
                                .as_str()
                                .filter(|p| !p.is_empty())
                                .map(str::to_string),
                            start: time("startTimeUnixNano"),
                            end: time("endTimeUnixNano"),
                            start_interval: interval(sp, "start"),
                            end_interval: interval(sp, "end"),
                        },
                    );
                }
            }
        }
    }
    spans
}

/// One HTTP/1.1 GET of `path` at `to`, from the calling thread's namespace; the status line.
fn get(to: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&to, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response.lines().next().unwrap_or_default().to_string())
}

/// Node k's true clock: its recorded time `local` back on node0's (the inverse of the agent's
/// `--clock-skew`, to well under a nanosecond).
fn truth_on_reference(k: usize, local: f64) -> f64 {
    let (offset, ppm) = SKEWS[k];
    (local - offset as f64) / (1.0 + ppm * 1e-6)
}

#[test]
#[ignore = "needs root: cargo xtask test runs it"]
fn spans_of_agent_nodes_on_the_namespace_lab_land_within_a_microsecond() {
    assert!(
        tsync_lab::is_root(),
        "this test needs root (network namespaces, eBPF); run it as root, as CI does"
    );
    let python = venv_python();
    let script = workspace().join("tsync-analyze/tests/otel_services.py");
    let agent_bin = tsync_lab::agent_binary().expect("cannot build tsync-agent");
    let analyzer = analyzer();
    let lab = Bridge::create(&unique_name("sl"), 3).unwrap();
    let nodes = lab.nodes();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let names: Vec<String> = (0..3).map(|k| format!("node{k}")).collect();

    // One agent per namespace, its node named as the spans' host.name, with its skew.
    let traces: Vec<PathBuf> = names
        .iter()
        .map(|n| out.join(format!("{n}.tsync")))
        .collect();
    let mut agents = Vec::new();
    for k in 0..3 {
        let mut cmd = record_command(&agent_bin, Some(&nodes[k]), &traces[k]);
        cmd.args(["--node", &names[k]]);
        let (offset, ppm) = SKEWS[k];
        if k > 0 {
            cmd.arg(format!("--clock-skew={offset},{ppm}"));
        }
        let log = out.join(format!("agent-{k}.log"));
        agents.push(Agent::start_logged(cmd, &log).expect("agent did not start"));
    }

    // One service per namespace, on its bridge address, all appending to one span file.
    let spans_path = out.join("spans.jsonl");
    let addresses: Vec<SocketAddr> = (0..3)
        .map(|k| format!("{}:{PORT}", Bridge::address(k)).parse().unwrap())
        .collect();
    let addresses_json = serde_json::to_string(
        &names
            .iter()
            .zip(&addresses)
            .map(|(n, a)| (n.clone(), a.to_string()))
            .collect::<HashMap<_, _>>(),
    )
    .unwrap();
    let mut services: Vec<Service> = (0..3)
        .map(|k| {
            let log = out.join(format!("service-{k}.log"));
            let file = fs::File::create(&log).unwrap();
            let mut cmd = nodes[k].command(&python);
            cmd.arg(&script)
                .args(["serve", &names[k], &addresses_json])
                .arg(&spans_path)
                .stdin(Stdio::null())
                .stdout(file.try_clone().unwrap())
                .stderr(file);
            // The calls go to the bridge's addresses, never through a proxy of the machine.
            for var in [
                "http_proxy",
                "HTTP_PROXY",
                "https_proxy",
                "HTTPS_PROXY",
                "all_proxy",
                "ALL_PROXY",
            ] {
                cmd.env_remove(var);
            }
            Service {
                child: Some(cmd.spawn().expect("start otel_services.py")),
                log,
            }
        })
        .collect();

    // Ready when node0 can connect to every service.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let to = addresses.clone();
        let ready = nodes[0].run_in(move || {
            to.iter()
                .all(|a| TcpStream::connect_timeout(a, Duration::from_secs(1)).is_ok())
        });
        if ready {
            break;
        }
        for service in &mut services {
            service.check_running();
        }
        assert!(
            Instant::now() < deadline,
            "the services did not listen within {PATIENCE:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }

    // The driver (not traced) calls node0's /root from node0's namespace.
    let root = addresses[0];
    let failures: Vec<String> = nodes[0].run_in(move || {
        (0..CALLS)
            .filter_map(|i| match get(root, "/root") {
                Ok(status) if status.contains(" 200 ") => None,
                other => Some(format!("call {i}: {other:?}")),
            })
            .collect()
    });
    assert!(failures.is_empty(), "{failures:?}");

    // Every span exported (the batch processor writes every 200 ms; a server span may end just
    // after its response went out), then the services stopped, then the agents.
    let want = CALLS * SPANS_PER_CALL;
    let deadline = Instant::now() + PATIENCE;
    while read_spans(&spans_path).len() < want {
        for service in &mut services {
            service.check_running();
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {want} spans written within {PATIENCE:?}",
            read_spans(&spans_path).len()
        );
        thread::sleep(Duration::from_millis(200));
    }
    for service in services {
        service.stop();
    }
    for agent in agents {
        let stopped = agent.stop_cleanly().unwrap();
        eprintln!("{}", stopped.stdout.lines().next().unwrap_or_default());
    }
    let original = read_spans(&spans_path);
    assert_eq!(original.len(), want);

    // sync: three traces (not six), every pair accurate with messages from packets and spans.
    let mut inputs: Vec<String> = traces.iter().map(|p| s(p)).collect();
    inputs.push(s(&spans_path));
    let reference = ["--reference".to_string(), "node0".to_string()];
    let mut args = vec!["sync".to_string(), "--json".to_string()];
    args.extend(inputs.iter().cloned());
    args.extend(reference.iter().cloned());
    let doc: Value = serde_json::from_slice(&run(&analyzer, &args).stdout).unwrap();
    fs::write(out.join("sync.json"), doc.to_string()).unwrap();
    let trace_names: Vec<&str> = doc["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        trace_names,
        ["node0", "node1", "node2"],
        "one trace per node"
    );
    let warnings = doc["warnings"].to_string();
    assert!(
        warnings.contains("have agent traces of their own"),
        "{warnings}"
    );
    let mut from_spans = 0;
    for p in doc["pairs"].as_array().unwrap() {
        assert_eq!(p["quality"], "accurate", "{p}");
        let f = &p["from_spans"];
        let (ab, ba) = (
            f["messages_ab"].as_u64().unwrap_or(0),
            f["messages_ba"].as_u64().unwrap_or(0),
        );
        assert!(ab > 0 && ba > 0, "every pair has calls both ways: {p}");
        assert!(
            p["messages_ab"].as_u64().unwrap() > ab && p["messages_ba"].as_u64().unwrap() > ba,
            "packets too: {p}"
        );
        eprintln!(
            "pair node{}–node{}: {} + {} messages, {} + {} from spans, accuracy {} ns",
            p["a"], p["b"], p["messages_ab"], p["messages_ba"], ab, ba, p["accuracy_ns"]["worst"]
        );
        from_spans += ab + ba;
    }
    // Every cross-host call gives a request and a response message; none was dropped.
    assert_eq!(
        from_spans as usize,
        2 * CROSS_PER_CALL * CALLS,
        "{warnings}"
    );
    // The text report says where the messages came from.
    let mut args = vec!["sync".to_string()];
    args.extend(inputs.iter().cloned());
    args.extend(reference.iter().cloned());
    let report = String::from_utf8_lossy(&run(&analyzer, &args).stdout).into_owned();
    assert!(
        report.contains("from packets,") && report.contains("from spans)"),
        "{report}"
    );

    // The maps' intervals hold the truth of the skews.
    for (k, trace) in doc["traces"].as_array().unwrap().iter().enumerate().skip(1) {
        let points: Vec<&Value> = std::iter::once(&trace["interval"])
            .chain(trace["intervals"].as_array().into_iter().flatten())
            .collect();
        assert!(
            points.len() > 1 && points[0].is_object(),
            "node{k} has intervals: {trace}"
        );
        for at in points {
            let truth = truth_on_reference(k, at["at_ns"].as_i64().unwrap() as f64);
            let (lo, hi) = (at["lo_ns"].as_f64().unwrap(), at["hi_ns"].as_f64().unwrap());
            assert!(
                lo - 1.0 <= truth && truth <= hi + 1.0,
                "node{k}: truth {truth} outside [{lo}, {hi}]"
            );
        }
        eprintln!(
            "node{k}: map interval {:.0} ns wide at the middle, truth inside at all {} points",
            trace["interval"]["width_ns"].as_f64().unwrap(),
            1 + trace["intervals"].as_array().map_or(0, Vec::len)
        );
    }

    // apply: every span time back within 1 µs of the truth, each interval holding it.
    let synced = out.join("spans.synced.jsonl");
    let mut args = vec!["apply".to_string()];
    args.extend(inputs.iter().cloned());
    args.extend(reference.iter().cloned());
    args.extend(
        [
            "--format",
            "otlp",
            "--events",
            &s(&spans_path),
            "-o",
            &s(&synced),
        ]
        .map(String::from),
    );
    let applied = run(&analyzer, &args);
    eprintln!("{}", String::from_utf8_lossy(&applied.stderr).trim_end());
    let corrected = read_spans(&synced);
    assert_eq!(corrected.len(), want);
    let mut worst = [0i64; 3];
    let mut widest = [0i64; 3];
    let mut missed = Vec::new();
    for (id, sp) in &corrected {
        let truth = &original[id];
        assert_eq!(sp.node, truth.node);
        for (which, got, want, interval) in [
            ("start", sp.start, truth.start, sp.start_interval),
            ("end", sp.end, truth.end, sp.end_interval),
        ] {
            worst[sp.node] = worst[sp.node].max((got - want).abs());
            widest[sp.node] = widest[sp.node].max(interval.map_or(0, |(lo, hi)| hi - lo));
            match interval {
                Some((lo, hi)) if lo <= want && want <= hi => {}
                other => missed.push(format!(
                    "node{} {id} {which}: {want} not in {other:?}",
                    sp.node
                )),
            }
        }
    }
    for (k, w) in worst.iter().enumerate() {
        eprintln!(
            "node{k}: worst span time error {:.3} µs, widest interval {:.3} µs ({} spans)",
            *w as f64 / 1e3,
            widest[k] as f64 / 1e3,
            corrected.values().filter(|sp| sp.node == k).count()
        );
    }
    assert!(
        missed.is_empty(),
        "{} of {} times without an interval holding the truth: {:?}",
        missed.len(),
        2 * want,
        &missed[..missed.len().min(5)]
    );
    for (k, w) in worst.iter().enumerate() {
        assert!(*w <= 1_000, "node{k}: a span time {w} ns off the truth");
    }

    // No cross-host child starts before its parent once corrected.
    let mut cross = 0;
    let mut before = Vec::new();
    for (id, sp) in &corrected {
        let Some(parent) = sp.parent.as_ref().and_then(|p| corrected.get(p)) else {
            continue;
        };
        if parent.node != sp.node {
            cross += 1;
            if sp.start < parent.start {
                before.push(id.clone());
            }
        }
    }
    assert_eq!(cross, CROSS_PER_CALL * CALLS);
    assert!(
        before.is_empty(),
        "{} cross-host children before their parents",
        before.len()
    );
    eprintln!("cross-host children: {cross}, before their parents after correction: 0");
}
