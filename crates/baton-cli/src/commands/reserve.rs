//! `baton reserve`: reserve paths of a repository while a command runs,
//! or check (`--check`) whether they are free for the caller. The work is
//! done by `baton_lock::reserve`; the repository's identity by `baton_git`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use baton_lock::reserve::{
    Conflict, Pattern, ReservationHolder, ReservationStore, ReserveError, ReserveRequest, Space,
};
use baton_lock::{BatonDir, Mode};
use baton_run::{run, RunControl, RunRequest};
use clap::Args;
use serde::Serialize;

use super::lock::Flags;
use crate::args::WaitArgs;
use crate::exit_codes::{
    for_child, for_git_error, for_run_error, BATON_FAILED, LOCK_LOST, NOT_ACQUIRED,
};
use crate::logging;
use crate::say::{fail, print_json};

/// `baton reserve`.
#[derive(Debug, Args)]
pub struct ReserveArgs {
    /// Paths or globs to reserve, relative to the repository's root (or absolute inside it):
    /// a path covers itself and everything below it; globs as `src/**/*.ts`, `docs/*.md`.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<String>,

    /// A shared reservation: shared ones coexist, exclusive ones (the default) wait.
    #[arg(long)]
    pub shared: bool,

    #[command(flatten)]
    pub wait: WaitArgs,

    /// Why, shown to whoever meets the reservation.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,

    /// Who holds it, shown to others [default: $BATON_AGENT, else user@host].
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,

    /// The repository [default: the working directory's].
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,

    /// Reserve nothing: exit 0 if the paths are free for the caller, 75 naming the first
    /// conflicting path and its holder if another live holder has them (reservations held
    /// for this process or an ancestor of it are its own).
    #[arg(long, conflicts_with_all = ["wait", "no_wait", "reason", "agent"])]
    pub check: bool,

    /// With --check: print JSON {free, conflicts: [{path, mode, holder}]}.
    #[arg(long, requires = "check")]
    pub json: bool,

    /// The command and its arguments, after `--` (not with --check).
    #[arg(
        last = true,
        value_name = "CMD",
        required_unless_present = "check",
        conflicts_with = "check"
    )]
    pub command: Vec<OsString>,
}

/// The space of the repository at `repo` (the working directory's by
/// default); the exit code of the failure.
pub(crate) fn space_of(repo: Option<&Path>) -> Result<Space, u8> {
    let at = repo.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    match baton_git::repository_identity(&at) {
        Ok((key, top)) => Ok(Space::new(key, top)),
        Err(e) => Err(fail(&e, for_git_error(&e))),
    }
}

/// The exit code for a reservation error: 75 not granted, else 125.
pub(crate) fn for_reserve_error(e: &ReserveError) -> u8 {
    if e.is_busy() {
        NOT_ACQUIRED
    } else {
        BATON_FAILED
    }
}

/// Parses every path; the exit code of the first refused.
pub(crate) fn patterns(space: &Space, raw: &[String]) -> Result<Vec<Pattern>, u8> {
    raw.iter()
        .map(|r| {
            space
                .pattern(r)
                .map_err(|e| fail(&e, for_reserve_error(&e)))
        })
        .collect()
}

/// A conflict as `--json` prints it.
#[derive(Serialize)]
pub(crate) struct ConflictJson<'a> {
    path: &'a Pattern,
    mode: &'static str,
    granted: bool,
    holder: &'a ReservationHolder,
}

impl<'a> From<&'a Conflict> for ConflictJson<'a> {
    fn from(c: &'a Conflict) -> Self {
        ConflictJson {
            path: &c.pattern,
            mode: c.mode.as_str(),
            granted: c.granted,
            holder: &c.holder,
        }
    }
}

/// `baton reserve`.
pub(crate) fn cmd_reserve(dir: &BatonDir, args: ReserveArgs, flags: &Flags<'_>) -> u8 {
    let store = flags.backend.reservations();
    let space = match space_of(args.repo.as_deref()) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let patterns = match patterns(&space, &args.paths) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mode = if args.shared {
        Mode::Shared
    } else {
        Mode::Exclusive
    };
    if args.check {
        return check_paths(&*store, &space, &patterns, mode, args.json);
    }
    let agent = args
        .agent
        .or_else(|| std::env::var("BATON_AGENT").ok().filter(|a| !a.is_empty()))
        .unwrap_or_else(|| baton_lock::default_owner().to_string());
    let mut holder = ReservationHolder::current(agent, logging::run_id());
    holder.reason = args.reason;
    let req = ReserveRequest {
        patterns,
        mode,
        wait: args.wait.into(),
        holder,
        cancel: None,
    };
    tracing::info!(paths = ?args.paths, "reserve: waiting for the paths");
    let held = match store.reserve(&space, &req) {
        Ok(h) => h,
        Err(e) => return fail(&e, for_reserve_error(&e)),
    };
    let mut env: Vec<(OsString, OsString)> = vec![
        (
            "BATON_FENCING_TOKEN".into(),
            held.token().to_string().into(),
        ),
        ("BATON_RESERVATION".into(), args.paths.join(",").into()),
    ];
    if let Some(died) = held.previous_holder_died() {
        env.push(("BATON_PREVIOUS_HOLDER_DIED".into(), "1".into()));
        warnln!(
            "baton: warning: the previous holder of {} ({}, pid {}) died holding it: its work may be half done",
            died.patterns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            died.holder.agent,
            died.holder.pid
        );
    }
    let mut run_req = RunRequest::new(args.command);
    run_req.forward_signals = true;
    // On a database, a holder whose session ends no longer holds: its
    // command is stopped, and this exits 76 (lock lost), as `run --lock`.
    let control = RunControl::new();
    let stop = control.clone();
    held.on_lost(Box::new(move || stop.interrupt()));
    run_req.control = control;
    run_req.run_id = Some(logging::run_id().to_string());
    run_req.env = env;
    // This process runs one command: orphans of its descendants come back
    // to it, so that they can be stopped when the command ends.
    #[cfg(unix)]
    if let Err(e) = baton_proc::become_subreaper() {
        warnln!("baton: warning: {e}; processes that leave the command's process group are not contained");
    }
    let outcome = run(dir, &run_req);
    let lost = held.is_lost();
    if let Err(e) = held.release() {
        warnln!("baton: warning: {}", baton_lock::one_line(&e));
    }
    if lost {
        errln!(
            "baton: lost the reservation of {}: its database session ended; the command was stopped",
            args.paths.join(", ")
        );
        return LOCK_LOST;
    }
    match outcome {
        Ok(report) => {
            if !report.leftovers.is_empty() {
                warnln!(
                    "baton: warning: the command left {} process(es) running; terminated them (TERM, grace, KILL) before releasing",
                    report.leftovers.len()
                );
            }
            for_child(report.outcome.exit_code())
        }
        Err(e) => fail(&e, for_run_error(&e)),
    }
}

/// `baton reserve --check`.
fn check_paths(
    store: &dyn ReservationStore,
    space: &Space,
    patterns: &[Pattern],
    mode: Mode,
    json: bool,
) -> u8 {
    let conflicts = match store.check(space, patterns, mode, None) {
        Ok(c) => c,
        Err(e) => return fail(&e, for_reserve_error(&e)),
    };
    let code = if conflicts.is_empty() {
        0
    } else {
        NOT_ACQUIRED
    };
    if json {
        #[derive(Serialize)]
        struct Report<'a> {
            free: bool,
            conflicts: Vec<ConflictJson<'a>>,
        }
        let printed = print_json(&Report {
            free: conflicts.is_empty(),
            conflicts: conflicts.iter().map(ConflictJson::from).collect(),
        });
        if printed != 0 {
            return printed;
        }
    }
    if !conflicts.is_empty() {
        let e = ReserveError::Busy { conflicts };
        return fail(&e, code);
    }
    code
}
