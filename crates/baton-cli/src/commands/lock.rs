//! `baton lock ...`: status, list, break, and holds for shell scripts
//! (`acquire` starts the background holder of [`super::hold`]; `release`
//! asks it to let go).

use std::time::Duration;

use baton_lock::{BatonDir, Content, HolderInfo, LockName, LockStatus, Mode};
use baton_run::hold::{caller_to_watch, callers_of_release, BreakReport, ReleaseReport};
use baton_run::Backend;
use clap::Subcommand;

use super::hold::{start_holder, warn_if_holders_stay_defunct, Held, HoldRequest};
use crate::args::{lock_name, HolderArgs, InvalidInput, LogFormat, ModeArgs, WaitArgs};
use crate::duration::{parse_duration, parse_positive_duration};
use crate::exit_codes::{for_run_error, BATON_FAILED};
use crate::filesystem::warn_if_remote;
use crate::logging;
use crate::say::{committed, delivered, fail, print_json};
use crate::startup::restore_default_sigpipe;

/// A fencing token as `lock acquire` prints it: a positive integer (grants
/// start at 1, so 0 names none).
fn token(s: &str) -> Result<u64, InvalidInput> {
    s.parse::<u64>().ok().filter(|t| *t > 0).ok_or_else(|| {
        InvalidInput(format!(
            "invalid token '{s}': a token is a positive integer printed by `baton lock acquire`"
        ))
    })
}

/// `baton lock ...`.
#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Show a lock (or every lock): holder, mode, waiters, and whether the last holder died.
    #[command(after_help = "Examples:
  baton lock status deploy
  baton lock status --json | jq '.[] | select(.held)'

JSON: one object per lock (an array without NAME) with name, held, mode, max, holder
{pid, host, owner, operation, run_id, acquired_at, token, alive, ...}, holders, waiters,
last_holder_died, last_holder, previous_holder_died, previous_holder (the holder before the
current grant, or the next one, when it ended without releasing), last_token, content
(ok|empty|unreadable|missing).")]
    Status {
        /// The lock; all locks when omitted.
        #[arg(value_parser = lock_name)]
        name: Option<LockName>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// List every lock in the baton dir.
    #[command(after_help = "Example:\n  baton lock list --json")]
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },

    /// Stop a lock's holder if it is a live process on this host (TERM, --grace, KILL).
    #[command(after_help = "Example:\n  baton lock break deploy --grace 5s

The lock file is never removed or rewritten: the kernel releases the lock when the holder
exits. A holder on another host is refused. A `baton run` holder forwards the TERM to its
command and stops it with its own grace period, so give --grace more time than that; a
holder that had to be killed has what is left of its command (or `state edit` filter)
stopped too (TERM, --grace, KILL).")]
    Break {
        /// The lock.
        #[arg(value_parser = lock_name)]
        name: LockName,
        /// Time between SIGTERM and SIGKILL.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, default_value = "15s")]
        grace: Duration,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Take a lock for a shell script: a background holder keeps it until released.
    #[command(after_help = "Example:
  TOKEN=$(baton lock acquire memory --wait 30s --ttl 10m) || exit 1
  ... critical section, pass $TOKEN to stores that check fencing ...
  baton lock release memory --token \"$TOKEN\"

Prints the fencing token. The lock is held by a small background process until
`baton lock release`, until --ttl elapses, or until the process that ran `acquire`
(usually your script's shell) exits, whichever comes first. Unless released, the
script and what it started are stopped (TERM, 10 s, KILL) before the lock is free. A script that exits without
`release` (killed, or not) is reported to the next holder as a holder that died
(previous_holder_died, a note on stderr): release when the work is complete.")]
    Acquire {
        /// The lock.
        #[arg(value_parser = lock_name)]
        name: LockName,
        #[command(flatten)]
        wait: WaitArgs,
        #[command(flatten)]
        mode: ModeArgs,
        /// Release automatically after this long.
        #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration, allow_hyphen_values = true)]
        ttl: Option<Duration>,
        #[command(flatten)]
        holder: HolderArgs,
        /// Print JSON {name, token, run_id, holder_pid, previous_holder_died, previous_holder,
        /// previous_outcome}
        /// instead of the token.
        #[arg(long)]
        json: bool,
    },

    /// Release a lock taken with `baton lock acquire`.
    #[command(after_help = "Example:\n  baton lock release memory --token \"$TOKEN\"

With --token, only that grant is released: a token that is no longer current changes
nothing and exits 75.")]
    Release {
        /// The lock.
        #[arg(value_parser = lock_name)]
        name: LockName,
        /// The token printed by `acquire`. Without it, only a hold that this
        /// script (the process that ran `acquire`) took is released.
        #[arg(long, value_name = "N", value_parser = token, allow_hyphen_values = true)]
        token: Option<u64>,
        /// Release the hold even if another script took it.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// What the `lock` commands take from the global options.
pub(crate) struct Flags<'a> {
    /// `-v` count, passed on to the background holder.
    pub verbose: u8,
    /// `--log-format`, passed on to the background holder.
    pub log_format: LogFormat,
    /// Where locks live (`--backend`).
    pub backend: &'a Backend,
    /// The `--backend` URL as given, password included, for the background holder.
    pub backend_url: Option<&'a str>,
    /// Whether the baton dir was named (`--dir`, `BATON_DIR`) rather than
    /// the per-user default: workspaces then live in it too, else in their
    /// repository's own baton dir (`baton_git::workspace_home`).
    pub named_dir: bool,
}

/// The global flags that give the background holder the same diagnostics.
fn holder_args(verbose: u8, format: LogFormat) -> Vec<String> {
    let mut args: Vec<String> = (0..verbose.min(3)).map(|_| "-v".to_string()).collect();
    if format == LogFormat::Json {
        args.extend(["--log-format".to_string(), "json".to_string()]);
    }
    args
}

/// `baton lock ...`.
pub(crate) fn cmd_lock(dir: &BatonDir, cmd: LockCommand, flags: &Flags<'_>) -> u8 {
    restore_default_sigpipe();
    match cmd {
        LockCommand::Status {
            name: Some(name),
            json,
        } => match flags.backend.status(&name) {
            Ok(st) => print_status(&st, json),
            Err(e) => fail(&e, for_run_error(&e)),
        },
        LockCommand::Status { name: None, json } | LockCommand::List { json } => {
            match flags.backend.list() {
                Ok(all) => print_list(&all, json),
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        LockCommand::Break { name, grace, json } => match flags.backend.break_lock(&name, grace) {
            Ok(report) => {
                committed();
                print_broke(&report, json)
            }
            Err(e) => fail(&e, for_run_error(&e)),
        },
        LockCommand::Acquire {
            name,
            wait: w,
            mode: m,
            ttl,
            holder,
            json,
        } => {
            let exe = match std::env::current_exe() {
                Ok(exe) => exe,
                Err(e) => return fail(&e, BATON_FAILED),
            };
            let caller = caller_to_watch();
            let req = HoldRequest {
                name: name.clone(),
                // A holder's exclusive lock is a semaphore of one slot.
                mode: match Mode::from(m) {
                    Mode::Exclusive => Mode::Semaphore(1),
                    mode => mode,
                },
                wait: w.into(),
                ttl,
                owner: holder.owner,
                operation: holder.operation,
                caller,
                grace: None,
                run_id: Some(logging::run_id().to_string()),
                // Windows cannot point the holder's stderr elsewhere once
                // it has reported: its diagnostics stay its own.
                share_stderr: cfg!(unix) && logging::active(),
                holder_args: holder_args(flags.verbose, flags.log_format),
                backend: flags.backend_url.map(str::to_string),
            };
            warn_if_remote(dir);
            tracing::info!(lock = %name, "lock acquire: starting the background holder");
            match start_holder(&exe, dir, &req) {
                Ok(held) => {
                    warn_if_holders_stay_defunct();
                    let code = print_acquired(&held, json);
                    match delivered() {
                        Ok(()) => code,
                        Err(e) => {
                            // Without its token the caller cannot use or
                            // release the hold: give it back.
                            let _ = flags
                                .backend
                                .release_held(&name, Some(held.token), &[], false);
                            errln!("baton: cannot write the token of lock '{name}' to stdout ({e}): the lock was released again");
                            BATON_FAILED
                        }
                    }
                }
                Err(e) => fail(&e, for_run_error(&e)),
            }
        }
        LockCommand::Release {
            name,
            token,
            force,
            json,
        } => match flags
            .backend
            .release_held(&name, token, &callers_of_release(), force)
        {
            Ok(report) => {
                committed();
                print_released(&report, json)
            }
            Err(e) => fail(&e, for_run_error(&e)),
        },
    }
}

fn state(st: &LockStatus) -> String {
    if !st.held_through_replaced_file.is_empty() && st.holders.is_empty() {
        "held on a deleted or replaced lock file".into()
    } else if st.held {
        let mode = st.mode.as_deref().unwrap_or("held");
        if st.max > 1 {
            format!("held ({mode}, {}/{} slots)", st.holders.len(), st.max)
        } else if st.holders.len() > 1 {
            format!("held ({mode}, {} holders)", st.holders.len())
        } else if st.previous_holder_died {
            format!("held ({mode}); the previous holder died")
        } else {
            format!("held ({mode})")
        }
    } else if st.replaced_file_unknown {
        // macOS: no `/proc/locks` to see holders through a deleted file.
        "unknown: not held through this lock file, but this system cannot see a holder through a deleted or replaced one".into()
    } else if st.last_holder_died {
        "free, last holder died".into()
    } else {
        "free".into()
    }
}

fn who(h: &HolderInfo) -> String {
    use baton_lock::Liveness;
    let ns = match (h.pid_ns, h.local_pid) {
        (Some(ns), Some(here)) if here != h.pid => {
            format!(" in PID namespace {ns} (pid {here} here)")
        }
        (Some(ns), None) if h.liveness == Liveness::NotVisible => {
            format!(" in PID namespace {ns}")
        }
        _ => String::new(),
    };
    let alive = match h.liveness {
        Liveness::Alive => " (alive)",
        Liveness::Unknown => "",
        Liveness::Dead => " (dead)",
        Liveness::NotVisible => " (alive in another PID namespace, not visible from here)",
        Liveness::Inherited => " (gone; the lock file it left open still holds the lock)",
    };
    format!("pid {}{ns} on {}{alive}", h.pid, h.host)
}

/// A holder that no longer holds the lock (the kernel says so), whatever
/// can be told about its process from here.
fn who_last(h: &HolderInfo) -> String {
    let ns = h
        .pid_ns
        .filter(|_| h.liveness == baton_lock::Liveness::NotVisible)
        .map(|ns| format!(" in PID namespace {ns}"))
        .unwrap_or_default();
    format!("pid {}{ns} on {}", h.pid, h.host)
}

/// `baton lock status NAME`.
fn print_status(st: &LockStatus, json: bool) -> u8 {
    if json {
        return print_json(st);
    }
    outln!("lock        {}", st.name);
    outln!("state       {}", state(st));
    outln!("waiters     {}", st.waiters);
    for h in &st.holders {
        outln!(
            "holder      {}, owner {}, token {}",
            who(h),
            h.owner,
            h.token
        );
        outln!("            run {}, since {}", h.run_id, h.acquired_at);
        if let Some(op) = &h.operation {
            outln!("            operation: {op}");
        }
    }
    if let Some(h) = &st.last_holder {
        outln!(
            "last holder {} died without releasing (owner {}, token {}, since {})",
            who_last(h),
            h.owner,
            h.token,
            h.acquired_at
        );
    }
    for k in &st.kernel_holders {
        outln!(
            "held by     pid {} ({}) according to the kernel (its open lock file holds slot {})",
            k.pid,
            k.command,
            k.slots
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for f in &st.held_through_replaced_file {
        outln!(
            "            held through lock file {f}, no longer at this path (deleted or replaced); new holders wait for it"
        );
    }
    outln!("last token  {}", st.last_token);
    match st.content {
        Content::Unreadable => outln!(
            "metadata    unreadable ({}); the next holder rewrites it",
            st.content_error.as_deref().unwrap_or("unknown reason")
        ),
        Content::Missing => outln!("metadata    none (never used)"),
        _ => {}
    }
    outln!("file        {}", st.path.display());
    0
}

/// `baton lock list` and `baton lock status` without a name.
fn print_list(all: &[LockStatus], json: bool) -> u8 {
    if json {
        return print_json(all);
    }
    if all.is_empty() {
        outln!("no locks");
        return 0;
    }
    let rows: Vec<[String; 6]> = all
        .iter()
        .map(|st| {
            let h = st.holder.as_ref().or(st.last_holder.as_ref());
            let shown = match (&st.holder, &st.last_holder) {
                (Some(h), _) => who(h),
                (None, Some(last)) => who_last(last),
                (None, None) => "-".into(),
            };
            [
                st.name.clone(),
                state(st),
                st.waiters.to_string(),
                shown,
                h.map(|h| h.owner.clone()).unwrap_or_else(|| "-".into()),
                h.and_then(|h| h.operation.clone())
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = ["NAME", "STATE", "WAITERS", "HOLDER", "OWNER", "OPERATION"];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths.iter()).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        outln!("{}", s.trim_end());
    };
    line(header);
    for r in &rows {
        line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
    }
    0
}

/// `baton lock acquire`: the token alone, for `TOKEN=$(...)`; a previous
/// holder that died is named on stderr (in the JSON with `--json`).
fn print_acquired(held: &Held, json: bool) -> u8 {
    if json {
        return print_json(held);
    }
    if let Some(prev) = &held.previous_holder {
        errln!(
            "baton: note: the previous holder of '{}' ({}, run {}, token {}) ended without releasing it: its work may be half done",
            held.name,
            who_last(prev),
            prev.run_id,
            prev.token
        );
    }
    if let (None, Some(o)) = (
        &held.previous_holder,
        held.previous_outcome.as_ref().filter(|o| o.is_bad()),
    ) {
        errln!(
            "baton: note: the previous holder of '{}' ended {o}: its work may be half done",
            held.name
        );
    }
    outln!("{}", held.token);
    0
}

/// `baton lock release`: silent on success, as a Unix tool is (its stdout
/// would land in the calling tool's output); `-v` logs it, `--json` prints
/// the report.
fn print_released(r: &ReleaseReport, json: bool) -> u8 {
    if json {
        return print_json(r);
    }
    tracing::info!(lock = %r.name, token = r.token, holder_pid = r.holder_pid, "released");
    0
}

/// `baton lock break`.
fn print_broke(r: &BreakReport, json: bool) -> u8 {
    if json {
        return print_json(r);
    }
    if !r.was_held {
        outln!("lock '{}' is not held; nothing to do", r.name);
        return 0;
    }
    for s in &r.stopped {
        outln!(
            "lock '{}': holder {} (owner {}, token {}): {}",
            r.name,
            who(&s.holder),
            s.holder.owner,
            s.holder.token,
            s.action
        );
    }
    if r.free_now {
        outln!("lock '{}' is free now", r.name);
        0
    } else {
        outln!(
            "lock '{}' is still held (taken again by a waiter, or the holder is stuck)",
            r.name
        );
        0
    }
}
