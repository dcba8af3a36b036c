//! Linux only: pidfds, the eventfd, `/proc`, the parent-death signal and
//! the child subreaper.

use std::ffi::c_char;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::event::EventfdFlags;
use rustix::io::Errno;
use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};
use rustix::pipe::PipeFlags;
use rustix::process::{Pid, PidfdFlags, Signal};

use super::stat::ProcStat;
use crate::error::ProcError;

/// A process pinned by a pidfd: signals reach it and no other process that
/// reused its pid; readable (`poll`) once it has exited (a zombie counts).
pub(crate) struct ProcFd(OwnedFd);

impl ProcFd {
    /// Pins process `pid`; `Errno::SRCH` when there is none.
    pub(crate) fn open(pid: Pid) -> Result<ProcFd, Errno> {
        rustix::process::pidfd_open(pid, PidfdFlags::empty()).map(ProcFd)
    }

    /// Sends `signal`; `Errno::SRCH` when the process has exited.
    pub(crate) fn send(&self, signal: Signal) -> Result<(), Errno> {
        rustix::process::pidfd_send_signal(&self.0, signal)
    }
}

impl AsFd for ProcFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// What a [`Canceller`](crate::Canceller) wakes: an eventfd, readable once woken.
#[derive(Debug)]
pub(crate) struct Waker(OwnedFd);

impl Waker {
    pub(crate) fn new() -> io::Result<Waker> {
        let fd = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Waker(fd))
    }

    /// Makes it readable (for good: it is never drained).
    pub(crate) fn wake(&self) {
        // Only fails with EAGAIN when the counter is already huge, i.e. already woken.
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A close-on-exec pipe (read end, write end).
pub(crate) fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), Errno> {
    rustix::pipe::pipe_with(PipeFlags::CLOEXEC)
}

/// A close-on-exec pair of connected Unix stream sockets.
pub(crate) fn socketpair_cloexec() -> Result<(OwnedFd, OwnedFd), Errno> {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
}

/// The flags of a `send` that must not raise `SIGPIPE`.
pub(crate) const SEND_FLAGS: SendFlags = SendFlags::NOSIGNAL;

/// This thread's `errno` (async-signal-safe: one read).
pub(crate) fn errno() -> i32 {
    // SAFETY: `__errno_location` returns this thread's errno slot, valid
    // for the thread's life.
    unsafe { *libc::__errno_location() }
}

/// Makes `envp` the environment `execvp` passes on (and looks `PATH` up in).
///
/// # Safety
///
/// Only in a child between fork and exec: `envp` is a NUL-terminated array
/// of pointers to NUL-terminated strings that outlives the exec.
pub(crate) unsafe fn set_environ(envp: *const *const c_char) {
    // SAFETY: as the caller promises; no other thread runs in the child.
    unsafe { environ = envp.cast_mut().cast() };
}

extern "C" {
    /// The C library's environment (`environ(7)`), defined by glibc and
    /// musl alike; the libc crate declares it for glibc only, so a static
    /// musl build (release.yml) needs our own declaration.
    static mut environ: *mut *mut c_char;
}

/// In the child between fork and exec: be killed (`SIGKILL`) when the
/// supervising thread dies, and give up if the supervisor `parent` died
/// already (the signal would never come). The errno on a failure.
/// Async-signal-safe: `prctl` and `getppid`.
pub(crate) fn die_with_parent(parent: libc::pid_t) -> Result<(), i32> {
    // SAFETY: plain system calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(errno());
        }
        if libc::getppid() != parent {
            return Err(libc::ESRCH);
        }
    }
    Ok(())
}

/// The program running now, the same file even if it was replaced on disk.
pub(crate) fn this_program() -> PathBuf {
    PathBuf::from("/proc/self/exe")
}

/// `PR_SET_CHILD_SUBREAPER` for this process.
pub(crate) fn set_subreaper() -> Result<(), ProcError> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| ProcError::io("become a child subreaper", e))
}

/// `PF_EXITING` of the kernel's per-task flags (`include/linux/sched.h`):
/// set when a task starts to exit, before its files are closed.
const PF_EXITING: u64 = 0x4;

/// The stat fields of `pid` (`/proc/<pid>/stat`), if the process exists.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name is in parentheses and may itself contain spaces or
    // parentheses: the fields after it start after the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut fields = text.get(close + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?; // field 3
    let exited = matches!(state, 'Z' | 'X');
    let ppid = fields.next()?.parse().ok()?; // field 4
    let pgrp = fields.next()?.parse().ok()?; // field 5
    let session = fields.next()?.parse().ok()?; // field 6
    let flags: u64 = fields.nth(2)?.parse().ok()?; // field 9
    let start_time = fields.nth(12)?.parse().ok()?; // field 22
    Some(ProcStat {
        comm,
        state,
        exited,
        exiting: flags & PF_EXITING != 0,
        ppid,
        pgrp,
        session,
        start_time,
    })
}

/// Every pid in `/proc`.
pub(crate) fn all_pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// The children of every thread of `pid` (`/proc/<pid>/task/<tid>/children`);
/// from a scan of `/proc` when the kernel has no such file.
pub(crate) fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let path = task.path().join("children");
        match fs::read_to_string(&path) {
            Ok(text) => out.extend(
                text.split_whitespace()
                    .filter_map(|s| s.parse::<i32>().ok()),
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound && task.path().exists() => {
                // A kernel without CONFIG_PROC_CHILDREN.
                return all_pids()
                    .into_iter()
                    .filter(|p| proc_stat(*p).is_some_and(|st| st.ppid == pid && !st.exited))
                    .collect();
            }
            Err(_) => {}
        }
    }
    out
}

/// `gettid() == getpid()`: the main thread's id is the pid.
pub(crate) fn is_main_thread() -> bool {
    rustix::thread::gettid() == rustix::process::getpid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parentheses() {
        let line = "42 (a) (b c)) S 7 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0";
        let st = parse_stat(line).unwrap_or_else(|| panic!("unparsed"));
        assert_eq!(st.comm, "a) (b c)");
        assert_eq!((st.ppid, st.pgrp, st.session), (7, 42, 42));
        assert_eq!(st.start_time, 123456);
        assert_eq!(st.state, 'S');
        assert!(!st.exited && !st.exiting && !st.ended());
    }

    #[test]
    fn a_process_with_pf_exiting_has_ended() {
        // A SIGKILLed process between the kill and becoming a zombie: state R
        // (or D), flags 0x400100 plus PF_EXITING (0x4).
        let line = "42 (baton) R 7 42 42 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0";
        let st = parse_stat(line).unwrap_or_else(|| panic!("unparsed"));
        assert!(!st.exited && st.exiting && st.ended());
        assert_eq!(st.start_time, 123456);
    }
}
