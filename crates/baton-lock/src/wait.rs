//! How long an acquisition may wait: a value, so it can travel into errors.

use std::fmt;
use std::time::{Duration, Instant};

/// How long [`acquire`](crate::acquire) may wait for a busy lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Fail at once if the lock is busy or others are already waiting for it.
    Immediately,
    /// Wait in line until the lock is granted or this long has passed.
    AtMost(Duration),
    /// Wait in line until the lock is granted or this instant has passed.
    Until(Instant),
    /// Wait in line for as long as it takes.
    Forever,
}

impl WaitPolicy {
    /// The instant after which waiting stops; `None` waits forever.
    pub fn deadline_from(&self, start: Instant) -> Option<Instant> {
        match *self {
            WaitPolicy::Immediately => Some(start),
            WaitPolicy::AtMost(d) => Some(start.checked_add(d).unwrap_or(far_future(start))),
            WaitPolicy::Until(t) => Some(t),
            WaitPolicy::Forever => None,
        }
    }
}

fn far_future(start: Instant) -> Instant {
    // About 30 years: effectively forever, without overflowing Instant.
    start + Duration::from_secs(30 * 365 * 24 * 3600)
}

impl From<Duration> for WaitPolicy {
    fn from(d: Duration) -> Self {
        if d.is_zero() {
            WaitPolicy::Immediately
        } else {
            WaitPolicy::AtMost(d)
        }
    }
}

impl fmt::Display for WaitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitPolicy::Immediately => f.write_str("no waiting"),
            WaitPolicy::AtMost(d) => {
                write!(f, "waiting at most {}", humantime::format_duration(*d))
            }
            WaitPolicy::Until(_) => f.write_str("waiting until a deadline"),
            WaitPolicy::Forever => f.write_str("waiting forever"),
        }
    }
}
