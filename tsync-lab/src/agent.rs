//! Running `tsync-agent record` as a child process: start, wait until it records, stop, collect.
use std::{
    collections::BTreeSet,
    fs,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{OnceLock, mpsc},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::Netns;

/// What an agent prints on stderr once its programs are attached (`tsync-agent: recording on …`).
pub const READY: &str = "recording on";

/// How long an agent may take to start recording (loading the programs) or to stop after a
/// signal (flushing its file).
const PATIENCE: Duration = Duration::from_secs(60);

/// The `tsync-agent` binary to run: `$TSYNC_AGENT` if set, else the workspace's, built by cargo
/// now (in release mode when this code is optimized), so that a test never runs a stale agent.
pub fn agent_binary() -> Result<PathBuf> {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    if let Some(path) = std::env::var_os("TSYNC_AGENT") {
        return Ok(path.into());
    }
    if let Some(path) = BUILT.get() {
        return Ok(path.clone());
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("tsync-lab is inside the workspace")?;
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(workspace)
        .args([
            "build",
            "-p",
            "tsync-agent",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        cargo.arg("--release");
    }
    let out = cargo.output().context("cannot run cargo")?;
    if !out.status.success() {
        bail!("cargo build -p tsync-agent failed ({})", out.status);
    }
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["target"]["name"] == "tsync-agent")
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .context("cargo built no tsync-agent executable")?;
    Ok(BUILT.get_or_init(|| path).clone())
}

/// `[ip netns exec NS] BIN record -o OUTPUT`: add options, then [`Agent::start`] it.
pub fn record_command(bin: &Path, netns: Option<&Netns>, output: &Path) -> Command {
    let mut cmd = match netns {
        Some(ns) => ns.command(bin),
        None => Command::new(bin),
    };
    cmd.args(["record", "-o"]).arg(output);
    cmd
}

/// A running agent; killed (and reaped) on drop if it was not stopped.
pub struct Agent {
    child: Option<Child>,
    /// Lines of its stderr, as they come.
    stderr: mpsc::Receiver<String>,
    /// Lines of its stderr read so far.
    seen: Vec<String>,
}

/// How an agent ended, with everything it printed.
pub struct Stopped {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Stopped {
    /// (events written, events lost) from its summary.
    pub fn summary(&self) -> Option<(u64, u64)> {
        parse_summary(&self.stdout)
    }
}

impl Agent {
    /// Starts `cmd` (a [`record_command`]) with stdout and stderr piped and waits until it says it
    /// is recording.
    pub fn start(cmd: Command) -> Result<Agent> {
        Self::spawn(cmd, None)
    }

    /// [`Agent::start`], also copying every line of its stderr into the file `log`.
    pub fn start_logged(cmd: Command, log: &Path) -> Result<Agent> {
        Self::spawn(cmd, Some(log))
    }

    /// [`Agent::start_logged`], the process started by `spawn` (the cluster lab starts it on a
    /// node's machine: `cluster::machine`).
    pub fn start_logged_by(
        cmd: Command,
        log: &Path,
        spawn: impl FnOnce(&mut Command) -> Result<Child>,
    ) -> Result<Agent> {
        Self::spawn_by(cmd, Some(log), spawn)
    }

    fn spawn(cmd: Command, log: Option<&Path>) -> Result<Agent> {
        Self::spawn_by(cmd, log, |cmd| Ok(cmd.spawn()?))
    }

    fn spawn_by(
        mut cmd: Command,
        log: Option<&Path>,
        spawn: impl FnOnce(&mut Command) -> Result<Child>,
    ) -> Result<Agent> {
        let mut log = log
            .map(|path| {
                fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
            })
            .transpose()?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn(&mut cmd).with_context(|| format!("cannot start {cmd:?}"))?;
        let err = child.stderr.take().context("no agent stderr")?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if let Some(log) = &mut log {
                    let _ = writeln!(log, "{line}");
                }
                // Keep reading (and logging) when nobody listens any more.
                let _ = tx.send(line);
            }
        });
        let mut agent = Agent {
            child: Some(child),
            stderr: rx,
            seen: Vec::new(),
        };
        agent.wait_for(READY)?;
        Ok(agent)
    }

    /// Waits (up to 60 s) for a line of stderr containing `what`; fails with what the agent said
    /// if it exits or the time runs out first.
    pub fn wait_for(&mut self, what: &str) -> Result<()> {
        self.wait_for_line(what, |line| line.contains(what))
            .map(drop)
    }

    /// Waits (up to 60 s) for a line of stderr for which `pick` holds, and returns it; fails
    /// with what the agent said if it exits or the time runs out first (`what` describes the
    /// line in that message).
    pub fn wait_for_line(&mut self, what: &str, pick: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let found = pick(&line);
                    self.seen.push(line);
                    if found {
                        return Ok(self.seen[self.seen.len() - 1].clone());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => status.to_string(),
            _ => "still running".into(),
        };
        bail!(
            "tsync-agent never said {what:?} ({status}); its stderr:\n{}",
            self.seen.join("\n")
        )
    }

    fn child(&self) -> &Child {
        self.child
            .as_ref()
            .expect("the agent is running until stopped")
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    /// Sends `signal` (e.g. `libc::SIGINT`, what Ctrl-C does).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child we own and have not reaped.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    /// Its exit status if it has exited by itself.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let child = self.child.as_mut().expect("the agent is running");
        Ok(child.try_wait()?)
    }

    /// Ids of the BPF programs the agent holds, from its file descriptors (`prog_id` in
    /// `/proc/PID/fdinfo`): what must be gone once it exited.
    pub fn program_ids(&self) -> Result<BTreeSet<u32>> {
        let dir = format!("/proc/{}/fdinfo", self.pid());
        let mut ids = BTreeSet::new();
        for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {dir}"))? {
            // An fd closed meanwhile has no fdinfo any more.
            let Ok(info) = fs::read_to_string(entry?.path()) else {
                continue;
            };
            let id: Option<u32> = info
                .lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok());
            ids.extend(id);
        }
        Ok(ids)
    }

    /// User and system CPU time the agent has used so far (`/proc/PID/stat`).
    pub fn cpu_seconds(&self) -> Result<f64> {
        let path = format!("/proc/{}/stat", self.pid());
        let stat = fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        cpu_seconds_of(&stat).with_context(|| format!("unexpected {path}: {stat}"))
    }

    /// SIGINT, as a user stops it, then [`wait`](Self::wait).
    pub fn stop(self) -> Result<Stopped> {
        self.stop_with(libc::SIGINT)
    }

    /// [`stop`](Self::stop), failing unless the agent exited successfully and without a panic.
    pub fn stop_cleanly(self) -> Result<Stopped> {
        let s = self.stop()?;
        if !s.status.success() || s.stderr.contains("panicked") {
            bail!(
                "tsync-agent: {}
{}
{}",
                s.status,
                s.stdout,
                s.stderr
            );
        }
        Ok(s)
    }

    /// Sends `signal`, then [`wait`](Self::wait).
    pub fn stop_with(self, signal: i32) -> Result<Stopped> {
        self.signal(signal);
        self.wait()
    }

    /// Waits (up to 60 s) for the agent to exit, by itself or signalled, and collects its output.
    pub fn wait(mut self) -> Result<Stopped> {
        let mut child = self.child.take().expect("the agent is running");
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("tsync-agent did not exit within {PATIENCE:?}");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let mut stdout = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut stdout)?;
        }
        // Its stderr closes with it; the reader thread then says so.
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        Ok(Stopped {
            status,
            stdout,
            stderr: self.seen.join("\n"),
        })
    }

    /// SIGKILL without warning (`kill -9`), and reap it.
    pub fn kill(mut self) -> Result<()> {
        let mut child = self.child.take().expect("the agent is running");
        let killed = child.kill();
        child.wait()?;
        Ok(killed?)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// (events written, events lost) from the agent's summary line
/// `tsync-agent: wrote N events to FILE in S s; L lost`.
pub fn parse_summary(out: &str) -> Option<(u64, u64)> {
    let line = out.lines().find(|l| l.contains(" events to "))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let wrote = words.iter().position(|w| *w == "wrote")?;
    let events = words.get(wrote + 1)?.parse().ok()?;
    let lost = line
        .rsplit(';')
        .next()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((events, lost))
}

/// utime + stime of a `/proc/PID/stat` line, in seconds. The fields after the command name (which
/// may hold spaces and parentheses) are counted from its closing parenthesis.
pub fn cpu_seconds_of(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) as f64 / ticks)
}

#[cfg(test)]
mod tests {
    use super::{cpu_seconds_of, parse_summary};

    #[test]
    fn reads_cpu_time_from_proc_stat() {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let stat = "4242 (tsync (agent)) S 1 4242 4242 0 -1 4194560 1092 0 0 0 150 50 0 0 20 0 3 0";
        assert_eq!(cpu_seconds_of(stat), Some(200.0 / ticks));
        assert_eq!(cpu_seconds_of("garbage"), None);
    }

    #[test]
    fn reads_the_agent_summary() {
        let out = "tsync-agent: wrote 262485 events to /x/a b.trace in 10.3 s; 17 lost\n  send ...";
        assert_eq!(parse_summary(out), Some((262485, 17)));
        assert_eq!(parse_summary("nothing here"), None);
    }
}
