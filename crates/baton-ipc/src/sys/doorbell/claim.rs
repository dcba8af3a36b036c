//! A bell's claim on its name in a directory of socket files: an exclusive
//! `flock` on `<dir>/<h>.lock`, held as long as the bell lives, and the
//! sweep of dead bells' files (the protocol is in [`super::files`]).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;
use rustix::io::Errno;

/// `e`, saying what was done to which path (its kind kept).
pub(super) fn in_context(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("cannot {what} {}: {e}", path.display()))
}

/// Removes the file `path`; gone already is fine.
pub(super) fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The lock that makes a bell's name its own (see the module
/// documentation); dropping it removes the bell's files.
pub(crate) struct Claim {
    pub(super) socket: PathBuf,
    lock: PathBuf,
    _file: File,
}

impl Claim {
    /// Takes the claim of `<dir>/<stem>`: `AddrInUse` when a live bell has it.
    pub(super) fn take(dir: &Path, stem: &str) -> io::Result<Claim> {
        let lock = dir.join(format!("{stem}.lock"));
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).mode(0o600);
        // Each turn that loses needs a remover to finish in between: a
        // handful of turns is plenty.
        for _ in 0..64 {
            let at = |e: io::Error| in_context(e, "claim the doorbell", &lock);
            let file = options.open(&lock).map_err(at)?;
            match lock_if_current(&file, &lock).map_err(at)? {
                Locked::Yes => {
                    return Ok(Claim {
                        socket: dir.join(stem),
                        lock,
                        _file: file,
                    })
                }
                Locked::Busy => {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "a doorbell is bound at {} already",
                            dir.join(stem).display()
                        ),
                    ))
                }
                Locked::Removed => {}
            }
        }
        Err(io::Error::other(format!(
            "cannot claim the doorbell {}: its lock file is removed again at every try",
            lock.display()
        )))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // The socket first: once the lock file is gone, a new bell of the
        // name may bind its own socket at once.
        let _ = remove(&self.socket);
        let _ = remove(&self.lock);
    }
}

enum Locked {
    /// Locked, and the path still names this file.
    Yes,
    /// Another open file holds the lock.
    Busy,
    /// Locked, but the path was removed (or names another file) meanwhile.
    Removed,
}

fn lock_if_current(file: &File, path: &Path) -> io::Result<Locked> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(Errno::WOULDBLOCK) => return Ok(Locked::Busy),
        Err(e) => return Err(e.into()),
    }
    let open = file.metadata()?;
    let current = match fs::symlink_metadata(path) {
        Ok(m) => m.dev() == open.dev() && m.ino() == open.ino(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    Ok(if current {
        Locked::Yes
    } else {
        Locked::Removed
    })
}

/// Removes the files of the dead bells of `dir` (best effort).
pub(super) fn sweep(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        let lock = entry.path();
        let Ok(file) = File::open(&lock) else {
            continue;
        };
        if let Ok(Locked::Yes) = lock_if_current(&file, &lock) {
            drop(Claim {
                socket: dir.join(stem),
                lock,
                _file: file,
            });
        }
    }
}
