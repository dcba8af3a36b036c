//! A process's identity: its pid and when it started, so that a process
//! that reused the pid of one that exited is told apart from it.

/// A process as it can be found again: its pid and its start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessId {
    /// Its pid.
    pub pid: i32,
    /// When it started: on Linux in clock ticks since boot (field 22 of
    /// `/proc/<pid>/stat`), on macOS in microseconds since the Unix epoch,
    /// on Windows its creation time (`GetProcessTimes`, 100-nanosecond
    /// intervals since 1601). Compare it only with start times read on the
    /// same machine.
    pub start_time: u64,
}

impl ProcessId {
    /// The process running now as `pid`; `None` when there is none, or it
    /// has exited (or, on Unix, is exiting).
    pub fn of(pid: i32) -> Option<ProcessId> {
        of(pid)
    }

    /// This process.
    pub fn current() -> Option<ProcessId> {
        ProcessId::of(i32::try_from(std::process::id()).ok()?)
    }

    /// Whether this process still runs: a process with its pid and its start
    /// time exists and has not exited.
    pub fn is_running(&self) -> bool {
        ProcessId::of(self.pid).is_some_and(|now| now.start_time == self.start_time)
    }

    /// Windows: waits until this process has exited, at most `limit`
    /// (forever when `None`); true if it has (or another process has its
    /// pid now). The handle that waits pins the process, so a pid reused
    /// meanwhile is never waited for.
    ///
    /// # Errors
    ///
    /// The system's, when the process cannot be opened or waited for.
    #[cfg(windows)]
    pub fn wait_exited(&self, limit: Option<std::time::Duration>) -> std::io::Result<bool> {
        let Ok(pid) = u32::try_from(self.pid) else {
            return Ok(true);
        };
        let Some(process) = crate::sys::Process::open_to_query(pid)? else {
            return Ok(true);
        };
        if process.creation_time()? != self.start_time {
            return Ok(true);
        }
        process.wait(limit)
    }
}

#[cfg(unix)]
fn of(pid: i32) -> Option<ProcessId> {
    crate::procfs::stat(pid)
        .filter(|st| !st.ended())
        .map(|st| ProcessId {
            pid,
            start_time: st.start_time,
        })
}

#[cfg(windows)]
fn of(pid: i32) -> Option<ProcessId> {
    let process = crate::sys::Process::open_to_query(u32::try_from(pid).ok()?).ok()??;
    if process.has_exited() {
        return None;
    }
    Some(ProcessId {
        pid,
        start_time: process.creation_time().ok()?,
    })
}

/// A process pinned so that its exit can be waited for with `poll`: a pidfd
/// on Linux, a kqueue watching it on macOS. The descriptor becomes readable
/// once the process has exited. For a process that is not our child (the
/// caller of `baton lock acquire`, which its background holder watches).
#[cfg(unix)]
pub struct ExitWatch(crate::sys::ProcFd);

#[cfg(unix)]
impl std::fmt::Debug for ExitWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExitWatch").finish_non_exhaustive()
    }
}

#[cfg(unix)]
impl ExitWatch {
    /// Watches process `pid`; `None` when there is none (or it cannot be
    /// watched). Check its identity after this (its start time): the watch
    /// then pins the process checked.
    pub fn open(pid: i32) -> Option<ExitWatch> {
        rustix::process::Pid::from_raw(pid)
            .and_then(|p| crate::sys::ProcFd::open(p).ok())
            .map(ExitWatch)
    }
}

#[cfg(unix)]
impl std::os::fd::AsFd for ExitWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::ProcessId;

    #[test]
    fn this_process_runs_and_another_start_time_is_another_process() {
        let me = ProcessId::current().unwrap_or_else(|| panic!("no identity for this process"));
        assert!(me.is_running());
        let other = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.is_running());
        assert_eq!(ProcessId::of(-1), None);
    }
}
