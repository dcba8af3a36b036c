//! macOS: OFD locks, checked at run time, and deadline waits by polling.
//!
//! XNU implements `F_OFD_SETLK`, `F_OFD_SETLKW` and `F_OFD_GETLK` with the
//! Linux semantics, but as a private interface, so baton does not assume
//! them: [`locks_work`] tries them once per process (two open files of one
//! file in the baton dir: a write lock on one must make the other's attempt
//! fail, `F_OFD_GETLK` must report it, and closing the first must free it)
//! and every lock call fails with the reason when they do not work; baton
//! never falls back to a weaker lock.
//!
//! There are no per-thread timers (`SIGEV_THREAD_ID`) and no real-time
//! signals to interrupt a blocked `F_OFD_SETLKW`: a wait without deadline
//! or cancel blocks in the kernel; one with either tries at 1 ms, doubling
//! up to 50 ms (`poll.rs`). A watchdog thread that interrupts the waiter
//! would need a signal of the application's, which a library must not take.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Instant;

use super::poll;
use crate::cancel::CancelToken;
use crate::ofd::Kind;

/// Tries OFD locks on a temporary file in `dir`; the reason when they do
/// not behave as the protocol needs.
pub(crate) fn locks_work(dir: &Path) -> Result<(), String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!(".ofd-check-{}-{nanos}", std::process::id());
    // In the baton dir (its filesystem is the one that matters); in the
    // temporary dir when this process may not create files there (another
    // user's shared dir, read through `status`).
    let mut path = dir.join(&name);
    let open =
        |path: &Path, create: bool| super::probe_file_options().create_new(create).open(path);
    let first = match open(&path, true) {
        Ok(f) => f,
        Err(_) => {
            path = std::env::temp_dir().join(&name);
            open(&path, true).map_err(|e| {
                format!(
                    "open-file-description locks could not be checked: cannot create '{}': {e}",
                    path.display()
                )
            })?
        }
    };
    let second = open(&path, false);
    let _ = std::fs::remove_file(&path);
    let second = second.map_err(|e| {
        format!(
            "open-file-description locks could not be checked: cannot open '{}': {e}",
            path.display()
        )
    })?;
    check(first, &second)
        .map_err(|why| format!("open-file-description locks do not work on this system: {why}"))
}

fn check(first: File, second: &File) -> Result<(), String> {
    const BYTE: u64 = 1 << 41;
    let err = |what: &str, e: io::Error| format!("{what}: {e}");
    if !super::try_lock(&first, Kind::Write, BYTE, 1).map_err(|e| err("F_OFD_SETLK", e))? {
        return Err("a write lock on a fresh file was refused".into());
    }
    if super::try_lock(second, Kind::Read, BYTE, 1).map_err(|e| err("F_OFD_SETLK", e))? {
        return Err("a second open file got a lock that conflicts with the first's".into());
    }
    match super::find_conflict(second, Kind::Read, BYTE, 1).map_err(|e| err("F_OFD_GETLK", e))? {
        Some(c) if c.kind == Kind::Write && c.start == BYTE => {}
        other => {
            return Err(format!(
                "F_OFD_GETLK did not report the conflicting lock ({other:?})"
            ))
        }
    }
    drop(first);
    if !super::try_lock(second, Kind::Write, BYTE, 1).map_err(|e| err("F_OFD_SETLK", e))? {
        return Err("closing the file did not release its lock".into());
    }
    Ok(())
}

/// Waits for the lock: in the kernel when nothing bounds the wait, else by
/// trying it at growing intervals.
pub(crate) fn lock_wait(
    file: &File,
    kind: Kind,
    start: u64,
    len: u64,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<bool> {
    if deadline.is_none() && cancel.is_none() {
        loop {
            match super::lock_blocking(file, kind, start, len) {
                Ok(()) => return Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }
    poll::until(deadline, cancel, || super::try_lock(file, kind, start, len))
}

/// Semaphore waiters poll on macOS (no inotify; see `slots.rs`).
pub(crate) fn watch_slots(
    _path: &Path,
    _deadline: Option<Instant>,
    _cancel: Option<&CancelToken>,
    _attempt: &mut dyn FnMut() -> io::Result<Option<u32>>,
) -> Option<io::Result<Option<u32>>> {
    None
}

/// Holders through deleted or replaced lock files cannot be found on macOS
/// (no `/proc/locks`): `None`, "cannot tell".
pub(crate) fn holders_elsewhere(_mark: u64, _ours: Option<super::FileId>) -> Option<Vec<String>> {
    None
}

/// The processes holding a lock's slots cannot be listed on macOS.
pub(crate) fn kernel_holders(
    _file: super::FileId,
    _max: u32,
) -> Vec<crate::kernel_holders::KernelHolder> {
    Vec::new()
}

/// inotify is Linux-only.
pub(crate) fn try_inotify(_dir: &Path) -> Result<(), String> {
    Err("inotify is Linux-only: semaphore waiters poll (1 ms doubling to 50 ms)".into())
}
