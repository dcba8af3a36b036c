//! The child does not run the command until the supervisor has recorded it.
//!
//! Between fork and exec the child writes its pid into one pipe and waits
//! for one byte on another. A thread of the supervisor reads the pid, lets
//! the caller record the command's process group (with its locks, so that
//! the next holder can find what is left if the supervisor dies), and only
//! then lets the child go on to exec. So there is no moment at which the
//! command runs unrecorded: a supervisor killed before the record kills the
//! child with it (parent-death signal), before it started anything.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::io::{read, write, Errno};
use rustix::pipe::{pipe_with, PipeFlags};

/// The two pipes of one spawn.
pub(crate) struct Handshake {
    /// The supervisor reads the child's pid here.
    pub(crate) pid_read: OwnedFd,
    /// The child writes its pid here (the supervisor closes its copy once
    /// the spawn returned, so a child that never wrote means end of file).
    pub(crate) pid_write: Option<OwnedFd>,
    /// The child waits here for the go-ahead.
    go_read: OwnedFd,
    /// The supervisor writes the go-ahead here.
    pub(crate) go_write: OwnedFd,
}

impl Handshake {
    pub(crate) fn new() -> io::Result<Handshake> {
        let (pid_read, pid_write) = pipe_with(PipeFlags::CLOEXEC)?;
        let (go_read, go_write) = pipe_with(PipeFlags::CLOEXEC)?;
        Ok(Handshake {
            pid_read,
            pid_write: Some(pid_write),
            go_read,
            go_write,
        })
    }

    /// The hook the child runs between fork and exec. Only async-signal-safe
    /// system calls: getpid, write, close, read.
    pub(crate) fn child_hook(&self) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
        let pid_write: RawFd = self.pid_write.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let go_read: RawFd = self.go_read.as_raw_fd();
        let go_write: RawFd = self.go_write.as_raw_fd();
        move || {
            // SAFETY: the descriptors are open in the child (it is a copy of
            // the parent, which keeps them open until the spawn returns) and
            // belong to this handshake only; closing the child's copy of the
            // go-ahead's write end makes a dead supervisor read as end of file.
            let (pid_write, go_read) = unsafe {
                libc::close(go_write);
                (
                    std::os::fd::BorrowedFd::borrow_raw(pid_write),
                    std::os::fd::BorrowedFd::borrow_raw(go_read),
                )
            };
            let pid = rustix::process::getpid().as_raw_nonzero().get();
            loop {
                match write(pid_write, &pid.to_ne_bytes()) {
                    Ok(_) => break,
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            let mut byte = [0u8; 1];
            loop {
                match read(go_read, &mut byte) {
                    Ok(_) => return Ok(()),
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
}

/// The supervisor's side: the child's pid, or `None` if it never got that far.
pub(crate) fn read_pid(from: &OwnedFd) -> Option<i32> {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        match read(from, &mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(Errno::INTR) => continue,
            Err(_) => return None,
        }
    }
    Some(i32::from_ne_bytes(buf))
}

/// Lets the child go on to exec.
pub(crate) fn go(to: &OwnedFd) {
    loop {
        match write(to, &[1u8]) {
            Err(Errno::INTR) => continue,
            _ => return,
        }
    }
}
