//! Typed errors of the lock engine.

use std::path::PathBuf;
use std::time::Duration;

use crate::wait::WaitPolicy;

/// Everything that can go wrong when using locks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock name is not acceptable.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// The lock could not be acquired within the wait policy.
    #[error("lock '{name}' is busy{}; gave up after {} ({policy})", holder_suffix(holder), humantime::format_duration(std::time::Duration::from_millis(waited.as_millis() as u64)))]
    Busy {
        /// The lock's name.
        name: String,
        /// The lock file.
        path: PathBuf,
        /// A one-line description of the current holder, if known.
        holder: Option<String>,
        /// How long this attempt waited.
        waited: Duration,
        /// The policy that gave up.
        policy: WaitPolicy,
    },
    /// Users of one lock name disagree on the number of slots or on the mode.
    #[error(
        "lock '{name}' is in use as {existing}, not as {requested}: all users of a name must agree"
    )]
    ModeMismatch {
        /// The lock's name.
        name: String,
        /// What current users use it as.
        existing: String,
        /// What this request asked for.
        requested: String,
    },
    /// This thread already holds the lock; waiting would deadlock.
    #[error("lock '{name}' is already held by this thread (re-entrant acquisition is refused to avoid a self-deadlock)")]
    Reentrant {
        /// The lock's name.
        name: String,
    },
    /// An ancestor of this process holds the lock; waiting for it would never end.
    #[error("lock '{name}' is held for an ancestor of this process (holder pid {pid}, {kind}); waiting for it would deadlock (a command run under a lock, or a script holding it, cannot take that lock again)")]
    HeldByAncestor {
        /// The lock's name.
        name: String,
        /// The ancestor holding it.
        pid: i32,
        /// Its holder kind (`run`, `hold`, `library`).
        kind: String,
    },
    /// The baton dir is not safe to use.
    #[error("baton dir '{}': {reason}", path.display())]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// The wait was cancelled through the request's [`CancelToken`](crate::CancelToken).
    #[error("waiting for lock '{name}' was cancelled")]
    Cancelled {
        /// The lock's name.
        name: String,
    },
    /// The lock file's fencing counter is at its maximum (a damaged or hand-edited file).
    #[error("lock '{name}': the fencing token counter is exhausted (the lock file was edited by hand?); delete the lock file while nobody holds the lock")]
    TokensExhausted {
        /// The lock's name.
        name: String,
    },
    /// The lock has no holder to act on.
    #[error("lock '{name}' is not held{}", .detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NotHeld {
        /// The lock's name.
        name: String,
        /// More detail, e.g. about a dead last holder.
        detail: Option<String>,
    },
    /// `release --token` named a token that is not the current holder's.
    #[error("lock '{name}': token {given} is not held (current holder tokens: {current}); nothing changed")]
    StaleToken {
        /// The lock's name.
        name: String,
        /// The token given.
        given: u64,
        /// The tokens currently held, for the message.
        current: String,
    },
    /// An operation on a holder that baton refuses to perform.
    #[error("lock '{name}': {reason}")]
    Refused {
        /// The lock's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// Byte-range locks do not work as baton needs them on this system
    /// (checked once per process, before the first lock; see `docs/src/design/locking.md`,
    /// "Platforms"). baton never falls back to a weaker lock.
    #[error("{reason}")]
    Unsupported {
        /// What the check found, beginning "open-file-description locks do
        /// not work on this system".
        reason: String,
    },
    /// An I/O error, with what was being done and the path it concerns.
    #[error(transparent)]
    Io(#[from] baton_fs::PathError),
}

fn holder_suffix(holder: &Option<String>) -> String {
    holder
        .as_deref()
        .map(|h| format!(" (held by {h})"))
        .unwrap_or_default()
}

/// An error and its causes on one line (`what: cause: cause`), as baton
/// prints every error; a cause already contained in the text is not repeated.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}
