//! Typed errors of the PostgreSQL backend.

use baton_lock::LockError;

/// Everything that can go wrong with locks on PostgreSQL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The backend URL cannot be used.
    #[error("invalid backend URL '{url}': {reason}")]
    Url {
        /// The URL, its password replaced by `***`.
        url: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// No session could be established (server unreachable, login refused,
    /// no such database).
    #[error("cannot connect to PostgreSQL at {url}: {reason}")]
    Connect {
        /// The URL, its password replaced by `***`.
        url: String,
        /// What the server or the network said, in one line.
        reason: String,
    },
    /// The database user lacks a permission baton needs.
    #[error("PostgreSQL at {url} refused to {op}: {reason}")]
    Permission {
        /// The URL, its password replaced by `***`.
        url: String,
        /// What was being done.
        op: &'static str,
        /// What the server said, with the remedy.
        reason: String,
    },
    /// A statement failed, or the session ended while it ran.
    #[error("PostgreSQL: cannot {op}: {message}")]
    Database {
        /// What was being done.
        op: &'static str,
        /// What the server or driver said, in one line.
        message: String,
    },
    /// The database's schema is newer than this baton knows.
    #[error("the baton tables in this database have schema version {found}, newer than this baton's {known}: upgrade baton")]
    SchemaTooNew {
        /// The version found.
        found: i32,
        /// The newest this build knows.
        known: i32,
    },
    /// A lock-level failure, the same as on the local backend (busy,
    /// cancelled, mode mismatch, not held, stale token, refused).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The server could not be reached, or is starting up or shutting down:
    /// worth trying again (a restart), unlike [`PgError::Connect`].
    #[error("cannot connect to PostgreSQL at {url}: {reason}")]
    Unavailable {
        /// The URL, password hidden.
        url: String,
        /// The driver's reason, in one line.
        reason: String,
    },
    /// A TLS check failed (the server declined TLS, its certificate is not
    /// signed by a trusted CA or does not name the host), or the trusted
    /// roots cannot be loaded: trying again cannot help.
    #[error("cannot connect to PostgreSQL at {url}: {failure}")]
    Tls {
        /// The URL, password hidden.
        url: String,
        /// The check that failed.
        failure: crate::ssl::TlsFailure,
    },
    /// The session ended while a statement ran (the server terminated it,
    /// shut down or restarted, or the connection broke).
    #[error("PostgreSQL: cannot {op}: the session ended ({message})")]
    SessionLost {
        /// What was being done.
        op: &'static str,
        /// The driver's message, in one line.
        message: String,
    },
}

impl PgError {
    /// Whether trying again on a new session may succeed: the server was
    /// restarting, or the connection broke ([`PgError::Unavailable`],
    /// [`PgError::SessionLost`]).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            PgError::Unavailable { .. } | PgError::SessionLost { .. }
        )
    }
}

/// Whether `e` says the session ended or the server is going down or
/// coming up: `57P01` admin shutdown, `57P02` crash shutdown, `57P03`
/// cannot connect now, class `08` (connection exceptions), or a closed
/// connection.
pub(crate) fn session_ended(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || matches!(sqlstate(e), Some("57P01" | "57P02" | "57P03"))
        || sqlstate(e).is_some_and(|s| s.starts_with("08"))
}

/// A driver error in one line (SQLSTATE and message for server errors).
pub fn one_line(e: &tokio_postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => baton_lock::one_line(e),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The SQLSTATE of a server error, if it is one.
pub(crate) fn sqlstate(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(tokio_postgres::error::SqlState::code)
}
