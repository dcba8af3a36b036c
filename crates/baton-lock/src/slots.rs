//! Waiting for any one of a semaphore's slots.
//!
//! A kernel lock wait names one byte range, and a semaphore's head waiter
//! needs whichever of N slots frees first. So the head waiter (only it: the
//! others wait for their predecessor) watches the lock file with inotify:
//! every release rewrites the metadata (`IN_MODIFY`) and closes the file
//! (`IN_CLOSE_WRITE`), and a holder that dies has its file closed by the
//! kernel (`IN_CLOSE_WRITE`). After each event it tries every slot again.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use crate::lock::{try_slots, Mode};

pub(crate) fn wait_any_slot(
    file: &File,
    path: &Path,
    slots: u32,
    deadline: Option<Instant>,
) -> io::Result<Option<u32>> {
    let watch = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
    inotify::add_watch(
        &watch,
        path,
        WatchFlags::MODIFY | WatchFlags::CLOSE_WRITE | WatchFlags::ATTRIB,
    )?;
    let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
    loop {
        // Watch first, then try: a release between the two is not missed.
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
        let mut fds = [PollFd::new(&watch, PollFlags::IN)];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        // Drain whatever arrived; the content does not matter.
        let mut reader = inotify::Reader::new(watch.as_fd(), &mut buf);
        loop {
            match reader.next() {
                Ok(_) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
