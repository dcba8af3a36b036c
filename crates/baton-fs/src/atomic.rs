//! Replacing a file atomically: a temp file in the same directory, written,
//! flushed as far as the [`Durability`] asks, renamed over the target. What
//! this does and does not guarantee is in the crate documentation.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{IoResultExt, PathError};
use crate::random::random_u64;

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
    /// As [`Durability::Data`], and the directory is flushed after the
    /// rename: once this returned `Ok`, the new content survives a power
    /// loss. A failure of that last flush is [`WriteError::NotDurable`].
    DataAndDir,
}

/// Why a replacement failed, and whether the target was changed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Before the rename: the target is unchanged and the temp file removed.
    #[error(transparent)]
    NotWritten(PathError),
    /// After the rename: readers see the new content, but flushing the
    /// directory failed, so a power loss may still undo the change.
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
/// `.NAME.baton-tmp-` (a long name cut to 160 bytes and `~`), so that they
/// are hidden, never end in the target's extension, and the ones a dead
/// writer left can be found.
pub fn temp_prefix(target: &Path) -> OsString {
    let name = target.file_name().map_or(&b""[..], OsStr::as_bytes);
    let mut out = Vec::with_capacity(name.len().min(161) + 12);
    out.push(b'.');
    if name.len() <= 180 {
        out.extend_from_slice(name);
    } else {
        out.extend_from_slice(&name[..160]);
        out.push(b'~');
    }
    out.extend_from_slice(b".baton-tmp-");
    OsString::from_vec(out)
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
    pub fn create(dir: &Path, prefix: &OsStr, mode: u32) -> Result<TempFile, PathError> {
        let pid = std::process::id();
        let mut attempts = 0;
        loop {
            let mut name = prefix.to_os_string().into_vec();
            name.extend_from_slice(format!("{pid}-{:016x}", random_u64()).as_bytes());
            let path = dir.join(OsString::from_vec(name));
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&path)
            {
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
    /// same directory); with [`Durability::DataAndDir`], flushes that
    /// directory. On [`WriteError::NotWritten`] the temp file is removed.
    pub fn persist(mut self, target: &Path, durability: Durability) -> Result<(), WriteError> {
        if durability != Durability::Rename {
            self.file
                .sync_all()
                .context("cannot flush", &self.path)
                .map_err(WriteError::NotWritten)?;
        }
        fs::rename(&self.path, target)
            .context("cannot rename a temporary file over", target)
            .map_err(WriteError::NotWritten)?;
        self.armed = false;
        drop(self);
        if durability == Durability::DataAndDir {
            sync_dir(parent_of(target)).map_err(WriteError::NotDurable)?;
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

/// Makes a rename or file creation in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), PathError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .context("cannot flush directory", dir)
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
mod tests {
    use super::*;

    fn temps(dir: &Path) -> Vec<OsString> {
        fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name())
                    .filter(|n| n.as_bytes().starts_with(b"."))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn every_durability_replaces_the_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.json");
        for (i, d) in [Durability::Rename, Durability::Data, Durability::DataAndDir]
            .into_iter()
            .enumerate()
        {
            let content = format!("{{\"n\":{i}}}\n");
            write_atomic(&path, content.as_bytes(), d).unwrap();
            assert_eq!(fs::read_to_string(&path).unwrap(), content);
            assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
        }
    }

    #[test]
    fn a_failed_rename_changes_nothing_and_removes_the_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), b"x").unwrap();
        let err = write_atomic(&target, b"new", Durability::DataAndDir).unwrap_err();
        assert!(!err.changed());
        assert!(
            err.to_string()
                .starts_with("cannot rename a temporary file over"),
            "{err}"
        );
        assert!(temps(dir.path()).is_empty(), "{:?}", temps(dir.path()));
        assert!(target.join("inside").exists());
    }

    #[test]
    fn a_missing_directory_is_reported_with_the_temp_path() {
        let err = write_atomic(
            Path::new("/nonexistent/baton-fs/doc"),
            b"x",
            Durability::Data,
        )
        .unwrap_err();
        assert!(!err.changed());
        let text = err.to_string();
        assert!(
            text.starts_with(
                "cannot create a temporary file '/nonexistent/baton-fs/.doc.baton-tmp-"
            ),
            "{text}"
        );
    }

    #[test]
    fn temp_names_are_hidden_and_keep_no_extension() {
        assert_eq!(
            temp_prefix(Path::new("/a/b.json")),
            OsString::from(".b.json.baton-tmp-")
        );
        let long = "x".repeat(200);
        let p = temp_prefix(Path::new(&long));
        assert_eq!(p.len(), 1 + 160 + 1 + ".baton-tmp-".len());
    }

    #[test]
    fn a_dropped_temp_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let t = TempFile::create(dir.path(), OsStr::new(".t.baton-tmp-"), 0o600).unwrap();
        let path = t.path().to_path_buf();
        assert!(path.exists());
        drop(t);
        assert!(!path.exists());
    }
}
