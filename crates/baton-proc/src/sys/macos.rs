//! macOS replacements for the Linux-only parts: a kqueue watching
//! `EVFILT_PROC`/`NOTE_EXIT` stands in for a pidfd, a pipe for the eventfd,
//! `proc_pidinfo` for `/proc`. What has no replacement says so with
//! [`ProcError::Unsupported`].
//!
//! Checked by cross-compiling (`cargo check --target aarch64-apple-darwin`)
//! only: no test runs on macOS yet.

use std::ffi::c_char;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rustix::event::kqueue::{
    kevent_timespec, kqueue, Event, EventFilter, EventFlags, ProcessEvents, UserDefinedFlags,
    UserFlags,
};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::{Errno, FdFlags};
use rustix::net::{AddressFamily, SendFlags, SocketFlags, SocketType};
use rustix::process::{Pid, Signal};

use super::stat::ProcStat;
use crate::error::ProcError;

const NO_WAIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// A process watched by a kqueue (`EVFILT_PROC`, `NOTE_EXIT`): the kqueue is
/// readable (`poll`) once the process has exited, as a pidfd is.
///
/// Weaker than a pidfd in one way: a signal goes by pid (`kill`), after a
/// check that the process has not exited, so a process that exits, is
/// reaped and has its pid reused between the check and the `kill` (a window
/// of microseconds; macOS hands out pids in increasing order up to 99999)
/// would get it.
pub(crate) struct ProcFd {
    kq: OwnedFd,
    pid: Pid,
}

impl ProcFd {
    /// Watches process `pid`; `Errno::SRCH` when there is none.
    pub(crate) fn open(pid: Pid) -> Result<ProcFd, Errno> {
        let kq = kqueue()?;
        rustix::io::fcntl_setfd(&kq, FdFlags::CLOEXEC)?;
        let exit = Event::new(
            EventFilter::Proc {
                pid,
                flags: ProcessEvents::EXIT,
            },
            EventFlags::ADD,
            std::ptr::null_mut(),
        );
        // SAFETY: the change list names no file descriptor; the event list
        // is empty, so errors come back as the call's own.
        match unsafe { kevent_timespec(&kq, &[exit], &mut Vec::<Event>::new(), Some(&NO_WAIT)) } {
            Ok(_) => {}
            // A zombie: it exists until reaped, but a kqueue no longer
            // attaches to it. It has exited: make the queue readable now.
            Err(Errno::SRCH) if proc_stat(pid.as_raw_nonzero().get()).is_some_and(|s| s.exited) => {
                let add = Event::new(
                    EventFilter::User {
                        ident: 1,
                        flags: UserFlags::empty(),
                        user_flags: UserDefinedFlags::new(0),
                    },
                    EventFlags::ADD,
                    std::ptr::null_mut(),
                );
                let trigger = Event::new(
                    EventFilter::User {
                        ident: 1,
                        flags: UserFlags::TRIGGER,
                        user_flags: UserDefinedFlags::new(0),
                    },
                    EventFlags::empty(),
                    std::ptr::null_mut(),
                );
                // SAFETY: as above.
                unsafe {
                    kevent_timespec(
                        &kq,
                        &[add, trigger],
                        &mut Vec::<Event>::new(),
                        Some(&NO_WAIT),
                    )
                }?;
            }
            Err(e) => return Err(e),
        }
        Ok(ProcFd { kq, pid })
    }

    /// Sends `signal`; `Errno::SRCH` when the process has exited.
    pub(crate) fn send(&self, signal: Signal) -> Result<(), Errno> {
        let mut fds = [PollFd::new(&self.kq, PollFlags::IN)];
        if matches!(rustix::event::poll(&mut fds, Some(&NO_WAIT)), Ok(n) if n > 0) {
            return Err(Errno::SRCH);
        }
        rustix::process::kill_process(self.pid, signal)
    }
}

impl AsFd for ProcFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.kq.as_fd()
    }
}

/// What a [`Canceller`](crate::Canceller) wakes: a pipe, readable once woken.
#[derive(Debug)]
pub(crate) struct Waker {
    read: OwnedFd,
    write: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> io::Result<Waker> {
        let (read, write) = pipe_cloexec()?;
        for fd in [&read, &write] {
            rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)?;
        }
        Ok(Waker { read, write })
    }

    /// Makes it readable (for good: it is never drained).
    pub(crate) fn wake(&self) {
        // Only fails with EAGAIN when the pipe is full, i.e. already woken.
        let _ = rustix::io::write(&self.write, &[1u8]);
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }
}

/// A close-on-exec pipe (read end, write end). macOS has no `pipe2`: a
/// fork by another thread between the two calls could leak the ends into
/// its child (as with the standard library's own pipes there).
pub(crate) fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), Errno> {
    let (read, write) = rustix::pipe::pipe()?;
    rustix::io::fcntl_setfd(&read, FdFlags::CLOEXEC)?;
    rustix::io::fcntl_setfd(&write, FdFlags::CLOEXEC)?;
    Ok((read, write))
}

/// A close-on-exec pair of connected Unix stream sockets that never raise
/// `SIGPIPE` (`SO_NOSIGPIPE`: macOS has no `MSG_NOSIGNAL`).
pub(crate) fn socketpair_cloexec() -> Result<(OwnedFd, OwnedFd), Errno> {
    let (a, b) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::empty(),
        None,
    )?;
    for fd in [&a, &b] {
        rustix::io::fcntl_setfd(fd, FdFlags::CLOEXEC)?;
        rustix::net::sockopt::set_socket_nosigpipe(fd, true)?;
    }
    Ok((a, b))
}

/// The flags of a `send` on a socket of [`socketpair_cloexec`].
pub(crate) const SEND_FLAGS: SendFlags = SendFlags::empty();

/// This thread's `errno` (async-signal-safe: one read).
pub(crate) fn errno() -> i32 {
    // SAFETY: `__error` returns this thread's errno slot, valid for the
    // thread's life.
    unsafe { *libc::__error() }
}

/// Makes `envp` the environment `execvp` passes on (and looks `PATH` up in).
///
/// # Safety
///
/// Only in a child between fork and exec: `envp` is a NUL-terminated array
/// of pointers to NUL-terminated strings that outlives the exec.
pub(crate) unsafe fn set_environ(envp: *const *const c_char) {
    // SAFETY: `_NSGetEnviron` returns the address of `environ`; as the
    // caller promises, no other thread runs in the child.
    unsafe { *libc::_NSGetEnviron() = envp.cast_mut().cast() };
}

/// In the child between fork and exec: macOS has no parent-death signal,
/// so this only gives up if the supervisor `parent` died already. A
/// supervisor killed later leaves its command running (see `docs/src/design/signals.md`,
/// "Platforms"); a guardian ([`RunSpec::guard`](crate::RunSpec::guard))
/// stops it.
pub(crate) fn die_with_parent(parent: libc::pid_t) -> Result<(), i32> {
    // SAFETY: getppid takes no arguments and cannot fail.
    if unsafe { libc::getppid() } != parent {
        return Err(libc::ESRCH);
    }
    Ok(())
}

/// The program running now (its path, as the loader found it).
pub(crate) fn this_program() -> PathBuf {
    std::env::current_exe().unwrap_or_default()
}

/// macOS has no child subreaper.
pub(crate) fn set_subreaper() -> Result<(), ProcError> {
    Err(ProcError::unsupported(
        "becoming a child subreaper (PR_SET_CHILD_SUBREAPER)",
    ))
}

/// `PROC_FLAG_INEXIT` of `proc_bsdinfo.pbi_flags` (`sys/proc_info.h`).
const PROC_FLAG_INEXIT: u32 = 4;

/// What `proc_pidinfo(PROC_PIDTBSDINFO)` says of `pid`, if it exists.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    if pid <= 0 {
        return None;
    }
    // SAFETY: a plain C struct, all zeros is a valid value.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: `info` is a buffer of `size` bytes for PROC_PIDTBSDINFO.
    let got =
        unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    if got != size {
        return None;
    }
    let comm: Vec<u8> = info
        .pbi_comm
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    // `p_stat` values of `sys/proc.h`.
    let state = match info.pbi_status {
        1 => 'I', // SIDL: being created
        2 => 'R', // SRUN
        3 => 'S', // SSLEEP
        4 => 'T', // SSTOP
        5 => 'Z', // SZOMB
        _ => '?',
    };
    // SAFETY: getsid takes a pid and touches no memory.
    let session = unsafe { libc::getsid(pid) };
    Some(ProcStat {
        comm: String::from_utf8_lossy(&comm).into_owned(),
        state,
        exited: state == 'Z',
        exiting: info.pbi_flags & PROC_FLAG_INEXIT != 0,
        ppid: info.pbi_ppid as i32,
        pgrp: info.pbi_pgid as i32,
        session: session.max(0),
        start_time: info
            .pbi_start_tvsec
            .saturating_mul(1_000_000)
            .saturating_add(info.pbi_start_tvusec),
    })
}

/// Every pid of the machine (`proc_listallpids`).
pub(crate) fn all_pids() -> Vec<i32> {
    // SAFETY: a null buffer asks for the number of processes.
    let n = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
    let Ok(n) = usize::try_from(n) else {
        return Vec::new();
    };
    // Room for processes started meanwhile.
    let mut pids = vec![0 as libc::pid_t; n + 64];
    let bytes = (pids.len() * std::mem::size_of::<libc::pid_t>()) as libc::c_int;
    // SAFETY: `pids` has room for `bytes` bytes.
    let got = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    pids.truncate(usize::try_from(got).unwrap_or(0));
    pids.retain(|p| *p > 0);
    pids
}

/// The children of `pid` (from a scan: macOS lists no children per process).
pub(crate) fn children_of(pid: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|p| proc_stat(*p).is_some_and(|st| st.ppid == pid && !st.exited))
        .collect()
}

/// `pthread_main_np()`.
#[allow(unsafe_code)]
pub(crate) fn is_main_thread() -> bool {
    // SAFETY: pthread_main_np takes no arguments and only reads the
    // calling thread's state.
    unsafe { libc::pthread_main_np() != 0 }
}
