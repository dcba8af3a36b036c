//! Shared baton dirs on Windows: none (no set-group-ID directories; a
//! directory is shared through its ACL, which baton leaves alone).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

/// Mode bits that make a directory shared on Unix (never set on Windows).
pub const SHARED_DIR_BITS: u32 = 0o2070;

/// Never: Windows has no set-group-ID directories.
pub fn is_shared(_dir: &Path) -> bool {
    false
}

/// Creates directory `path` (its ACL inherited from its parent); an
/// existing one is left as it is.
pub fn create_dir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Opens `path` with `options` (which must not ask to create), creating it
/// if it does not exist (`private` is a Unix mode: ignored).
pub fn open_or_create(path: &Path, options: &OpenOptions, _private: u32) -> io::Result<File> {
    for _ in 0..8 {
        match options.open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let mut create = options.clone();
        create.create_new(true);
        match create.open(path) {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    options.open(path)
}

/// Nothing to do on Windows.
pub fn share_new_file(_file: &File, _path: &Path) -> io::Result<()> {
    Ok(())
}

/// Never: Windows groups are not Unix groups.
pub fn is_member(_gid: u32) -> bool {
    false
}

/// None: Windows groups have no Unix ids.
pub fn group_id(_name: &str) -> Option<u32> {
    None
}

/// None: Windows groups have no Unix ids.
pub fn group_name(_gid: u32) -> Option<String> {
    None
}

/// `gid N`.
pub fn describe_group(gid: u32) -> String {
    format!("gid {gid}")
}

/// Nothing to do on Windows (no umask).
pub fn open_umask_to_group() {}
