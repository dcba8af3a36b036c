//! How a git command ended and what it printed, the same on every platform
//! (std's `ExitStatus` cannot be built from a code portably).

use std::fmt;

use baton_proc::Outcome;

/// What a git command printed, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Output {
    /// How it ended.
    pub(crate) status: Status,
    /// Its standard output.
    pub(crate) stdout: Vec<u8>,
    /// Its standard error.
    pub(crate) stderr: Vec<u8>,
}

/// How a git command ended, read as its wait status would be; displayed as
/// std's `ExitStatus` is on unix (`exit status: 128`, `signal: 9 (SIGKILL)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Status(Outcome);

impl Status {
    /// The status of a command that ended as `outcome` (git has no timeout
    /// and no canceller, so it only exits or is killed: a timeout or a
    /// cancellation reads as `SIGKILL`).
    pub(crate) fn of(outcome: Outcome) -> Status {
        Status(match outcome {
            Outcome::TimedOut | Outcome::Cancelled => Outcome::Signaled(9),
            other => other,
        })
    }

    /// Whether it exited 0.
    pub(crate) fn success(&self) -> bool {
        self.0 == Outcome::Exited(0)
    }

    /// Its exit code, if it exited.
    pub(crate) fn code(&self) -> Option<i32> {
        match self.0 {
            Outcome::Exited(code) => Some(code),
            _ => None,
        }
    }

    /// The signal that killed it, if one did.
    #[cfg(test)]
    pub(crate) fn signal(&self) -> Option<i32> {
        match self.0 {
            Outcome::Signaled(signal) => Some(signal),
            _ => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Outcome::Signaled(signal) => match signal_name(signal) {
                Some(name) => write!(f, "signal: {signal} ({name})"),
                None => write!(f, "signal: {signal}"),
            },
            Outcome::Exited(code) => write!(f, "exit status: {code}"),
            Outcome::TimedOut | Outcome::Cancelled => write!(f, "signal: 9 (SIGKILL)"),
        }
    }
}

/// The names of the signals that end a process, as std prints them.
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_wait_statuses() {
        assert_eq!(Status::of(Outcome::Exited(0)).to_string(), "exit status: 0");
        assert!(Status::of(Outcome::Exited(0)).success());
        assert_eq!(Status::of(Outcome::Exited(128)).code(), Some(128));
        let killed = Status::of(Outcome::TimedOut);
        assert_eq!((killed.code(), killed.signal()), (None, Some(9)));
        assert_eq!(killed.to_string(), "signal: 9 (SIGKILL)");
        assert_eq!(Status::of(Outcome::Signaled(64)).to_string(), "signal: 64");
    }
}
