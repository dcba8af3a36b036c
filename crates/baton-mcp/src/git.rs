//! `workspace_create`, `workspace_remove`, `push`: baton-git's isolated
//! workspaces and the push that lands every commit.

use std::path::Path;
use std::sync::Arc;

use baton_git::{PushRequest, Unpushed, WorkspaceRequest};
use baton_lock::{ProcessIdentity, WaitPolicy};

use crate::session::Session;
use crate::types::{
    PushArgs, PushOut, RemovedOut, WorkspaceCreateArgs, WorkspaceOut, WorkspaceRemoveArgs,
};
use crate::{Outcome, ToolError};

/// `workspace_create`: a clone of the repository, owned by the client (it
/// is garbage for `baton workspace gc` once the client has ended).
pub(crate) fn create(session: &Arc<Session>, args: WorkspaceCreateArgs) -> Outcome<WorkspaceOut> {
    let mut req = WorkspaceRequest::new(session.repo());
    req.reference = args.reference;
    req.branch = args.branch;
    req.run_id = Some(session.identity.session.clone());
    req.id = Some(baton_lock::new_run_id());
    req.owner = Some(
        session
            .identity
            .principal
            .clone()
            .unwrap_or_else(ProcessIdentity::current),
    );
    let ws = baton_git::create(&session.config.workspaces, &req)?;
    let summary = format!(
        "workspace '{}' at '{}'{}",
        ws.id,
        ws.path.display(),
        ws.branch
            .as_deref()
            .map(|b| format!(" on branch '{b}'"))
            .unwrap_or_default()
    );
    Ok((
        WorkspaceOut {
            path: ws.path.display().to_string(),
            branch: ws.branch,
            id: ws.id,
        },
        summary,
    ))
}

/// The id of the workspace at `path` (or with that id).
fn workspace_id(session: &Session, given: &str) -> Result<String, ToolError> {
    let dir = &session.config.workspaces;
    let path = Path::new(given);
    let canon = std::fs::canonicalize(path).ok();
    // A workspace's directory is named after its id.
    if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
        if let Ok(ws) = baton_git::get(dir, name) {
            let same = std::fs::canonicalize(&ws.path).ok();
            if ws.path == path || (same.is_some() && same == canon) || given == ws.id {
                return Ok(ws.id);
            }
        }
    }
    let all = baton_git::list(dir)?;
    all.into_iter()
        .map(|i| i.workspace)
        .find(|ws| {
            ws.path == path
                || (canon.is_some() && std::fs::canonicalize(&ws.path).ok() == canon)
                || ws.id == given
        })
        .map(|ws| ws.id)
        .ok_or_else(|| {
            ToolError::NotFound(format!(
                "workspace '{given}': no workspace of this repository is there"
            ))
        })
}

/// `workspace_remove`.
pub(crate) fn remove(session: &Arc<Session>, args: WorkspaceRemoveArgs) -> Outcome<RemovedOut> {
    let id = workspace_id(session, &args.path)?;
    let unpushed = if args.discard.unwrap_or(false) {
        Unpushed::Discard
    } else {
        Unpushed::Keep
    };
    let removed = baton_git::remove_with(
        &session.config.workspaces,
        &id,
        WaitPolicy::AtMost(baton_git::DEFAULT_GIT_LOCK_WAIT),
        unpushed,
    )?;
    let discarded = removed.discarded.as_ref().map_or(0, |d| d.count);
    let summary = format!(
        "removed workspace '{}' at '{}'{}",
        removed.workspace.id,
        removed.workspace.path.display(),
        if discarded > 0 {
            format!(", discarding {discarded} commit(s)")
        } else {
            String::new()
        }
    );
    Ok((
        RemovedOut {
            path: removed.workspace.path.display().to_string(),
            id: removed.workspace.id,
            discarded_commits: discarded,
        },
        summary,
    ))
}

/// `push`.
pub(crate) fn push(session: &Arc<Session>, args: PushArgs) -> Outcome<PushOut> {
    let path = session.repo().join(&args.path);
    // Only this repository or one of the workspaces baton made: a path a
    // prompt could have written must not push some other repository.
    let inside = |p: &Path| {
        let (Ok(p), Ok(root)) = (
            std::fs::canonicalize(p),
            std::fs::canonicalize(session.repo()),
        ) else {
            return false;
        };
        p.starts_with(root)
    };
    if !inside(&path) && workspace_id(session, &path.to_string_lossy()).is_err() {
        return Err(ToolError::Invalid(format!(
            "push '{}': not this repository ('{}') nor one of its workspaces",
            args.path.escape_debug(),
            session.repo().display()
        )));
    }
    let mut req = PushRequest::new(path);
    req.branch = args.branch;
    req.run_id = Some(session.identity.session.clone());
    req.log = false;
    // An agent run as a group run's command (`baton run --group K --mode
    // supersede -- agent`), whose MCP server inherits the run's landing:
    // its pushes announce themselves as `baton git push`'s do.
    req.landing = baton_git::landing::Landing::from_env();
    let report = baton_git::push(&req)?;
    let summary = format!(
        "pushed {} to {}/{} after {} attempt(s)",
        short(&report.commit),
        report.remote,
        report.branch,
        report.attempts
    );
    Ok((
        PushOut {
            landed: report.commit,
            attempts: report.attempts,
            branch: report.branch,
        },
        summary,
    ))
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
