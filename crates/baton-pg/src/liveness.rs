//! How a session notices a dead peer, and how it proves it is alive: the
//! one definition of the TCP keepalives (both ends), the heartbeat's
//! cadence and limit, and the heartbeat itself, for every PostgreSQL
//! session baton keeps (a lock holder's here, a job service node's in
//! `baton-serve`).
//!
//! - Client side ([`client_keepalives`]): connect within 5 s; TCP
//!   keepalives idle 5 s, interval 2 s, 3 probes; `tcp_user_timeout` 10 s.
//! - Server side ([`SERVER_KEEPALIVES`], set on the session): the same, so
//!   the server ends the session of a machine that died or was cut off, and
//!   frees its advisory locks, within about 11 s.
//! - Heartbeat: one every [`HEARTBEAT`] at a fixed cadence ([`ticker`]:
//!   a slow answer does not push the next one back), each answered within
//!   [`HEARTBEAT_LIMIT`] or the session counts as lost ([`beat`]). Each
//!   answered heartbeat vouches, with the instant it was sent, for the
//!   commands a guardian fences with [`crate::FENCE`].

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a session sends a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(2);

/// How long a heartbeat may take before the session counts as lost.
pub const HEARTBEAT_LIMIT: Duration = Duration::from_secs(3);

/// The session settings that make the server notice a dead client (run
/// each; a server that refuses one still works, only slower to notice).
pub const SERVER_KEEPALIVES: [&str; 4] = [
    "SET tcp_keepalives_idle = 5",
    "SET tcp_keepalives_interval = 2",
    "SET tcp_keepalives_count = 3",
    "SET tcp_user_timeout = 10000",
];

/// Applies the client side's connect timeout and keepalives to `config`.
pub fn client_keepalives(config: &mut tokio_postgres::Config) {
    config
        .connect_timeout(Duration::from_secs(5))
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(5))
        .keepalives_interval(Duration::from_secs(2))
        .keepalives_retries(3)
        .tcp_user_timeout(Duration::from_secs(10));
}

/// The heartbeat's clock: ticks every [`HEARTBEAT`] (the first at once),
/// at a fixed cadence.
pub fn ticker() -> tokio::time::Interval {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// Why a heartbeat did not prove the session alive.
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    /// The statement failed.
    #[error("heartbeat failed: {0}")]
    Failed(String),
    /// No answer within [`HEARTBEAT_LIMIT`].
    #[error("heartbeat unanswered within {} s", HEARTBEAT_LIMIT.as_secs())]
    Unanswered,
}

/// Sends one heartbeat (`statement`, a query not yet polled) and waits for
/// its answer at most [`HEARTBEAT_LIMIT`]; returns the instant it was sent,
/// which is what an answer vouches for.
///
/// # Errors
///
/// [`HeartbeatError`]: the session is to be taken as lost.
pub async fn beat<T>(
    statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<Instant, HeartbeatError> {
    let sent = Instant::now();
    match tokio::time::timeout(HEARTBEAT_LIMIT, statement).await {
        Ok(Ok(_)) => Ok(sent),
        Ok(Err(e)) => Err(HeartbeatError::Failed(crate::error::one_line(&e))),
        Err(_) => Err(HeartbeatError::Unanswered),
    }
}
