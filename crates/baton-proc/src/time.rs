//! Durations as the kernel's waits take them.

use std::time::Duration;

use rustix::event::Timespec;

/// A `poll` timeout (`ppoll` takes nanoseconds, so no rounding is needed).
pub(crate) fn timespec(duration: Duration) -> Timespec {
    Timespec::try_from(duration).unwrap_or(Timespec {
        tv_sec: rustix::event::Secs::MAX,
        tv_nsec: 0,
    })
}
