//! Arbitrary input through the whole `sync` command: one or two input files (trace files, text
//! message files, or one of each: the analyzer tells them apart by content), `InputSet::open`,
//! `tsync_analyze::sync` (matching across the files, hulls or regression, reduction) and both reports, as
//! `tsync-analyze sync [--json]` does. Errors are fine; a panic, an abort, an allocation past the
//! memory limit or a hang is a bug.
//!
//! Input layout: [`tsync_fuzz::SyncInput`] (options byte, split point, file A, file B). A file
//! that starts with `CHUNKS` is a chunk list, written as the trace file it describes
//! (`tsync_fuzz::build_trace`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tsync_analyze::output::report;
use tsync_analyze::{Algorithm, InputSet, MatchOptions, SyncOptions};
use tsync_fuzz::SyncInput;

fuzz_target!(|data: &[u8]| {
    let Some(input) = SyncInput::parse(data) else {
        return;
    };
    let file = |name: &str, bytes: &[u8]| {
        let rewritten = tsync_fuzz::build_trace(bytes).or_else(|| {
            input
                .repair
                .then(|| tsync_fuzz::repair_checksums(bytes))
                .flatten()
        });
        tsync_fuzz::scratch_file(name, rewritten.as_deref().unwrap_or(bytes))
    };
    let mut paths = vec![file("a", input.a)];
    if let Some(b) = input.b {
        paths.push(file("b", b));
    }
    let inputs = match InputSet::open(&paths) {
        Ok(inputs) => inputs,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let options = SyncOptions {
        algorithm: if input.linreg {
            Algorithm::Linreg
        } else {
            Algorithm::Chull
        },
        reference: input.reference.then(|| "0".to_string()),
        matching: MatchOptions::default(),
        linreg_filter_z: input.filter.then_some(1.64),
        ..Default::default()
    };
    let result = match tsync_analyze::sync(&inputs, &options, &mut |_| {}) {
        Ok(result) => result,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    assert_eq!(result.traces.len(), inputs.traces.len());
    for p in &result.pairs {
        assert!(
            p.a < p.b && (p.b as usize) < inputs.traces.len(),
            "pair {}–{}",
            p.a,
            p.b
        );
    }
    let _ = report::to_text(&result);
    let _ = serde_json::to_string(&report::to_json(&result)).expect("the JSON report serializes");
});
