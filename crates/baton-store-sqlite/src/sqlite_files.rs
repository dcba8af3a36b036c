//! The SQLite store's files under a running service: who owns them (a
//! lock), whether they are still the files the service opened, whether
//! the last write to them worked, and whether their disk has room for the
//! write-ahead log at its usual size.
//!
//! Guaranteed: a second service on the same store file is refused before it
//! reads or changes anything; a store file or `-wal` file removed or
//! replaced under the service is noticed by the next operation (which then
//! fails, naming the file), so no job is acknowledged into a file that is
//! gone, and what the open files held is first written where a restart
//! finds it, so no job acknowledged before is lost (`sqlite_rescue`); a write that failed (an unwritable file, a full disk) is reported
//! by [`StoreFiles::problem`] until a write works again.
//!
//! On a disk with less than [`LOW_SPACE`] free, the WAL is kept small: the
//! service's usual policy lets it grow to 64 MiB between checkpoints (see
//! `sqlite.rs`), and a WAL that fills the disk can no longer be
//! checkpointed (that needs room in the database file), so every later
//! claim and job end would fail for good. There, SQLite checkpoints after
//! any commit that takes the WAL past [`LOW_SPACE_WAL_PAGES`] (a
//! submission's too) and truncates the WAL back to that size, and a write
//! that failed checkpoints and truncates it at once. The free space is
//! looked at every [`SPACE_CHECK_EVERY`] writes and after each failed one.
//!
//! Not guaranteed: a file removed and put back with the same inode (not
//! possible while the service holds it open) is not noticed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use baton_fs::shared_log::try_lock_exclusive;
use baton_fs::{path_id, FileId};

use super::sqlite_rescue::{self, Lost};

/// Below this much free space on the store's disk, the WAL is kept small:
/// 64 MiB, the WAL's usual bound (`sqlite.rs`).
pub(super) const LOW_SPACE: u64 = 64 * 1024 * 1024;

/// The WAL's size in pages (4 KiB) on a disk low on space: 1 MiB.
pub(super) const LOW_SPACE_WAL_PAGES: i64 = 256;

/// The free space is looked at after this many writes.
const SPACE_CHECK_EVERY: u64 = 64;

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
    // Which file was found changed and what its rescue said, once one was.
    rescued: Mutex<Option<(Lost, String)>>,
    // Writes since the store was opened (see `watch_space`).
    writes: AtomicU64,
    // Whether the WAL is kept small (the disk has less than `LOW_SPACE`).
    low_space: AtomicBool,
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
            rescued: Mutex::new(None),
            writes: AtomicU64::new(0),
            low_space: AtomicBool::new(false),
            _owner: owner,
        })
    }

    /// An error unless the store file and its `-wal` file are still the
    /// ones opened. The first time one is not, what `conn` (the store's
    /// connection, under its lock) holds is first written to where a restart
    /// finds it (`sqlite_rescue`), and the error says where.
    pub(super) fn check(&self, conn: &rusqlite::Connection) -> Result<(), String> {
        let Some((lost, problem)) = self.changed() else {
            return Ok(());
        };
        let mut rescued = self.rescued.lock().unwrap_or_else(PoisonError::into_inner);
        let said = match rescued.as_ref() {
            // Once, but again for a store file lost after only its log was
            // rescued (a copy put in place is not the file opened either).
            Some((done, said)) if *done != Lost::Wal || lost == Lost::Wal => said.clone(),
            _ => {
                let said = sqlite_rescue::rescue(conn, &self.path, &self.wal_path, lost);
                *rescued = Some((lost, said.clone()));
                said
            }
        };
        Err(format!("{problem}; {said}"))
    }

    /// Which file is no longer the one opened, and the message saying so.
    fn changed(&self) -> Option<(Lost, String)> {
        let path = &self.path;
        match identity(path) {
            Ok(id) if id == self.db => {}
            Ok(_) => {
                let problem = format!(
                    "the store file '{}' was replaced while the service ran \
                     (restart the service)",
                    path.display()
                );
                return Some((Lost::Replaced, problem));
            }
            Err(e) => {
                return Some((
                    Lost::Removed,
                    format!(
                        "the store file '{}' is gone ({e}): it was removed while the service ran \
                         (restart the service)",
                        path.display()
                    ),
                ))
            }
        }
        let wal = self.wal?;
        match identity(&self.wal_path) {
            Ok(id) if id == wal => None,
            _ => Some((
                Lost::Wal,
                format!(
                    "the store's write-ahead log '{}' was removed or replaced while the service ran: \
                     what is stored from now on would be lost (restart the service)",
                    self.wal_path.display()
                ),
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

    /// After a write on `conn` (under the connection's lock; `failed`: it
    /// did not commit): on the first, every [`SPACE_CHECK_EVERY`]th and
    /// each failed one, looks at the free space of the store's disk and
    /// keeps the WAL small while it is low (see the module documentation);
    /// `usual_pages` is the WAL's usual bound, restored once there is room.
    pub(super) fn watch_space(&self, conn: &rusqlite::Connection, failed: bool, usual_pages: i64) {
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        if !failed && !n.is_multiple_of(SPACE_CHECK_EVERY) {
            return;
        }
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        // Unknown: as if low (a smaller WAL costs only more checkpoints).
        let free = baton_lock::free_space(dir).map(|s| s.available_bytes);
        let low = !matches!(free, Ok(bytes) if bytes >= LOW_SPACE);
        if low != self.low_space.load(Ordering::Relaxed) {
            let pages = match low {
                true => LOW_SPACE_WAL_PAGES,
                false => usual_pages,
            };
            let set = conn
                .pragma_update(None, "wal_autocheckpoint", pages)
                .and_then(|()| conn.pragma_update(None, "journal_size_limit", pages * 4096));
            match set {
                Ok(()) => {
                    self.low_space.store(low, Ordering::Relaxed);
                    tracing::info!(target: "baton_serve::store", low, free = ?free.ok(), path = %self.path.display(), "the WAL is kept small while the store's disk is low on space");
                }
                Err(e) => {
                    tracing::warn!(target: "baton_serve::store", error = %e, "cannot change the WAL's checkpoints")
                }
            }
        }
        if failed && low {
            let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(1)
            });
            tracing::debug!(target: "baton_serve::store", pages = ?done, "checkpoint after a failed write");
        }
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
    let mut file = crate::private_file(
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
        tracing::warn!(target: "baton_serve::store", path = %lock_path.display(), error = %e, "cannot record this process in the store's lock");
    }
    Ok(file)
}
