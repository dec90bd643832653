//! A file system whose writes stall, for the agent's output: a pass-through FUSE mount
//! (`stall.py`, Python with Debian's `python3-fusepy`) whose `write()`, `flush()` and `fsync()`
//! block periodically or while a gate is closed, as a saturated disk blocks writers.
use std::{
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::unique_name;

/// The file system's program (run with the system's Python, which has Debian's fusepy).
const SCRIPT: &str = include_str!("stall.py");

/// How long mounting, and a test's wait for a stalled write, may take.
const PATIENCE: Duration = Duration::from_secs(60);

/// When writes stall.
#[derive(Clone, Copy, Debug)]
pub enum Stall {
    /// The first `stall` of every `period`, from the mount on.
    Periodic { period: Duration, stall: Duration },
    /// While the gate is closed ([`StallingFs::close_gate`]); it starts open.
    Gate,
}

/// A mounted stalling file system; unmounted, and its directory removed, on drop (also when a
/// test fails).
pub struct StallingFs {
    /// Holds the script, the directory the mount passes through to, the mount point, the gate.
    dir: PathBuf,
    mount: PathBuf,
    gate: PathBuf,
    child: Option<Child>,
    /// Lines the file system prints (`blocked` at each stall's first stalled call).
    lines: mpsc::Receiver<String>,
}

impl StallingFs {
    /// Mounts a new, empty file system under the temporary directory; waits until it serves.
    pub fn mount(stall: Stall) -> Result<Self> {
        let dir = std::env::temp_dir().join(unique_name("tsync-stallfs-"));
        let (source, mount) = (dir.join("source"), dir.join("mount"));
        for d in [&source, &mount] {
            fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        let script = dir.join("stall.py");
        fs::write(&script, SCRIPT).with_context(|| format!("cannot write {}", script.display()))?;
        let mut fs = StallingFs {
            gate: dir.join("gate"),
            dir,
            mount,
            child: None,
            lines: mpsc::channel().1,
        };
        // The system's interpreter: Debian's python3-fusepy is installed for it, not for a
        // python3 of pyenv or a virtual environment that may come first in PATH.
        let python = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let mut cmd = Command::new(python);
        cmd.arg(&script).arg(&source).arg(&fs.mount);
        match stall {
            Stall::Periodic { period, stall } => cmd
                .arg("--period")
                .arg(period.as_secs_f64().to_string())
                .arg("--stall")
                .arg(stall.as_secs_f64().to_string()),
            Stall::Gate => cmd.arg("--gate").arg(&fs.gate),
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context(
                "cannot run python3 for the FUSE file system (cargo xtask setup installs it)",
            )?;
        let (tx, rx) = mpsc::channel();
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        fs.child = Some(child);
        fs.lines = rx;
        fs.wait_line("mounted")
            .context("the stalling FUSE file system did not mount (are fuse3 and python3-fusepy installed? cargo xtask setup installs them)")?;
        Ok(fs)
    }

    /// The mount point: files written under it stall.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Makes writes block ([`Stall::Gate`]) until the returned guard is dropped. Declare it after
    /// the processes that write, so that it opens first when a test fails: a process blocked in
    /// a write cannot even be killed.
    pub fn close_gate(&self) -> Result<ClosedGate<'_>> {
        fs::write(&self.gate, b"")
            .with_context(|| format!("cannot create {}", self.gate.display()))?;
        Ok(ClosedGate(self))
    }

    /// Waits until a write (or flush) is blocked by a stall.
    pub fn wait_blocked(&self) -> Result<()> {
        self.wait_line("blocked")
    }

    /// Waits for a line of the file system's output equal to `what`; fails with what it said.
    fn wait_line(&self, what: &str) -> Result<()> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.trim() == what => return Ok(()),
                Ok(line) => seen.push(line),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        bail!(
            "the FUSE file system never said {what:?}; its output:\n{}",
            seen.join("\n")
        )
    }
}

/// Writes to a [`StallingFs`] block while this lives.
pub struct ClosedGate<'a>(&'a StallingFs);

impl Drop for ClosedGate<'_> {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0.gate);
    }
}

impl Drop for StallingFs {
    fn drop(&mut self) {
        // Let anything blocked through first, so that the unmount is not refused as busy.
        let _ = fs::remove_file(&self.gate);
        if let Some(mut child) = self.child.take() {
            let unmounted = Command::new("umount")
                .arg(&self.mount)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !unmounted {
                // Busy (a process still has a file open) or never mounted: detach it lazily.
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.mount)
                    .stderr(Stdio::null())
                    .status();
            }
            // The file system's process ends with its mount; make sure it does.
            let deadline = Instant::now() + Duration::from_secs(5);
            while !matches!(child.try_wait(), Ok(Some(_))) {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
