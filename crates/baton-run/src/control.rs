//! Stopping a run from outside: a value the caller holds, not a signal.
//!
//! A [`RunControl`] reaches every place a run can be: waiting for its group's
//! slot or its locks (the lock library's [`CancelToken`] interrupts the
//! wait), or running its command (the supervisor's [`Canceller`] sends TERM,
//! grace, KILL). The group machinery stops a superseded run through the same
//! value; one process can own as many runs as it likes.

use std::sync::{Arc, Mutex, PoisonError};

use baton_lock::CancelToken;
use baton_proc::Canceller;

/// Why a run was stopped before its command finished by itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// A newer run of the same group superseded it (modes supersede, coalesce).
    Superseded {
        /// The run id of the newer run.
        by: String,
    },
    /// [`RunControl::cancel`] was called.
    Cancelled,
    /// The database session holding the run's locks ended (PostgreSQL
    /// backend): the locks are no longer held, so the command must stop.
    LockLost,
}

/// A handle that stops a run: clone it, keep one, put one in
/// [`RunRequest::control`](crate::RunRequest::control).
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    waits: CancelToken,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    reason: Option<StopReason>,
    command: Option<Canceller>,
}

impl RunControl {
    /// A control that has not stopped anything.
    pub fn new() -> RunControl {
        RunControl::default()
    }

    /// Stops the run: a wait ends at once, a running command is terminated
    /// (TERM, grace, KILL), a run that has not started never starts. The run
    /// then reports [`Outcome::Cancelled`](baton_proc::Outcome::Cancelled).
    /// Idempotent; never blocks.
    pub fn cancel(&self) {
        self.stop(StopReason::Cancelled);
    }

    /// Stops the run as superseded by run `by` (a newer run of its group
    /// that this process learned of by other means than the group's own
    /// machinery, e.g. from another machine); it then reports
    /// [`RunReport::superseded_by`](crate::RunReport::superseded_by).
    /// Idempotent; never blocks.
    pub fn supersede(&self, by: impl Into<String>) {
        self.stop(StopReason::Superseded { by: by.into() });
    }

    /// Stops the run because what it held was lost without anyone asking
    /// (a job service's node lost its database session): the run reports
    /// [`StopReason::LockLost`], so its caller can tell an interruption
    /// from a cancel. Idempotent; never blocks.
    pub fn interrupt(&self) {
        self.stop(StopReason::LockLost);
    }

    /// Why the run was stopped, if it was.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.lock().reason.clone()
    }

    /// Records `reason` (the first one wins) and stops whatever the run is
    /// doing. Returns whether this was the first stop.
    pub(crate) fn stop(&self, reason: StopReason) -> bool {
        let mut state = self.lock();
        let first = state.reason.is_none();
        if first {
            state.reason = Some(reason);
        }
        self.inner.waits.cancel();
        if let Some(c) = &state.command {
            c.cancel();
        }
        first
    }

    /// The token that ends this run's lock waits.
    pub(crate) fn waits(&self) -> CancelToken {
        self.inner.waits.clone()
    }

    /// The command is about to start: a stop from now on cancels it, and a
    /// stop that came earlier cancels it before it starts.
    pub(crate) fn attach(&self, command: Canceller) {
        let mut state = self.lock();
        if state.reason.is_some() {
            command.cancel();
        }
        state.command = Some(command);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
