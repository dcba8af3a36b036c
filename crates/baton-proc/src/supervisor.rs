//! The [`Supervisor`] type, the same on every platform; what
//! [`Supervisor::run_with`] does is the platform's (`supervise.rs` on Unix,
//! `supervise_windows.rs` on Windows).

use std::sync::Arc;

use crate::cancel::{CancelShared, Canceller};
use crate::error::ProcError;
use crate::spec::{Outcome, RunSpec};

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
}

/// Detaches a run's waker from its cancel state when the run ends, however
/// it ends (cancels after that are no-ops).
pub(crate) struct Detach<'a>(pub(crate) &'a CancelShared);

impl Drop for Detach<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}
