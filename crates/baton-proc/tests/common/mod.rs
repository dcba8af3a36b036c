//! Helpers shared by the integration tests.

use std::path::Path;
use std::time::{Duration, Instant};

use baton_proc::RunSpec;

/// How long any test waits for something that should happen in milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// `sh -c script`, with a grace period long enough that a test relying on it would notice.
pub fn sh(script: &str) -> RunSpec {
    let mut spec = RunSpec::new("sh").arg("-c").arg(script);
    spec.grace = Duration::from_secs(20);
    spec
}

/// Timeouts for a test whose child must set itself up (a TERM trap, say)
/// before its timeout fires, shortest first. A timeout cannot wait for the
/// child, so an attempt in which the child was not ready in time proves
/// nothing and is repeated with the next one.
pub const GROWING_TIMEOUTS: [Duration; 4] = [
    Duration::from_millis(200),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(20),
];

/// The complete first line of `path`, if it has one yet.
pub fn first_line(path: &Path) -> Option<String> {
    let content = std::fs::read_to_string(path).ok()?;
    content.split_once('\n').map(|(line, _)| line.to_owned())
}

/// Wait (bounded) until `path` exists and has a complete first line; returns that line.
pub fn wait_for_line(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Some(line) = first_line(path) {
            return line;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait until the process behind `pidfd` has exited; false if it is still alive after `limit`.
pub fn pidfd_exits_within(pidfd: &std::os::fd::OwnedFd, limit: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let timeout = Timespec::try_from(limit).unwrap_or_default();
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0)
}

/// Open a pidfd for `pid`; `None` if it is already gone.
pub fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}
