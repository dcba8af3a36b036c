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
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use crate::cancel::CancelToken;
use crate::layout::SLOT_BASE;
use crate::ofd::{self, cancelled, Alarm, AlarmFor, Kind};
use crate::request::Mode;

thread_local! {
    static WATCHER: RefCell<Option<OwnedFd>> = const { RefCell::new(None) };
}

/// Takes a free slot without waiting.
pub(crate) fn try_slots(file: &File, mode: Mode, slots: u32) -> std::io::Result<Option<u32>> {
    let fd = file.as_fd();
    let kind = if mode == Mode::Shared {
        Kind::Read
    } else {
        Kind::Write
    };
    for slot in 0..slots {
        if ofd::try_lock(fd, kind, SLOT_BASE + u64::from(slot), 1)? {
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
    let wait = SlotWait {
        file,
        slots,
        deadline,
        cancel,
    };
    WATCHER.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            // Out of inotify instances (`max_user_instances`) or none at all:
            // wait anyway, by trying the slots at growing intervals.
            match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
                Ok(fd) => *cell = Some(fd),
                Err(_) => return wait.polling(),
            }
        }
        match cell.as_ref() {
            Some(watch) => wait.watching(watch, path),
            None => wait.polling(),
        }
    })
}

/// Longest pause of the fallback without inotify.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// One wait for any of a semaphore's slots.
#[derive(Clone, Copy)]
struct SlotWait<'a> {
    file: &'a File,
    slots: u32,
    deadline: Option<Instant>,
    cancel: Option<&'a CancelToken>,
}

impl SlotWait<'_> {
    /// The fallback without inotify: try every slot at 1 ms, doubling up to
    /// [`MAX_PAUSE`], until one is free or the deadline passes.
    fn polling(&self) -> io::Result<Option<u32>> {
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(slot) = try_slots(self.file, Mode::Semaphore(self.slots), self.slots)? {
                return Ok(Some(slot));
            }
            if self.cancel.is_some_and(CancelToken::is_cancelled) {
                return Err(cancelled());
            }
            let now = Instant::now();
            if self.deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            std::thread::sleep(self.deadline.map_or(pause, |d| pause.min(d - now)));
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Waits with an inotify watch on `path`.
    fn watching(&self, watch: &OwnedFd, path: &Path) -> io::Result<Option<u32>> {
        let wd = match inotify::add_watch(
            watch,
            path,
            WatchFlags::MODIFY | WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB,
        ) {
            Ok(wd) => wd,
            // Out of watches (`max_user_watches`): wait without them.
            Err(_) => return self.polling(),
        };
        let result = self.events(watch);
        let _ = inotify::remove_watch(watch, wd);
        result
    }

    fn events(&self, watch: &OwnedFd) -> io::Result<Option<u32>> {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        // The kernel reports a close (`__fput`: fsnotify before the file's locks
        // are removed) a moment before a dead holder's slot is free: after an
        // event that found no free slot, look again at 1, 4, 16 and 64 ms.
        let mut recheck: Option<Duration> = None;
        // Only to be interrupted by a cancel: the poll's own timeout is the deadline.
        let _alarm = match Alarm::for_wait(None, self.cancel)? {
            AlarmFor::Armed(alarm) => alarm,
            AlarmFor::Cancelled | AlarmFor::Expired => return Err(cancelled()),
        };
        loop {
            // Forget events from earlier waits, then try: a release after the
            // watch was added is either seen by this try or wakes the poll.
            drain(watch, &mut buf)?;
            if let Some(slot) = try_slots(self.file, Mode::Semaphore(self.slots), self.slots)? {
                return Ok(Some(slot));
            }
            let left = match self.deadline {
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
            if self.cancel.is_some_and(CancelToken::is_cancelled) {
                return Err(cancelled());
            }
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
