//! Correcting spans from themselves: tsync against Jaeger's clock-skew adjuster, side by side on
//! the same spans. Not a speed benchmark: the accuracy of two corrections against the truth.
//!
//! The spans are OpenTelemetry's own Python SDK's (`tests/otel_services.py`: three HTTP
//! services on loopback ports, real calls, one shared clock), each node's then put on a clock of
//! its own by a known affine map (`tests/sdk_spans`), so every span's true start is known. Two
//! corrections of the same skewed spans onto node0's clock:
//!
//! - tsync: `tsync-analyze apply --format otlp` of the spans from themselves (this build's
//!   binary, release);
//! - "Jaeger rule": a reimplementation of Jaeger's clock-skew adjuster's published rule
//!   (`clockskew.go`), not Jaeger itself (`tests/sdk_spans/jaeger.rs`), with no limit on the
//!   delta.
//!
//! Per node: the worst and median |corrected start − true start|, and how many cross-host
//! children start before their parents after each. The table goes to stdout and to `--out`.
//!
//! `cargo bench -p tsync-analyze --bench spans_adjuster -- [--calls N] [--out FILE]`, or
//! `cargo xtask bench spans-adjuster`. Needs `target/otel-venv` (`cargo xtask setup`).

#[path = "../tests/sdk_spans/mod.rs"]
mod sdk_spans;

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut calls = 1000usize;
    let mut out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => {
                calls = args.next().and_then(|v| v.parse().ok()).expect("--calls N");
            }
            "--out" => out = Some(args.next().expect("--out FILE").into()),
            // What `cargo bench` passes to every bench, and filters: nothing to do here.
            _ => {}
        }
    }

    let began = Instant::now();
    let rec = sdk_spans::recording(calls);
    let recorded = began.elapsed();
    let skewed = sdk_spans::figures(&rec.truth, &sdk_spans::starts(&rec.spans));
    let (tsync_starts, said) = sdk_spans::tsync_starts(&rec, &rec.dir.path().join("tsync.jsonl"));
    let tsync = sdk_spans::figures(&rec.truth, &tsync_starts);
    let jaeger = sdk_spans::figures(&rec.truth, &sdk_spans::jaeger_starts(&rec));
    let pairs: usize = tsync.iter().map(|f| f.cross).sum();

    let goal = tsync
        .iter()
        .zip(&jaeger)
        .all(|(t, j)| 2 * t.worst_ns <= j.worst_ns && t.before_parent == 0);
    let report = format!(
        "## Spans corrected from themselves: tsync and Jaeger's adjuster's rule \
         (`cargo xtask bench spans-adjuster`)\n\n\
         OpenTelemetry's Python SDK, {calls} calls between three HTTP services on loopback \
         ({} spans, {pairs} cross-host children, recorded in {:.1} s), each node's spans put on \
         a clock of its own by a known map; node0's clock is the truth's. Both corrections put \
         the same skewed spans on node0's clock: tsync by `apply --format otlp` from the spans \
         alone; \"Jaeger rule\" by a reimplementation of Jaeger's clock-skew adjuster's \
         published rule (`clockskew.go`), not Jaeger itself, per trace, with no limit on the \
         delta. Errors are |corrected start − true start| over every span of the node.\n\n\
         {}\n\
         Goal (tsync's worst error at most half the Jaeger rule's on every node, no child before \
         its parent after tsync): {}.\n",
        rec.truth.len(),
        recorded.as_secs_f64(),
        sdk_spans::table(&skewed, &tsync, &jaeger),
        if goal { "met" } else { "NOT met" },
    );
    println!("{report}");
    eprintln!(
        "{}",
        said.lines()
            .filter(|l| l.contains("cross-node order"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    if let Some(path) = out {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the report's folder");
        }
        std::fs::write(&path, &report).expect("write the report");
        eprintln!("spans-adjuster: written to {}", path.display());
    }
}
