//! tsync's BPF programs as the kernel lists them (`bpftool prog show --json`).
use std::{
    collections::BTreeSet,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use tsync_common::names::PROGRAMS;

/// A loaded program's identity and, when `kernel.bpf_stats_enabled` is on, its statistics.
pub struct Program {
    pub id: u32,
    pub name: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// Loaded tracing programs named like tsync's hooks (every agent's, also other processes').
pub fn programs() -> Result<Vec<Program>> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .context("cannot run bpftool (cargo xtask setup installs it)")?;
    if !out.status.success() {
        bail!(
            "bpftool prog show failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("bpftool printed no JSON")?;
    Ok(v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|p| p["type"] == "tracing")
        .filter_map(|p| {
            let name = p["name"].as_str().filter(|n| PROGRAMS.contains(n))?;
            Some(Program {
                id: u32::try_from(p["id"].as_u64()?).ok()?,
                name: name.to_owned(),
                run_time_ns: p["run_time_ns"].as_u64().unwrap_or(0),
                run_cnt: p["run_cnt"].as_u64().unwrap_or(0),
            })
        })
        .collect())
}

/// Ids of the loaded programs named like tsync's.
pub fn program_ids() -> Result<BTreeSet<u32>> {
    Ok(programs()?.into_iter().map(|p| p.id).collect())
}

/// Waits (up to 10 s) until none of `ids` is loaded and returns those still loaded: the kernel
/// frees programs asynchronously (RCU, workqueue) after their last reference goes, so they may
/// linger a moment after the agent's exit.
pub fn wait_unloaded(ids: &BTreeSet<u32>) -> Result<BTreeSet<u32>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: BTreeSet<u32> = program_ids()?.intersection(ids).copied().collect();
        if left.is_empty() || Instant::now() > deadline {
            return Ok(left);
        }
        thread::sleep(Duration::from_millis(50));
    }
}
