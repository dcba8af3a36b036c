//! A lock file deleted or replaced while held (`docs/src/design/locking.md`, "When the lock
//! file is deleted").
//!
//! Kernel locks belong to an inode. If someone deletes `locks/L.lock` (or the
//! whole baton dir, or renames it) while L is held, the next acquirer creates
//! a new file and would get the lock at once, beside the holder that still
//! holds the old inode. To prevent that, every holder also takes a read lock on
//! a *marker* byte of its lock file whose offset is derived from the baton
//! dir's path and the lock's name. Markers of every open lock file appear in
//! `/proc/locks` with their inode, so an acquirer on a file that is new to the
//! lock (its document does not name its inode) looks for markers of the same
//! name on other inodes and waits until they are gone. Only Linux has
//! `/proc/locks`: macOS cannot see such holders (`docs/src/design/locking.md`, "Platforms"),
//! and Windows refuses to delete or rename a lock file while it is open.

use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::cancel::CancelToken;
use crate::sys;
pub(crate) use crate::sys::FileId;

/// First marker byte; markers span 2^48 bytes above it.
const MARK_BASE: u64 = 1 << 48;

/// The marker byte of lock `name` in the baton dir at `dir`.
pub(crate) fn marker(dir: &Path, name: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(dir.as_os_str().as_encoded_bytes());
    h.update([0]);
    h.update(name.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&d[..6]);
    MARK_BASE + u64::from_be_bytes(b)
}

/// Whether `path` still names the open `file` (not deleted, renamed or replaced).
pub(crate) fn still_at_path(file_id: FileId, path: &Path) -> bool {
    sys::path_id(path).is_ok_and(|id| id == file_id)
}

/// Files other than `ours` on which a holder of the same lock holds its
/// marker, as `dev:ino` strings; `None` when this system cannot tell
/// (macOS: no `/proc/locks`; Linux without `/proc`). On Windows a held lock
/// file cannot be deleted or renamed, so there are none.
pub(crate) fn holders_elsewhere(mark: u64, ours: Option<FileId>) -> Option<Vec<String>> {
    sys::holders_elsewhere(mark, ours)
}

/// How [`wait_until_gone`] ended.
pub(crate) enum Gone {
    /// No holder through another file is left.
    Clear,
    /// Our own file is no longer at the lock's path: start again.
    OursReplaced,
    /// The request was cancelled.
    Cancelled,
    /// The deadline passed.
    TimedOut,
}

/// Waits until no file other than `ours` carries a marker of this lock.
/// `Ok(false)` when `deadline` passes first.
///
/// Nothing notifies a waiter when a process closes a file that it can no
/// longer open, so this is the one wait in baton that polls `/proc/locks`
/// (from 1 ms, doubling up to 50 ms): it happens only after someone deleted or
/// replaced a lock file while it was held.
pub(crate) fn wait_until_gone(
    mark: u64,
    ours: FileId,
    path: &Path,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> Gone {
    let mut pause = Duration::from_millis(1);
    loop {
        if holders_elsewhere(mark, Some(ours)).is_none_or(|h| h.is_empty()) {
            return Gone::Clear;
        }
        // Deleted again while we wait: whoever holds the newest file must
        // not wait for us, nor we for them (docs/src/design/locking.md).
        if !still_at_path(ours, path) {
            return Gone::OursReplaced;
        }
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Gone::Cancelled;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Gone::TimedOut;
        }
        let nap = deadline.map_or(pause, |d| pause.min(d - now));
        std::thread::sleep(nap);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_differ_by_dir_and_name_and_stay_in_their_range() {
        let a = marker(Path::new("/a"), "x");
        assert_ne!(a, marker(Path::new("/b"), "x"));
        assert_ne!(a, marker(Path::new("/a"), "y"));
        assert_eq!(a, marker(Path::new("/a"), "x"));
        assert!((MARK_BASE..MARK_BASE * 2).contains(&a));
        assert!(i64::try_from(a).is_ok());
    }
}
