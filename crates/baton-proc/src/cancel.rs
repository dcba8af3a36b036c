//! Asking a running supervisor, from another thread, to stop its child.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::sys::Waker;

/// State shared by a [`Supervisor`](crate::Supervisor) and its [`Canceller`]s.
#[derive(Debug, Default)]
pub(crate) struct CancelShared {
    cancelled: AtomicBool,
    /// What the running supervisor waits on; `None` before `run` starts and after it ends.
    waker: Mutex<Option<Arc<Waker>>>,
}

impl CancelShared {
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Publish the waker to wake. Returns whether a cancel already happened, so a cancel
    /// that raced with this call is never lost: either `cancel` sees the fd, or this sees the flag.
    pub(crate) fn attach(&self, waker: Arc<Waker>) -> bool {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(waker);
        self.is_cancelled()
    }

    pub(crate) fn detach(&self) {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// A handle that asks a [`Supervisor`](crate::Supervisor) to terminate its child.
///
/// Get one from [`Supervisor::canceller`](crate::Supervisor::canceller) before calling
/// [`Supervisor::run`](crate::Supervisor::run); clone it and send it to any thread (for
/// example one that watches for "superseded"). [`Canceller::cancel`] wakes the supervisor
/// through an eventfd it polls (a pipe on macOS, an event on Windows), so the
/// child gets `SIGTERM` (on Windows: `CTRL_BREAK_EVENT`) within microseconds; then the
/// usual grace period and `SIGKILL` follow, and `run` returns
/// [`Outcome::Cancelled`](crate::Outcome::Cancelled).
#[derive(Debug, Clone)]
pub struct Canceller {
    pub(crate) shared: Arc<CancelShared>,
}

impl Canceller {
    /// Ask the supervisor to terminate the child's process group (TERM, grace, KILL).
    ///
    /// Idempotent and non-blocking. If `run` has not started yet, it will not spawn the
    /// child at all and returns [`Outcome::Cancelled`](crate::Outcome::Cancelled) at once; if
    /// `run` has already returned, this does nothing.
    pub fn cancel(&self) {
        self.shared.cancelled.store(true, Ordering::SeqCst);
        let waker = self
            .shared
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(waker) = waker.as_ref() {
            waker.wake();
        }
    }

    /// Whether [`Canceller::cancel`] was called (by any clone).
    pub fn is_cancelled(&self) -> bool {
        self.shared.is_cancelled()
    }
}
