//! Byte-range locks on lock files, on every platform: the safe interface the
//! rest of the crate uses (`sys` holds the platform calls).
//!
//! On Linux and macOS these are open-file-description (OFD) locks; on
//! Windows, `LockFileEx` ranges of a handle. Either belongs to one open file
//! (not to a process or thread), is released when that file is closed,
//! which the kernel does when the holder dies, and is independent of the
//! file's content, so one lock file carries many lockable bytes (see
//! `docs/src/design/locking.md` for the layout).

use once_cell::race::OnceBox;
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Instant;

use crate::cancel::CancelToken;
use crate::sys;

/// Read (shared) or write (exclusive) byte-range lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

/// A conflicting lock reported by [`find_conflict`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conflict {
    pub start: u64,
    /// Its length (0: to the end of the file's address space).
    pub len: u64,
    pub kind: Kind,
}

/// Checks once per process, before the first lock, that byte-range locks
/// work as the protocol needs (on macOS, where OFD locks are a private
/// interface of the kernel, by trying them on a file in `dir`); the reason
/// when they do not. Every later call gives the first answer.
pub(crate) fn locks_work(dir: &Path) -> Result<(), String> {
    // Never blocks (two first callers may both check): a child forked
    // while another thread checks must not hang on a Once copied running.
    static CHECKED: OnceBox<Result<(), String>> = OnceBox::new();
    CHECKED
        .get_or_init(|| Box::new(sys::locks_work(dir)))
        .clone()
}

/// Tries to take a lock without waiting; `Ok(false)` if another holder conflicts.
pub(crate) fn try_lock(file: &File, kind: Kind, start: u64, len: u64) -> io::Result<bool> {
    sys::try_lock(file, kind, start, len)
}

/// Releases what this open file holds in the range (nothing held is no error).
pub(crate) fn unlock(file: &File, start: u64, len: u64) -> io::Result<()> {
    sys::unlock(file, start, len)
}

/// Reports one lock held by another open file that would conflict with
/// taking `kind` over the range, if any. Which one is reported when there
/// are several is up to the platform.
pub(crate) fn find_conflict(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
) -> io::Result<Option<Conflict>> {
    sys::find_conflict(file, kind, start, len)
}

/// Blocks until the lock is taken (`Ok(true)`) or `deadline` passes
/// (`Ok(false)`). `None` waits forever. When `cancel` is cancelled the wait
/// ends with [`cancelled`] as its error.
pub(crate) fn lock_wait(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<bool> {
    if try_lock(file, kind, start, len)? {
        return Ok(true);
    }
    if cancel.is_some_and(CancelToken::is_cancelled) {
        return Err(cancelled());
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(false);
    }
    sys::lock_wait(file, kind, start, len, deadline, cancel)
}

/// The error of a wait ended by a [`CancelToken`].
pub(crate) fn cancelled() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "the wait was cancelled")
}
