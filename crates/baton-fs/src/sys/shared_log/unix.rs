//! Linux and macOS: `flock`.

use std::fs::File;
use std::io;

use rustix::fs::FlockOperation;

pub(crate) fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match rustix::fs::flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
