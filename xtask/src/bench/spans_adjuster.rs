//! `cargo xtask bench spans-adjuster`: spans corrected from themselves, tsync against a
//! reimplementation of Jaeger's clock-skew adjuster's published rule, on the same real
//! OpenTelemetry SDK spans, against the truth (`tsync-analyze/benches/spans_adjuster.rs`).

use anyhow::{Result, bail};

use crate::util::{cargo, run, target_dir};

#[derive(clap::Args)]
pub struct Args {
    /// Root calls between the three instrumented services (9 spans each).
    #[arg(long, default_value_t = 1000)]
    calls: usize,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let python = target_dir().join("otel-venv/bin/python");
        if !python.exists() {
            bail!(
                "{} is missing: `cargo xtask setup` installs OpenTelemetry's Python SDK there",
                python.display()
            );
        }
        let out = target_dir().join("bench/spans-adjuster.md");
        let mut cmd = cargo();
        cmd.args([
            "bench",
            "-p",
            "tsync-analyze",
            "--bench",
            "spans_adjuster",
            "--",
            "--calls",
            &self.calls.to_string(),
            "--out",
        ])
        .arg(&out);
        run(&mut cmd)
    }
}
