//! A file's identity, the one way baton tells whether two names, or a name
//! and an open file, are the same file: on unix its device and inode; on
//! Windows its volume serial number and file index (from an open handle).

use std::fs::{File, Metadata};
use std::io;
use std::path::Path;

use crate::sys;

/// A file's identity: two names with the same identity are the same file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    volume: u64,
    index: u64,
}

impl FileId {
    /// The identity in `meta` (as a directory walk has it): on unix its
    /// device and inode; `None` on Windows, where std's `Metadata` has no
    /// stable file index (use [`file_id`] or [`path_id`] there, which open
    /// the file).
    pub fn of_metadata(meta: &Metadata) -> Option<FileId> {
        sys::metadata_id(meta).map(|(volume, index)| FileId { volume, index })
    }
}

/// The identity of the open `file`.
///
/// # Errors
///
/// The system's, when the file cannot be inspected.
pub fn file_id(file: &File) -> io::Result<FileId> {
    let (volume, index) = sys::file_id(file)?;
    Ok(FileId { volume, index })
}

/// The identity of the file at `path`, `None` if there is none (a symbolic
/// link is followed).
///
/// # Errors
///
/// The system's, when it cannot be inspected (other than not found).
pub fn path_id(path: &Path) -> io::Result<Option<FileId>> {
    match sys::path_id(path) {
        Ok((volume, index)) => Ok(Some(FileId { volume, index })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

    use super::*;

    #[test]
    fn a_hard_link_is_the_same_file_and_a_copy_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let one = dir.path().join("one");
        std::fs::write(&one, b"x").unwrap();
        let link = dir.path().join("link");
        std::fs::hard_link(&one, &link).unwrap();
        let copy = dir.path().join("copy");
        std::fs::copy(&one, &copy).unwrap();
        let id = file_id(&File::open(&one).unwrap()).unwrap();
        assert_eq!(path_id(&link).unwrap(), Some(id));
        assert_ne!(path_id(&copy).unwrap(), Some(id));
        assert_eq!(path_id(&dir.path().join("none")).unwrap(), None);
        // From a walk's metadata: the same identity where there is one.
        let meta = |p: &Path| FileId::of_metadata(&std::fs::symlink_metadata(p).unwrap());
        if cfg!(unix) {
            assert_eq!(meta(&one), Some(id));
            assert_eq!(meta(&link), Some(id));
            assert_ne!(meta(&copy), Some(id));
        } else {
            assert_eq!(meta(&one), None);
        }
    }
}
