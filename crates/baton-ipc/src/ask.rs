//! Asking a process that is not our child to let go and exit by itself
//! (`SIGUSR1`: what the background holder of `baton lock acquire` takes as
//! "release"), then waiting for it to exit.
//!
//! On Windows there is no signal to ask with: the process to ask listens
//! with [`on_exit_request`] on a named event of its own (`Local\\baton-exit/
//! <pid>-<creation time>`, a [`doorbell`](crate::doorbell)), which
//! [`ask_to_exit`] sets once it has pinned the process (a handle) and checked
//! it is the one meant. A process that does not listen is not asked: it
//! still runs when the limit passes ([`Asked::StillRunning`]), as a unix
//! process ignoring `SIGUSR1` does.

use std::time::Duration;

use baton_proc::{PinnedProcess, ProcError};

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
/// [`ProcError::Io`] when the process cannot be pinned or waited for.
#[cfg(unix)]
pub fn ask_to_exit(
    pid: i32,
    is_expected: impl FnOnce() -> bool,
    limit: Duration,
) -> Result<Asked, ProcError> {
    let Some(process) = PinnedProcess::open(pid)? else {
        return Ok(Asked::Gone);
    };
    if !is_expected() {
        return Ok(Asked::Gone);
    }
    if !process.signal(rustix::process::Signal::USR1.as_raw(), "SIGUSR1")? {
        return Ok(Asked::Gone);
    }
    Ok(if process.wait_exit(limit)? {
        Asked::Exited
    } else {
        Asked::StillRunning
    })
}

/// Windows: once process `pid` is pinned (a handle) and `is_expected` says
/// it is the process meant, sets the exit request it listens for with
/// [`on_exit_request`], then waits up to `limit` for it to exit.
///
/// # Errors
///
/// [`ProcError::InvalidPid`] for a pid that is not positive;
/// [`ProcError::Io`] when the process cannot be opened or waited for.
#[cfg(windows)]
pub fn ask_to_exit(
    pid: i32,
    is_expected: impl FnOnce() -> bool,
    limit: Duration,
) -> Result<Asked, ProcError> {
    let Some(process) = PinnedProcess::open(pid)? else {
        return Ok(Asked::Gone);
    };
    if process.has_exited() || !is_expected() {
        return Ok(Asked::Gone);
    }
    let created = process.start_time()?;
    crate::doorbell::Bells::named().ring(&exit_request_name(process.pid(), created));
    Ok(if process.wait_exit(limit)? {
        Asked::Exited
    } else {
        Asked::StillRunning
    })
}

/// The name of the exit request of process `pid` created at `created`.
#[cfg(windows)]
fn exit_request_name(pid: i32, created: u64) -> String {
    format!("baton-exit/{pid}-{created}")
}

/// Windows: calls `on_ask` (in a thread of its own) each time another
/// process asks this one to exit with [`ask_to_exit`], until the returned
/// watcher is closed. On unix the same request is `SIGUSR1`, which the
/// program handles itself (this library installs no signal handler).
///
/// # Errors
///
/// The system's, when this process's identity cannot be read or its event
/// cannot be made ([`std::io::ErrorKind::AddrInUse`]: someone listens
/// already).
#[cfg(windows)]
pub fn on_exit_request(
    on_ask: impl Fn() + Send + 'static,
) -> std::io::Result<crate::doorbell::DoorbellWatcher> {
    let me = baton_proc::ProcessId::current()
        .ok_or_else(|| std::io::Error::other("cannot read this process's creation time"))?;
    let name = exit_request_name(me.pid, me.start_time);
    crate::doorbell::Bells::named().bind(&name)?.watch(on_ask)
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

    /// A process that listens for exit requests exits when asked; one that
    /// is not the one expected is not asked.
    #[cfg(windows)]
    #[test]
    fn an_asked_process_exits_and_an_unexpected_one_is_not_asked() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ask::tests::exit_request_helper",
                "--ignored",
                "--nocapture",
            ])
            .env("BATON_TEST_ASK", "1")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("listening") {
            line.clear();
            assert_ne!(out.read_line(&mut line).unwrap(), 0, "the helper ended");
        }
        let pid = child.id() as i32;
        let limit = Duration::from_secs(10);
        assert_eq!(ask_to_exit(pid, || false, limit).unwrap(), Asked::Gone);
        assert!(
            child.try_wait().unwrap().is_none(),
            "asked although not expected"
        );
        assert_eq!(ask_to_exit(pid, || true, limit).unwrap(), Asked::Exited);
        assert_eq!(child.wait().unwrap().code(), Some(7));
        assert_eq!(ask_to_exit(pid, || true, limit).unwrap(), Asked::Gone);
    }

    /// Run by the test above: listens for an exit request, then exits 7.
    #[cfg(windows)]
    #[test]
    #[ignore = "a helper: run by an_asked_process_exits_and_an_unexpected_one_is_not_asked"]
    fn exit_request_helper() {
        if std::env::var_os("BATON_TEST_ASK").is_none() {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let _watch = on_exit_request(move || {
            let _ = tx.send(());
        })
        .unwrap();
        println!("listening");
        rx.recv().unwrap();
        std::process::exit(7);
    }
}
