//! Finding CTF traces: a trace is a directory holding a `metadata` file that is CTF metadata;
//! an LTTng session directory (`~/lttng-traces/SESSION/`) holds several (`kernel/`,
//! `ust/uid/1000/64-bit/`, …), and a user may gather several nodes' traces under one directory.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::CtfError;
use super::metadata::{Metadata, TraceClass, is_metadata};
use super::network::classify;

/// Deepest directory level searched for traces below the one given.
const MAX_SEARCH_DEPTH: usize = 16;

/// True when `dir` is a CTF trace: it holds a `metadata` file that starts with the metadata
/// packet magic or `/* CTF`.
pub fn is_trace_dir(dir: &Path) -> bool {
    let Ok(mut f) = fs::File::open(dir.join("metadata")) else {
        return false;
    };
    let mut prefix = [0u8; 64];
    let mut n = 0;
    while n < prefix.len() {
        match f.read(&mut prefix[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    is_metadata(&prefix[..n])
}

/// The CTF traces at or under `dir`, in path order (`dir` itself when it is one).
pub fn find_traces(dir: &Path) -> Result<Vec<PathBuf>, CtfError> {
    if is_trace_dir(dir) {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let entries = fs::read_dir(&d).map_err(|e| CtfError::io(&d, e))?;
        for e in entries {
            let e = e.map_err(|e| CtfError::io(&d, e))?;
            let ty = e.file_type().map_err(|err| CtfError::io(&e.path(), err))?;
            if ty.is_dir() && depth < MAX_SEARCH_DEPTH {
                let p = e.path();
                if is_trace_dir(&p) {
                    found.push(p);
                } else {
                    stack.push((p, depth + 1));
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

/// One trace of a directory given as input: where it is, the node name it gets, and whether
/// its metadata declares network events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundTrace {
    /// The trace's directory.
    pub dir: PathBuf,
    /// Its node name: `env.hostname`, with the trace's path inside the given directory when
    /// several traces there share a host (`node1/kernel`).
    pub name: String,
    /// Whether it declares `net_dev_queue`, `net_if_receive_skb` or the add-on events.
    pub network: bool,
}

/// The traces of `dir` (a trace, or a directory holding traces) that synchronization can use:
/// all of them when `dir` is one trace; those declaring network events when it holds several
/// (a session's userspace traces have none). Fails when none is found.
pub fn traces_of(dir: &Path) -> Result<Vec<FoundTrace>, CtfError> {
    let dirs = find_traces(dir)?;
    if dirs.is_empty() {
        return Err(CtfError::trace(
            dir,
            "no CTF trace here (no directory below holds a CTF `metadata` file)",
        ));
    }
    let mut traces = Vec::with_capacity(dirs.len());
    for d in dirs {
        let meta = Metadata::read(&d.join("metadata")).map_err(|e| CtfError::trace(&d, e))?;
        let class = TraceClass::parse(&meta.text, meta.little_endian)
            .map_err(|e| CtfError::trace(&d, e))?;
        let host = class.env("hostname").unwrap_or_default();
        let network = class.events.iter().any(|e| classify(e).is_some());
        traces.push((d, host, network));
    }
    let single = traces.len() == 1;
    let kept: Vec<_> = traces.into_iter().filter(|t| single || t.2).collect();
    if kept.is_empty() {
        return Err(CtfError::trace(
            dir,
            "none of its CTF traces declares network events (net_dev_queue and \
             net_if_receive_skb, or inet_sock_local_out and inet_sock_local_in): record a kernel \
             trace with `lttng enable-event --kernel net_dev_queue,netif_receive_skb`",
        ));
    }
    let mut out = Vec::with_capacity(kept.len());
    for (d, host, network) in &kept {
        let shared = kept.iter().filter(|t| t.1 == *host).count() > 1;
        let relative = d.strip_prefix(dir).unwrap_or(d).display().to_string();
        let name = match (host.is_empty(), shared) {
            (true, _) => d
                .file_name()
                .map_or_else(|| relative.clone(), |n| n.to_string_lossy().into()),
            (false, false) => host.clone(),
            (false, true) => format!("{host}/{relative}"),
        };
        out.push(FoundTrace {
            dir: d.clone(),
            name,
            network: *network,
        });
    }
    Ok(out)
}
