//! `baton run`: a command under locks, in a group, in a workspace.

use std::ffi::OsString;
use std::time::Duration;

use baton_lock::{BatonDir, LockName};
use baton_proc::LeftoverPolicy;
use baton_run::{command_line, run, GroupRequest, RunControl, RunRequest};
use clap::{ArgGroup, Args};

use super::lock::Flags;
use super::workspace::RunWorkspaceArgs;
use crate::args::{lock_name, order_key, HolderArgs, ModeArg, ModeArgs, WaitArgs};
use crate::duration::{parse_duration, parse_positive_duration};
use crate::exit_codes::{for_child, for_run_error};
use crate::filesystem::warn_if_remote;
use crate::logging;
use crate::say::fail;

/// `baton run`.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").args(["locks", "group", "workspace"]).required(true).multiple(true)))]
#[command(mut_arg("max", |a| a.help("Use the lock as a semaphore with N slots (with --group: N runs of the group at once, mode queue); every user of the name must give the same N")))]
pub struct RunArgs {
    /// Lock to hold while the command runs; repeat for several.
    #[arg(long = "lock", value_name = "NAME", value_parser = lock_name)]
    pub locks: Vec<LockName>,

    /// Run in this concurrency group (key rules as lock names); see --mode.
    #[arg(long, value_name = "KEY", value_parser = lock_name)]
    pub group: Option<LockName>,

    /// How runs of the group relate.
    #[arg(long, value_enum, default_value = "queue", requires = "group")]
    pub mode: ModeArg,

    /// Modes supersede and coalesce: the event this run answers, an integer or an RFC 3339 time
    /// (e.g. the event's id or timestamp). The highest key wins whatever the arrival order: a run
    /// whose key is older than the newest its group has seen (even one that ended) exits 79 at once
    /// without running; an equal or newer key supersedes as usual. Runs without a key are ordered
    /// by arrival and leave the newest key as it is.
    ///
    /// Without --order, BATON_ORDER gives the key to runs in modes supersede and coalesce (and is
    /// ignored by others, so that a CI job may export it for all its steps).
    #[arg(long, value_name = "KEY", requires = "group", value_parser = order_key)]
    pub order: Option<baton_run::Order>,

    /// Queue mode: refuse (exit 75) an arrival when this many runs already wait.
    #[arg(long, value_name = "N", requires = "group", value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub max_pending: Option<u32>,

    /// Shell command run when this run is superseded, at most --grace long (BATON_SUPERSEDED_BY is
    /// the newer run's id; BATON_RUN_STARTED is 1 if the command had started, 0 if it was waiting).
    #[arg(long, value_name = "CMD", requires = "group")]
    pub on_superseded: Option<String>,

    #[command(flatten)]
    pub lock_mode: ModeArgs,

    #[command(flatten)]
    pub wait: WaitArgs,

    /// Kill the command's whole process group after this long (TERM, --grace, KILL); exit 124.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,

    /// Time between SIGTERM and SIGKILL when stopping the command.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, default_value = "10s")]
    pub grace: Duration,

    /// Leave processes that the command started in the background running
    /// after it exits, for a command that starts a daemon on purpose. By
    /// default they are terminated (TERM, --grace, KILL) before the locks are
    /// released, so nothing the command started runs beside the next holder.
    #[arg(long)]
    pub leave_leftovers: bool,

    #[command(flatten)]
    pub holder: HolderArgs,

    #[command(flatten)]
    pub workspace: RunWorkspaceArgs,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `baton run`.
pub(crate) fn cmd_run(dir: &BatonDir, args: RunArgs, flags: &Flags<'_>) -> u8 {
    let backend = flags.backend;
    // Workspaces belong to their repository, locks to the machine.
    let workspace_dir = match &args.workspace.workspace {
        Some(base) if !flags.named_dir => match baton_git::workspace_home(base) {
            Ok(d) => Some(d),
            Err(e) => {
                let e = baton_run::RunError::from(e);
                return fail(&e, for_run_error(&e));
            }
        },
        _ => None,
    };
    let order = match (args.order, args.mode) {
        (Some(o), _) => Some(o),
        (None, ModeArg::Supersede | ModeArg::Coalesce) if args.group.is_some() => {
            match crate::args::order_from_env() {
                Ok(o) => o,
                Err(e) => return fail(&e, crate::exit_codes::BATON_FAILED),
            }
        }
        (None, _) => None,
    };
    let group = args.group.map(|key| GroupRequest {
        key,
        mode: args.mode.into(),
        max: args.lock_mode.max.unwrap_or(1),
        max_pending: args.max_pending,
        wait: args.wait.into(),
        order,
    });
    let lock_mode = if group.is_some() {
        ModeArgs {
            shared: args.lock_mode.shared,
            max: None,
        }
    } else {
        args.lock_mode
    };
    let req = RunRequest {
        locks: args.locks,
        backend: Some(backend.clone()),
        mode: lock_mode.into(),
        wait: args.wait.into(),
        group,
        on_superseded: args.on_superseded,
        owner: args.holder.owner,
        operation: args.holder.operation,
        command: args.command,
        timeout: args.timeout,
        grace: args.grace,
        workspace: args.workspace.request().map(|mut w| {
            if args.workspace.keep_workspace {
                // Kept for whoever ran `baton run` (as `workspace create`
                // records its caller), not for this run, which ends now: a
                // gc must not remove it the moment the run is over.
                w.owner = Some(crate::args::caller());
            }
            w
        }),
        keep_workspace: args.workspace.keep_workspace,
        workspace_dir,
        leftovers: if args.leave_leftovers {
            LeftoverPolicy::Leave
        } else {
            LeftoverPolicy::Terminate
        },
        control: RunControl::new(),
        forward_signals: true,
        new_session: false,
        run_id: Some(logging::run_id().to_string()),
        env: Vec::new(),
        clear_env: false,
        cwd: None,
        stdio: Default::default(),
        setup: None,
        on_start: None,
        // Another machine may take over a run on PostgreSQL: its
        // whole command must stop with this process, or when this
        // process stops vouching for itself in time.
        guard: backend.guard(),
    };
    warn_if_remote(dir);
    // This process runs one command: orphans of its descendants come
    // back to it, so that they can be stopped when the command ends. (On
    // Windows none can leave: the command's Job Object holds them all.)
    #[cfg(unix)]
    if let Err(e) = baton_proc::become_subreaper() {
        warnln!("baton: warning: {e}; processes that leave the command's process group are not contained");
    }
    tracing::info!(
        locks = ?req.locks.iter().map(|l| l.as_str()).collect::<Vec<_>>(),
        group = req.group.as_ref().map(|g| g.key.as_str()),
        command = %command_line(&req.command),
        "run: taking the group slot and locks, then running the command"
    );
    match run(dir, &req) {
        Ok(report) => {
            tracing::info!(
                ran = report.ran,
                exit_code = report.outcome.exit_code(),
                "run: done"
            );
            if let (Some(newest), Some(by), Some(g)) =
                (&report.newer_order, &report.superseded_by, &req.group)
            {
                errln!(
                    "baton: run {} in group '{}' did not run: its --order '{}' is older than '{newest}' of run {by}",
                    report.run_id,
                    g.key,
                    g.order.as_ref().map(ToString::to_string).unwrap_or_default()
                );
            } else if let (false, Some(by), Some(g)) =
                (report.ran, &report.superseded_by, &req.group)
            {
                errln!(
                    "baton: run {} in group '{}' was superseded by run {by} while waiting",
                    report.run_id,
                    g.key
                );
            }
            if !report.leftovers.is_empty() {
                warnln!(
                    "baton: warning: the command left {} process(es) running ({}); terminated them (TERM, --grace, KILL) before releasing",
                    report.leftovers.len(),
                    leftovers(&report.leftovers)
                );
            }
            if let Some(ws) = &report.workspace {
                let asked = req.workspace.as_ref().and_then(|w| w.reference.as_deref());
                crate::commands::workspace::say_start(ws, asked);
            }
            if let Some(p) = &report.workspace_preserved {
                warnln!("baton: {}", p.note());
            }
            if let Some(e) = &report.workspace_error {
                warnln!("baton: warning: {e} (the workspace is left for `baton workspace gc`)");
            }
            for_child(report.outcome.exit_code())
        }
        Err(e) => fail(&e, for_run_error(&e)),
    }
}

/// `pid 12 (sleep), pid 13 (sh, had left the process group)`.
fn leftovers(all: &[baton_proc::Leftover]) -> String {
    all.iter()
        .map(|l| {
            let escaped = if l.escaped {
                ", had left the process group"
            } else {
                ""
            };
            format!("pid {} ({}{escaped})", l.pid, l.command)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
