//! Stopping a run from outside: a value the caller holds, not a signal.
//!
//! A [`RunControl`] reaches every place a run can be: waiting for its group's
//! slot or its locks (the lock library's [`CancelToken`] interrupts the
//! wait), or running its command (the supervisor's [`Canceller`] sends TERM,
//! grace, KILL). The group machinery stops a superseded run through the same
//! value; one process can own as many runs as it likes.
//!
//! A supersede of a run whose command pushes with `baton git push` waits
//! for a push that is landing (bounded by the grace period), and lets a
//! command whose push landed end by itself: the protocol is in
//! `baton_git::landing`; [`RunControl::stop`] is its supervisor side.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use baton_git::landing::Landing;
use baton_lock::{BatonDir, CancelToken, LockGuard, WaitPolicy};
use baton_proc::Canceller;

use crate::group::{GroupMode, GroupRequest};

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
    /// Signalled when the command has ended ([`RunControl::command_ended`]).
    ended: Condvar,
}

#[derive(Debug, Default)]
struct State {
    reason: Option<StopReason>,
    command: Option<Canceller>,
    /// The run's landing, and its grace period (mode supersede).
    landing: Option<(Landing, Duration)>,
    /// A supersede is waiting for the landing (at most once).
    deferring: bool,
    /// The landing closed by a supersede: held until the run is over.
    closed: Option<LockGuard>,
    /// The command has ended.
    ended: bool,
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
    ///
    /// A supersede of a running command with a landing
    /// ([`RunControl::open_landing`]) stops it from another thread once the
    /// landing is closed: at once if no push of the run landed, else only
    /// if the command has not ended by itself within the grace period
    /// (`baton_git::landing`). Any other stop stops it at once.
    pub(crate) fn stop(&self, reason: StopReason) -> bool {
        let superseded = matches!(reason, StopReason::Superseded { .. });
        let mut state = self.lock();
        let first = state.reason.is_none();
        if first {
            state.reason = Some(reason);
        }
        self.inner.waits.cancel();
        let Some(c) = state.command.clone() else {
            return first;
        };
        match (state.landing.clone(), superseded) {
            (Some(_), true) if state.deferring => {}
            (Some((landing, grace)), true) => {
                state.deferring = true;
                let inner = Arc::clone(&self.inner);
                let canceller = c.clone();
                let spawned = std::thread::Builder::new()
                    .name("baton-landing".into())
                    .spawn(move || land_then_stop(&inner, &landing, grace, &canceller));
                if spawned.is_err() {
                    c.cancel();
                }
            }
            _ => c.cancel(),
        }
        first
    }

    /// The landing of a run of `group` in mode supersede (`None` for any
    /// other run), cleared of an earlier run's record: its variables go
    /// into the command's environment, so that its pushes announce
    /// themselves, and a supersede then waits for a push in flight, at
    /// most `grace`, and spares a command whose push landed for `grace`.
    pub(crate) fn open_landing(
        &self,
        dir: &BatonDir,
        group: Option<&GroupRequest>,
        grace: Duration,
    ) -> Option<Landing> {
        let g = group.filter(|g| g.mode == GroupMode::Supersede)?;
        let landing = match Landing::new(dir, &g.key) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "pushes of this run cannot announce their landing");
                return None;
            }
        };
        landing.clear();
        // Taken once now, while nothing can push: the first grant of a lock
        // file reads /proc/locks (baton-lock's replaced-file check), tens of
        // ms on a busy machine, which must not delay a supersede's TERM.
        drop(landing.close(WaitPolicy::Immediately));
        self.lock().landing = Some((landing.clone(), grace));
        Some(landing)
    }

    /// The command has ended: a supersede waiting for it stops waiting.
    pub(crate) fn command_ended(&self) {
        self.lock().ended = true;
        self.inner.ended.notify_all();
    }

    /// The run is over: lets go of the landing a supersede closed.
    pub(crate) fn release_landing(&self) {
        let closed = self.lock().closed.take();
        drop(closed);
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

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.inner)
    }
}

fn lock(inner: &Inner) -> MutexGuard<'_, State> {
    inner.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The deferred stop of a superseded command (see [`RunControl::stop`]):
/// closes the landing (waiting at most `grace` for pushes in flight); if a
/// push landed, waits at most `grace` more for the command to end by
/// itself; then stops it unless it has ended.
fn land_then_stop(inner: &Inner, landing: &Landing, grace: Duration, command: &Canceller) {
    let closed = landing.close(WaitPolicy::AtMost(grace));
    let pushed = landing.pushed();
    let mut state = lock(inner);
    if !state.ended {
        state.closed = closed; // until the run is over
    }
    if pushed {
        tracing::info!(
            "superseded after its push landed: the command may end by itself within the grace period"
        );
        let deadline = Instant::now() + grace;
        while !state.ended {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = inner
                .ended
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
    if !state.ended {
        command.cancel();
    }
}
