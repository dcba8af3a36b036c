//! Errors of running and holding.

use std::io;
use std::path::PathBuf;

use baton_lock::LockError;
use baton_proc::ProcError;

#[cfg(feature = "postgres")]
impl From<baton_pg::PgError> for RunError {
    fn from(e: baton_pg::PgError) -> RunError {
        match e {
            baton_pg::PgError::Lock(l) => RunError::Lock(l),
            other => RunError::Database(other),
        }
    }
}

/// Everything that can stop a run or a hold.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A lock could not be taken, or lock state could not be read or written.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The run's workspace could not be created or removed.
    #[error(transparent)]
    Workspace(#[from] baton_git::GitError),
    /// The command could not be started or supervised.
    #[error(transparent)]
    Proc(#[from] ProcError),
    /// The group did not admit the run (mode skip while busy, or `--max-pending` reached).
    #[error("not run: {0}")]
    NotAdmitted(String),
    /// Runs of one group key disagree on the mode or the number of slots.
    #[error(
        "group '{key}' is in use with {existing}, not {requested}: all runs of a key must agree"
    )]
    GroupModeMismatch {
        /// The group key.
        key: String,
        /// What the live runs use.
        existing: String,
        /// What this run asked for.
        requested: String,
    },
    /// The request contradicts itself (e.g. `--max` with a mode other than queue).
    #[error("{0}")]
    InvalidRequest(String),
    /// No command was given.
    #[error("no command given: put it after `--`")]
    NoCommand,
    /// `baton lock acquire`: the background holder did not get the lock.
    /// The message is complete, worded like the same failure of `baton run`
    /// ("lock 'x' is busy ...; gave up after ...") or, for a fault of the
    /// holder itself, saying what failed.
    #[error("{message}")]
    Holder {
        /// Whether it failed because the lock was busy (not a fault).
        busy: bool,
        /// What happened.
        message: String,
    },
    /// The event log could not be read or written.
    #[error(transparent)]
    EventLog(#[from] EventLogError),
    /// A file or directory of a group could not be used.
    #[error("cannot {op} '{}'", path.display())]
    File {
        /// What was being done, as a verb phrase.
        op: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The PostgreSQL backend failed (connection, permission, statement).
    #[cfg(feature = "postgres")]
    #[error(transparent)]
    Database(baton_pg::PgError),
    /// The database session holding the run's locks ended while the command
    /// ran (the server terminated it, restarted, or stopped answering): the
    /// command was stopped, since the locks were no longer held.
    #[error("lost the lock{}: its database session ended; the command was stopped (or never started)", if .locks.is_empty() { String::new() } else { format!(" '{}'", .locks) })]
    LockLost {
        /// The locks (comma-separated).
        locks: String,
    },
    /// The run's guardian stopped the command because this process did not
    /// vouch for its database sessions in time (it was stopped, or could
    /// not reach the database): another machine may have taken over.
    #[error("the command was stopped by its guardian: this process did not prove within {}s that its database session lived (it was stopped or cut off), so another machine may have taken over", .fence.as_secs())]
    Fenced {
        /// The fence's bound.
        fence: std::time::Duration,
    },
    /// The run's guardian died while the command ran (someone killed it):
    /// the command was stopped rather than run on unguarded.
    #[error("the command's guardian died while the command ran (was it killed?); the command was stopped, since it must not run unguarded")]
    GuardianLost,
    /// An I/O error while talking to the background holder.
    #[error("{op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// An I/O error on the event log, with the path it concerns.
#[derive(Debug, thiserror::Error)]
#[error("{op} '{}'", path.display())]
pub struct EventLogError {
    /// What was being done.
    pub op: &'static str,
    /// The file concerned.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: io::Error,
}
