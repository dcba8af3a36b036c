//! Handing the terminal to the supervised command.
//!
//! The command runs in its own process group (so that a timeout or a cancel
//! can stop all of it). When baton itself is the terminal's foreground job,
//! that group would be a background group, and a command that reads the
//! terminal would be stopped by SIGTTIN. So, as a shell does for a job, we
//! make the command's group the terminal's foreground group while it runs,
//! and take the terminal back once it has been reaped. Keyboard signals
//! (Ctrl-C, Ctrl-\) then reach the command directly, exactly once.
//!
//! Job control is proxied: when the command is stopped (Ctrl-Z, or SIGTTIN
//! in the background), the supervisor takes the terminal back and stops
//! itself the same way, so the shell sees the job stopped and gets the
//! terminal; when the shell continues the job (`fg` or `bg`), the supervisor
//! hands the terminal on (only if it was given it: `fg`) and continues the
//! command's group.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

use rustix::process::{Pid, Signal};
use signal_hook::consts::signal::SIGCHLD;
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;

/// Gives the terminal back to our own process group when dropped.
pub(crate) struct TerminalHandover {
    ours: Pid,
}

impl TerminalHandover {
    /// Whether the command should get the terminal: our standard input is a
    /// terminal whose foreground group is ours. Decided before the spawn, so
    /// the child can take the terminal itself before it runs anything.
    pub(crate) fn wanted() -> bool {
        let stdin = stdin();
        let Some(ours) = crate::contain::our_pgrp() else {
            return false; // led from outside our PID namespace: not our terminal
        };
        rustix::termios::isatty(stdin) && rustix::termios::tcgetpgrp(stdin).ok() == Some(ours)
    }

    /// Makes `child_group` the terminal's foreground group (again: the child
    /// did it before exec, see [`take_in_child`]) and returns the guard that
    /// gives it back to our group.
    pub(crate) fn give(child_group: Pid) -> TerminalHandover {
        let ours = rustix::process::getpgrp();
        // The child may have taken the terminal already, which makes us a
        // background group: block SIGTTOU around the call.
        with_sigttou_blocked(|| {
            let _ = rustix::termios::tcsetpgrp(stdin(), child_group);
        });
        TerminalHandover { ours }
    }
}

/// In the child, between fork and exec, after it made its own process group:
/// take the terminal as a shell's job does, so a command that reads the
/// terminal at once is never stopped by SIGTTIN before the parent's call.
///
/// Only async-signal-safe calls: `sigprocmask` and two `ioctl`s.
pub(crate) fn take_in_child() -> std::io::Result<()> {
    with_sigttou_blocked(|| {
        let _ = rustix::termios::tcsetpgrp(stdin(), rustix::process::getpgrp());
    });
    Ok(())
}

impl Drop for TerminalHandover {
    fn drop(&mut self) {
        // We are a background group now: tcsetpgrp would stop us with
        // SIGTTOU unless that signal is blocked while we call it.
        with_sigttou_blocked(|| {
            let _ = rustix::termios::tcsetpgrp(stdin(), self.ours);
        });
    }
}

#[allow(unsafe_code)] // fd 0 borrowed for good: the SAFETY comment below
fn stdin() -> BorrowedFd<'static> {
    // SAFETY: file descriptor 0 stays open for the life of the process (we
    // never close it); borrowing it is how std's own `Stdin` reaches it.
    unsafe { BorrowedFd::borrow_raw(0) }
}

#[allow(unsafe_code)] // sigprocmask(2): the SAFETY comment below
fn with_sigttou_blocked(f: impl FnOnce()) {
    // SAFETY: sigset_t is a plain C type initialised by sigemptyset; we block
    // SIGTTOU in this thread only and restore the previous mask right after.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Wakes the supervisor when a child changes state (SIGCHLD), for the job
/// control proxy. Only used when the command has the terminal.
pub(crate) struct StopWatch {
    delivery: SignalDelivery<UnixStream, SignalOnly>,
}

impl StopWatch {
    pub(crate) fn new() -> io::Result<StopWatch> {
        let (read, write) = UnixStream::pair()?;
        let delivery = SignalDelivery::with_pipe(read, write, SignalOnly, [SIGCHLD])?;
        Ok(StopWatch { delivery })
    }

    /// Readable when a SIGCHLD arrived.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.delivery.get_read().as_fd()
    }

    /// Forgets the signals that arrived.
    pub(crate) fn drain(&mut self) {
        let _ = self.delivery.pending().count();
    }
}

/// Whether the child `pid` has stopped (the stop is reported once).
pub(crate) fn child_stopped(pid: Pid) -> bool {
    matches!(
        rustix::process::waitid(
            rustix::process::WaitId::Pid(pid),
            rustix::process::WaitIdOptions::STOPPED | rustix::process::WaitIdOptions::NOHANG,
        ),
        Ok(Some(_))
    )
}

/// The command's group stopped: take the terminal back and stop this
/// process too, so that the shell sees its job stopped. Returns when the
/// shell continues us; then hand the terminal on if the shell gave it to us
/// (`fg`), and continue the command's group (`fg` and `bg` alike).
pub(crate) fn proxy_stop(child_group: Pid) {
    let ours = rustix::process::getpgrp();
    with_sigttou_blocked(|| {
        let _ = rustix::termios::tcsetpgrp(stdin(), ours);
    });
    let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::STOP);
    // Continued by the shell.
    if rustix::termios::tcgetpgrp(stdin()).ok() == Some(ours) {
        with_sigttou_blocked(|| {
            let _ = rustix::termios::tcsetpgrp(stdin(), child_group);
        });
    }
    let _ = rustix::process::kill_process_group(child_group, Signal::CONT);
}
