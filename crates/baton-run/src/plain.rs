//! A run that is only its command: no group, no locks, no workspace, no
//! setup command, no guardian, no signal forwarding. [`run()`](crate::run)
//! handles it like any other; a caller that supervises commands its own
//! way (the job service, on its runtime: `Supervisor::run_async`) takes it
//! apart with [`PlainRun::new`]: the command's supervisor, the recording of
//! its process group, and the report of how it ended, as `run()` would
//! give them.

use baton_lock::BatonDir;
use baton_proc::{Finished, ProcError, Started, Supervisor};

use crate::control::{RunControl, StopReason};
use crate::error::RunError;
use crate::run::{base_env, OnStart, RunReport, RunRequest};

/// A plain run taken apart: give [`PlainRun::supervisor`] to whatever
/// runs it, call [`PlainRun::recorder`]'s [`Recorder::record`] from its
/// start hook, and turn its end into a report with [`PlainRun::end`].
#[derive(Debug)]
pub struct PlainRun {
    /// The command's supervisor (the request's control stops it).
    pub supervisor: Supervisor,
    /// Records the command's process group, as `run()` does.
    pub recorder: Recorder,
    /// Makes the run's report.
    pub end: PlainEnd,
}

/// Records a plain run's process group (the request's
/// [`RunRequest::on_start`]).
#[derive(Debug)]
pub struct Recorder {
    grace_ms: u64,
    on_start: Option<OnStart>,
}

/// Makes a plain run's [`RunReport`] from how its command ended.
#[derive(Debug)]
pub struct PlainEnd {
    run_id: String,
    control: RunControl,
}

impl RunRequest {
    /// Whether this run is its command alone (see the [`PlainRun`]
    /// module): no locks, group, workspace, setup command or guardian, and
    /// no signal forwarding.
    pub fn is_plain(&self) -> bool {
        self.locks.is_empty()
            && self.group.is_none()
            && self.workspace.is_none()
            && self.setup.is_none()
            && self.guard.is_none()
            && !self.forward_signals
    }
}

impl PlainRun {
    /// Takes `req` apart, its command to run with the same environment as
    /// [`run()`](crate::run) gives it in `dir`; `None` when it is not
    /// plain ([`RunRequest::is_plain`]).
    ///
    /// # Errors
    ///
    /// [`RunError::NoCommand`] for an empty command.
    pub fn new(dir: &BatonDir, req: &RunRequest) -> Result<Option<PlainRun>, RunError> {
        if !req.is_plain() {
            return Ok(None);
        }
        let (program, args) = req.command.split_first().ok_or(RunError::NoCommand)?;
        let run_id = req.run_id.clone().unwrap_or_else(baton_lock::new_run_id);
        // A plain request has no guard and forwards no signal (`is_plain`).
        let spec = crate::run::command_spec(req, program, args, base_env(dir, &run_id));
        let supervisor = Supervisor::new(spec);
        req.control.attach(supervisor.canceller());
        Ok(Some(PlainRun {
            supervisor,
            recorder: Recorder {
                grace_ms: u64::try_from(req.grace.as_millis()).unwrap_or(u64::MAX),
                on_start: req.on_start.clone(),
            },
            end: PlainEnd {
                run_id,
                control: req.control.clone(),
            },
        }))
    }
}

impl Recorder {
    /// Records the command's process group (call it from the supervisor's
    /// start hook, while the command waits before its exec).
    pub fn record(&self, started: Started) {
        if let Some(f) = &self.on_start {
            (f.0)(baton_lock::CommandGroup::of_started(started, self.grace_ms));
        }
    }
}

impl PlainEnd {
    /// The run's report, as [`run()`](crate::run) makes it.
    ///
    /// # Errors
    ///
    /// The supervisor's error; [`RunError::GuardianLost`] as `run()` says it.
    pub fn report(self, finished: Result<Finished, ProcError>) -> Result<RunReport, RunError> {
        let finished = finished?;
        if finished.guardian_lost {
            return Err(RunError::GuardianLost);
        }
        let superseded_by = match self.control.stop_reason() {
            Some(StopReason::Superseded { by }) => Some(by),
            _ => None,
        };
        Ok(RunReport {
            run_id: self.run_id,
            outcome: finished.outcome,
            ran: true,
            superseded_by,
            newer_order: None,
            workspace_error: None,
            workspace_preserved: None,
            workspace: None,
            leftovers: finished.leftovers,
            setup_failed: false,
        })
    }
}
