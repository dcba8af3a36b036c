//! Typed errors of path reservations.

use std::path::PathBuf;

use super::Conflict;
use crate::error::LockError;

/// Everything that can go wrong with a reservation. Exit codes for
/// commands: `BadPath` and `Io` 125, `Busy` 75 (see
/// [`ReserveError::is_busy`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReserveError {
    /// A path or glob that cannot be reserved.
    #[error("cannot reserve '{}': {reason}", path.escape_debug())]
    BadPath {
        /// As given.
        path: String,
        /// Why it is refused.
        reason: String,
    },
    /// Not granted: immediately, or when the wait elapsed.
    #[error("{}", busy_line(conflicts))]
    Busy {
        /// What stood in the way, the first first.
        conflicts: Vec<Conflict>,
    },
    /// The request's [`CancelToken`](crate::CancelToken) fired while it waited.
    #[error("waiting for the reservation was cancelled")]
    Cancelled,
    /// `break` of a token no live reservation has.
    #[error("no live reservation has token {token}")]
    NotFound {
        /// The token given.
        token: u64,
    },
    /// An I/O error on the reservation table or its lock file.
    #[error("{what} '{}': {source}", path.display())]
    Io {
        /// What was being done.
        what: String,
        /// The file concerned.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An error of the lock engine (the baton dir, say).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// An error of the store that keeps the reservations elsewhere (a
    /// PostgreSQL database): no connection, a failed statement.
    #[error(transparent)]
    Store(Box<dyn std::error::Error + Send + Sync>),
}

impl ReserveError {
    /// Whether this is "not granted" (exit code 75 for commands):
    /// [`ReserveError::Busy`] or [`ReserveError::Cancelled`].
    pub fn is_busy(&self) -> bool {
        matches!(self, ReserveError::Busy { .. } | ReserveError::Cancelled)
    }

    pub(crate) fn io(what: &str, path: &std::path::Path, source: std::io::Error) -> ReserveError {
        ReserveError::Io {
            what: what.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }
}

fn busy_line(conflicts: &[Conflict]) -> String {
    match conflicts.first() {
        None => "reservation not granted: another process held the reservations table past the deadline (stopped inside it?)".to_string(),
        Some(c) => {
            let more = match conflicts.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            format!("{}{more}", c.describe())
        }
    }
}
