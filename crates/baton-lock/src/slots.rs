//! Waiting for any one of a semaphore's slots.
//!
//! A kernel lock wait names one byte range, and a semaphore's head waiter
//! needs whichever of N slots frees first. So the head waiter (only it: the
//! others wait for their predecessor) watches the lock file with inotify:
//! every release rewrites the metadata (`IN_MODIFY`) and closes the file
//! (`IN_CLOSE_WRITE`), and a holder that dies has its file closed by the
//! kernel (`IN_CLOSE_WRITE`). After each event it tries every slot again.
//!
//! The inotify instance is kept per thread for the thread's lifetime: closing
//! one waits for a kernel grace period (several milliseconds), which would
//! otherwise be paid by every semaphore handoff. Each wait adds a watch on the
//! lock file and removes it afterwards.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use crate::cancel::CancelToken;
use crate::lock::{try_slots, Mode};
use crate::ofd::{cancelled, Alarm, AlarmFor};

thread_local! {
    static WATCHER: RefCell<Option<OwnedFd>> = const { RefCell::new(None) };
}

pub(crate) fn wait_any_slot(
    file: &File,
    path: &Path,
    slots: u32,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<Option<u32>> {
    WATCHER.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?);
        }
        match cell.as_ref() {
            Some(watch) => wait_with(watch, file, path, slots, deadline, cancel),
            None => Err(io::Error::other("inotify instance missing")),
        }
    })
}

fn wait_with(
    watch: &OwnedFd,
    file: &File,
    path: &Path,
    slots: u32,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<Option<u32>> {
    let wd = inotify::add_watch(
        watch,
        path,
        WatchFlags::MODIFY | WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB,
    )?;
    let result = wait_events(watch, file, slots, deadline, cancel);
    let _ = inotify::remove_watch(watch, wd);
    result
}

fn wait_events(
    watch: &OwnedFd,
    file: &File,
    slots: u32,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> io::Result<Option<u32>> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    // Only to be interrupted by a cancel: the poll's own timeout is the deadline.
    let _alarm = match Alarm::for_wait(None, cancel)? {
        AlarmFor::Armed(alarm) => alarm,
        AlarmFor::Cancelled | AlarmFor::Expired => return Err(cancelled()),
    };
    loop {
        // Forget events from earlier waits, then try: a release after the
        // watch was added is either seen by this try or wakes the poll.
        drain(watch, &mut buf)?;
        if let Some(slot) = try_slots(file, Mode::Semaphore(slots), slots)? {
            return Ok(Some(slot));
        }
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                Some(Timespec {
                    tv_sec: left.as_secs() as i64,
                    tv_nsec: i64::from(left.subsec_nanos()),
                })
            }
        };
        let mut fds = [PollFd::new(watch, PollFlags::IN)];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(cancelled());
        }
    }
}

/// Reads and discards whatever events are queued.
fn drain(watch: &OwnedFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<()> {
    let mut reader = inotify::Reader::new(watch.as_fd(), buf);
    loop {
        match reader.next() {
            Ok(_) => {}
            Err(rustix::io::Errno::AGAIN) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
