//! `cargo xtask bench spans`: span reading, the criterion benchmark
//! `tsync-analyze/benches/spans.rs` (OTLP/JSON and OTLP protobuf, `sync`'s first pass alone and
//! both passes), its figures put into `target/bench/spans.md` as spans per second.

use anyhow::{Context, Result};

use crate::util::{cargo, run, target_dir, workspace_root};

#[derive(clap::Args)]
pub struct Args {
    /// A short run: criterion's `--quick`, on 20,000 spans unless `--spans` says otherwise.
    #[arg(long)]
    quick: bool,
    /// Spans in the generated files (100,000 by default).
    #[arg(long)]
    spans: Option<u64>,
}

/// The benchmark's functions, as criterion names them, and what each measures.
const FUNCTIONS: [(&str, &str); 4] = [
    (
        "json_scan",
        "OTLP/JSON, first pass (reading: nodes and epoch)",
    ),
    (
        "json_read_join",
        "OTLP/JSON, both passes (reading, then reading + join)",
    ),
    ("proto_scan", "OTLP protobuf, first pass"),
    ("proto_read_join", "OTLP protobuf, both passes"),
];

impl Args {
    pub fn run(self) -> Result<()> {
        let spans = self
            .spans
            .unwrap_or(if self.quick { 20_000 } else { 100_000 });
        let mut cmd = cargo();
        cmd.args(["bench", "-p", "tsync-analyze", "--bench", "spans", "--"])
            .env("TSYNC_BENCH_SPANS", spans.to_string());
        if self.quick {
            cmd.arg("--quick");
        }
        run(&mut cmd).context("the span reading benchmark failed")?;
        let mut table = format!(
            "## Reading span files (`cargo xtask bench spans`)\n\n\
             {spans} spans shaped like OpenTelemetry's Python SDK's (3 services on 3 hosts, \
             client/server pairs), one core; spans/s counts each span once, whatever the passes.\n\n\
             | what | time (ms) | spans/s |\n|---|---:|---:|\n"
        );
        for (id, what) in FUNCTIONS {
            let dir = target_dir().join("criterion/spans").join(id).join("new");
            let read = |name: &str| -> Result<serde_json::Value> {
                let path = dir.join(name);
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                Ok(serde_json::from_str(&text)?)
            };
            let ns = read("estimates.json")?["median"]["point_estimate"]
                .as_f64()
                .context("no median in criterion's estimates")?;
            let elements = read("benchmark.json")?["throughput"]["Elements"]
                .as_f64()
                .unwrap_or(spans as f64);
            table.push_str(&format!(
                "| {what} | {:.1} | {:.0} |\n",
                ns / 1e6,
                elements / (ns / 1e9)
            ));
        }
        let path = workspace_root().join("target/bench/spans.md");
        std::fs::create_dir_all(path.parent().expect("a folder"))?;
        std::fs::write(&path, &table)
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("{table}");
        eprintln!("bench: span reading written to {}", path.display());
        Ok(())
    }
}
