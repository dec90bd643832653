//! The analyzer's benchmarks (`cargo xtask bench analyze|mesh|apply`; hundreds of traces: [`many`]): their inputs, the
//! measurements and the Markdown tables. xtask only parses the options, builds the release
//! binary and passes it here.
//!
//! Programs are timed as child processes and their peak RSS read from `wait4`, through a fresh
//! helper process ([`Meter`]): a child's `ru_maxrss` starts from the peak RSS of the process
//! that spawned it (Linux carries the old address space's high-water mark across `exec`, and
//! `posix_spawn` children run in their parent's address space until then). The process that
//! generated the inputs may have grown large; a freshly started helper has not, so its children
//! report their own peak (plus a floor of the helper's size: [`Meter::floor`]).

pub mod analyze;
pub mod apply;
pub mod many;
pub mod merge;
pub mod mesh;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// What one run of a program measured.
#[derive(Clone, Copy, Debug)]
pub struct Measure {
    /// Wall time (s).
    pub seconds: f64,
    /// Peak resident set size (KiB).
    pub max_rss_kib: i64,
}

impl Measure {
    /// Folds another run of the same command in: the shorter time, the higher peak memory.
    pub fn keep_best(&mut self, other: Measure) {
        self.seconds = self.seconds.min(other.seconds);
        self.max_rss_kib = self.max_rss_kib.max(other.max_rss_kib);
    }
}

/// Runs `program` with `args`, stdout to /dev/null, in this process, and measures it: what the
/// helper behind [`Meter`] does.
pub fn peak_rss(program: &OsString, args: &[OsString]) -> Result<Measure> {
    let start = Instant::now();
    let child = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("running {}", program.to_string_lossy()))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let seconds = start.elapsed().as_secs_f64();
    if r != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        use std::os::unix::process::ExitStatusExt;
        bail!(
            "{} failed: {}",
            program.to_string_lossy(),
            std::process::ExitStatus::from_raw(status)
        );
    }
    Ok(Measure {
        seconds,
        max_rss_kib: usage.ru_maxrss,
    })
}

/// Measures programs through a helper command that runs [`peak_rss`] and prints `seconds KiB`
/// (`xtask peak-rss PROGRAM ARGS...`).
pub struct Meter {
    helper: PathBuf,
    helper_args: Vec<OsString>,
}

impl Meter {
    /// A meter whose helper is `helper helper_args... PROGRAM ARGS...`.
    pub fn new(helper: impl Into<PathBuf>, helper_args: &[&str]) -> Self {
        Meter {
            helper: helper.into(),
            helper_args: helper_args.iter().map(OsString::from).collect(),
        }
    }

    /// [`measure`](Self::measure) `runs` times in a row: the fastest run's time (what the
    /// program costs when nothing else on the machine gets in its way) and the largest peak RSS.
    pub fn best_of(
        &self,
        runs: usize,
        program: &Path,
        args: &[PathBuf],
        pre: &[&str],
    ) -> Result<Measure> {
        let mut best = self.measure(program, args, pre)?;
        for _ in 1..runs {
            best.keep_best(self.measure(program, args, pre)?);
        }
        Ok(best)
    }

    /// Runs `program pre... args...` with stdout to /dev/null and returns its wall time and
    /// peak RSS.
    pub fn measure(&self, program: &Path, args: &[PathBuf], pre: &[&str]) -> Result<Measure> {
        let out = Command::new(&self.helper)
            .args(&self.helper_args)
            .arg(program)
            .args(pre)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running the peak-rss helper")?;
        if !out.status.success() {
            bail!(
                "{} {:?} failed: {}",
                program.display(),
                pre,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let mut words = text.split_whitespace();
        let (Some(seconds), Some(kib)) = (words.next(), words.next()) else {
            bail!("peak-rss printed {text:?}");
        };
        Ok(Measure {
            seconds: seconds.parse()?,
            max_rss_kib: kib.parse()?,
        })
    }

    /// The fastest of `runs` runs (a shared machine's noise only adds): seconds and peak RSS
    /// (MiB) of that run.
    pub fn best(
        &self,
        runs: u32,
        program: &Path,
        args: &[PathBuf],
        pre: &[&str],
    ) -> Result<(f64, f64)> {
        let mut best = (f64::MAX, 0.0);
        for _ in 0..runs.max(1) {
            let m = self.measure(program, args, pre)?;
            if m.seconds < best.0 {
                best = (m.seconds, m.max_rss_kib as f64 / 1024.0);
            }
        }
        Ok(best)
    }

    /// The peak RSS (MiB) the helper reports for a program that does nothing (`true`): the floor
    /// under every figure of a table.
    pub fn floor(&self) -> Result<f64> {
        Ok(self.measure(Path::new("true"), &[], &[])?.max_rss_kib as f64 / 1024.0)
    }
}

/// Total size of files (bytes; a missing file counts 0).
fn size(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

/// Prints a benchmark's table and writes it to `dir/name`.
fn publish(dir: &Path, name: &str, table: &str) -> Result<()> {
    println!("{table}");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, table).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("written to {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_measures_a_child_and_names_a_failure() {
        let m = peak_rss(&"true".into(), &[]).unwrap();
        assert!(m.seconds >= 0.0 && m.max_rss_kib > 0, "{m:?}");
        let e = peak_rss(&"false".into(), &[]).unwrap_err().to_string();
        assert!(e.contains("false failed"), "{e}");
    }
}
