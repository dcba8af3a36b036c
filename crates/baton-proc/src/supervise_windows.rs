//! The supervisor on Windows: the command runs in a Job Object that only
//! this process holds, as the leader of a console process group of its own.
//!
//! - **It dies with us.** The job kills its processes when its last handle
//!   closes (`JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`), and the handle is not
//!   inheritable: when the supervisor dies, however it dies, the kernel
//!   closes it and the command's whole tree is killed (not only the leader,
//!   as the parent-death signal does on Linux).
//! - **Nothing runs unrecorded.** The command is created suspended, put in
//!   the job, handed to `on_start`, and only then resumed.
//! - **Stopping it**: `CTRL_BREAK_EVENT` to its process group (it was
//!   created with `CREATE_NEW_PROCESS_GROUP`), the grace period, then
//!   `TerminateJobObject`. Without a console to send the event through (a
//!   service, a detached process), the job is terminated at once.
//! - **No polling.** One `WaitForMultipleObjects` on the command's process,
//!   the cancel event and the console control event, with the next
//!   deadline as its timeout.
//!
//! How a run ended is decided from what the supervisor did, not only from
//! the exit code: a command killed through its job reports the code it was
//! given (137; under wine, sometimes 0), and the supervisor, which knows it
//! killed it, reports it as killed.

use std::ffi::OsString;
use std::os::windows::process::CommandExt;
use std::time::{Duration, Instant};

use crate::error::ProcError;
use crate::leftover::{Leftover, LeftoverPolicy};
use crate::spec::{Finished, Outcome, RunSpec, Started, Stdio};
use crate::supervisor::{cancelled, Phase, Reason, Supervisor};
use crate::sys::{
    ctrl_break, resume_threads, wait_any, CtrlCatcher, Job, Process, KILLED_EXIT_CODE, SPAWN_FLAGS,
    STATUS_CONTROL_C_EXIT,
};
use crate::terminate::KILL_WAIT;

/// The signal number reported for a command the supervisor killed
/// (`SIGKILL`), so that it exits 137 on every platform.
const KILLED: i32 = 9;
/// The signal number reported for a command that a console control event
/// ended (`SIGINT`: exit 130, as a shell reports a Ctrl-C).
const INTERRUPTED: i32 = 2;

impl Supervisor {
    /// Like [`Supervisor::run`], and calls `on_start` (on this thread) once
    /// the child exists, in its job, but before it runs (it is suspended), so
    /// the caller can record it before anything of the command runs; reports
    /// the processes the command left behind in its job, which were
    /// terminated unless [`RunSpec::leftovers`] says to leave them.
    ///
    /// # Errors
    ///
    /// As [`Supervisor::run`].
    pub fn run_with(self, on_start: impl FnOnce(Started) + Send) -> Result<Finished, ProcError> {
        let Some(attached) = self.attach_waker()? else {
            return Ok(cancelled());
        };
        let waker = &attached.waker;
        if self.spec.guard.is_some() {
            return Err(ProcError::unsupported(
                "a guardian (RunSpec::guard; the Job Object already stops the command when the supervisor dies)",
            ));
        }
        check_cwd(&self.spec)?;
        let mut ctrl = match self.spec.forward_signals {
            true => Some(
                CtrlCatcher::new().map_err(|e| ProcError::io("catch Ctrl-C and Ctrl-Break", e))?,
            ),
            false => None,
        };
        let job = Job::new().map_err(|e| ProcError::io("create the command's Job Object", e))?;
        let mut child = spawn(&self.spec)?;
        let pid = child.id();
        // Until the job holds it, a failure must not leave it suspended.
        let process = match Process::open(pid) {
            Ok(Some(p)) => p,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                let source = other
                    .err()
                    .unwrap_or_else(|| std::io::ErrorKind::NotFound.into());
                return Err(ProcError::io("open the command's process", source));
            }
        };
        let mut running = Running {
            job,
            process,
            child: Some(child),
        };
        running
            .job
            .assign(&running.process)
            .map_err(|e| ProcError::io("put the command in its Job Object", e))?;
        on_start(Started { pgid: pid as i32 });
        match resume_threads(pid) {
            Ok(1..) => {}
            Ok(0) => {
                return Err(ProcError::io(
                    "start the command's main thread",
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ))
            }
            Err(e) => return Err(ProcError::io("start the command's main thread", e)),
        }
        let started = Instant::now();
        let mut state = State {
            group: pid,
            job: &running.job,
            grace: self.spec.grace,
            deadline: self.spec.timeout.and_then(|t| started.checked_add(t)),
            phase: Phase::Running,
        };
        loop {
            let mut handles = vec![running.process.handle()];
            let watch_cancel = state.phase == Phase::Running;
            if watch_cancel {
                handles.push(waker.handle());
            }
            let ctrl_at = ctrl.as_ref().and_then(CtrlCatcher::handle).map(|h| {
                handles.push(h);
                handles.len() - 1
            });
            let limit = state
                .next_deadline()
                .map(|at| at.saturating_duration_since(Instant::now()));
            let ready =
                wait_any(&handles, limit).map_err(|e| ProcError::io("wait for the command", e))?;
            drop(handles);
            match ready {
                Some(0) => {
                    let code = running
                        .process
                        .exit_code()
                        .map_err(|e| ProcError::io("read the command's exit code", e))?;
                    let outcome = state.finish(code);
                    let leftovers = match self.spec.leftovers {
                        LeftoverPolicy::Leave => {
                            // Closing the job must not kill them now.
                            running
                                .job
                                .leave_running()
                                .map_err(|e| ProcError::io("leave the command's processes", e))?;
                            Vec::new()
                        }
                        LeftoverPolicy::Terminate => {
                            contain_leftovers(&running.job, pid, state.grace)
                        }
                    };
                    running.reap();
                    return Ok(Finished {
                        outcome,
                        leftovers,
                        fenced: false,
                        guardian_lost: false,
                    });
                }
                Some(1) if watch_cancel => state.on_cancel(),
                Some(i) if Some(i) == ctrl_at => {
                    let new = ctrl.as_mut().map_or(0, CtrlCatcher::pending);
                    for _ in 0..new {
                        state.on_signal();
                    }
                }
                _ => {}
            }
            state.on_time(Instant::now());
        }
    }
}

/// The command's process and job until it has been reaped. Dropped before
/// that (an error), it terminates the job and waits for the command.
struct Running {
    job: Job,
    process: Process,
    child: Option<std::process::Child>,
}

impl Running {
    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.child.is_some() {
            // The job, and the command itself: it may not be in the job yet.
            let _ = self.job.terminate(KILLED_EXIT_CODE);
            let _ = self.process.terminate(KILLED_EXIT_CODE);
            let _ = self.process.wait(Some(KILL_WAIT));
            self.reap();
        }
    }
}

/// Starts the command suspended, leading a console process group of its own.
fn spawn(spec: &RunSpec) -> Result<std::process::Child, ProcError> {
    let spawn_failed = |source: std::io::Error| ProcError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let mut command = std::process::Command::new(&spec.program);
    command.args(&spec.args);
    if spec.clear_env {
        command.env_clear();
    }
    for (key, value) in &spec.env {
        command.env(key, value);
    }
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    command.stdin(stdio(&spec.stdio.stdin).map_err(spawn_failed)?);
    command.stdout(stdio(&spec.stdio.stdout).map_err(spawn_failed)?);
    command.stderr(stdio(&spec.stdio.stderr).map_err(spawn_failed)?);
    command.creation_flags(SPAWN_FLAGS);
    command
        .spawn()
        .map_err(|source| spawn_error(&spec.program, source))
}

fn stdio(s: &Stdio) -> std::io::Result<std::process::Stdio> {
    Ok(match s {
        Stdio::Inherit => std::process::Stdio::inherit(),
        Stdio::Null => std::process::Stdio::null(),
        Stdio::Fd(handle) => std::process::Stdio::from(handle.try_clone()?),
    })
}

/// `ERROR_BAD_EXE_FORMAT`: not a program Windows can run.
const ERROR_BAD_EXE_FORMAT: i32 = 193;

fn spawn_error(program: &OsString, source: std::io::Error) -> ProcError {
    let program = program.clone();
    match source.kind() {
        std::io::ErrorKind::NotFound => ProcError::NotFound { program },
        std::io::ErrorKind::PermissionDenied => ProcError::NotExecutable { program, source },
        _ if source.raw_os_error() == Some(ERROR_BAD_EXE_FORMAT) => {
            ProcError::NotExecutable { program, source }
        }
        _ => ProcError::Spawn { program, source },
    }
}

/// Refuse a working directory that does not exist or is not a directory,
/// so that the spawn's "not found" is not mistaken for the program's.
fn check_cwd(spec: &RunSpec) -> Result<(), ProcError> {
    let Some(cwd) = &spec.cwd else {
        return Ok(());
    };
    let result = std::fs::metadata(cwd).and_then(|meta| match meta.is_dir() {
        true => Ok(()),
        // ERROR_DIRECTORY: "The directory name is invalid."
        false => Err(std::io::Error::from_raw_os_error(267)),
    });
    result.map_err(|source| ProcError::Cwd {
        path: cwd.clone(),
        source,
    })
}

/// Terminates what the command left in its job (its leader has exited):
/// Ctrl-Break to the leader's group, up to `grace`, then the job is
/// terminated. Returns whom it found.
fn contain_leftovers(job: &Job, leader: u32, grace: Duration) -> Vec<Leftover> {
    let pids: Vec<u32> = job
        .pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| *p != leader)
        .collect();
    let left: Vec<Process> = pids
        .into_iter()
        .filter_map(|p| Process::open_to_query(p).ok().flatten())
        .filter(|p| !p.has_exited())
        .collect();
    if left.is_empty() {
        return Vec::new();
    }
    let found = left
        .iter()
        .map(|p| Leftover {
            pid: p.pid() as i32,
            command: p.image_name(),
            escaped: false,
        })
        .collect();
    if ctrl_break(leader).is_ok() {
        wait_all(&left, grace);
    }
    let _ = job.terminate(KILLED_EXIT_CODE);
    wait_all(&left, KILL_WAIT);
    found
}

/// Waits until every process has exited or `limit` passes.
fn wait_all(procs: &[Process], limit: Duration) {
    let deadline = Instant::now().checked_add(limit);
    for p in procs {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let _ = p.wait(left);
    }
}

struct State<'a> {
    /// The command's pid: its console process group.
    group: u32,
    job: &'a Job,
    grace: Duration,
    deadline: Option<Instant>,
    phase: Phase,
}

impl State<'_> {
    fn reason(&self) -> Option<Reason> {
        match self.phase {
            Phase::Running => None,
            Phase::Terminating { reason, .. } | Phase::Killed { reason } => Some(reason),
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => self.deadline,
            Phase::Terminating { kill_at, .. } => Some(kill_at),
            Phase::Killed { .. } => None,
        }
    }

    /// Ctrl-Break to the group, then `grace` before the job is terminated;
    /// at once when the event cannot be sent (no console).
    fn start_terminating(&mut self, reason: Reason) {
        if ctrl_break(self.group).is_err() {
            self.kill(reason);
            return;
        }
        match Instant::now().checked_add(self.grace) {
            Some(kill_at) => self.phase = Phase::Terminating { reason, kill_at },
            None => self.phase = Phase::Killed { reason },
        }
    }

    fn kill(&mut self, reason: Reason) {
        let _ = self.job.terminate(KILLED_EXIT_CODE);
        self.phase = Phase::Killed { reason };
    }

    /// A Ctrl-C or Ctrl-Break arrived: pass the first on, kill at once on the second.
    fn on_signal(&mut self) {
        match self.phase {
            Phase::Running => self.start_terminating(Reason::Signal),
            Phase::Terminating { reason, .. } => self.kill(reason),
            Phase::Killed { .. } => {}
        }
    }

    fn on_cancel(&mut self) {
        if self.phase == Phase::Running {
            self.start_terminating(Reason::Cancel);
        }
    }

    fn on_time(&mut self, now: Instant) {
        match self.phase {
            Phase::Running => {
                if self.deadline.is_some_and(|deadline| now >= deadline) {
                    self.start_terminating(Reason::Timeout);
                }
            }
            Phase::Terminating { reason, kill_at } => {
                if now >= kill_at {
                    self.kill(reason);
                }
            }
            Phase::Killed { .. } => {}
        }
    }

    /// The command exited with `code`: how the run ended.
    fn finish(&self, code: u32) -> Outcome {
        match (self.reason(), self.phase) {
            (Some(Reason::Timeout), _) => Outcome::TimedOut,
            (Some(Reason::Cancel), _) => Outcome::Cancelled,
            // Killed by us: whatever code the system reports (wine may say 0).
            (Some(Reason::Signal), Phase::Killed { .. }) => Outcome::Signaled(KILLED),
            _ if code == STATUS_CONTROL_C_EXIT => Outcome::Signaled(INTERRUPTED),
            _ => Outcome::Exited(code as i32),
        }
    }
}
