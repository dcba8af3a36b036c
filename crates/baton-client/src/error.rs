//! Why a call to the job service failed.

use std::io;
use std::path::PathBuf;

use baton_contract::exit;

/// Why a call to the job service failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server address is not a plain `http://host:port` URL.
    #[error("invalid server URL '{url}': {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server could not be reached, or the connection broke.
    #[error("cannot reach the job service at {server}: {reason} (is `baton serve` running there? set --server or BATON_SERVER)")]
    Unreachable {
        /// The server.
        server: String,
        /// The transport's reason.
        reason: String,
    },
    /// 401: no token, or the wrong one.
    #[error("the job service at {server} refused the request: {message} ({hint})")]
    Unauthorized {
        /// The server.
        server: String,
        /// The server's message.
        message: String,
        /// What to do.
        hint: &'static str,
    },
    /// 429 or 503: full, or shutting down; try again later.
    #[error(
        "the job service at {server} cannot take the job now: {message}; retry in {retry_after} s"
    )]
    Busy {
        /// The server.
        server: String,
        /// The server's message.
        message: String,
        /// Seconds to wait, from `Retry-After` (1 if the server named none).
        retry_after: u64,
    },
    /// Any other refusal (400, 403, 404, 409, ...), with the server's message.
    #[error("{message} (HTTP {status} from {server})")]
    Refused {
        /// The server.
        server: String,
        /// The HTTP status.
        status: u16,
        /// The server's error code (`not_found`, `invalid_request`, ...).
        code: String,
        /// The server's message.
        message: String,
    },
    /// The server answered something this client does not understand.
    #[error("unexpected answer from the job service at {server}: {reason}")]
    Protocol {
        /// The server.
        server: String,
        /// What was wrong.
        reason: String,
    },
    /// A local file (prompt, token) could not be read.
    #[error("cannot read {what} '{}': {source}", path.display())]
    File {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing the log to our output failed.
    #[error("cannot write the job's log: {0}")]
    Output(#[source] io::Error),
}

impl ClientError {
    /// The process exit code for this error (`baton_contract::exit`): 75
    /// when the service is full or draining (try again later), 125 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClientError::Busy { .. } => exit::NOT_ACQUIRED,
            _ => exit::BATON_FAILED,
        }
    }

    /// Whether the server said there is no such job.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ClientError::Refused { status: 404, .. })
    }
}
