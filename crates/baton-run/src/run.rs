//! `baton run`: join a group and/or acquire locks, run a supervised command,
//! release.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use baton_lock::{
    new_run_id, BatonDir, CommandGroup, HolderOutcome, LockError, LockName, LockRequest, Mode,
    WaitPolicy,
};
use baton_proc::{Leftover, LeftoverPolicy, Outcome, RunSpec, Started, StdioSpec, Supervisor};

use crate::backend::Backend;
use crate::control::{RunControl, StopReason};
use crate::error::RunError;
use crate::group::GroupRequest;
use crate::locks::HeldLocks;
use crate::member::{End, Entered, Member};

/// What to run, in which group and under which locks.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Locks to hold while the command runs; taken in canonical (sorted) order.
    pub locks: Vec<LockName>,
    /// Where the locks and the group live: the baton dir, or a PostgreSQL
    /// database shared by many machines; `None` is the baton dir given to
    /// [`run()`].
    pub backend: Option<Backend>,
    /// Mode of every lock.
    pub mode: Mode,
    /// How long to wait for the locks (and the group's slot), all together.
    pub wait: WaitPolicy,
    /// The concurrency group to run in, if any.
    pub group: Option<GroupRequest>,
    /// Shell command run (best effort, bounded by `grace`) when this run is
    /// superseded, with `BATON_SUPERSEDED_BY` set and `BATON_RUN_STARTED`
    /// `1` (the command had started and was stopped) or `0` (superseded
    /// while waiting).
    pub on_superseded: Option<String>,
    /// Recorded owner; default `user@host`.
    pub owner: Option<String>,
    /// Recorded operation; default the command line.
    pub operation: Option<String>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Kill the command's process group after this long (counted from the
    /// start of the [`RunRequest::setup`] command when there is one: one
    /// budget for both).
    pub timeout: Option<Duration>,
    /// Time between TERM and KILL.
    pub grace: Duration,
    /// Run the command in a fresh workspace (its run id is this run's); it
    /// is created after the slot and the locks are taken, and removed when
    /// the command ends, before they are released.
    pub workspace: Option<baton_git::WorkspaceRequest>,
    /// Leave the workspace in place after the command.
    pub keep_workspace: bool,
    /// Where the workspace is recorded and made; `None` is the run's baton
    /// dir. The CLI gives the base repository's own baton dir when no baton
    /// dir was named (`baton_git::workspace_home`): workspaces belong to
    /// their repository, locks to the machine.
    pub workspace_dir: Option<BatonDir>,
    /// What to do with processes the command leaves running when it exits.
    pub leftovers: LeftoverPolicy,
    /// Stops the run from another thread (and is how a newer run of the
    /// group supersedes it).
    pub control: RunControl,
    /// Forward the signals this process receives to the command, give it
    /// the terminal and proxy job control (`baton run`); off for a process
    /// that hosts many runs (see [`RunSpec::forward_signals`]).
    pub forward_signals: bool,
    /// Start the command (and `setup`) in a session of its own (see
    /// [`baton_proc::RunSpec::new_session`]): for a process that hosts many
    /// runs (the job service), so that no process of a run can join a
    /// process group of the host's; never with `forward_signals`.
    pub new_session: bool,
    /// The run id (`BATON_RUN_ID`, recorded in every lock and event); a new
    /// one if absent. A caller that logs gives its own, so that its log lines
    /// and the run's carry the same id.
    pub run_id: Option<String>,
    /// Variables the command gets besides baton's own (a caller's, such as
    /// a job template's); baton's `BATON_*` variables win.
    pub env: Vec<(OsString, OsString)>,
    /// The command (and `setup`) start from an empty environment: they get
    /// `env` and baton's `BATON_*` variables only, nothing of this
    /// process's (see [`baton_proc::RunSpec::clear_env`]).
    pub clear_env: bool,
    /// The command's working directory when it has no workspace; the
    /// caller's when `None`.
    pub cwd: Option<PathBuf>,
    /// The command's standard streams (inherited by default).
    pub stdio: StdioSpec,
    /// A command run in the workspace before the command (e.g. `git-crypt
    /// unlock KEY`), supervised like it, with the same environment and
    /// stdio; if it fails, the command does not run and the report says so.
    pub setup: Option<Vec<OsString>>,
    /// Called once the command's process group exists, before the command
    /// executes (the command waits for it): a caller that must be able to
    /// stop what is left of the command after its own crash records the
    /// group here (the job service stores it with the job).
    pub on_start: Option<OnStart>,
    /// Run a guardian beside the command (see `baton_proc::guard`): the
    /// command's whole process group is killed if this process dies, or
    /// stops vouching for itself in time. Every PostgreSQL session of the
    /// run (its group's slot, its locks) becomes a source of the fence; a
    /// caller adds its own (the job service: its node's session). A run
    /// whose guardian fenced it ends with [`RunError::Fenced`]. Meant for
    /// runs that another machine may take over: `None` by default.
    pub guard: Option<baton_proc::GuardSpec>,
}

/// A callback for [`RunRequest::on_start`].
#[derive(Clone)]
pub struct OnStart(pub std::sync::Arc<dyn Fn(CommandGroup) + Send + Sync>);

impl std::fmt::Debug for OnStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnStart(..)")
    }
}

impl RunRequest {
    /// A run of `command` with no locks, no group, no timeout, waiting as
    /// long as it takes, with the default grace period, leftovers
    /// terminated, no signal forwarding and the caller's stdio.
    pub fn new(command: Vec<OsString>) -> RunRequest {
        RunRequest {
            locks: Vec::new(),
            backend: None,
            mode: Mode::Exclusive,
            wait: WaitPolicy::Forever,
            group: None,
            on_superseded: None,
            owner: None,
            operation: None,
            command,
            timeout: None,
            grace: baton_proc::DEFAULT_GRACE,
            workspace: None,
            keep_workspace: false,
            workspace_dir: None,
            leftovers: LeftoverPolicy::Terminate,
            control: RunControl::new(),
            forward_signals: false,
            new_session: false,
            run_id: None,
            env: Vec::new(),
            clear_env: false,
            cwd: None,
            stdio: StdioSpec::default(),
            setup: None,
            on_start: None,
            guard: None,
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The run id given to the command as `BATON_RUN_ID`.
    pub run_id: String,
    /// How the command ended (`Cancelled` when superseded or cancelled).
    pub outcome: Outcome,
    /// Whether the command was started at all.
    pub ran: bool,
    /// The run that superseded this one.
    pub superseded_by: Option<String>,
    /// The newest ordering key of the group, when this run's
    /// ([`GroupRequest::order`]) was older and it did not run
    /// (`superseded_by` is the run that brought it).
    pub newer_order: Option<String>,
    /// The workspace could not be removed after the command ended (the
    /// command's outcome still stands; `baton workspace gc` retries).
    pub workspace_error: Option<String>,
    /// Commits of the workspace's branch that the base's branch could not
    /// take when the workspace was removed (it had moved on), kept in the
    /// base under a ref of their own.
    pub workspace_preserved: Option<baton_git::Preserved>,
    /// The workspace the command ran in, as recorded when it was made
    /// (where it started, and a branch reset's `abandoned_ref`).
    pub workspace: Option<baton_git::Workspace>,
    /// Processes still running when the command exited, terminated before
    /// the locks were released (unless [`RunRequest::leftovers`] said to leave them).
    pub leftovers: Vec<Leftover>,
    /// The setup command ([`RunRequest::setup`]) failed: the command did
    /// not run, and [`RunReport::outcome`] is the setup's.
    pub setup_failed: bool,
    /// A `baton git push` of the command landed (a run of a group in mode
    /// supersede, whose pushes announce themselves: `baton_git::landing`).
    /// A superseded run that pushed ends with its command's own status when
    /// the command ends by itself within the grace period.
    pub pushed: bool,
}

/// Joins the group (if any), acquires the locks, runs the command with
/// `BATON_LOCK`, `BATON_FENCING_TOKEN`, `BATON_RUN_ID`, `BATON_DIR` (and
/// `BATON_GROUP`) set, plus `BATON_PREVIOUS_HOLDER_DIED=1` when a lock's or
/// the group slot's previous holder ended without releasing it and
/// `BATON_PREVIOUS_OUTCOME` (how it ended: [`HolderOutcome`]) when there was
/// one, and releases everything when it ends, leaving its own outcome
/// (see `holder_outcome`) for the next holder.
///
/// With several locks, `BATON_LOCK` and `BATON_FENCING_TOKEN` hold
/// comma-separated lists in the same (sorted) order. In a group without
/// locks, `BATON_FENCING_TOKEN` is the token of the group's slot. A run
/// superseded or cancelled (through [`RunRequest::control`]) reports
/// [`Outcome::Cancelled`]; it never calls `exit` and installs no signal
/// handler, so a process may own many runs at once.
pub fn run(dir: &BatonDir, req: &RunRequest) -> Result<RunReport, RunError> {
    let (program, args) = req.command.split_first().ok_or(RunError::NoCommand)?;
    let started = std::time::SystemTime::now();
    let run_id = req.run_id.clone().unwrap_or_else(new_run_id);
    let line = command_line(&req.command);
    let control = &req.control;
    let local;
    let backend = match &req.backend {
        Some(b) => b,
        None => {
            local = Backend::Local(dir.clone());
            &local
        }
    };
    tracing::debug!(run_id = %run_id, command = %line, locks = req.locks.len(), group = req.group.as_ref().map(|g| g.key.as_str()), "run started");
    // A branch the workspace would refuse (`origin/main` would shadow the
    // remote-tracking branch) is refused before a slot or a lock is taken.
    if let Some(w) = &req.workspace {
        if let Some(b) = &w.branch {
            baton_git::check_branch_name(&w.repo, b)?;
        }
    }

    // 1. The group's slot.
    let mut member = match &req.group {
        None => None,
        Some(g) => match backend.join_group(g, &run_id, &line, control)? {
            Entered::Running(m) => Some(*m),
            Entered::Superseded(by) => return Ok(not_run(req, g, &run_id, Some(by))),
            Entered::Outdated(out) => {
                let mut report = not_run(req, g, &run_id, Some(out.by));
                report.newer_order = Some(out.newest);
                return Ok(report);
            }
            Entered::Cancelled => return Ok(not_run_cancelled(&run_id)),
        },
    };

    // 2. The locks, then the workspace.
    let lost = control.clone();
    let guards = match backend.acquire(&lock_requests(req, &run_id, &line, control), move || {
        tracing::error!("the database session holding the locks ended: stopping the command");
        lost.stop(StopReason::LockLost);
    }) {
        Ok(g) => {
            tracing::debug!(locks = g.tokens().len(), "locks held; starting the command");
            g
        }
        Err(RunError::Lock(LockError::Cancelled { .. })) => {
            // The group slot's session ended while the run waited for its
            // locks: nobody superseded it (79), it lost its slot (76).
            if control.stop_reason() == Some(StopReason::LockLost) {
                let key = req.group.as_ref().map(|g| g.key.to_string());
                return Err(RunError::LockLost {
                    locks: key.unwrap_or_default(),
                });
            }
            return Ok(match (member.take(), &req.group) {
                (Some(m), Some(g)) => match crate::member::stopped(m, control) {
                    Entered::Superseded(by) => not_run(req, g, &run_id, Some(by)),
                    _ => not_run_cancelled(&run_id),
                },
                _ => not_run_cancelled(&run_id),
            });
        }
        Err(e) => return Err(e),
    };
    let ws_dir = req.workspace_dir.as_ref().unwrap_or(dir);
    let workspace = match &req.workspace {
        None => None,
        Some(w) => {
            let mut w = w.clone();
            w.run_id = Some(run_id.clone());
            // Only a fetch begun after the run started can hold every push
            // that completed before it (a quick re-run must not start from
            // an older fetch); after a group slot or locks, only one begun
            // from now on can hold what the run before this one pushed
            // before it let go. Concurrent runs still share one fetch.
            let since = if req.group.is_some() || !req.locks.is_empty() {
                std::time::SystemTime::now()
            } else {
                started
            };
            w.fetched_since = Some(w.fetched_since.map_or(since, |s| s.max(since)));
            match baton_git::create(ws_dir, &w) {
                Ok(ws) => Some((ws, w.git_lock_wait)),
                Err(e) => {
                    // Nothing ran under the locks: their next holders learn
                    // what this run learned.
                    let _ = guards.release_with(None);
                    return Err(e.into());
                }
            }
        }
    };

    // 3. The command, guarded by every database session the run holds.
    if let Some(g) = &req.guard {
        guards.vouch_to(&g.fence);
        if let Some(m) = &member {
            m.vouch_to(&g.fence);
        }
    }
    let mut env = command_env(dir, req, &run_id, &guards, member.as_ref());
    let landing = control.open_landing(dir, req.group.as_ref(), req.grace);
    if let Some(l) = &landing {
        env.extend(l.env());
    }
    let mut spec = command_spec(req, program, args, env);
    if let Some((ws, _)) = &workspace {
        spec.cwd = Some(ws.path.clone());
        spec.env
            .push(("BATON_WORKSPACE".into(), ws.path.as_os_str().to_owned()));
    }
    let grace_ms = u64::try_from(req.grace.as_millis()).unwrap_or(u64::MAX);
    // The setup command's start and the command's are recorded alike.
    let on_start = |started| {
        record_command(
            started,
            grace_ms,
            &guards,
            member.as_ref(),
            req.on_start.as_ref(),
        );
    };
    let mut setup_failed = false;
    let mut finished = None;
    if let Some((setup_program, setup_args)) = req.setup.as_ref().and_then(|s| s.split_first()) {
        let setup_started = std::time::Instant::now();
        let mut setup = spec.clone();
        setup.program = setup_program.clone();
        setup.args = setup_args.to_vec();
        let supervisor = Supervisor::new(setup);
        control.attach(supervisor.canceller());
        let done = supervisor.run_with(on_start);
        if !matches!(&done, Ok(f) if f.outcome == Outcome::Exited(0)) {
            tracing::debug!(run_id = %run_id, "setup command failed; the command does not run");
            setup_failed = true;
            finished = Some(done);
        }
        // One timeout for the setup and the command together.
        spec.timeout = spec
            .timeout
            .map(|t| t.saturating_sub(setup_started.elapsed()));
    }
    let finished = match finished {
        Some(done) => done,
        None => {
            let supervisor = Supervisor::new(spec);
            control.attach(supervisor.canceller());
            supervisor.run_with(on_start)
        }
    };
    control.command_ended();
    let (outcome, leftovers, fenced, guardian_lost) = match finished {
        Ok(f) => (Ok(f.outcome), f.leftovers, f.fenced, f.guardian_lost),
        Err(e) => (Err(e), Vec::new(), false, false),
    };
    // Every process of the command is gone: no push can land any more.
    let pushed = landing.as_ref().is_some_and(|l| l.pushed());
    if let Some(l) = &landing {
        l.clear();
    }
    control.release_landing();

    // 4. Tear down: workspace, locks (reverse order), group slot.
    // Nobody watches this removal: commits the base's branch cannot take
    // (another run on the branch moved it on) are kept under a ref of their
    // own in the base rather than left in a workspace nothing collects.
    let (workspace_error, workspace_preserved) = match &workspace {
        Some((ws, wait)) if !req.keep_workspace => {
            match baton_git::remove_with(ws_dir, &ws.id, *wait, baton_git::Unpushed::Preserve) {
                Ok(removed) => (None, removed.preserved),
                Err(e) => (Some(e), None),
            }
        }
        _ => (None, None),
    };
    // Errors here must not hide the command's outcome; the kernel releases
    // on exit regardless.
    let lock_lost = (guards.is_lost() || member.as_ref().is_some_and(Member::is_lost)).then(|| {
        let names: Vec<String> = guards.tokens().into_iter().map(|(n, _)| n).collect();
        names.join(",")
    });
    // What the next holder learns (BATON_PREVIOUS_OUTCOME).
    let left = match &outcome {
        Ok(o) => holder_outcome(o),
        Err(e) => HolderOutcome::of_exit(e.exit_code()),
    };
    let release_error = guards.release_with(Some(left.clone())).err();
    let superseded_by = match control.stop_reason() {
        Some(StopReason::Superseded { by }) => Some(by),
        _ => None,
    };
    if let Some(mut m) = member.take() {
        m.set_outcome(left);
        if !leftovers.is_empty() {
            m.log_leftovers(&leftover_list(&leftovers));
        }
        m.set_pushed(pushed);
        m.end(match (&outcome, &superseded_by) {
            (Ok(Outcome::Cancelled), Some(by)) => End::Superseded(by.clone()),
            (Ok(o), _) => End::Finished(o.exit_code()),
            (Err(e), _) => End::Finished(e.exit_code()),
        });
        drop(m); // the newer run may start now
    }
    if let (Some(g), Some(by)) = (&req.group, &superseded_by) {
        run_hook(req, g.key.as_str(), &run_id, by, true, pushed);
    }
    tracing::debug!(run_id = %run_id, outcome = ?outcome.as_ref().map(Outcome::exit_code), leftovers = leftovers.len(), superseded_by = superseded_by.as_deref(), "run ended; locks released");
    let outcome = outcome?;
    if let (true, Some(g)) = (fenced, &req.guard) {
        return Err(RunError::Fenced {
            fence: g.fence.bound(),
        });
    }
    if let Some(locks) = lock_lost {
        return Err(RunError::LockLost { locks });
    }
    if guardian_lost {
        return Err(RunError::GuardianLost);
    }
    if let Some(e) = release_error {
        return Err(e);
    }
    Ok(RunReport {
        run_id,
        outcome,
        ran: true,
        superseded_by,
        newer_order: None,
        workspace_error: workspace_error.map(|e| e.to_string()),
        workspace_preserved,
        workspace: workspace.map(|(ws, _)| ws),
        leftovers,
        setup_failed,
        pushed,
    })
}

/// What a run whose command ended with `outcome` leaves for the next
/// holder of its locks and group slot: `released` (exit 0), `failed:<code>`
/// (the code `baton run` exits with: 124 after a timeout, 79 when
/// superseded or cancelled), `killed:<signal>`.
pub fn holder_outcome(outcome: &Outcome) -> HolderOutcome {
    match *outcome {
        Outcome::Signaled(signal) => HolderOutcome::of_signal(signal),
        ref o => HolderOutcome::of_exit(o.exit_code()),
    }
}

fn lock_requests(
    req: &RunRequest,
    run_id: &str,
    line: &str,
    control: &RunControl,
) -> Vec<LockRequest> {
    let operation = req.operation.clone().unwrap_or_else(|| line.to_string());
    req.locks
        .iter()
        .map(|name| {
            let mut r = LockRequest::new(name.clone())
                .mode(req.mode)
                .wait(req.wait)
                .operation(operation.clone())
                .run_id(run_id.to_string())
                .kind(baton_lock::HolderKind::Run)
                .cancel(control.waits());
            r.owner = req.owner.clone();
            r
        })
        .collect()
}

/// The variables the command gets (`baton run --help`, the `after_help` of `Command::Run`
/// in `crates/baton-cli/src/commands.rs`).
fn command_env(
    dir: &BatonDir,
    req: &RunRequest,
    run_id: &str,
    guards: &HeldLocks,
    member: Option<&Member>,
) -> Vec<(OsString, OsString)> {
    let mut env = base_env(dir, run_id);
    let tokens = guards.tokens();
    if !tokens.is_empty() {
        let names: Vec<&str> = tokens.iter().map(|(n, _)| n.as_str()).collect();
        let values: Vec<String> = tokens.iter().map(|(_, t)| t.to_string()).collect();
        env.push(("BATON_LOCK".into(), names.join(",").into()));
        env.push(("BATON_FENCING_TOKEN".into(), values.join(",").into()));
    }
    // The previous holder of a lock or of the group's slot ended without
    // releasing it: the command may find its work half done (README).
    if guards.previous_holder_died().is_some() || member.is_some_and(Member::previous_holder_died) {
        env.push(("BATON_PREVIOUS_HOLDER_DIED".into(), "1".into()));
    }
    // How it ended, whether it died or its command failed or was killed
    // inside a living supervisor: the group slot's first, then the locks'.
    let outcome = crate::locks::worst(vec![
        member.and_then(Member::previous_outcome),
        guards.previous_outcome().as_ref(),
    ]);
    if let Some(o) = outcome {
        env.push(("BATON_PREVIOUS_OUTCOME".into(), o.to_string().into()));
    }
    if let (Some(g), Some(token)) = (&req.group, member.and_then(Member::token)) {
        env.push(("BATON_GROUP".into(), g.key.to_string().into()));
        if tokens.is_empty() {
            env.push(("BATON_FENCING_TOKEN".into(), token.to_string().into()));
        }
    }
    env
}

/// The variables every run's command gets: its run id, the baton dir, and
/// the outer run's id when this process runs inside a run.
pub(crate) fn base_env(dir: &BatonDir, run_id: &str) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("BATON_RUN_ID".into(), run_id.into()),
        ("BATON_DIR".into(), dir.path().as_os_str().to_owned()),
    ];
    // A run inside a run: the outer run's id stays reachable.
    if let Some(outer) = std::env::var_os("BATON_RUN_ID").filter(|v| !v.is_empty()) {
        env.push(("BATON_PARENT_RUN_ID".into(), outer));
    }
    env
}

/// Records the command's process group with every lock and the group slot:
/// if this process dies, whoever takes them next stops what is left of the
/// command first (docs/src/design/architecture.md, decision 11).
fn record_command(
    started: Started,
    grace_ms: u64,
    guards: &HeldLocks,
    member: Option<&Member>,
    on_start: Option<&OnStart>,
) {
    let group = CommandGroup::of_started(started, grace_ms);
    guards.set_command_group(group);
    if let Some(m) = member {
        m.set_command_group(group);
    }
    if let Some(f) = on_start {
        (f.0)(group);
    }
}

fn leftover_list(leftovers: &[Leftover]) -> String {
    leftovers
        .iter()
        .map(|l| format!("pid {} ({})", l.pid, l.command))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A group run superseded before its command started.
fn not_run(req: &RunRequest, g: &GroupRequest, run_id: &str, by: Option<String>) -> RunReport {
    if let Some(by) = &by {
        run_hook(req, g.key.as_str(), run_id, by, false, false);
    }
    RunReport {
        run_id: run_id.to_string(),
        outcome: Outcome::Cancelled,
        ran: false,
        superseded_by: by,
        newer_order: None,
        workspace_error: None,
        workspace_preserved: None,
        workspace: None,
        leftovers: Vec::new(),
        setup_failed: false,
        pushed: false,
    }
}

fn not_run_cancelled(run_id: &str) -> RunReport {
    RunReport {
        run_id: run_id.to_string(),
        outcome: Outcome::Cancelled,
        ran: false,
        superseded_by: None,
        newer_order: None,
        workspace_error: None,
        workspace_preserved: None,
        workspace: None,
        leftovers: Vec::new(),
        setup_failed: false,
        pushed: false,
    }
}

/// Runs `--on-superseded` with `sh -c`, supervised like any command and
/// bounded by the grace period (its process group is stopped at the end of it).
/// `BATON_RUN_STARTED` tells it whether the command had started (`1`: it
/// was stopped, or ended by itself after its push landed) or the run was
/// superseded while it waited (`0`); `BATON_RUN_PUSHED` whether a push of
/// the command landed (`1`: its work was published) or not (`0`).
fn run_hook(req: &RunRequest, key: &str, run_id: &str, by: &str, started: bool, pushed: bool) {
    let Some(cmd) = &req.on_superseded else {
        return;
    };
    // /bin/sh, not `sh` from PATH: a directory early in PATH must not be able
    // to replace the shell that runs the hook.
    let mut spec = RunSpec::new("/bin/sh").args(["-c", cmd.as_str()]);
    spec.env = vec![
        ("BATON_SUPERSEDED_BY".into(), by.into()),
        ("BATON_RUN_ID".into(), run_id.into()),
        ("BATON_GROUP".into(), key.into()),
        (
            "BATON_RUN_STARTED".into(),
            if started { "1" } else { "0" }.into(),
        ),
        (
            "BATON_RUN_PUSHED".into(),
            if pushed { "1" } else { "0" }.into(),
        ),
    ];
    spec.timeout = Some(req.grace);
    spec.grace = Duration::from_millis(200).min(req.grace);
    let _ = baton_proc::run(&spec);
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

/// The command's spec as the request asks for it (`program` and `args`
/// split from its command line): its limits, stdio, working directory and
/// environment, plus `added` (baton's variables) and git's
/// foreground-maintenance settings. For [`run`] and for a plain run alike.
pub(crate) fn command_spec(
    req: &RunRequest,
    program: &OsString,
    args: &[OsString],
    added: impl IntoIterator<Item = (OsString, OsString)>,
) -> RunSpec {
    let mut spec = RunSpec::new(program.clone()).args(args.iter().cloned());
    spec.guard = req.guard.clone();
    spec.timeout = req.timeout;
    spec.grace = req.grace;
    spec.leftovers = req.leftovers;
    spec.forward_signals = req.forward_signals;
    spec.new_session = req.new_session;
    spec.stdio = req.stdio.clone();
    spec.cwd = req.cwd.clone();
    spec.env = req.env.clone();
    spec.clear_env = req.clear_env;
    spec.env.extend(added);
    let git = crate::git_env::foreground_maintenance(&spec.env, spec.clear_env);
    spec.env.extend(git);
    spec
}
