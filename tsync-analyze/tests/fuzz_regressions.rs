//! Inputs with which the fuzz targets (`cargo xtask fuzz`, docs/fuzzing.md) crashed the analyzer,
//! kept as regression tests: each must now give an error (or a result), never a panic, an abort,
//! an allocation sized by the input or a hang.

use std::path::PathBuf;

use tsync_analyze::{Algorithm, InputError, InputSet, SyncOptions, SyncResult};

/// Writes the inputs to files of a fresh temporary directory (kept alive by the returned guard).
fn files(inputs: &[&[u8]]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let paths = inputs
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let path = dir.path().join(format!("input-{i}"));
            std::fs::write(&path, bytes).expect("write input");
            path
        })
        .collect();
    (dir, paths)
}

/// What the `sync_pipeline` target does with its files: open them, then synchronize.
fn sync(paths: &[PathBuf], algorithm: Algorithm) -> Result<SyncResult, String> {
    let inputs = InputSet::open(paths).map_err(|e| e.to_string())?;
    let options = SyncOptions {
        algorithm,
        ..Default::default()
    };
    tsync_analyze::sync(&inputs, &options, &mut |_| {}).map_err(|e| e.to_string())
}

/// `sync_pipeline`, crash-9958a2ce1c68b193a7d80f1c1af24d9b27b86be8 (minimized; linreg, checksums
/// made right, as the target does): file A is a trace file whose header chunk claims, in its
/// bincode, a string of 0xe8d4a51000 bytes (about 10¹²); `InputSet::open`, reading the header,
/// aborted on the allocation. The same defect as the trace reader's regression test in
/// tsync-common; the header is now refused.
#[test]
fn trace_header_claiming_a_huge_string_is_an_error() {
    const A: &[u8] = b"TSYNCTRC\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x96\x00\x00\x00\
        \xa7\xb0\xc0\xba\x01\x00\x00\x00\x05sim-0\x05sim-0\x0dsimulated-7-0\x09simulated\
        \x09simulated\x01\x02\x04sim0\x00\x01\x0c10.77.0.1/16\xfd\x00\x00\xf4\xdb\xa3\xe4`\x0c1\
        \xfd\x00\x10\xa5ate 0.1.0\x00\x00\x00\x00\x00\x00\x000\x07\x00\x00R\xda\x01\x00\x00\x01\
        \x0aM\x00\x01\x00\x00\x00\x00\x00\x00\x00\xff\xe4\x0c1\xfd \x1a|\x0c1\xfd \x1a|\xe0\xe8\
        \x00\x1a|\xe0\xe8\x00\x00\x00\x00\x00\x00\x01\x02\x01\x01\x01\x00\xfd\x9e";
    const B: &[u8] = b"\x00\x00\x00\x00\x00\x00\x00\xfd \xe4\x0c1\xfd \x1a|\xe0\x00";
    assert_eq!((A.len(), B.len()), (186, 18));
    let (_dir, paths) = files(&[A, B]);
    match InputSet::open(&paths) {
        Err(InputError::Trace { what, .. }) => assert!(what.contains("header"), "{what}"),
        Err(other) => panic!("expected an unusable trace file, got {other}"),
        Ok(_) => panic!("expected an unusable trace file"),
    }
    assert!(sync(&paths, Algorithm::Linreg).is_err());
}

/// `sync_pipeline`, crash-bd9812fc4e3b859460e0435bf779f60248ef5041 (libFuzzer's minimization
/// stopped at 6863 bytes; these two files, written by hand, panic the same way): trace file A's
/// only event is at 2⁶³ + 1 ns, so its time on the merge axis is near `i64::MIN`; trace file B's
/// last event is at 2⁶³ − 1 ns, near `i64::MAX`. The warning about recordings that do not overlap
/// took the difference of the two in `i64`: "attempt to subtract with overflow". It is now taken
/// in `i128` (`overlap_warnings`, `matching/merge.rs`).
#[test]
fn recordings_at_both_ends_of_the_time_axis_do_not_overflow() {
    const A: &[u8] = b"TSYNCTRC\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x10\x00\x00\x00\
        \xcfD\x16\xb9\x01\x00\x00\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x02\x00\x00\x00P\x00\x00\x00\xdf{\xebE\x01\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x80\
        \x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00";
    const B: &[u8] = b"TSYNCTRC\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x10\x00\x00\x00\
        \xb6.k\xa8\x01\x00\x00\x00\x01b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x02\x00\x00\x00\xa0\x00\x00\x00\xd2|\x00\xe1\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x00\x00\x00\x00\x00\x01\
        \x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\
        \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00";
    assert_eq!((A.len(), B.len()), (144, 224));
    let (_dir, paths) = files(&[A, B]);
    for algorithm in [Algorithm::Chull, Algorithm::Linreg] {
        let result = sync(&paths, algorithm).expect("two readable trace files");
        assert_eq!(result.traces.len(), 2);
    }
}
