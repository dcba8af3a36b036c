//! Linux: an inotify watch on the directory (a watch on a file would follow
//! it to its new name and fall silent after a rename).

use std::ffi::OsString;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::event::{PollFd, PollFlags};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

pub(crate) struct DirWatch {
    fd: OwnedFd,
}

impl DirWatch {
    pub(crate) fn new(dir: &Path) -> io::Result<DirWatch> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)?;
        inotify::add_watch(
            &fd,
            dir,
            WatchFlags::MODIFY | WatchFlags::CREATE | WatchFlags::MOVED_FROM | WatchFlags::MOVED_TO,
        )?;
        Ok(DirWatch { fd })
    }

    pub(crate) fn wait(&self, names: &[OsString]) -> io::Result<()> {
        loop {
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut events = inotify::Reader::new(&self.fd, &mut buf);
            let mut relevant = false;
            loop {
                match events.next() {
                    Ok(e) => {
                        relevant |= e.events().contains(ReadFlags::QUEUE_OVERFLOW)
                            || e.file_name().is_some_and(|n| {
                                names.iter().any(|m| m.as_bytes() == n.to_bytes())
                            });
                    }
                    Err(rustix::io::Errno::WOULDBLOCK) => break,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if relevant {
                return Ok(());
            }
        }
    }
}
