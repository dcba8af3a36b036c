//! Replacing a file atomically: a temp file in the same directory, written,
//! flushed as far as the [`Durability`] asks, renamed over the target. What
//! this does and does not guarantee is in the crate documentation.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{IoResultExt, PathError};
use crate::random::random_u64;
use crate::sys;

/// What must hold after a power loss once a replacement returned `Ok`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Only the rename: atomic for readers and for a crash of the writer,
    /// nothing flushed. After a power loss the file may hold the old
    /// content, the new, or (on some file systems) be empty. For documents
    /// that describe live processes, which a power loss ends anyway.
    Rename,
    /// The new content is flushed (`fsync`) before the rename: after a
    /// power loss the file holds the old content or the new, whole; the
    /// rename itself may be lost (the old content comes back).
    Data,
    /// As [`Durability::Data`], and the rename is flushed too (unix: the
    /// directory is flushed after it; Windows: a write-through move, then
    /// a flush of the renamed file): once this returned `Ok`, the new
    /// content survives a power loss. A failure of that last flush is
    /// [`WriteError::NotDurable`].
    DataAndDir,
}

/// Why a replacement failed, and whether the target was changed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Before the rename: the target is unchanged and the temp file removed.
    #[error(transparent)]
    NotWritten(PathError),
    /// After the rename: readers see the new content, but flushing the
    /// rename (the directory) failed, so a power loss may still undo the
    /// change.
    #[error(transparent)]
    NotDurable(PathError),
}

impl WriteError {
    /// Whether the target was replaced despite the error.
    pub fn changed(&self) -> bool {
        matches!(self, WriteError::NotDurable(_))
    }

    /// The underlying path error, whichever side of the rename it came from.
    pub fn into_path_error(self) -> PathError {
        match self {
            WriteError::NotWritten(e) | WriteError::NotDurable(e) => e,
        }
    }
}

impl From<WriteError> for PathError {
    fn from(e: WriteError) -> PathError {
        e.into_path_error()
    }
}

/// The prefix of the temp files [`write_atomic`] makes for `target`:
/// `.NAME.baton-tmp-` (a name longer than 180 cut to 160 and `~`; bytes on
/// unix, UTF-16 units on Windows), so that they are hidden (on unix; on
/// Windows a leading dot hides nothing), never end in the target's
/// extension, and the ones a dead writer left can be found.
pub fn temp_prefix(target: &Path) -> OsString {
    let name = target.file_name().unwrap_or_default();
    let mut out = OsString::with_capacity(name.len().min(161) + 12);
    out.push(".");
    out.push(sys::shorten_name(name, 180, 160));
    out.push(".baton-tmp-");
    out
}

/// A new temp file that becomes the target on [`TempFile::persist`]; removed
/// when dropped before that.
#[derive(Debug)]
#[must_use = "a temp file is removed when dropped; persist it to replace the target"]
pub struct TempFile {
    file: File,
    path: PathBuf,
    /// Not yet renamed: remove it when dropped.
    armed: bool,
}

impl TempFile {
    /// Creates `dir/PREFIX<pid>-<16 hex digits>` exclusively (it can
    /// clobber nothing, not even through a symbolic link), with permission
    /// bits `mode` minus the umask. `dir` must be the target's directory,
    /// for the rename to be atomic.
    ///
    /// On Windows `mode` is ignored: there are no permission bits, and the
    /// file inherits its directory's ACL.
    pub fn create(dir: &Path, prefix: &OsStr, mode: u32) -> Result<TempFile, PathError> {
        let pid = std::process::id();
        let mut attempts = 0;
        loop {
            let mut name = prefix.to_os_string();
            name.push(format!("{pid}-{:016x}", random_u64()));
            let path = dir.join(name);
            match sys::create_new(&path, mode) {
                Ok(file) => {
                    return Ok(TempFile {
                        file,
                        path,
                        armed: true,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 8 => {
                    attempts += 1;
                }
                Err(e) => return Err(e).context("cannot create a temporary file", path),
            }
        }
    }

    /// The open file, to write to and set up (owner, mode) before persisting.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes it as `durability` asks and renames it over `target` (in the
    /// same directory); with [`Durability::DataAndDir`], flushes the rename
    /// (that directory on unix). On [`WriteError::NotWritten`] the temp file
    /// is removed.
    ///
    /// On Windows, readers that have `target` open keep reading the old
    /// content if they share it for deleting (Rust's `File::open` and most
    /// programs do); one that does not makes the rename fail, and nothing
    /// changes.
    pub fn persist(mut self, target: &Path, durability: Durability) -> Result<(), WriteError> {
        if durability != Durability::Rename {
            self.file
                .sync_all()
                .context("cannot flush", &self.path)
                .map_err(WriteError::NotWritten)?;
        }
        let durable = durability == Durability::DataAndDir;
        sys::rename(&self.path, target, durable)
            .context("cannot rename a temporary file over", target)
            .map_err(WriteError::NotWritten)?;
        self.armed = false;
        if durable {
            sys::flush_rename(&self.file, target, parent_of(target))
                .map_err(WriteError::NotDurable)?;
        }
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// The directory a rename of `target` changes (`.` for a bare name).
fn parent_of(target: &Path) -> &Path {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Replaces the file at `path` with `bytes` (see the [crate](crate) notes):
/// a temp file with permission bits 0666 minus the umask, flushed and
/// renamed as `durability` says.
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> Result<(), WriteError> {
    let temp = TempFile::create(parent_of(path), &temp_prefix(path), 0o666)
        .map_err(WriteError::NotWritten)?;
    (&mut temp.file())
        .write_all(bytes)
        .context("cannot write", temp.path())
        .map_err(WriteError::NotWritten)?;
    temp.persist(path, durability)
}

#[cfg(test)]
mod tests;
