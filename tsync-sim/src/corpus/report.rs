//! What a fuzz run reports: the figures and any crash, read out of libFuzzer's output
//! (`-print_final_stats=1`), for `cargo xtask fuzz`'s summary and its error naming the input
//! that crashed a target.

use std::path::PathBuf;

/// What one target's run did, from libFuzzer's output.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Inputs executed.
    pub runs: u64,
    /// Inputs executed per second, on average.
    pub exec_per_s: u64,
    /// Coverage: code edges reached (`cov`).
    pub cov: u64,
    /// Coverage: features reached (`ft`: edges with hit counts, comparisons, …).
    pub ft: u64,
    /// Inputs in libFuzzer's in-memory corpus at the end.
    pub corpus_units: u64,
    /// The fuzzer's peak resident memory, MB.
    pub peak_rss_mb: u64,
    /// The input that crashed the target, as libFuzzer wrote it.
    pub artifact: Option<PathBuf>,
    /// What went wrong (`deadly signal`, `timeout`, `out-of-memory`, the panic message, …).
    pub failure: Option<String>,
}

/// Reads the figures and any crash out of libFuzzer's output (`-print_final_stats=1`).
pub fn parse_output(output: &str) -> Stats {
    let mut s = Stats::default();
    let field = |line: &str, name: &str| -> Option<u64> {
        let rest = &line[line.find(name)? + name.len()..];
        let digits: String = rest
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    for line in output.lines() {
        let line = line.trim_end();
        if line.starts_with('#') && line.contains("cov: ") {
            // `#19110	DONE   cov: 272 ft: 312 corp: 32/1093b lim: 122 exec/s: 910 rss: 370Mb`
            s.runs = field(line, "#").unwrap_or(s.runs);
            s.cov = field(line, "cov:").unwrap_or(s.cov);
            s.ft = field(line, "ft:").unwrap_or(s.ft);
            s.corpus_units = field(line, "corp:").unwrap_or(s.corpus_units);
            s.exec_per_s = field(line, "exec/s:").unwrap_or(s.exec_per_s);
            s.peak_rss_mb = s.peak_rss_mb.max(field(line, "rss:").unwrap_or(0));
        } else if let Some(n) = line.strip_prefix("Done ").and_then(|r| field(r, "")) {
            s.runs = n;
        } else if let Some((name, value)) =
            line.strip_prefix("stat::").and_then(|r| r.split_once(':'))
        {
            let value = value.trim().parse().ok();
            match name {
                "number_of_executed_units" => s.runs = value.unwrap_or(s.runs),
                "average_exec_per_sec" => s.exec_per_s = value.unwrap_or(s.exec_per_s),
                "peak_rss_mb" => s.peak_rss_mb = value.unwrap_or(s.peak_rss_mb),
                _ => {}
            }
        } else if let Some(i) = line.find("Test unit written to ") {
            s.artifact = Some(PathBuf::from(
                line[i + "Test unit written to ".len()..].trim(),
            ));
        } else if let Some((i, tag)) = ["ERROR: libFuzzer: ", "ERROR: AddressSanitizer: "]
            .iter()
            .find_map(|tag| Some((line.find(tag)?, tag)))
        {
            let what = line[i + tag.len()..].to_string();
            // A Rust panic says more than the signal it ends with.
            if s.failure.as_ref().is_none_or(|f| !f.starts_with("panic")) {
                s.failure = Some(what);
            }
        } else if line.contains("panicked at ") && s.failure.is_none() {
            s.failure = Some(format!("panic: {}", line.trim()));
        } else if let Some(f) = s.failure.as_mut()
            && f.starts_with("panic")
            && !f.contains('\n')
            && !line.is_empty()
            && !line.starts_with("note:")
            && !line.starts_with("==")
        {
            // The panic message follows its location.
            f.push('\n');
            f.push_str("  ");
            f.push_str(line.trim());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn reads_the_final_figures() {
        let out = "INFO: Seed: 1\n\
            #2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
            #19015\tREDUCE cov: 272 ft: 312 corp: 32/1093b lim: 122 exec/s: 950 rss: 370Mb L: 92/92 MS: 5 EraseBytes-\n\
            #19110\tDONE   cov: 272 ft: 312 corp: 32/1093b lim: 122 exec/s: 910 rss: 370Mb\n\
            Done 19110 runs in 21 second(s)\n\
            stat::number_of_executed_units: 19110\n\
            stat::average_exec_per_sec:     910\n\
            stat::new_units_added:          43\n\
            stat::slowest_unit_time_sec:    0\n\
            stat::peak_rss_mb:              371\n";
        assert_eq!(
            parse_output(out),
            Stats {
                runs: 19110,
                exec_per_s: 910,
                cov: 272,
                ft: 312,
                corpus_units: 32,
                peak_rss_mb: 371,
                artifact: None,
                failure: None,
            }
        );
    }

    #[test]
    fn finds_the_crashing_input_and_the_panic() {
        let out = "#1024\tpulse  cov: 50 ft: 60 corp: 5/100b lim: 4 exec/s: 512 rss: 40Mb\n\
            \n\
            thread '<unnamed>' panicked at tsync-common/src/format.rs:141:9:\n\
            attempt to add with overflow\n\
            note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\
            ==4242== ERROR: libFuzzer: deadly signal\n\
            MS: 1 ChangeBit-; base unit: 0123\n\
            artifact_prefix='/w/target/fuzz-artifacts/trace_reader/'; Test unit written to /w/target/fuzz-artifacts/trace_reader/crash-abc\n\
            Base64: AAAA\n\
            stat::number_of_executed_units: 1100\n";
        let s = parse_output(out);
        assert_eq!(s.runs, 1100);
        assert_eq!(s.cov, 50);
        assert_eq!(
            s.artifact.as_deref(),
            Some(Path::new("/w/target/fuzz-artifacts/trace_reader/crash-abc"))
        );
        assert_eq!(
            s.failure.as_deref(),
            Some(
                "panic: thread '<unnamed>' panicked at tsync-common/src/format.rs:141:9:\n  \
                 attempt to add with overflow"
            )
        );
    }

    #[test]
    fn names_timeouts_and_memory() {
        let out = "==7== ERROR: libFuzzer: timeout after 10 seconds\n\
            artifact_prefix='a/'; Test unit written to a/timeout-1\n";
        let s = parse_output(out);
        assert_eq!(s.failure.as_deref(), Some("timeout after 10 seconds"));
        assert_eq!(s.artifact.as_deref(), Some(Path::new("a/timeout-1")));
        let out = "==7== ERROR: libFuzzer: out-of-memory (malloc(4294967296))\n\
            artifact_prefix='a/'; Test unit written to a/oom-1\n";
        assert_eq!(
            parse_output(out).failure.as_deref(),
            Some("out-of-memory (malloc(4294967296))")
        );
        let out = "==6094==ERROR: AddressSanitizer: out of memory: allocator is trying to \
            allocate 0xe8d4a51000 bytes\n\
            artifact_prefix='a/'; Test unit written to a/crash-1\n";
        assert_eq!(
            parse_output(out).failure.as_deref(),
            Some("out of memory: allocator is trying to allocate 0xe8d4a51000 bytes")
        );
    }
}
