//! `baton run --lock ...`: acquire locks, run a supervised command, release.

use std::ffi::OsString;
use std::time::Duration;

use baton_lock::{acquire_all, new_run_id, BatonDir, LockName, LockRequest, Mode, WaitPolicy};
use baton_proc::{Outcome, RunSpec, Supervisor};

use crate::error::RunError;

/// What to run and under which locks.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Locks to hold while the command runs; taken in canonical (sorted) order.
    pub locks: Vec<LockName>,
    /// Mode of every lock.
    pub mode: Mode,
    /// How long to wait for the locks, all together.
    pub wait: WaitPolicy,
    /// Recorded owner; default `user@host`.
    pub owner: Option<String>,
    /// Recorded operation; default the command line.
    pub operation: Option<String>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Kill the command's process group after this long.
    pub timeout: Option<Duration>,
    /// Time between TERM and KILL.
    pub grace: Duration,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The run id given to the command as `BATON_RUN_ID`.
    pub run_id: String,
    /// How the command ended.
    pub outcome: Outcome,
}

/// Acquires the locks, runs the command with `BATON_LOCK`, `BATON_FENCING_TOKEN`,
/// `BATON_RUN_ID` and `BATON_DIR` set, and releases the locks when it ends.
///
/// With several locks, `BATON_LOCK` and `BATON_FENCING_TOKEN` hold
/// comma-separated lists in the same (sorted) order.
pub fn run(dir: &BatonDir, req: &RunRequest) -> Result<RunReport, RunError> {
    let (program, args) = req.command.split_first().ok_or(RunError::NoCommand)?;
    let run_id = new_run_id();
    let operation = req
        .operation
        .clone()
        .unwrap_or_else(|| command_line(&req.command));
    let requests: Vec<LockRequest> = req
        .locks
        .iter()
        .map(|name| {
            let mut r = LockRequest::new(name.clone())
                .mode(req.mode)
                .wait(req.wait)
                .operation(operation.clone())
                .run_id(run_id.clone())
                .kind("run");
            r.owner = req.owner.clone();
            r
        })
        .collect();
    let guards = acquire_all(dir, &requests)?;
    let join = |f: &dyn Fn(&baton_lock::LockGuard) -> String| {
        guards.iter().map(f).collect::<Vec<_>>().join(",")
    };
    let mut spec = RunSpec::new(program.clone()).args(args.iter().cloned());
    spec.timeout = req.timeout;
    spec.grace = req.grace;
    spec.env = vec![
        ("BATON_RUN_ID".into(), run_id.clone().into()),
        ("BATON_DIR".into(), dir.path().as_os_str().to_owned()),
    ];
    if !guards.is_empty() {
        spec.env
            .push(("BATON_LOCK".into(), join(&|g| g.name().to_string()).into()));
        spec.env.push((
            "BATON_FENCING_TOKEN".into(),
            join(&|g| g.token().to_string()).into(),
        ));
    }
    let outcome = Supervisor::new(spec).run();
    // Release in reverse order of acquisition; errors here must not hide the
    // command's outcome, and the kernel releases on exit regardless.
    let mut release_error = None;
    for g in guards.into_iter().rev() {
        if let Err(e) = g.release() {
            release_error.get_or_insert(e);
        }
    }
    let outcome = outcome?;
    if let Some(e) = release_error {
        return Err(e.into());
    }
    Ok(RunReport { run_id, outcome })
}

/// The command as one line, for metadata and messages.
pub fn command_line(command: &[OsString]) -> String {
    let mut s = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() > 200 {
        let mut cut = 197;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}
