//! The SQLite store's files under a running service: who owns them (a
//! lock), whether they are still the files the service opened, and whether
//! the last write to them worked.
//!
//! Guaranteed: a second service on the same store file is refused before it
//! reads or changes anything; a store file or `-wal` file removed or
//! replaced under the service is noticed by the next operation (which then
//! fails, naming the file), so no job is acknowledged into a file that is
//! gone; a write that failed (an unwritable file, a full disk) is reported
//! by [`StoreFiles::problem`] until a write works again.
//!
//! Not guaranteed: a file removed and put back with the same inode (not
//! possible while the service holds it open) is not noticed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use baton_fs::shared_log::try_lock_exclusive;
use baton_fs::{path_id, FileId};

/// The store's files as the service opened them.
pub(super) struct StoreFiles {
    path: PathBuf,
    // The store file's identity (device and inode; on Windows volume and
    // file index) when it was opened.
    db: FileId,
    wal_path: PathBuf,
    // The -wal file's, if it existed once the store was opened.
    wal: Option<FileId>,
    // Why the last write failed; `None` once one works.
    problem: Mutex<Option<String>>,
    // `<store>.lock`, locked exclusively (flock; on Windows LockFileEx) for as long as the store is open:
    // one service owns the store (the kernel releases it when the service
    // dies, even by SIGKILL).
    _owner: File,
}

fn identity(path: &Path) -> std::io::Result<FileId> {
    path_id(path)?.ok_or_else(|| std::io::ErrorKind::NotFound.into())
}

impl StoreFiles {
    /// The files at `path` as they are now (the store just opened and
    /// written to), owned through `owner` (see [`own`]).
    pub(super) fn new(path: &Path, owner: File) -> Result<StoreFiles, String> {
        let db = identity(path).map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let wal_path = PathBuf::from(wal_path);
        Ok(StoreFiles {
            path: path.to_path_buf(),
            db,
            wal: identity(&wal_path).ok(),
            wal_path,
            problem: Mutex::new(None),
            _owner: owner,
        })
    }

    /// An error unless the store file and its `-wal` file are still the
    /// ones opened.
    pub(super) fn check(&self) -> Result<(), String> {
        let path = &self.path;
        match identity(path) {
            Ok(id) if id == self.db => {}
            Ok(_) => {
                return Err(format!(
                    "the store file '{}' was replaced while the service ran (restart the service)",
                    path.display()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "the store file '{}' is gone ({e}): it was removed while the service ran \
                     (restart the service)",
                    path.display()
                ))
            }
        }
        let Some(wal) = self.wal else {
            return Ok(());
        };
        match identity(&self.wal_path) {
            Ok(id) if id == wal => Ok(()),
            _ => Err(format!(
                "the store's write-ahead log '{}' was removed or replaced while the service ran: \
                 what is stored from now on would be lost (restart the service)",
                self.wal_path.display()
            )),
        }
    }

    /// The message for a failed query: SQLite's, naming the store.
    pub(super) fn failed(&self, e: &rusqlite::Error) -> String {
        format!("'{}': {e}", self.path.display())
    }

    /// Records how a write ended (`Some`: its error).
    pub(super) fn wrote(&self, error: Option<&String>) {
        *self.problem.lock().unwrap_or_else(PoisonError::into_inner) = error.cloned();
    }

    /// Why the last write failed, if it did.
    pub(super) fn problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Takes the lock that makes this process the store's one owner: an
/// exclusive lock on `<path>.lock` (flock; on Windows LockFileEx on a byte
/// beyond the pid written in it), never removed (the kernel releases it
/// when its holder ends), then records this process's pid in it for the
/// message another service gets.
pub(super) fn own(path: &Path) -> Result<std::fs::File, String> {
    use std::io::{Read, Seek, Write};
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let mut file = crate::sys::private_file(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )
    .open(&lock_path)
    .map_err(|e| format!("cannot open '{}': {e}", lock_path.display()))?;
    match try_lock_exclusive(&file) {
        Ok(true) => {}
        Ok(false) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let pid = holder.trim();
            let who = if pid.is_empty() {
                String::new()
            } else {
                format!(" (pid {pid})")
            };
            return Err(format!(
                "the store '{}' is in use by another `baton serve`{who}: one SQLite store \
                 belongs to one service (its lock '{}' is held)",
                path.display(),
                lock_path.display()
            ));
        }
        Err(e) => return Err(format!("cannot lock '{}': {e}", lock_path.display())),
    }
    let recorded = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    if let Err(e) = recorded {
        tracing::warn!(path = %lock_path.display(), error = %e, "cannot record this process in the store's lock");
    }
    Ok(file)
}
