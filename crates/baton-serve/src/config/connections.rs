//! The connection limits (see [`crate::conn`]): how long a client may take
//! to send a request's headers and its body, and how many connections are
//! served at once.

use std::time::Duration;

use super::durations::{duration, nonzero};
use super::ConfigError;

/// How long clients may take, and how many connections are served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a request's headers (an idle
    /// keep-alive connection included); then it is closed.
    pub header_read_timeout: Duration,
    /// How long a request may take to send its body, counted from its
    /// headers; then it is answered 408 and its connection closed.
    pub request_body_timeout: Duration,
    /// Connections open at once; beyond it (or beyond what the descriptor
    /// limit leaves room for) a connection is answered 503 and closed.
    pub max_connections: usize,
}

/// Checks `header_read_timeout`, `request_body_timeout` (durations, at
/// least 1ms, default 30 s) and `max_connections` (at least 1, default
/// 1024).
pub(super) fn connections(
    header_read_timeout: Option<&str>,
    request_body_timeout: Option<&str>,
    max_connections: Option<usize>,
) -> Result<ConnectionLimits, ConfigError> {
    let timeout = |field: &str, value: Option<&str>| {
        let d = duration(field, value, Duration::from_secs(30))?;
        nonzero(field, d)
    };
    let max_connections = max_connections.unwrap_or(1024);
    if max_connections == 0 {
        return Err(ConfigError(
            "invalid max_connections 0: at least 1 connection must be possible".into(),
        ));
    }
    Ok(ConnectionLimits {
        header_read_timeout: timeout("header_read_timeout", header_read_timeout)?,
        request_body_timeout: timeout("request_body_timeout", request_body_timeout)?,
        max_connections,
    })
}
