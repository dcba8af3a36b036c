//! Running one job through the run library: the template's argv with the
//! prompt as one element (never a shell), the prompt on stdin and in
//! `$BATON_PROMPT`, a clean environment (see [`command_for`]: never the
//! service's token or another template's secrets), output captured, its
//! group and workspace, its timeout
//! counted from the start of execution. [`run_job`] is synchronous: the
//! scheduler runs it on a blocking thread, which it holds until the command
//! has ended (the command's parent-death signal is tied to that thread).
//! This is the one route of every job on every platform: a route of its
//! own for plain jobs on the runtime was measured and removed
//! (`docs/src/design/service.md`, "Speed devices").

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_lock::{BatonDir, CommandGroup, LockName, WaitPolicy};
use baton_proc::{Outcome, Stdio, StdioSpec};
use baton_run::{GroupRequest, OnStart, RunControl, RunError, RunRequest};
use tokio::sync::watch;

use crate::config::{Config, Template, BASE_ENV};
use crate::model::{now_ms, Finish, Job, JobStatus, RecordedGroup};
use crate::output::{Capture, JobFiles, Stream};

mod notes;
use notes::{leftover_list, note_reset};

/// What a job needs from the service to run.
pub struct ExecContext {
    /// The baton dir: the job's group and workspace live there, shared
    /// with every `baton run` on it.
    pub dir: BatonDir,
    /// The configuration.
    pub config: Arc<Config>,
    /// Where job files go.
    pub jobs_root: PathBuf,
    /// Set when the service shuts down (a cancel then reads "shutdown").
    pub shutting_down: Arc<AtomicBool>,
    /// Where the job's group lives (the store's PostgreSQL database, if
    /// that is the store: one group across every node).
    pub groups: baton_run::Backend,
    /// The job's guardian, on a store several nodes share (see
    /// [`baton_run::RunRequest::guard`]).
    pub guard: Option<baton_proc::GuardSpec>,
}

/// The workspace a job's command runs in, as its start reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartedIn {
    /// The workspace's path.
    pub path: String,
    /// Where its branch's old tip was kept when the workspace started the
    /// branch over (`reset_branch`) and that dropped commits.
    pub abandoned_ref: Option<String>,
}

/// Hooks the executor calls while the job runs.
pub struct Hooks {
    /// The command's process group exists (before it executes); the job's
    /// workspace, if it has one.
    pub on_start: Arc<dyn Fn(RecordedGroup, Option<StartedIn>) + Send + Sync>,
    /// Bytes of stdout captured so far.
    pub stdout_progress: watch::Sender<u64>,
}

/// Variables for a command.
pub type Env = Vec<(OsString, OsString)>;

/// `PATH` for a job when the service itself has none.
#[cfg(unix)]
pub const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// `PATH` for a job when the service itself has none.
#[cfg(windows)]
pub const FALLBACK_PATH: &str = r"C:\Windows\system32;C:\Windows";

/// The argv and environment of a job, from its template (or its raw
/// command, where allowed). The environment is the whole of it (the run
/// starts from an empty one): the service's [`BASE_ENV`] variables it has,
/// the template's `inherit_env` ones it has, the template's `env`, then
/// `BATON_PROMPT` and `BATON_JOB_ID` (the run library adds its own
/// `BATON_*`). Never the service's token, nor another template's `env`.
pub fn command_for(job: &Job, template: Option<&Template>) -> Result<(Vec<OsString>, Env), String> {
    command_from(job, template, &|k| std::env::var_os(k))
}

/// [`command_for`] with the service's environment given as a lookup.
fn command_from(
    job: &Job,
    template: Option<&Template>,
    service_env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<(Vec<OsString>, Env), String> {
    let prompt = job.spec.prompt.clone().unwrap_or_default();
    let mut env: Env = Vec::new();
    for &name in BASE_ENV {
        match service_env(name) {
            Some(v) => env.push((name.into(), v)),
            None if name == "PATH" => env.push((name.into(), FALLBACK_PATH.into())),
            None => {}
        }
    }
    let argv: Vec<OsString> = match (&job.spec.command, template) {
        (Some(raw), _) => raw.iter().map(OsString::from).collect(),
        (None, Some(t)) => {
            for name in &t.inherit_env {
                if let Some(v) = service_env(name) {
                    env.push((name.into(), v));
                }
            }
            for (k, v) in &t.env {
                env.push((k.into(), v.into()));
            }
            t.command
                .iter()
                .map(|a| match a.as_str() {
                    "{prompt}" => OsString::from(&prompt),
                    other => OsString::from(other),
                })
                .collect()
        }
        (None, None) => {
            return Err(format!(
                "template '{}' is no longer configured",
                job.spec.template
            ))
        }
    };
    env.push(("BATON_PROMPT".into(), prompt.into()));
    env.push(("BATON_JOB_ID".into(), job.spec.id.clone().into()));
    Ok((argv, env))
}

/// The message for a command the kernel refused to start because its
/// arguments and environment are too large (E2BIG): the sizes and limits.
fn too_large(argv: &[OsString], env: &Env, prompt_len: usize) -> String {
    let args: usize = argv.iter().map(|a| a.len() + 1).sum();
    let vars: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let (refusal, one, all) = crate::sys::size_limits();
    format!(
        "could not start the command: the system refused its arguments and environment as too \
         large ({refusal}): the prompt is {prompt_len} bytes (one argument and BATON_PROMPT; each \
         may be at most {one}), arguments and environment are {} bytes in all ({all}); lower \
         max_prompt_bytes or the template's env",
        args + vars
    )
}

/// Runs `job` to its end and says how it ended. Never panics on the
/// command's behalf; every failure becomes a [`Finish`].
pub fn run_job(ctx: &ExecContext, job: &Job, control: RunControl, hooks: Hooks) -> Finish {
    let (req, ending) = match prepare(ctx, job, control, hooks) {
        Ok(p) => p,
        Err(failed) => return failed,
    };
    let result = baton_run::run(&ctx.dir, &req);
    drop(req); // our copies of the pipes' write ends
    ending.finish(result)
}

/// The end of a job whose thread failed (panicked).
pub(crate) fn thread_failed(e: &tokio::task::JoinError) -> Finish {
    Finish {
        status: JobStatus::Failed,
        exit_code: Some(baton_contract::exit::BATON_FAILED),
        error: Some(format!("the job's thread failed: {e}")),
        superseded_by: None,
        finished_at: now_ms(),
    }
}

/// What is left to do once a job's run has ended: its output's capture to
/// finish, and its end to make of the run's result.
pub(crate) struct Ending {
    out: Capture,
    err: Capture,
    verdict: Verdict,
}

/// How long a job's end waits for its output's capture to finish.
const CAPTURE_WAIT: Duration = Duration::from_secs(2);

impl Ending {
    /// The job's end (waits, at most 2 s, for its output's capture).
    pub(crate) fn finish(self, result: Result<baton_run::RunReport, RunError>) -> Finish {
        self.note_leftovers(&result);
        let lost = [self.out.finish(CAPTURE_WAIT), self.err.finish(CAPTURE_WAIT)];
        self.verdict.of(result, lost)
    }
}

impl Ending {
    /// Says in the job's stderr log (and the service's log) which
    /// processes its command left running, which were terminated before
    /// the job ended, as `baton run` warns on its stderr; and where its
    /// branch's commits went when the base's branch could not take them.
    fn note_leftovers(&self, result: &Result<baton_run::RunReport, RunError>) {
        let Ok(report) = result else { return };
        if let Some(p) = &report.workspace_preserved {
            tracing::warn!(job = %report.run_id, kept = %p.reference, "a job's branch could not take its commits; kept them under a ref of their own");
            self.err.note(&format!("baton: {}\n", p.note()));
        }
        if report.leftovers.is_empty() {
            return;
        }
        let list = leftover_list(&report.leftovers);
        tracing::warn!(job = %report.run_id, leftovers = %list, "a job's command left processes running; terminated them");
        self.err.note(&format!(
            "baton: warning: the command left {} process(es) running ({list}); terminated them (TERM, grace, KILL) before the job ended\n",
            report.leftovers.len()
        ));
    }
}

/// The job's run request and what to do at its end, or its end already
/// (it cannot run).
#[allow(clippy::result_large_err)]
pub(crate) fn prepare(
    ctx: &ExecContext,
    job: &Job,
    control: RunControl,
    hooks: Hooks,
) -> Result<(RunRequest, Ending), Finish> {
    let template = ctx.config.templates.get(&job.spec.template);
    let failed = |error: String| Finish {
        status: JobStatus::Failed,
        exit_code: Some(baton_contract::exit::BATON_FAILED),
        error: Some(error),
        superseded_by: None,
        finished_at: now_ms(),
    };
    let (argv, env) = match command_for(job, template) {
        Ok(c) => c,
        Err(e) => return Err(failed(e)),
    };
    let files = JobFiles::new(&ctx.jobs_root, &job.spec.id);
    let stdin = match &job.spec.prompt {
        Some(p) => match JobFiles::prompt(p) {
            Ok(fd) => Stdio::Fd(Arc::new(fd)),
            Err(e) => {
                return Err(failed(format!(
                    "cannot hold the job's prompt for its stdin: {e}"
                )))
            }
        },
        None => Stdio::Null,
    };
    let cap = ctx.config.max_log_bytes;
    let (stderr_progress, _) = watch::channel(0);
    let captures = Capture::start(&files.stream(Stream::Stdout), cap, hooks.stdout_progress)
        .and_then(|out| {
            Capture::start(&files.stream(Stream::Stderr), cap, stderr_progress).map(|e| (out, e))
        });
    let (out, err) = match captures {
        Ok(c) => c,
        Err(e) => return Err(failed(format!("cannot capture the job's output: {e}"))),
    };

    let mut req = RunRequest::new(argv.clone());
    req.run_id = Some(job.spec.id.clone());
    req.owner = Some(format!("baton serve job {}", job.spec.id));
    req.operation = Some(format!("job {} ({})", job.spec.id, job.spec.template));
    req.control = control.clone();
    req.grace = ctx.config.grace;
    req.timeout = Some(Duration::from_millis(job.spec.timeout_ms));
    req.guard = ctx.guard.clone();
    req.env = env.clone();
    req.clear_env = true;
    // A session of its own: no process of the job can join a process group
    // of the service's (its own group holds the service's helpers, which
    // orphan containment never touches).
    req.new_session = true;
    req.stdio = StdioSpec {
        stdin,
        stdout: Stdio::Fd(out.writer()),
        stderr: Stdio::Fd(err.writer()),
    };
    if let Some(group) = &job.spec.group {
        let key = match LockName::new(group) {
            Ok(k) => k,
            Err(e) => return Err(failed(format!("invalid group '{group}': {e}"))),
        };
        req.backend = Some(ctx.groups.clone());
        req.group = Some(GroupRequest {
            key,
            mode: job.spec.mode,
            max: 1,
            max_pending: None,
            wait: WaitPolicy::Forever,
            // Only supersede and coalesce jobs are stored with one.
            order: job.spec.order_key(),
        });
    }
    match (
        template.and_then(|t| t.workspace.as_ref()),
        job.spec.command.is_some(),
    ) {
        (Some(w), false) => {
            let mut ws = baton_git::WorkspaceRequest::new(&w.repo);
            ws.strategy = w.strategy;
            ws.id = Some(job.spec.id.clone());
            // fetch_debounce = "0s" means never fetch (see the config).
            ws.fetch = w.fetch_debounce.is_some_and(|d| !d.is_zero());
            ws.fetch_debounce = w.fetch_debounce.unwrap_or_default();
            // Full names: a start point no other ref can stand in for (a
            // job's branch `origin/main` is refused, and even a
            // `refs/heads/origin/main` made by hand in the base would not
            // answer to `refs/remotes/origin/main`).
            ws.reference = w.branch.as_ref().map(|b| match ws.fetch {
                true => format!("refs/remotes/{}/{b}", baton_git::DEFAULT_REMOTE),
                false => format!("refs/heads/{b}"),
            });
            ws.branch = job.spec.branch.clone();
            // Checked at submission (a branch, a ref); baton_git refuses it
            // again, as a workspace set-up failure, if the template changed.
            ws.reset_branch = job.spec.reset_branch;
            req.workspace = Some(ws);
            req.setup = w
                .setup
                .as_ref()
                .map(|s| s.iter().map(OsString::from).collect());
        }
        _ => req.cwd = template.and_then(|t| t.cwd.clone()),
    }
    let dir_path = ctx.dir.path().to_path_buf();
    let job_id = job.spec.id.clone();
    let on_start = Arc::clone(&hooks.on_start);
    let with_workspace = req.workspace.is_some();
    // A reset's note goes into the job's stderr log once (the setup
    // command's start and the command's both report it).
    let reset_log = (with_workspace && job.spec.reset_branch).then(|| err.writer());
    let noted = AtomicBool::new(false);
    req.on_start = Some(OnStart(Arc::new(move |g: CommandGroup| {
        let workspace = with_workspace
            .then(|| BatonDir::open(dir_path.clone()).ok())
            .flatten()
            .and_then(|d| baton_git::get(&d, &job_id).ok());
        if let (Some(log), Some(w)) = (&reset_log, &workspace) {
            if w.abandoned_ref.is_some() && !noted.swap(true, Ordering::SeqCst) {
                note_reset(log, &job_id, w);
            }
        }
        let workspace = workspace.map(|w| StartedIn {
            path: w.path.display().to_string(),
            abandoned_ref: w.abandoned_ref,
        });
        on_start(
            RecordedGroup {
                pgid: g.pgid,
                leader_start_time: g.leader_start_time,
                session: g.session,
                grace_ms: g.grace_ms,
            },
            workspace,
        );
    })));

    let ending = Ending {
        out,
        err,
        verdict: Verdict {
            argv,
            env,
            prompt_len: job.spec.prompt.as_deref().map_or(0, str::len),
            control,
            shutting_down: Arc::clone(&ctx.shutting_down),
        },
    };
    Ok((req, ending))
}

/// What a job's end is made of besides its run's result: its command (to
/// explain a command too large to start), its control (why it was stopped)
/// and whether the service is shutting down.
struct Verdict {
    argv: Vec<OsString>,
    env: Env,
    prompt_len: usize,
    control: RunControl,
    shutting_down: Arc<AtomicBool>,
}

impl Verdict {
    /// How the job ended, from its run's result and what its capture lost.
    fn of(
        &self,
        result: Result<baton_run::RunReport, RunError>,
        lost: [Option<String>; 2],
    ) -> Finish {
        let lost: Vec<String> = lost.into_iter().flatten().collect();
        if let Err(RunError::Proc(baton_proc::ProcError::Spawn { source, .. })) = &result {
            if crate::sys::is_too_large(source) {
                return Finish {
                    status: JobStatus::Failed,
                    exit_code: Some(baton_contract::exit::BATON_FAILED),
                    error: Some(too_large(&self.argv, &self.env, self.prompt_len)),
                    superseded_by: None,
                    finished_at: now_ms(),
                };
            }
        }
        let mut finish = finish_of(
            result,
            &self.control,
            self.shutting_down.load(Ordering::SeqCst),
        );
        // The record says when its output is incomplete, and why.
        if !lost.is_empty() {
            let lost = lost.join("; ");
            finish.error = Some(match finish.error {
                Some(e) => format!("{e}; {lost}"),
                None => lost,
            });
        }
        finish
    }
}

fn finish_of(
    result: Result<baton_run::RunReport, RunError>,
    control: &RunControl,
    shutting_down: bool,
) -> Finish {
    let now = now_ms();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let (status, exit_code, error) = match e {
                // Its node lost its database session, or stopped vouching
                // for it in time: nobody cancelled it, its run was cut short.
                RunError::LockLost { .. } | RunError::Fenced { .. } => {
                    (JobStatus::Interrupted, e_exit_code(&e), e.to_string())
                }
                RunError::NotAdmitted(why) => {
                    (JobStatus::Skipped, baton_contract::exit::NOT_ACQUIRED, why)
                }
                // The git library names `baton run`'s flags; a job's are
                // fields of its submission.
                RunError::Workspace(baton_git::GitError::BranchNotAtRef { .. }) => (
                    JobStatus::Failed,
                    e_exit_code(&e),
                    format!(
                        "{e} (a job: submit it with workspace.reset_branch = true, `baton job submit --reset-branch`)"
                    ),
                ),
                e => (JobStatus::Failed, e_exit_code(&e), e.to_string()),
            };
            return Finish {
                status,
                exit_code: Some(exit_code),
                error: Some(error),
                superseded_by: None,
                finished_at: now,
            };
        }
    };
    // A run stopped through its control as superseded before it reached
    // its group's machinery (e.g. by a newer job on another node) reports
    // it through the control only.
    let mut report = report;
    if report.superseded_by.is_none() && report.outcome == Outcome::Cancelled {
        if let Some(baton_run::StopReason::Superseded { by }) = control.stop_reason() {
            report.superseded_by = Some(by);
        }
    }
    let code = report.outcome.exit_code();
    // A run superseded after its push landed whose command then ended by
    // itself ends with its own status (baton_git::landing).
    let landed_then_ended = report.pushed && report.outcome != Outcome::Cancelled;
    let (status, error) = match report.outcome {
        _ if report.superseded_by.is_some() && !landed_then_ended => (
            JobStatus::Superseded,
            Some(format!(
                "superseded by {}",
                report.superseded_by.as_deref().unwrap_or("a newer run")
            )),
        ),
        Outcome::Cancelled if control.stop_reason() == Some(baton_run::StopReason::LockLost) => (
            JobStatus::Interrupted,
            Some("interrupted: this node lost its database session".to_string()),
        ),
        Outcome::Cancelled => {
            let why = match (control.stop_reason(), shutting_down) {
                (_, true) => "cancelled: the service shut down and its drain timeout passed",
                _ => "cancelled",
            };
            (JobStatus::Cancelled, Some(why.to_string()))
        }
        Outcome::TimedOut if report.setup_failed => (
            JobStatus::TimedOut,
            Some(
                "timed out in the workspace's setup command (the timeout counts from its start); \
                 the job's command did not run"
                    .to_string(),
            ),
        ),
        _ if report.setup_failed => (
            JobStatus::Failed,
            Some(format!(
                "the workspace's setup command failed (exit {code}); the job's command did not run"
            )),
        ),
        Outcome::Exited(0) => (JobStatus::Succeeded, None),
        Outcome::Exited(c) => (JobStatus::Failed, Some(format!("exited with {c}"))),
        Outcome::Signaled(s) => (JobStatus::Failed, Some(format!("killed by signal {s}"))),
        Outcome::TimedOut => (
            JobStatus::TimedOut,
            Some("timed out (counted from the start of execution)".to_string()),
        ),
    };
    let error = match (&report.workspace_error, error) {
        (Some(w), Some(e)) => Some(format!("{e}; the workspace could not be removed: {w}")),
        (Some(w), None) => Some(format!("the workspace could not be removed: {w}")),
        (None, e) => e,
    };
    // Stopped because its node lost its session: baton's "lock lost".
    let code = match status {
        JobStatus::Interrupted => baton_contract::exit::LOCK_LOST,
        _ => code,
    };
    Finish {
        status,
        exit_code: Some(code),
        error,
        superseded_by: report.superseded_by,
        finished_at: now,
    }
}

fn e_exit_code(e: &RunError) -> i32 {
    match e {
        RunError::Proc(p) => p.exit_code(),
        RunError::LockLost { .. } | RunError::Fenced { .. } => baton_contract::exit::LOCK_LOST,
        _ => baton_contract::exit::BATON_FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GroupMode, NewJob};

    fn job(command: Option<Vec<String>>) -> Job {
        Job {
            spec: NewJob {
                id: "j1".into(),
                template: "t".into(),
                prompt: Some("hi".into()),
                group: None,
                mode: GroupMode::Queue,
                order: None,
                timeout_ms: 1000,
                branch: None,
                reset_branch: false,
                command,
                created_at: 0,
                waiter: None,
            },
            seq: 1,
            status: JobStatus::Running,
            exit_code: None,
            error: None,
            started_at: None,
            finished_at: None,
            workspace: None,
            abandoned_ref: None,
            superseded_by: None,
            node: None,
            attempts: 1,
            process_group: None,
        }
    }

    #[test]
    fn a_job_environment_is_the_base_its_allowlist_its_env_and_batons_own() {
        let template = Template {
            command: vec!["cmd".into(), "{prompt}".into()],
            env: vec![("KEY".into(), "v".into())],
            timeout: None,
            workspace: None,
            retry_on_interrupt: false,
            cwd: None,
            inherit_env: vec!["WANTED".into(), "ABSENT".into()],
            prompt_may_start_with_dash: false,
        };
        let service = |k: &str| match k {
            // In the base on every platform.
            "TZ" => Some(OsString::from("UTC")),
            "WANTED" => Some("w".into()),
            "BATON_SERVE_TOKEN" | "OTHER" => Some("secret".into()),
            _ => None,
        };
        let (argv, env) = command_from(&job(None), Some(&template), &service).unwrap();
        assert_eq!(argv, ["cmd", "hi"]);
        let env: Vec<(String, String)> = env
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        let expect = [
            ("PATH", FALLBACK_PATH),
            ("TZ", "UTC"),
            ("WANTED", "w"),
            ("KEY", "v"),
            ("BATON_PROMPT", "hi"),
            ("BATON_JOB_ID", "j1"),
        ];
        let expect: Vec<(String, String)> = expect
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(env, expect);
        // A raw command gets the base only (and baton's own).
        let (_, env) =
            command_from(&job(Some(vec!["true".into()])), Some(&template), &service).unwrap();
        assert!(
            !env.iter().any(|(k, _)| k == "WANTED" || k == "KEY"),
            "{env:?}"
        );
    }
}
