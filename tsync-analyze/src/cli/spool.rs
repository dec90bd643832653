//! Inputs that can be read only once — a pipe, a process substitution (`<(zstdcat a.tsync.zst)`),
//! `-` for standard input, a trace arriving over `ssh` — are copied to a temporary file before
//! anything else, because every command reads its inputs more than once (the file kind, the
//! headers, the coarse alignment, then the matching). Messages name the input as the user gave
//! it, never the temporary copy.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use std::sync::OnceLock;
use tsync_analyze::output::describe_io;

use super::CliError;

/// The temporary copies of this run, with the names the user gave (for messages).
static COPIES: OnceLock<Vec<(String, String)>> = OnceLock::new();
/// Keeps the directory of the copies alive until the process ends.
static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();

/// Replaces every input that cannot be read twice by a temporary copy, in place. Regular files
/// (and block devices) are read where they are. Call once per run.
pub fn spool(inputs: &mut [PathBuf]) -> Result<(), CliError> {
    let mut copies = Vec::new();
    let mut stdin_used = false;
    for (i, input) in inputs.iter_mut().enumerate() {
        let is_stdin = input.as_os_str() == "-";
        if !is_stdin && !reads_once(input) {
            continue;
        }
        if is_stdin && std::mem::replace(&mut stdin_used, true) {
            return Err(CliError::usage(
                "- (standard input) is given twice: it can be read only once",
            ));
        }
        let dir = match DIR.get() {
            Some(d) => d,
            None => {
                let d = tempfile::Builder::new()
                    .prefix("tsync-analyze-input.")
                    .tempdir()
                    .map_err(|e| {
                        CliError::msg(format!(
                            "cannot create a temporary directory for the piped inputs in {} ({e}); \
                             set TMPDIR to a writable directory with room for them",
                            std::env::temp_dir().display()
                        ))
                    })?;
                DIR.get_or_init(|| d)
            }
        };
        let copy = dir.path().join(format!("input-{i}"));
        let shown = if is_stdin {
            "- (standard input)".to_string()
        } else {
            input.display().to_string()
        };
        copy_input(input, is_stdin, &copy, &shown)?;
        copies.push((copy.display().to_string(), shown));
        *input = copy;
    }
    let _ = COPIES.set(copies);
    Ok(())
}

/// True for a pipe, FIFO, socket or character device: what cannot be read a second time.
fn reads_once(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| {
        let t = m.file_type();
        t.is_fifo() || t.is_socket() || t.is_char_device()
    })
}

fn copy_input(input: &Path, is_stdin: bool, copy: &Path, shown: &str) -> Result<(), CliError> {
    let mut out = File::create(copy).map_err(|e| {
        CliError::msg(format!(
            "cannot copy {shown} to {} to read it: {}",
            copy.display(),
            describe_io(&e)
        ))
    })?;
    let mut source: Box<dyn Read> = if is_stdin {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(
            File::open(input)
                .map_err(|e| CliError::msg(format!("cannot read {shown}: {}", describe_io(&e))))?,
        )
    };
    // The kind first: a stream that is neither format (`/dev/urandom`, a wrong pipe) is refused
    // before anything is copied, instead of filling the disk.
    let prefix = tsync_analyze::read_prefix(&mut source)
        .map_err(|e| CliError::msg(format!("cannot read {shown}: {}", describe_io(&e))))?;
    tsync_analyze::sniff_prefix(&prefix, &shown)?;
    let copied = out
        .write_all(&prefix)
        .and_then(|()| std::io::copy(&mut source, &mut out));
    copied.map_err(|e| {
        CliError::msg(format!(
            "cannot copy {shown} to a temporary file to read it: {} (TMPDIR chooses where)",
            describe_io(&e)
        ))
    })?;
    Ok(())
}

/// True when no input was copied: [`as_given`] would change nothing.
pub fn none() -> bool {
    COPIES.get().is_none_or(Vec::is_empty)
}

/// `text` with every temporary copy's path replaced by the name the user gave.
pub fn as_given(text: &str) -> String {
    let mut text = text.to_string();
    for (copy, shown) in COPIES.get().into_iter().flatten() {
        if text.contains(copy.as_str()) {
            text = text.replace(copy.as_str(), shown);
        }
    }
    text
}
