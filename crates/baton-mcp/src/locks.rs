//! `lock` and `unlock`: the named locks of `baton run --lock`, held by the
//! session (baton-lock decides; this module translates).

use std::sync::Arc;

use baton_lock::{HolderKind, LockError, LockName, LockRequest, Mode};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use crate::session::Session;
use crate::types::{LockArgs, LockOut, UnlockArgs, UnlockOut};
use crate::wait::{blocking, wait_policy};
use crate::{Outcome, ToolError};

/// `lock`.
pub(crate) async fn lock(
    session: &Arc<Session>,
    args: LockArgs,
    ctx: &RequestContext<RoleServer>,
) -> Outcome<LockOut> {
    let name: LockName = args.name.parse().map_err(ToolError::from)?;
    let mode = match (args.shared.unwrap_or(false), args.max) {
        (true, Some(_)) => {
            return Err(ToolError::Invalid(format!(
                "lock '{name}': give shared or max, not both (max makes a semaphore)"
            )))
        }
        (_, Some(0)) => {
            return Err(ToolError::Invalid(format!(
                "lock '{name}': max must be at least 1"
            )))
        }
        (true, None) => Mode::Shared,
        (false, Some(n)) => Mode::Semaphore(n),
        (false, None) => Mode::Exclusive,
    };
    if session.holds_lock(name.as_str()) {
        return Err(ToolError::Conflict(format!(
            "lock '{name}' is already held by this session"
        )));
    }
    let wait = wait_policy(args.wait_seconds, &format!("lock '{name}'"))?;
    let cancel = session.wait_token();
    let agent = session.agent();
    let req = LockRequest::new(name.clone())
        .mode(mode)
        .wait(wait)
        .owner(agent.clone())
        .operation(format!("mcp session of {agent}"))
        .run_id(session.identity.session.clone())
        .kind(HolderKind::Library)
        .cancel(cancel.clone());
    let dir = session.dir().clone();
    let total = (args.wait_seconds > 0.0).then_some(args.wait_seconds);
    let got = blocking(
        ctx,
        cancel,
        total,
        format!("waiting for lock '{name}'"),
        move || baton_lock::acquire(&dir, &req),
    )
    .await
    .ok_or_else(|| ToolError::Engine(format!("lock '{name}': the waiting thread failed")))?;
    let guard = match got {
        Ok(g) => g,
        Err(LockError::Cancelled { .. }) => {
            return Err(ToolError::Cancelled(format!(
                "lock '{name}': the wait was cancelled"
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let out = LockOut {
        name: name.to_string(),
        token: guard.token(),
        mode: guard.mode().as_str().to_string(),
        previous_holder_died: guard.previous_holder_died().is_some(),
    };
    if !session.keep_lock(name.to_string(), guard) {
        return Err(ToolError::Cancelled(format!(
            "lock '{name}': the session ended while it was granted; released"
        )));
    }
    let died = if out.previous_holder_died {
        " (its previous holder died holding it: its work may be half done)"
    } else {
        ""
    };
    let summary = format!("locked '{name}' ({}, token {}){died}", out.mode, out.token);
    Ok((out, summary))
}

/// `unlock`.
pub(crate) fn unlock(session: &Session, args: UnlockArgs) -> Outcome<UnlockOut> {
    let Some(guard) = session.take_lock(&args.name) else {
        return Err(ToolError::NotFound(format!(
            "lock '{}' is not held by this session",
            args.name
        )));
    };
    guard
        .release()
        .map_err(|e| ToolError::from(e).prefixed(&format!("lock '{}'", args.name)))?;
    let summary = format!("unlocked '{}'", args.name);
    Ok((UnlockOut { name: args.name }, summary))
}
