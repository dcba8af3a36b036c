//! The META byte's lock: held around every read-modify-write of a lock's
//! metadata (`docs/src/design/locking.md`), and by readers that want a consistent document.

use std::fs::File;
use std::time::Instant;

use crate::cancel::CancelToken;
use crate::layout::META;
use crate::ofd::{self, Kind};

/// How long bookkeeping (a release, recording a command) waits for META.
const META_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// The least a wait for META lasts, whatever the caller's deadline: a META
/// section is a few system calls (a grant, a release, a `status` reader), so
/// a `--no-wait` or a short `--wait` that met one in progress would read a
/// free lock as busy. Only a process stopped inside its section makes a
/// wait last this long.
const META_FLOOR: std::time::Duration = std::time::Duration::from_millis(200);

/// The exclusive write lock on the META byte, released on drop.
pub(crate) struct MetaLock<'f> {
    file: &'f File,
}

impl<'f> MetaLock<'f> {
    /// The write lock on META, waiting at most until `deadline`. A holder of
    /// META keeps it for a few system calls, so a long wait means a process
    /// stopped inside its section (SIGSTOP, a debugger, a frozen cgroup):
    /// every wait for it is bounded, and the caller decides what to do. A
    /// deadline closer than [`META_FLOOR`] is moved out to it.
    pub(crate) fn write_until(
        file: &'f File,
        deadline: Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> std::io::Result<Option<Self>> {
        let deadline = deadline.map(|d| d.max(Instant::now() + META_FLOOR));
        Ok(
            ofd::lock_wait(file, Kind::Write, META, 1, deadline, cancel)?
                .then_some(MetaLock { file }),
        )
    }

    /// The write lock on META for bookkeeping that must not hang behind a
    /// stopped process: gives up after [`META_PATIENCE`] with `TimedOut`.
    pub(crate) fn write(file: &'f File) -> std::io::Result<Self> {
        MetaLock::write_until(file, Some(Instant::now() + META_PATIENCE), None)?.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "another process has held the lock's metadata for too long (stopped?)",
            )
        })
    }

    /// A shared lock on META for readers; `None` if a writer holds it past
    /// `patience` (a stopped process, say): the caller then reads without it.
    pub(crate) fn read(
        file: &'f File,
        patience: std::time::Duration,
    ) -> std::io::Result<Option<Self>> {
        let deadline = Instant::now() + patience;
        if ofd::lock_wait(file, Kind::Read, META, 1, Some(deadline), None)? {
            Ok(Some(MetaLock { file }))
        } else {
            Ok(None)
        }
    }
}

impl Drop for MetaLock<'_> {
    fn drop(&mut self) {
        let _ = ofd::unlock(self.file, META, 1);
    }
}
