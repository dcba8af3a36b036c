//! The [`Supervisor`] type, the same on every platform; what
//! [`Supervisor::run_with`] does is the platform's (`supervise.rs` on Unix,
//! `supervise_windows.rs` on Windows).

use std::sync::Arc;

use crate::cancel::{CancelShared, Canceller};
use crate::error::ProcError;
use crate::spec::{Finished, Outcome, RunSpec};
use crate::sys::Waker;

/// Supervises one child command; see the [crate documentation](crate) for what it does.
///
/// ```no_run
/// use baton_proc::{RunSpec, Supervisor};
///
/// let supervisor = Supervisor::new(RunSpec::new("make").arg("test"));
/// let canceller = supervisor.canceller();
/// std::thread::spawn(move || {
///     // ... when this run has been superseded:
///     canceller.cancel();
/// });
/// let outcome = supervisor.run()?;
/// std::process::exit(outcome.exit_code());
/// # Ok::<(), baton_proc::ProcError>(())
/// ```
#[derive(Debug)]
#[must_use = "a Supervisor does nothing until `run` is called"]
pub struct Supervisor {
    pub(crate) spec: RunSpec,
    pub(crate) cancel: Arc<CancelShared>,
}

impl Supervisor {
    /// Prepare to run `spec`. Nothing is started until [`Supervisor::run`].
    pub fn new(spec: RunSpec) -> Self {
        Supervisor {
            spec,
            cancel: Arc::default(),
        }
    }

    /// A handle to cancel this run from another thread.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            shared: Arc::clone(&self.cancel),
        }
    }

    /// Run the child to completion and report how it ended.
    ///
    /// Blocks the calling thread until the child has exited (and, on Unix,
    /// been reaped). When this returns, whether `Ok` or `Err`, no process of
    /// the run is left running (unless [`RunSpec::leftovers`] says to leave
    /// them): on an error after the spawn the command is killed first.
    ///
    /// # Errors
    ///
    /// [`ProcError::NotFound`], [`ProcError::NotExecutable`], [`ProcError::Cwd`] and
    /// [`ProcError::Spawn`] when the child could not be started;
    /// [`ProcError::Unsupported`] for a [`RunSpec::guard`] on Windows (no
    /// guardian there); [`ProcError::Io`] when a system call needed to
    /// supervise it failed.
    pub fn run(self) -> Result<Outcome, ProcError> {
        self.run_with(|_| {}).map(|f| f.outcome)
    }

    /// How every platform's `run_with` begins: `None` when the run was
    /// cancelled before it started (it then returns [`cancelled`]); else
    /// the waker a cancel sets, attached to the run's cancel state until
    /// the returned guard drops, however the run ends.
    pub(crate) fn attach_waker(&self) -> Result<Option<Attached<'_>>, ProcError> {
        if self.cancel.is_cancelled() {
            return Ok(None);
        }
        let waker =
            Arc::new(Waker::new().map_err(|e| ProcError::io("create the cancel waker", e))?);
        let attached = Attached {
            waker: Arc::clone(&waker),
            _detach: Detach(&self.cancel),
        };
        if self.cancel.attach(waker) {
            return Ok(None);
        }
        Ok(Some(attached))
    }
}

/// What a run that was cancelled before it started reports.
pub(crate) fn cancelled() -> Finished {
    Finished {
        outcome: Outcome::Cancelled,
        leftovers: Vec::new(),
        fenced: false,
        guardian_lost: false,
    }
}

/// A run's waker, attached to its cancel state ([`Supervisor::attach_waker`]).
pub(crate) struct Attached<'a> {
    /// Set by a cancel: the run waits on it with everything else.
    pub(crate) waker: Arc<Waker>,
    _detach: Detach<'a>,
}

/// Detaches a run's waker from its cancel state when the run ends, however
/// it ends (cancels after that are no-ops).
struct Detach<'a>(&'a CancelShared);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}

/// Why a supervisor started terminating its command (every platform).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// We forwarded a signal (a console control event on Windows) that we
    /// received.
    Signal,
    /// The timeout elapsed.
    Timeout,
    /// [`Canceller::cancel`] was called.
    Cancel,
}

/// Where a supervisor's termination of its command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Nothing sent to the command yet.
    Running,
    /// The polite request was sent (`SIGTERM` to the group, Ctrl-Break on
    /// Windows); the kill follows at `kill_at`.
    Terminating {
        reason: Reason,
        kill_at: std::time::Instant,
    },
    /// The command was killed (`SIGKILL`, the job terminated); waiting for
    /// it to be gone.
    Killed { reason: Reason },
}
