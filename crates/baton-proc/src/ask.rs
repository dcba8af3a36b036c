//! Asking a process that is not our child to let go and exit by itself
//! (`SIGUSR1`: what the background holder of `baton lock acquire` takes as
//! "release"), then waiting for it to exit.
//!
//! On Windows there is no signal to ask with: [`ask_to_exit`] fails with
//! [`ProcError::Unsupported`], and the caller says so (or terminates).

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

/// What [`ask_to_exit`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Asked {
    /// No such process, it had exited, or it is not the one expected:
    /// nothing was sent.
    Gone,
    /// It was asked and exited within the limit.
    Exited,
    /// It was asked and still runs after the limit (stopped, or ignoring it).
    StillRunning,
}

/// Sends `SIGUSR1` to `pid` once it is pinned (a pidfd on Linux, a kqueue
/// on macOS) and `is_expected` says it is the process meant (its start
/// time), then waits up to `limit` for it to exit.
///
/// # Errors
///
/// [`ProcError::InvalidPid`] for a pid that is not positive;
/// [`ProcError::Signal`] when the kernel refuses the signal;
/// [`ProcError::Io`] when the process cannot be pinned or waited for;
/// [`ProcError::Unsupported`] on Windows.
#[cfg(unix)]
pub fn ask_to_exit(
    pid: i32,
    is_expected: impl FnOnce() -> bool,
    limit: Duration,
) -> Result<Asked, ProcError> {
    let Some(target) = Pid::from_raw(pid) else {
        return Err(ProcError::InvalidPid { pid });
    };
    let pidfd = match ProcFd::open(target) {
        Ok(pidfd) => pidfd,
        Err(Errno::SRCH) => return Ok(Asked::Gone),
        Err(e) => return Err(ProcError::io("open a pidfd for the process", e)),
    };
    if !is_expected() {
        return Ok(Asked::Gone);
    }
    match pidfd.send(Signal::USR1) {
        Ok(()) => {}
        Err(Errno::SRCH) => return Ok(Asked::Gone),
        Err(e) => {
            return Err(ProcError::Signal {
                pid,
                signal: "SIGUSR1",
                source: e.into(),
            })
        }
    }
    let deadline = Instant::now().checked_add(limit);
    loop {
        let timeout = deadline.map(|d| timespec(d.saturating_duration_since(Instant::now())));
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Ok(Asked::StillRunning),
            Ok(_) => return Ok(Asked::Exited),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ProcError::io("wait for the process to exit", e)),
        }
    }
}

/// Windows: there is no signal to ask a process with (see the module doc).
///
/// # Errors
///
/// Always [`ProcError::Unsupported`].
#[cfg(windows)]
pub fn ask_to_exit(
    _pid: i32,
    _is_expected: impl FnOnce() -> bool,
    _limit: Duration,
) -> Result<Asked, ProcError> {
    Err(ProcError::unsupported(
        "asking a process to let go (there are no signals on Windows)",
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

    use super::*;

    /// A process that exits when asked (SIGUSR1 on unix).
    #[cfg(unix)]
    #[test]
    fn an_asked_process_exits_and_an_unexpected_one_is_not_asked() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let mut child = Command::new("sh")
            .args([
                "-c",
                "trap 'exit 0' USR1; echo ready; while :; do sleep 0.05; done",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = child.id() as i32;
        let limit = Duration::from_secs(5);
        assert_eq!(ask_to_exit(pid, || false, limit).unwrap(), Asked::Gone);
        assert!(
            child.try_wait().unwrap().is_none(),
            "asked although not expected"
        );
        assert_eq!(ask_to_exit(pid, || true, limit).unwrap(), Asked::Exited);
        assert!(child.wait().unwrap().success());
    }

    #[cfg(windows)]
    #[test]
    fn windows_says_it_cannot_ask() {
        let e = ask_to_exit(std::process::id() as i32, || true, Duration::ZERO).unwrap_err();
        assert!(matches!(e, ProcError::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("no signals on Windows"), "{e}");
    }
}
