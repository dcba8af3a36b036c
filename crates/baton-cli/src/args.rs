//! Argument types that several commands share (how long to wait, how a
//! lock is shared, what is recorded about the holder, group modes, the
//! diagnostics format, the wait for git's locks, the calling process),
//! their value parsers, and their conversion into the
//! libraries' policies. A leaf: it depends on no other module of the crate.

use std::error::Error;
use std::time::Duration;

use baton_lock::{LockName, Mode, ProcessIdentity, WaitPolicy};
use baton_run::GroupMode;
use clap::{Args, ValueEnum};

use crate::duration::parse_duration;

/// A lock name or group key, validated (clap's value parser).
pub(crate) fn lock_name(s: &str) -> Result<LockName, String> {
    LockName::new(s).map_err(|e| e.to_string())
}

/// A group run's ordering key (`--order`, `BATON_ORDER`).
pub(crate) fn order_key(s: &str) -> Result<baton_run::Order, InvalidInput> {
    baton_run::Order::parse(s).map_err(|e| InvalidInput(e.to_string()))
}

/// `BATON_ORDER`, when set and not empty: the ordering key of a group run
/// (or job) in mode supersede or coalesce that has no `--order`.
pub(crate) fn order_from_env() -> Result<Option<baton_run::Order>, InvalidInput> {
    match std::env::var("BATON_ORDER") {
        Ok(v) if !v.is_empty() => order_key(&v)
            .map(Some)
            .map_err(|e| InvalidInput(format!("BATON_ORDER: {e}"))),
        _ => Ok(None),
    }
}

/// An invalid command-line value, with a message that stands on its own
/// ("invalid token '-1': ..."): printed instead of clap's "invalid value
/// '-1' for '--token <N>': ...".
#[derive(Debug)]
pub(crate) struct InvalidInput(pub(crate) String);

impl std::fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for InvalidInput {}

/// How diagnostics (`-v`) are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per event: time, level, span (with the run id), target, message, fields.
    Text,
    /// One JSON object per line, with the spans (and so the run id) in `spans`.
    Json,
}

/// How long to wait for a lock.
#[derive(Debug, Args, Clone, Copy)]
pub struct WaitArgs {
    /// Give up if the lock is not acquired within this long (e.g. 250ms, 5s, 2m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,

    /// Fail at once (exit 75) if the lock is busy or others already wait for it.
    #[arg(long)]
    pub no_wait: bool,
}

/// How the lock is shared.
#[derive(Debug, Args, Clone, Copy)]
pub struct ModeArgs {
    /// Take a shared (read) lock: many shared holders at once, exclusive holders wait.
    #[arg(long, conflicts_with = "max")]
    pub shared: bool,

    /// Use the lock as a semaphore with N slots; every user of the name must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max: Option<u32>,
}

/// What is recorded about the holder.
#[derive(Debug, Args, Clone)]
pub struct HolderArgs {
    /// What the holder does, shown by `baton lock status` [default: the command line].
    #[arg(long, value_name = "TEXT")]
    pub operation: Option<String>,

    /// Who the holder acts for [default: user@host].
    #[arg(long, value_name = "TEXT")]
    pub owner: Option<String>,
}

/// Group modes on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Every run executes, one at a time (or --max at a time), in arrival order.
    Queue,
    /// A new run cancels the running one and every older waiting one (they exit 79).
    Supersede,
    /// The running run finishes; only the newest waiting run runs next (others exit 79).
    Coalesce,
    /// If the group is running or has a waiter, exit 75 at once without running.
    Skip,
}

impl From<WaitArgs> for WaitPolicy {
    fn from(w: WaitArgs) -> WaitPolicy {
        match (w.no_wait, w.wait) {
            (true, _) => WaitPolicy::Immediately,
            (false, Some(d)) => WaitPolicy::from(d),
            (false, None) => WaitPolicy::Forever,
        }
    }
}

impl From<ModeArgs> for Mode {
    fn from(m: ModeArgs) -> Mode {
        match (m.shared, m.max) {
            (true, _) => Mode::Shared,
            (false, Some(n)) => Mode::Semaphore(n),
            (false, None) => Mode::Exclusive,
        }
    }
}

impl From<ModeArg> for GroupMode {
    fn from(m: ModeArg) -> GroupMode {
        match m {
            ModeArg::Queue => GroupMode::Queue,
            ModeArg::Supersede => GroupMode::Supersede,
            ModeArg::Coalesce => GroupMode::Coalesce,
            ModeArg::Skip => GroupMode::Skip,
        }
    }
}

/// `--git-lock-wait`.
#[derive(Debug, Args, Clone, Copy)]
pub struct GitLockWaitArg {
    /// Longest wait for locks, all together: the repository's (held by others only while
    /// they run a short git command on its shared metadata) and the workspace's (held while
    /// it is created or removed); past it, exit 75 naming the holder.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
    pub git_lock_wait: Duration,
}

/// The process that ran `baton` (a shell, an agent): a workspace it creates
/// lives as long as it does.
pub(crate) fn caller() -> ProcessIdentity {
    #[cfg(unix)]
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    #[cfg(windows)]
    let parent = baton_lock::parent_of(std::process::id() as i32);
    parent
        .and_then(ProcessIdentity::of_pid)
        .unwrap_or_else(ProcessIdentity::current)
}
