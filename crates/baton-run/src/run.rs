//! `baton run`: join a group and/or acquire locks, run a supervised command,
//! release.

use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use baton_lock::CommandGroup;
use baton_lock::{
    acquire_all, new_run_id, BatonDir, LockGuard, LockName, LockRequest, Mode, WaitPolicy,
};
use baton_proc::{Canceller, Leftover, LeftoverPolicy, Outcome, RunSpec, Supervisor};
use signal_hook::consts::SIGUSR1;
use signal_hook::iterator::Signals;

use crate::error::RunError;
use crate::group::{join, notify, GroupRequest, Joined, Membership, Phase};

/// What to run, in which group and under which locks.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Locks to hold while the command runs; taken in canonical (sorted) order.
    pub locks: Vec<LockName>,
    /// Mode of every lock.
    pub mode: Mode,
    /// How long to wait for the locks (and the group's slot), all together.
    pub wait: WaitPolicy,
    /// The concurrency group to run in, if any.
    pub group: Option<GroupRequest>,
    /// Shell command run (best effort, bounded by `grace`) when this run is
    /// superseded, with `BATON_SUPERSEDED_BY` set.
    pub on_superseded: Option<String>,
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
    /// Run the command in a fresh workspace (its run id is this run's); it
    /// is created after the slot and the locks are taken, and removed when
    /// the command ends, before they are released.
    pub workspace: Option<baton_git::WorkspaceRequest>,
    /// Leave the workspace in place after the command.
    pub keep_workspace: bool,
    /// What to do with processes the command leaves running when it exits.
    pub leftovers: LeftoverPolicy,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The run id given to the command as `BATON_RUN_ID`.
    pub run_id: String,
    /// How the command ended (`Cancelled` when superseded).
    pub outcome: Outcome,
    /// The run that superseded this one.
    pub superseded_by: Option<String>,
    /// The workspace could not be removed after the command ended (the
    /// command's outcome still stands; `baton workspace gc` retries).
    pub workspace_error: Option<String>,
    /// Processes still running when the command exited, terminated before
    /// the locks were released (unless [`RunRequest::leftovers`] said to leave them).
    pub leftovers: Vec<Leftover>,
}

/// Shared between the run and the thread that reacts to being superseded.
/// `mark` holds who superseded us and the canceller of the running command
/// under one mutex, so that a supersede arriving before the command's
/// supervisor exists is still acted on (whoever comes second cancels).
struct SupersedeState {
    mark: Mutex<(Option<String>, Option<Canceller>)>,
    hook: Mutex<Option<JoinHandle<()>>>,
}

/// Joins the group (if any), acquires the locks, runs the command with
/// `BATON_LOCK`, `BATON_FENCING_TOKEN`, `BATON_RUN_ID`, `BATON_DIR` (and
/// `BATON_GROUP`) set, and releases everything when it ends.
///
/// With several locks, `BATON_LOCK` and `BATON_FENCING_TOKEN` hold
/// comma-separated lists in the same (sorted) order. In a group without
/// locks, `BATON_FENCING_TOKEN` is the token of the group's slot.
pub fn run(dir: &BatonDir, req: &RunRequest) -> Result<RunReport, RunError> {
    let (program, args) = req.command.split_first().ok_or(RunError::NoCommand)?;
    let run_id = new_run_id();
    let line = command_line(&req.command);
    let operation = req.operation.clone().unwrap_or_else(|| line.clone());
    let state = Arc::new(SupersedeState {
        mark: Mutex::new((None, None)),
        hook: Mutex::new(None),
    });

    // Group first: join, tell superseded runs, wait for the slot.
    let mut group_parts = None;
    if let Some(g) = &req.group {
        // Listen before registering, so a newer run's signal is never missed.
        let signals = Signals::new([SIGUSR1]).map_err(|source| RunError::Io {
            op: "listen for SIGUSR1",
            source,
        })?;
        let (member, targets) = match join(dir, g, &run_id, &line)? {
            Joined::Member(m, t) => (Arc::new(m), t),
            Joined::Refused(why) => return Err(RunError::NotAdmitted(why)),
        };
        notify(&targets);
        let watcher = spawn_watcher(signals, member.clone(), state.clone(), req, g);
        let slot = match member.take_slot(g.wait) {
            Ok(slot) => slot,
            Err(e) => {
                member.set_done();
                member.finish("gave_up", None, None);
                watcher.close();
                return Err(e);
            }
        };
        if let Some(by) = member.start()? {
            drop(slot);
            member.set_done();
            member.finish("superseded", None, Some(&by));
            watcher.close();
            run_hook(req, g.key.as_str(), &run_id, &by);
            return Ok(RunReport {
                run_id,
                outcome: Outcome::Cancelled,
                superseded_by: Some(by),
                workspace_error: None,
                leftovers: Vec::new(),
            });
        }
        group_parts = Some((member, slot, watcher));
    }

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
    let guards = match acquire_all(dir, &requests) {
        Ok(g) => g,
        Err(e) => {
            if let Some((member, slot, watcher)) = group_parts {
                drop(slot);
                member.set_done();
                member.finish("gave_up", None, None);
                watcher.close();
            }
            return Err(e.into());
        }
    };
    let workspace = req
        .workspace
        .as_ref()
        .map(|w| {
            let mut w = w.clone();
            w.run_id = Some(run_id.clone());
            baton_git::create(dir, &w).map(|ws| (ws, w.git_lock_wait))
        })
        .transpose();
    let workspace = match workspace {
        Ok(ws) => ws,
        Err(e) => {
            drop(guards);
            if let Some((member, slot, watcher)) = group_parts {
                drop(slot);
                member.set_done();
                member.finish("gave_up", None, None);
                watcher.close();
            }
            return Err(e.into());
        }
    };
    let join_names = |gs: &[LockGuard]| {
        gs.iter()
            .map(|g| g.name().to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let join_tokens = |gs: &[LockGuard]| {
        gs.iter()
            .map(|g| g.token().to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut spec = RunSpec::new(program.clone()).args(args.iter().cloned());
    spec.timeout = req.timeout;
    spec.grace = req.grace;
    spec.leftovers = req.leftovers;
    spec.env = vec![
        ("BATON_RUN_ID".into(), run_id.clone().into()),
        ("BATON_DIR".into(), dir.path().as_os_str().to_owned()),
    ];
    if let Some((ws, _)) = &workspace {
        spec.cwd = Some(ws.path.clone());
        spec.env
            .push(("BATON_WORKSPACE".into(), ws.path.as_os_str().to_owned()));
    }
    if !guards.is_empty() {
        spec.env
            .push(("BATON_LOCK".into(), join_names(&guards).into()));
        spec.env
            .push(("BATON_FENCING_TOKEN".into(), join_tokens(&guards).into()));
    }
    if let (Some(g), Some((_, slot, _))) = (&req.group, &group_parts) {
        spec.env
            .push(("BATON_GROUP".into(), g.key.to_string().into()));
        if guards.is_empty() {
            spec.env.push((
                "BATON_FENCING_TOKEN".into(),
                slot.token().to_string().into(),
            ));
        }
    }
    let supervisor = Supervisor::new(spec);
    {
        let mut mark = state.mark.lock().unwrap_or_else(|p| p.into_inner());
        let canceller = supervisor.canceller();
        if mark.0.is_some() {
            canceller.cancel(); // superseded after start(), before now
        }
        mark.1 = Some(canceller);
    }
    let grace_ms = u64::try_from(req.grace.as_millis()).unwrap_or(u64::MAX);
    let finished = supervisor.run_with(|started| {
        // Recorded with every lock and the group slot: if this process dies,
        // whoever takes them next stops what is left of the command first.
        let group = CommandGroup {
            pgid: started.pgid,
            leader_start_time: baton_proc::procfs::stat(started.pgid).map_or(0, |s| s.start_time),
            grace_ms,
        };
        for g in &guards {
            let _ = g.set_command_group(group);
        }
        if let Some((_, slot, _)) = &group_parts {
            let _ = slot.set_command_group(group);
        }
    });
    let (outcome, leftovers) = match finished {
        Ok(f) => (Ok(f.outcome), f.leftovers),
        Err(e) => (Err(e), Vec::new()),
    };
    let workspace_error = match &workspace {
        Some((ws, wait)) if !req.keep_workspace => baton_git::remove(dir, &ws.id, *wait).err(),
        _ => None,
    };

    // Release in reverse order of acquisition; errors here must not hide the
    // command's outcome, and the kernel releases on exit regardless.
    let mut release_error = None;
    for g in guards.into_iter().rev() {
        if let Err(e) = g.release() {
            release_error.get_or_insert(e);
        }
    }
    let superseded_by = state
        .mark
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .0
        .clone();
    if let Some((member, slot, watcher)) = group_parts {
        member.set_done();
        drop(slot); // the newer run may start now
        match (&outcome, &superseded_by) {
            (Ok(Outcome::Cancelled), Some(by)) => member.finish("superseded", None, Some(by)),
            (Ok(o), _) => member.finish("finished", Some(o.exit_code()), None),
            (Err(_), _) => member.finish("finished", Some(125), None),
        }
        watcher.close();
        let hook = state.hook.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = hook {
            let _ = h.join();
        }
    }
    let outcome = outcome?;
    if let Some(e) = release_error {
        return Err(e.into());
    }
    Ok(RunReport {
        run_id,
        outcome,
        superseded_by,
        workspace_error: workspace_error.map(|e| e.to_string()),
        leftovers,
    })
}

/// The thread that reacts to SIGUSR1 from a newer run of the group.
struct Watcher {
    handle: signal_hook::iterator::Handle,
}

impl Watcher {
    fn close(&self) {
        self.handle.close();
    }
}

fn spawn_watcher(
    mut signals: Signals,
    member: Arc<Membership>,
    state: Arc<SupersedeState>,
    req: &RunRequest,
    g: &GroupRequest,
) -> Watcher {
    let handle = signals.handle();
    let req = req.clone();
    let key = g.key.to_string();
    std::thread::spawn(move || {
        for _ in signals.forever() {
            // A stray SIGUSR1 is ignored: act only on a mark in the document.
            let Ok(Some(by)) = member.superseded_by() else {
                continue;
            };
            let phase = member.phase.lock().unwrap_or_else(|p| p.into_inner());
            match *phase {
                Phase::Waiting => {
                    // Not started and never will: leave the line now. The
                    // phase lock stays held so the run cannot start meanwhile.
                    member.finish("superseded", None, Some(&by));
                    run_hook(&req, &key, &member.run_id, &by);
                    eprintln!(
                        "baton: run {} in group '{key}' was superseded by run {by} while waiting",
                        member.run_id
                    );
                    std::process::exit(79);
                }
                Phase::Running => {
                    drop(phase);
                    let first = {
                        let mut mark = state.mark.lock().unwrap_or_else(|p| p.into_inner());
                        let first = mark.0.is_none();
                        mark.0 = Some(by.clone());
                        if let Some(c) = &mark.1 {
                            c.cancel();
                        }
                        first
                    };
                    if first && req.on_superseded.is_some() {
                        let (req, key, run_id) = (req.clone(), key.clone(), member.run_id.clone());
                        let h = std::thread::spawn(move || run_hook(&req, &key, &run_id, &by));
                        *state.hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
                    }
                }
                Phase::Done => {}
            }
        }
    });
    Watcher { handle }
}

/// Runs `--on-superseded` with `sh -c`, supervised like any command and
/// bounded by the grace period (its process group is stopped at the end of it).
fn run_hook(req: &RunRequest, key: &str, run_id: &str, by: &str) {
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
