//! inotify for a semaphore's head waiter: every release rewrites the
//! metadata (`IN_MODIFY`) and closes the file (`IN_CLOSE_WRITE`), and a
//! holder that dies has its file closed by the kernel (`IN_CLOSE_WRITE`).
//! After each event the waiter tries every slot again.
//!
//! The inotify instance is kept per thread for the thread's lifetime: closing
//! one waits for a kernel grace period (several milliseconds), which would
//! otherwise be paid by every semaphore handoff. Each wait adds a watch on the
//! lock file and removes it afterwards.

use std::cell::RefCell;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use super::{Alarm, AlarmFor};
use crate::cancel::CancelToken;
use crate::ofd::cancelled;

thread_local! {
    static WATCHER: RefCell<Option<OwnedFd>> = const { RefCell::new(None) };
}

/// Calls `attempt` after every change to the file at `path` until it finds
/// a slot, `deadline` passes (`Ok(None)`) or `cancel` fires. `None` when
/// inotify cannot be used (no instance or watch left: `max_user_instances`,
/// `max_user_watches`): the caller then polls.
pub(crate) fn watch_slots(
    path: &Path,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
    attempt: &mut dyn FnMut() -> io::Result<Option<u32>>,
) -> Option<io::Result<Option<u32>>> {
    WATCHER.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?);
        }
        let watch = cell.as_ref()?;
        let wd = inotify::add_watch(
            watch,
            path,
            WatchFlags::MODIFY | WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB,
        )
        .ok()?;
        let result = events(watch, deadline, cancel, attempt);
        let _ = inotify::remove_watch(watch, wd);
        Some(result)
    })
}

fn events(
    watch: &OwnedFd,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
    attempt: &mut dyn FnMut() -> io::Result<Option<u32>>,
) -> io::Result<Option<u32>> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    // The kernel reports a close (`__fput`: fsnotify before the file's locks
    // are removed) a moment before a dead holder's slot is free: after an
    // event that found no free slot, look again at 1, 4, 16 and 64 ms.
    let mut recheck: Option<Duration> = None;
    // Only to be interrupted by a cancel: the poll's own timeout is the deadline.
    let _alarm = match Alarm::for_wait(None, cancel)? {
        AlarmFor::Armed(alarm) => alarm,
        AlarmFor::Cancelled | AlarmFor::Expired => return Err(cancelled()),
    };
    loop {
        // Forget events from earlier waits, then try: a release after the
        // watch was added is either seen by this try or wakes the poll.
        drain(watch, &mut buf)?;
        if let Some(slot) = attempt()? {
            return Ok(Some(slot));
        }
        let left = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                Some(left)
            }
        };
        let wait = match (left, recheck) {
            (Some(l), Some(r)) => Some(l.min(r)),
            (l, r) => l.or(r),
        };
        let timeout = wait.map(|w| Timespec {
            tv_sec: w.as_secs() as i64,
            tv_nsec: i64::from(w.subsec_nanos()),
        });
        let mut fds = [PollFd::new(watch, PollFlags::IN)];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => {
                // A re-check came due (or the deadline): next one later, if any.
                recheck = recheck.map(|r| r * 4).filter(|r| *r <= RECHECK_LAST);
            }
            Ok(_) => recheck = Some(RECHECK_FIRST),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if cancel.is_some_and(CancelToken::is_cancelled) {
            return Err(cancelled());
        }
    }
}

/// First and last re-check after an event that found no free slot.
const RECHECK_FIRST: Duration = Duration::from_millis(1);
const RECHECK_LAST: Duration = Duration::from_millis(64);

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

/// Whether an inotify instance can be made and can watch `dir`; why not.
pub(crate) fn try_inotify(dir: &Path) -> Result<(), String> {
    use rustix::fs::inotify::{add_watch, init};
    init(CreateFlags::CLOEXEC)
        .map_err(|e| format!("cannot create an inotify instance: {e}"))
        .and_then(|fd| {
            add_watch(&fd, dir, WatchFlags::CLOSE_WRITE)
                .map(drop)
                .map_err(|e| format!("cannot watch '{}': {e}", dir.display()))
        })
}
