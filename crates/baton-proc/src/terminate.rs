//! Terminating a process that is not necessarily our child (`baton lock break`),
//! and pinning one ([`PinnedProcess`]) for a caller that asks it to exit its
//! own way (baton-ipc's `ask_to_exit`).
//!
//! On Windows a process that this crate did not start cannot be asked to
//! stop (a console control event reaches a whole console process group, and
//! only one that shares this process's console): it is terminated at once
//! (`TerminateProcess`), which [`TerminateReport::Killed`] says.

use std::time::Duration;
#[cfg(unix)]
use std::time::Instant;

#[cfg(unix)]
use rustix::event::{poll, PollFd, PollFlags};
#[cfg(unix)]
use rustix::io::Errno;
#[cfg(unix)]
use rustix::process::{Pid, Signal};

use crate::error::ProcError;
#[cfg(unix)]
use crate::sys::ProcFd;
#[cfg(unix)]
use crate::time::timespec;

/// How long [`terminate_process`] waits for a process to disappear after `SIGKILL`.
///
/// `SIGKILL` cannot be caught, so only a process stuck in the kernel (uninterruptible
/// sleep, for example on a hung network file system) takes longer.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// What [`terminate_process`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminateReport {
    /// There was no such process, or it had exited already (a zombie); no signal was sent.
    AlreadyGone,
    /// `SIGTERM` was sent and the process exited within the grace period.
    ExitedAfterTerm,
    /// `SIGTERM` was not enough within the grace period; `SIGKILL` was sent and the process
    /// exited.
    Killed,
    /// `SIGKILL` was sent, but the process had still not exited after [`KILL_WAIT`]
    /// (it is stuck in the kernel); it will die when it leaves the kernel.
    KillPending,
}

/// Send `SIGTERM` to process `pid`, wait up to `grace` for it to exit, then `SIGKILL` it.
///
/// The process does not need to be our child. It is addressed through a pidfd opened once at
/// the start, so if it exits and its pid is reused meanwhile, the new process is never
/// signalled. Waiting blocks in `poll` on that pidfd, which becomes readable the moment the
/// process exits (a zombie counts as exited); there is no sleep-polling. Only the process
/// itself is signalled, not its process group: when it is a `baton run` supervisor, it
/// forwards the `SIGTERM` to its own child's group, so give it a `grace` longer than the one
/// it uses itself.
///
/// # Errors
///
/// [`ProcError::InvalidPid`] for a pid that is not positive or is this process;
/// [`ProcError::Signal`] when the kernel refuses a signal (typically `EPERM`: another user's
/// process); [`ProcError::Io`] when the pidfd cannot be opened or polled.
pub fn terminate_process(pid: i32, grace: Duration) -> Result<TerminateReport, ProcError> {
    terminate_verified(pid, grace, || true)
}

/// Like [`terminate_process`], but calls `is_expected` once the process is
/// pinned by a pidfd and sends nothing unless it returns true. Callers use it
/// to check the process's identity (start time) so that a pid reused since it
/// was recorded is never signalled; [`TerminateReport::AlreadyGone`] then.
///
/// # Errors
///
/// As [`terminate_process`].
#[cfg(unix)]
pub fn terminate_verified(
    pid: i32,
    grace: Duration,
    is_expected: impl FnOnce() -> bool,
) -> Result<TerminateReport, ProcError> {
    let target = match Pid::from_raw(pid.max(0)) {
        Some(target) if target != rustix::process::getpid() => target,
        _ => return Err(ProcError::InvalidPid { pid }),
    };
    let pidfd = match ProcFd::open(target) {
        Ok(pidfd) => pidfd,
        Err(Errno::SRCH) => return Ok(TerminateReport::AlreadyGone),
        Err(e) => return Err(ProcError::io("open a pidfd for the process", e)),
    };
    // A zombie (exited, not yet reaped by its parent) still has a pid but is gone for us.
    if wait_exit(&pidfd, Duration::ZERO)? || !is_expected() {
        return Ok(TerminateReport::AlreadyGone);
    }
    if !send(&pidfd, pid, Signal::TERM, "SIGTERM")? {
        return Ok(TerminateReport::AlreadyGone);
    }
    if wait_exit(&pidfd, grace)? {
        return Ok(TerminateReport::ExitedAfterTerm);
    }
    if !send(&pidfd, pid, Signal::KILL, "SIGKILL")? {
        return Ok(TerminateReport::ExitedAfterTerm);
    }
    if wait_exit(&pidfd, KILL_WAIT)? {
        Ok(TerminateReport::Killed)
    } else {
        Ok(TerminateReport::KillPending)
    }
}

#[cfg(unix)]
/// Sends `signal` (named `name`) to the process behind `pidfd`; false when
/// it has exited (and possibly was reaped) since the pidfd was opened.
fn send(pidfd: &ProcFd, pid: i32, signal: Signal, name: &'static str) -> Result<bool, ProcError> {
    match pidfd.send(signal) {
        Ok(()) => Ok(true),
        Err(Errno::SRCH) => Ok(false),
        Err(e) => Err(ProcError::Signal {
            pid,
            signal: name,
            source: e.into(),
        }),
    }
}

#[cfg(unix)]
/// Wait until the process behind `pidfd` exits or `limit` passes; true if it exited.
fn wait_exit(pidfd: &ProcFd, limit: Duration) -> Result<bool, ProcError> {
    let deadline = Instant::now().checked_add(limit);
    loop {
        let timeout = deadline.map(|d| timespec(d.saturating_duration_since(Instant::now())));
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ProcError::io("wait for the process to exit", e)),
        }
    }
}

/// Like [`terminate_process`], but calls `is_expected` once the process is
/// pinned by a handle and terminates nothing unless it returns true.
///
/// On Windows there is no graceful step for a process this crate did not
/// start: `grace` is not used, and the process is terminated at once.
///
/// # Errors
///
/// As [`terminate_process`].
#[cfg(windows)]
pub fn terminate_verified(
    pid: i32,
    _grace: Duration,
    is_expected: impl FnOnce() -> bool,
) -> Result<TerminateReport, ProcError> {
    let target = match u32::try_from(pid) {
        Ok(target) if target != 0 && target != std::process::id() => target,
        _ => return Err(ProcError::InvalidPid { pid }),
    };
    // The handle pins the process: its pid is not reused while it is open.
    let process = match crate::sys::Process::open(target) {
        Ok(Some(process)) => process,
        Ok(None) => return Ok(TerminateReport::AlreadyGone),
        Err(e) => return Err(ProcError::io("open the process", e)),
    };
    if process.has_exited() || !is_expected() {
        return Ok(TerminateReport::AlreadyGone);
    }
    process
        .terminate(crate::sys::KILLED_EXIT_CODE)
        .map_err(|source| ProcError::Signal {
            pid,
            signal: "TerminateProcess",
            source,
        })?;
    match process.wait(Some(KILL_WAIT)) {
        Ok(true) => Ok(TerminateReport::Killed),
        Ok(false) => Ok(TerminateReport::KillPending),
        Err(e) => Err(ProcError::io("wait for the process to exit", e)),
    }
}

/// A process that is not necessarily our child, pinned: a pidfd on Linux, a
/// kqueue watching it on macOS, a handle on Windows. What is sent to it, and
/// the wait for its exit, reach it and never a process that reused its pid.
/// Check its identity (its start time) once it is pinned.
pub struct PinnedProcess {
    pid: i32,
    #[cfg(unix)]
    pidfd: ProcFd,
    #[cfg(windows)]
    process: crate::sys::Process,
}

impl std::fmt::Debug for PinnedProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedProcess")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl PinnedProcess {
    /// Pins process `pid`; `None` when there is no such process.
    ///
    /// # Errors
    ///
    /// [`ProcError::InvalidPid`] for a pid that is not positive (on Unix:
    /// zero); [`ProcError::Io`] when the process cannot be pinned.
    #[cfg(unix)]
    pub fn open(pid: i32) -> Result<Option<PinnedProcess>, ProcError> {
        let Some(target) = Pid::from_raw(pid) else {
            return Err(ProcError::InvalidPid { pid });
        };
        match ProcFd::open(target) {
            Ok(pidfd) => Ok(Some(PinnedProcess { pid, pidfd })),
            Err(Errno::SRCH) => Ok(None),
            Err(e) => Err(ProcError::io("open a pidfd for the process", e)),
        }
    }

    /// Pins process `pid`; `None` when there is no such process.
    ///
    /// # Errors
    ///
    /// [`ProcError::InvalidPid`] for a pid that is not positive;
    /// [`ProcError::Io`] when the process cannot be opened.
    #[cfg(windows)]
    pub fn open(pid: i32) -> Result<Option<PinnedProcess>, ProcError> {
        let Some(target) = u32::try_from(pid).ok().filter(|p| *p > 0) else {
            return Err(ProcError::InvalidPid { pid });
        };
        match crate::sys::Process::open_to_query(target) {
            Ok(Some(process)) => Ok(Some(PinnedProcess { pid, process })),
            Ok(None) => Ok(None),
            Err(e) => Err(ProcError::io("open the process", e)),
        }
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends it signal number `signal` (such as `libc::SIGUSR1`), named
    /// `name` in an error; false when it has exited since it was pinned.
    ///
    /// # Errors
    ///
    /// [`ProcError::Signal`] when the kernel refuses the signal, or
    /// `signal` is not a signal's number.
    #[cfg(unix)]
    pub fn signal(&self, signal: i32, name: &'static str) -> Result<bool, ProcError> {
        let Some(signal) = Signal::from_named_raw(signal) else {
            return Err(ProcError::Signal {
                pid: self.pid,
                signal: name,
                source: std::io::ErrorKind::InvalidInput.into(),
            });
        };
        send(&self.pidfd, self.pid, signal, name)
    }

    /// Windows: whether it has exited.
    #[cfg(windows)]
    pub fn has_exited(&self) -> bool {
        self.process.has_exited()
    }

    /// Windows: its creation time (as [`ProcessId::start_time`](crate::ProcessId::start_time)).
    ///
    /// # Errors
    ///
    /// [`ProcError::Io`] when it cannot be read.
    #[cfg(windows)]
    pub fn start_time(&self) -> Result<u64, ProcError> {
        self.process
            .creation_time()
            .map_err(|e| ProcError::io("read the process's creation time", e))
    }

    /// Waits until it exits or `limit` passes; true if it has exited.
    ///
    /// # Errors
    ///
    /// [`ProcError::Io`] when it cannot be waited for.
    pub fn wait_exit(&self, limit: Duration) -> Result<bool, ProcError> {
        #[cfg(unix)]
        return wait_exit(&self.pidfd, limit);
        #[cfg(windows)]
        self.process
            .wait(Some(limit))
            .map_err(|e| ProcError::io("wait for the process to exit", e))
    }
}
