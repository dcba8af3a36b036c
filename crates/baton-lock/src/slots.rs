//! Waiting for any one of a semaphore's slots.
//!
//! A kernel lock wait names one byte range, and a semaphore's head waiter
//! needs whichever of N slots frees first. So the head waiter (only it: the
//! others wait for their predecessor) watches the lock file where the
//! platform can (inotify on Linux: every release rewrites the metadata and
//! closes the file, and a dead holder's file is closed by the kernel) and
//! tries every slot after each change; elsewhere, or without inotify
//! instances or watches left, it tries the slots at growing intervals.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Instant;

use crate::cancel::CancelToken;
use crate::layout::SLOT_BASE;
use crate::ofd::{self, Kind};
use crate::request::Mode;
use crate::sys;

/// Takes a free slot without waiting.
pub(crate) fn try_slots(file: &File, mode: Mode, slots: u32) -> std::io::Result<Option<u32>> {
    let kind = if mode == Mode::Shared {
        Kind::Read
    } else {
        Kind::Write
    };
    for slot in 0..slots {
        if ofd::try_lock(file, kind, SLOT_BASE + u64::from(slot), 1)? {
            return Ok(Some(slot));
        }
    }
    Ok(None)
}

/// Waits for any of the `slots` of `file` (at `path`) until `deadline`
/// (or a cancel); `Ok(None)` when the deadline passed.
pub(crate) fn wait_any_slot(
    file: &File,
    path: &Path,
    slots: u32,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<Option<u32>> {
    let mut attempt = || try_slots(file, Mode::Semaphore(slots), slots);
    if let Some(watched) = sys::watch_slots(path, deadline, cancel, &mut attempt) {
        return watched;
    }
    // No watch: try the slots at 1 ms, doubling up to 50 ms.
    let mut found = None;
    let got = crate::sys::poll_until(deadline, cancel, || {
        found = attempt()?;
        Ok(found.is_some())
    })?;
    Ok(if got { found } else { None })
}
