//! Waiting in an engine call without holding up the session: the call runs
//! on a blocking thread; meanwhile the client gets a progress notification
//! every half second (when it gave a progress token), and a cancelled
//! request (`notifications/cancelled`), a dropped one or the end of the
//! session cancels the engine's wait through its [`CancelToken`].

use std::time::{Duration, Instant};

use baton_lock::{CancelToken, WaitPolicy};

use crate::ToolError;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::RoleServer;

/// How often a waiting request reports progress (the contract: at least once a second).
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// Cancels the engine's wait when the request's future is dropped (the
/// client went away, or the server is shutting down).
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Runs `call` (an engine call that may wait, and ends its wait when
/// `cancel` fires) on a blocking thread; reports progress while it runs.
/// `what` words the progress message ("waiting for src/ (held by ...)").
/// A call that does not wait (`total_seconds` of `None`: it answers at
/// once, after the engine's short critical section) runs right here
/// instead, without a hand-off to another thread. Returns `None` if the
/// blocking thread failed (panicked).
pub(crate) async fn blocking<T, F>(
    ctx: &RequestContext<RoleServer>,
    cancel: CancelToken,
    total_seconds: Option<f64>,
    what: String,
    call: F,
) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let _guard = CancelOnDrop(cancel.clone());
    if total_seconds.is_none() {
        return Some(call());
    }
    let mut task = tokio::task::spawn_blocking(call);
    let progress = ctx.meta.get_progress_token();
    let start = Instant::now();
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut cancelled = false;
    loop {
        tokio::select! {
            joined = &mut task => return joined.ok(),
            _ = ctx.ct.cancelled(), if !cancelled => {
                // The engine ends its wait (Cancelled) and the task returns.
                cancelled = true;
                cancel.cancel();
            }
            _ = tick.tick() => {
                if let Some(token) = &progress {
                    let waited = start.elapsed().as_secs_f64();
                    let mut param = ProgressNotificationParam::new(token.clone(), waited)
                        .with_message(format!("{what}: waited {waited:.1} s"));
                    if let Some(total) = total_seconds {
                        param = param.with_total(total);
                    }
                    if let Err(e) = ctx.peer.notify_progress(param).await {
                        tracing::debug!("progress notification not sent: {e}");
                    }
                }
            }
        }
    }
}

/// A wait of `seconds` as the engine's policy: 0 answers at once.
pub(crate) fn wait_policy(seconds: f64, what: &str) -> Result<WaitPolicy, ToolError> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(ToolError::Invalid(format!(
            "{what}: wait_seconds must be a number of seconds >= 0, not {seconds}"
        )));
    }
    if seconds == 0.0 {
        return Ok(WaitPolicy::Immediately);
    }
    // Beyond what a Duration holds: as long as it takes.
    Ok(Duration::try_from_secs_f64(seconds).map_or(WaitPolicy::Forever, WaitPolicy::AtMost))
}
