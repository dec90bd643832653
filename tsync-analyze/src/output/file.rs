//! Where the analyzer's results go, written so that a failure never destroys anything.
//!
//! A result file (an export, a plot) is written to a temporary file in its target's directory and
//! renamed over the target only once it is complete: a failed or interrupted run leaves the target
//! as it was, and a reader never sees half a file. A target that is not a regular file (standard
//! output as `-`, a device such as `/dev/null`, a FIFO) cannot be replaced that way; it is written
//! straight through and never unlinked. A target that is one of the inputs (the same file, also
//! through a symbolic or hard link) is refused before anything is written.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a result could not be written.
#[derive(thiserror::Error, Debug)]
pub enum OutputError {
    /// The target is one of the inputs.
    #[error(
        "{output} is the input {input}: writing it would destroy that input; choose another output"
    )]
    IsInput {
        /// The target, as given.
        output: PathBuf,
        /// The input it is the same file as.
        input: PathBuf,
    },
    /// The target (or its temporary file) cannot be created.
    #[error("cannot create {path}: {what}")]
    Create {
        /// The target, as given (not its temporary file).
        path: PathBuf,
        /// Why, in words (a missing directory, or [`describe_io`] of the error).
        what: String,
    },
    /// The target (or its temporary file) cannot be written.
    #[error("cannot write {path}: {}", describe_io(.source))]
    Io {
        /// The target, as given (not its temporary file).
        path: PathBuf,
        /// The error of the final flush, sync or rename.
        #[source]
        source: io::Error,
    },
}

/// An I/O error in words, with what to do about the usual ones.
pub fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(ENOSPC) => {
            format!("the disk is full ({e}); free some space or write elsewhere")
        }
        Some(EDQUOT) => {
            format!("the disk quota is exhausted ({e}); free some space or write elsewhere")
        }
        _ => match e.kind() {
            io::ErrorKind::PermissionDenied => {
                format!("{e}; choose a directory you may write to")
            }
            _ => e.to_string(),
        },
    }
}

/// `ENOSPC` and `EDQUOT` on Linux (std exposes no constants; the values are the kernel ABI).
const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;

/// The files a run reads, by identity (device and inode), so that no output replaces one.
#[derive(Clone, Debug, Default)]
pub struct InputIds {
    ids: Vec<(u64, u64, PathBuf)>,
}

impl InputIds {
    /// The identities of `paths` (links followed); paths that cannot be inspected (`-`, missing
    /// files: the reader reports those) are left out.
    pub fn of<P: AsRef<Path>>(paths: &[P]) -> Self {
        let ids = paths
            .iter()
            .filter_map(|p| {
                let p = p.as_ref();
                let m = std::fs::metadata(p).ok()?;
                m.is_file().then(|| (m.dev(), m.ino(), p.to_path_buf()))
            })
            .collect();
        InputIds { ids }
    }

    /// Fails if `output` is one of the inputs.
    pub fn check(&self, output: &Path) -> Result<(), OutputError> {
        let Ok(m) = std::fs::metadata(output) else {
            return Ok(());
        };
        match self
            .ids
            .iter()
            .find(|(dev, ino, _)| (*dev, *ino) == (m.dev(), m.ino()))
        {
            Some((_, _, input)) => Err(OutputError::IsInput {
                output: output.to_path_buf(),
                input: input.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// Where an [`OutputFile`]'s bytes go.
enum Sink {
    Stdout(io::StdoutLock<'static>),
    /// A device or FIFO, written in place.
    Straight(File),
    /// A temporary file renamed over `target` by [`OutputFile::commit`].
    Replace {
        temp: tempfile::NamedTempFile,
        target: PathBuf,
    },
}

/// A result file being written (see the module doc). Dropping it without
/// [`commit`](Self::commit) removes the temporary file and leaves the target untouched.
///
/// It remembers the first I/O error of its writes, so that a failure reported by a format
/// library in its own words ("error writing bytes") can be told in the operating system's
/// ([`io_error`](Self::io_error)).
pub struct OutputFile {
    sink: Sink,
    shown: PathBuf,
    error: Option<io::Error>,
}

impl OutputFile {
    /// Opens `path` for writing (`-` is standard output). `suffix` ends the temporary file's
    /// name (libraries that choose a format by extension need it). Refuses an input.
    pub fn create(path: &Path, suffix: &str, inputs: &InputIds) -> Result<Self, OutputError> {
        let shown = path.to_path_buf();
        let io_err = |e: io::Error| OutputError::Create {
            path: path.to_path_buf(),
            // Without the temporary file's name that some errors carry.
            what: describe_io(&e.raw_os_error().map_or(e, io::Error::from_raw_os_error)),
        };
        if path == Path::new("-") {
            return Ok(OutputFile {
                sink: Sink::Stdout(io::stdout().lock()),
                shown,
                error: None,
            });
        }
        inputs.check(path)?;
        let existing = std::fs::metadata(path).ok();
        if let Some(m) = existing.as_ref().filter(|m| !m.is_file()) {
            if m.is_dir() {
                return Err(io_err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "it is a directory",
                )));
            }
            let file = OpenOptions::new().write(true).open(path).map_err(io_err)?;
            return Ok(OutputFile {
                sink: Sink::Straight(file),
                shown,
                error: None,
            });
        }
        // Replace the file a link points to, not the link.
        let target = match existing {
            Some(_) => std::fs::canonicalize(path).map_err(io_err)?,
            None => path.to_path_buf(),
        };
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(OutputError::Create {
                path: path.to_path_buf(),
                what: format!("the directory {} does not exist", dir.display()),
            });
        }
        let name = target
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(&format!(".tmp{suffix}"))
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)
            .map_err(io_err)?;
        if let Some(m) = existing {
            temp.as_file()
                .set_permissions(m.permissions())
                .map_err(io_err)?;
        }
        Ok(OutputFile {
            sink: Sink::Replace { temp, target },
            shown,
            error: None,
        })
    }

    /// The path a library that writes files by name should write to: the temporary file, or the
    /// target itself when it is written straight through. None for standard output.
    pub fn draw_path(&self) -> Option<&Path> {
        match &self.sink {
            Sink::Stdout(_) => None,
            Sink::Straight(_) => Some(&self.shown),
            Sink::Replace { temp, .. } => Some(temp.path()),
        }
    }

    /// The first I/O error a write met, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// The error of a failed write, in the operating system's words when there was one.
    pub fn failure(&self, fallback: &dyn std::fmt::Display) -> String {
        match &self.error {
            Some(e) => format!("cannot write {}: {}", self.shown.display(), describe_io(e)),
            None => format!("writing {} failed: {fallback}", self.shown.display()),
        }
    }

    /// Flushes, syncs and renames the result into place.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let shown = self.shown.clone();
        let io_err = |source| OutputError::Io {
            path: shown.clone(),
            source,
        };
        self.flush().map_err(io_err)?;
        match self.sink {
            Sink::Stdout(_) | Sink::Straight(_) => Ok(()),
            Sink::Replace { temp, target } => {
                temp.as_file().sync_all().map_err(io_err)?;
                temp.persist(&target).map_err(|e| io_err(e.error))?;
                Ok(())
            }
        }
    }

    fn record<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r
            && self.error.is_none()
        {
            self.error = Some(match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            });
        }
        r
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = match &mut self.sink {
            Sink::Stdout(o) => o.write(buf),
            Sink::Straight(f) => f.write(buf),
            Sink::Replace { temp, .. } => temp.as_file_mut().write(buf),
        };
        self.record(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = match &mut self.sink {
            Sink::Stdout(o) => o.flush(),
            Sink::Straight(f) => f.flush(),
            Sink::Replace { temp, .. } => temp.as_file_mut().flush(),
        };
        self.record(r)
    }
}

/// A result that is a directory (a CTF trace), written under a temporary name beside its
/// target and renamed into place once complete, as [`OutputFile`] does for files. The target
/// must not exist (a directory cannot be replaced atomically, and its old content would be
/// lost), and must lie outside every input directory.
pub struct OutputDir {
    temp: Option<tempfile::TempDir>,
    target: PathBuf,
}

impl OutputDir {
    /// Prepares `path`; `input_dirs` are the directories read (the target may not be inside
    /// one, nor be one).
    pub fn create(path: &Path, input_dirs: &[&Path]) -> Result<Self, OutputError> {
        let create_err = |what: String| OutputError::Create {
            path: path.to_path_buf(),
            what,
        };
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(create_err(
                "it exists; the output is a new directory, so choose a path that does not exist \
                 (nothing there is replaced)"
                    .into(),
            ));
        }
        let parent = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let parent = std::fs::canonicalize(parent).map_err(|_| {
            create_err(format!("the directory {} does not exist", parent.display()))
        })?;
        for input in input_dirs {
            if let Ok(input) = std::fs::canonicalize(input)
                && parent.starts_with(&input)
            {
                return Err(OutputError::IsInput {
                    output: path.to_path_buf(),
                    input: input.clone(),
                });
            }
        }
        let name = path
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempdir_in(&parent)
            .map_err(|e| create_err(describe_io(&e)))?;
        Ok(OutputDir {
            temp: Some(temp),
            target: parent.join(name),
        })
    }

    /// Where to write the result's files until [`commit`](Self::commit).
    pub fn path(&self) -> &Path {
        self.temp.as_ref().expect("until committed").path()
    }

    /// Renames the complete result into place.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let temp = self.temp.take().expect("committed once");
        let from = temp.keep();
        // Readable like a directory made with the user's umask (TempDir makes it 0700).
        let _ = std::fs::set_permissions(&from, std::fs::Permissions::from_mode(0o755));
        std::fs::rename(&from, &self.target).map_err(|source| {
            let _ = std::fs::remove_dir_all(&from);
            OutputError::Io {
                path: self.target.clone(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_target_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        std::fs::write(&target, "precious").unwrap();
        let mut out = OutputFile::create(&target, "", &InputIds::default()).unwrap();
        out.write_all(b"half a result").unwrap();
        drop(out);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "the temporary file is removed");
    }

    #[test]
    fn commit_replaces_the_target_and_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        std::fs::write(&target, "old").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut out = OutputFile::create(&target, "", &InputIds::default()).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[test]
    fn a_link_to_an_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("node-0.tsync");
        std::fs::write(&input, "trace").unwrap();
        let sym = dir.path().join("sym");
        std::os::unix::fs::symlink(&input, &sym).unwrap();
        let hard = dir.path().join("hard");
        std::fs::hard_link(&input, &hard).unwrap();
        let ids = InputIds::of(&[&input]);
        for out in [&input, &sym, &hard] {
            let err = OutputFile::create(out, "", &ids).err().unwrap();
            assert!(matches!(err, OutputError::IsInput { .. }), "{err}");
        }
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "trace");
    }

    #[test]
    fn a_symlink_target_is_replaced_through_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.csv");
        std::fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut out = OutputFile::create(&link, "", &InputIds::default()).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
    }

    #[test]
    fn a_device_is_written_in_place_and_never_unlinked() {
        let mut out = OutputFile::create(Path::new("/dev/null"), "", &InputIds::default()).unwrap();
        out.write_all(b"bytes").unwrap();
        drop(out);
        assert!(Path::new("/dev/null").exists());
    }

    #[test]
    fn disk_full_is_said_as_such() {
        let full = describe_io(&io::Error::from_raw_os_error(ENOSPC));
        assert!(full.contains("the disk is full"), "{full}");
        // The same through a real full device, where this user may write to it (root may; some
        // systems make /dev/full 0600).
        if OpenOptions::new().write(true).open("/dev/full").is_err() {
            eprintln!("/dev/full is not writable here: the device half of this test is skipped");
            return;
        }
        let mut out = OutputFile::create(Path::new("/dev/full"), "", &InputIds::default()).unwrap();
        assert!(out.write_all(&[0; 4096]).and_then(|_| out.flush()).is_err());
        let msg = out.failure(&"Error writing bytes");
        assert!(msg.contains("the disk is full"), "{msg}");
        assert!(Path::new("/dev/full").exists());
    }
}
