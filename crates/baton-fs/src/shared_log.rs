//! What a log that many processes append to, rotate and follow needs of the
//! system, alike on every platform: a file's identity ([`crate::FileId`]), a
//! non-blocking exclusive lock on an open file ([`try_lock_exclusive`]) and
//! a wait for changes in a directory ([`DirWatch`]).
//!
//! - Linux: device and inode, `flock`, inotify.
//! - macOS: device and inode, `flock`; [`DirWatch::wait`] polls (every
//!   [`POLL`]), macOS having no inotify.
//! - Windows: volume serial number and file index; a `LockFileEx` lock on
//!   one byte far beyond any data (Windows locks are mandatory: a lock on
//!   the data would make other handles' reads and writes fail), released
//!   when the handle closes; [`DirWatch::wait`] polls (every [`POLL`]); a
//!   rotation's rename over a file a reader holds open is retried
//!   ([`rename_over`]), and readers close what they finished
//!   ([`KEEP_OPEN_FOR_IDENTITY`]).

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::sys::shared_log as sys;

pub use sys::POLL;

/// Whether a reader must keep a file open for its [`FileId`](crate::FileId) to stay its
/// own: on unix an inode number is reused as soon as its file is deleted;
/// on Windows an NTFS file index carries a sequence number (not reused),
/// and an open file could not be replaced by a rename (see [`rename_over`]).
pub const KEEP_OPEN_FOR_IDENTITY: bool = cfg!(unix);

/// Renames `from` over `to`, replacing it. On unix `rename(2)`, also while
/// others have `to` open. On Windows a file held open cannot always be
/// replaced (wine, FAT32, network shares refuse; NTFS allows it when every
/// opener shares deleting): the rename is retried for about 1 s, readers
/// holding a file briefly, and then fails, changing nothing.
///
/// # Errors
///
/// The system's.
pub fn rename_over(from: &Path, to: &Path) -> io::Result<()> {
    crate::sys::rename(from, to, false)
}

/// Tries once to take an exclusive lock on the open `file`, without
/// waiting: `Ok(false)` when another open file holds it (or the attempt was
/// interrupted). The lock belongs to this open file and is released when it
/// is closed, or when its process dies. Only takers of this lock exclude
/// each other: reads and writes of the file are not hindered.
///
/// # Errors
///
/// The system's, when the file system has no such locks.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    sys::try_lock_exclusive(file)
}

/// Waits for changes to some names in one directory.
pub struct DirWatch {
    inner: sys::DirWatch,
    dir: PathBuf,
    names: Vec<OsString>,
}

impl DirWatch {
    /// Starts watching `dir` for files named one of `names` being created,
    /// written to, or renamed (to or from these names). Changes after this
    /// call are seen by the next [`DirWatch::wait`].
    ///
    /// # Errors
    ///
    /// The system's, when the directory cannot be watched.
    pub fn new(dir: &Path, names: Vec<OsString>) -> io::Result<DirWatch> {
        Ok(DirWatch {
            inner: sys::DirWatch::new(dir)?,
            dir: dir.to_path_buf(),
            names,
        })
    }

    /// The directory watched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Blocks until one of the names changed (or changes were lost) since
    /// the last call; where there is no inotify, returns after [`POLL`]
    /// (callers look again at what they wait for).
    ///
    /// # Errors
    ///
    /// The system's, when the changes cannot be read.
    pub fn wait(&self) -> io::Result<()> {
        self.inner.wait(&self.names)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

    use std::fs::OpenOptions;
    use std::io::{Read, Write};
    use std::time::Duration;

    use super::*;
    use crate::{file_id, path_id};

    fn open(path: &Path) -> File {
        OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn the_lock_excludes_another_open_file_until_closed_and_hinders_no_io() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let (a, mut b) = (open(&path), open(&path));
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(
            !try_lock_exclusive(&b).unwrap(),
            "two open files held the lock"
        );
        // Neither writing nor reading through the other open file is hindered.
        b.write_all(b"line\n").unwrap();
        let mut text = String::new();
        File::open(&path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "line\n");
        drop(a);
        assert!(
            try_lock_exclusive(&b).unwrap(),
            "closing did not release the lock"
        );
    }

    #[test]
    fn identities_tell_files_apart_and_follow_a_rename() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        let f = open(&one);
        drop(open(&two));
        let id = file_id(&f).unwrap();
        assert_eq!(path_id(&one).unwrap(), Some(id));
        assert_ne!(path_id(&two).unwrap(), Some(id));
        std::fs::rename(&one, dir.path().join("one.1")).unwrap();
        assert_eq!(path_id(&one).unwrap(), None);
        assert_eq!(path_id(&dir.path().join("one.1")).unwrap(), Some(id));
    }

    #[test]
    fn a_watch_sees_a_watched_name_appear() {
        let dir = tempfile::tempdir().unwrap();
        let watch = DirWatch::new(dir.path(), vec!["events.jsonl".into()]).unwrap();
        let path = dir.path().join("events.jsonl");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            open(&path).write_all(b"x\n").unwrap();
        });
        let start = std::time::Instant::now();
        watch.wait().unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        writer.join().unwrap();
        assert!(DirWatch::new(&dir.path().join("missing"), Vec::new()).is_err());
    }
}
