//! Removing a workspace: its directory, its worktree entry in the base, its
//! record, in that order, under the workspace's lock.
//!
//! A clone workspace on a branch keeps its work when it goes: commits that
//! exist nowhere else are fetched back into the base's branch first (where a
//! worktree would have left them). When the base cannot take them (the
//! branch is checked out there, has diverged, or the base is gone) the
//! removal is refused ([`GitError::Unpushed`], naming the commits), unless
//! the caller said to discard them ([`Unpushed::Discard`]; the report names
//! what was dropped) or to preserve them ([`Unpushed::Preserve`]: they are
//! kept in the base under `refs/baton/kept/<branch>/<UTC time>-<run id>`,
//! which the report names, and the workspace goes). Removals nobody watches
//! (the end of a run, a service's job) preserve: two runs on one branch
//! whose second cannot fast-forward the base's branch leave a ref, not a
//! workspace that nothing would ever collect.

use std::fs;
use std::io;

use baton_lock::{BatonDir, WaitPolicy};
use serde::Serialize;

use crate::error::{BranchCommits, GitError};
use crate::git::{self, commit_of, Repo};
use crate::record::{lock_workspace, validate_id, Strategy, Workspace};
use crate::registry;

/// At most this many unpushed commits are named (the count is always exact).
const LISTED_COMMITS: usize = 20;

/// What a removal does with commits on a clone's branch that exist nowhere
/// else and cannot be handed to the base.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unpushed {
    /// Refuse to remove the workspace ([`GitError::Unpushed`]).
    #[default]
    Keep,
    /// Remove it anyway, and report what was discarded.
    Discard,
    /// Keep the commits in the base under `refs/baton/kept/<branch>/...`
    /// (reported in [`Removed::preserved`]), then remove it. Where the base
    /// cannot take even that (it is gone), refuse as [`Unpushed::Keep`].
    Preserve,
}

/// Commits a removal kept in the base under a ref of their own
/// ([`Unpushed::Preserve`]), since the base's branch could not take them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Preserved {
    /// The ref in the base repository that holds them
    /// (`refs/baton/kept/<branch>/<UTC time>-<run id>`).
    pub reference: String,
    /// The base repository.
    pub base: std::path::PathBuf,
    /// The commits, and why the base's branch could not take them.
    pub commits: BranchCommits,
}

impl Preserved {
    /// One line saying where the commits went and why.
    pub fn note(&self) -> String {
        let c = &self.commits;
        format!(
            "the {} commit(s) of branch '{}' in workspace '{}' are kept under {} in '{}', since its branch could not take them ({}): merge or rebase them from there",
            c.count,
            c.branch,
            c.id,
            self.reference,
            self.base.display(),
            c.reason
        )
    }
}

/// A removed workspace, and what went with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Removed {
    /// The record of the removed workspace.
    pub workspace: Workspace,
    /// Commits discarded with it ([`Unpushed::Discard`] only).
    pub discarded: Option<BranchCommits>,
    /// Commits kept under a ref of their own ([`Unpushed::Preserve`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserved: Option<Preserved>,
}

/// Removes a workspace (directory, worktree registration, record), whoever
/// owns it. A clone on a branch first hands commits that exist nowhere else
/// to the base's branch, or refuses ([`GitError::Unpushed`]).
/// `git_lock_wait` bounds the whole removal (the workspace's lock, which a
/// creation or another removal holds, and the repository's).
pub fn remove(dir: &BatonDir, id: &str, git_lock_wait: WaitPolicy) -> Result<Workspace, GitError> {
    remove_with(dir, id, git_lock_wait, Unpushed::Keep).map(|r| r.workspace)
}

/// [`remove`], choosing what happens to commits that cannot be kept.
pub fn remove_with(
    dir: &BatonDir,
    id: &str,
    git_lock_wait: WaitPolicy,
    unpushed: Unpushed,
) -> Result<Removed, GitError> {
    validate_id(id)?;
    let wait = git::deadline(git_lock_wait);
    let guard = lock_workspace(dir, id, wait, "remove workspace", "")?;
    let ws = registry::get(dir, id)?;
    let (discarded, preserved) = remove_workspace(dir, &ws, wait, unpushed)?;
    drop(guard);
    Ok(Removed {
        workspace: ws,
        discarded,
        preserved,
    })
}

/// What [`remove_if`] did.
pub(crate) enum Removal {
    /// Removed.
    Removed(Box<Removed>),
    /// Not removed: no longer due (re-checked under its lock).
    NotDue,
    /// Not removed: being created or removed by another process.
    Busy(String),
    /// Removed by someone else meanwhile.
    Gone,
}

/// Removes workspace `id` if `due` holds for its record as read under its
/// lock, without waiting for the lock: a workspace being created or removed
/// is left alone.
pub(crate) fn remove_if(
    dir: &BatonDir,
    id: &str,
    wait: WaitPolicy,
    unpushed: Unpushed,
    due: impl Fn(&Workspace) -> bool,
) -> Result<Removal, GitError> {
    let guard = match lock_workspace(dir, id, WaitPolicy::Immediately, "gc workspace", "") {
        Ok(g) => g,
        Err(e) if e.is_busy() => return Ok(Removal::Busy(baton_lock::one_line(&e))),
        Err(e) => return Err(e),
    };
    let ws = match registry::get(dir, id) {
        Ok(ws) => ws,
        Err(GitError::NoSuchWorkspace { .. }) => return Ok(Removal::Gone),
        Err(e) => return Err(e),
    };
    if !due(&ws) {
        return Ok(Removal::NotDue);
    }
    let (discarded, preserved) = remove_workspace(dir, &ws, wait, unpushed)?;
    drop(guard);
    Ok(Removal::Removed(Box::new(Removed {
        workspace: ws,
        discarded,
        preserved,
    })))
}

fn remove_workspace(
    dir: &BatonDir,
    ws: &Workspace,
    wait: WaitPolicy,
    unpushed: Unpushed,
) -> Result<(Option<BranchCommits>, Option<Preserved>), GitError> {
    // Never delete outside a workspace root baton made, whatever a record
    // says; a directory that is gone already (its root was wiped) needs no
    // deleting, and its record may go.
    let exists = fs::symlink_metadata(&ws.path).is_ok();
    if exists && !crate::root::may_delete(dir, ws) {
        let root = crate::root::root_of(dir, ws);
        return Err(GitError::Invalid(format!(
            "workspace '{}' (run {}) records path '{}', outside '{}': refusing to delete it; remove the record '{}' by hand",
            ws.id,
            ws.run_id,
            ws.path.display(),
            root.display(),
            registry::record_file(dir, &ws.id).display()
        )));
    }
    let (discarded, preserved) = match (ws.strategy, &ws.branch) {
        (Strategy::Clone, Some(branch)) => match keep_branch(ws, branch, wait, unpushed) {
            Ok(preserved) => (None, preserved),
            Err(e) if unpushed == Unpushed::Discard => (Some(BranchCommits::from_error(e)?), None),
            Err(e) => return Err(e),
        },
        _ => (None, None),
    };
    remove_dir(ws)?;
    if ws.strategy == Strategy::Worktree {
        // The base may be gone too; then there is nothing to prune.
        if let Ok(repo) = Repo::open(&ws.base_repo) {
            repo.run_locked(wait, &ws.run_id, &["worktree", "prune"])?;
        }
    }
    // Only now, with the directory gone, may the record go.
    registry::delete(dir, &ws.id)?;
    registry::unmark_creating(dir, &ws.id);
    Ok((discarded, preserved))
}

/// Deletes the workspace's directory and checks that it is gone (a process
/// still writing into it could have made it again).
pub(crate) fn remove_dir(ws: &Workspace) -> Result<(), GitError> {
    let gone = match fs::remove_dir_all(&ws.path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .and_then(|()| match fs::symlink_metadata(&ws.path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(_) => Err(baton_fs::not_empty_error()),
    });
    gone.map_err(|source| GitError::RemoveFailed {
        id: ws.id.clone(),
        path: ws.path.clone(),
        run_id: ws.run_id.clone(),
        remedy: remedy(&source, ws),
        source,
    })
}

/// What to do when a workspace directory cannot be deleted, by the cause
/// (the tools named are the platform's own).
fn remedy(e: &io::Error, ws: &Workspace) -> String {
    use baton_fs::ErrorCause;
    let path = ws.path.display();
    let again = format!("run `baton workspace remove {}` again", ws.id);
    let windows = cfg!(windows);
    match baton_fs::error_cause(e) {
        ErrorCause::Denied if windows => format!(
            "make it writable (`attrib -r \"{path}\\*\" /s /d`) and close what has its files open, then {again}"
        ),
        ErrorCause::Denied => {
            format!("make it writable (`chmod -R u+w '{path}'`), then {again}")
        }
        ErrorCause::NotEmpty if windows => format!(
            "a process is still writing into it (Resource Monitor's Associated Handles names it): stop it, then {again}"
        ),
        ErrorCause::NotEmpty => format!(
            "a process is still writing into it (`lsof +D '{path}'` names it): stop it, then {again}"
        ),
        ErrorCause::Busy if windows => format!(
            "a process has a file in it open (Resource Monitor's Associated Handles names it): close it, then {again}"
        ),
        ErrorCause::Busy => format!(
            "something is mounted in it or keeps it busy (`findmnt -R '{path}'`): unmount or stop it, then {again}"
        ),
        ErrorCause::ReadOnly => {
            format!("its filesystem is read-only: remount it read-write, then {again}")
        }
        _ => format!("fix the cause, then {again}"),
    }
}

/// Before a clone workspace on `branch` goes, hands the commits of its branch
/// that exist nowhere else to the base repository's branch of the same name,
/// where a worktree would have left them. "Nowhere else": not reachable from
/// the workspace's remote-tracking refs (what it pushed, and the base's
/// branches as they were when it was cloned), from the commit it started at,
/// or from the base's branch. The fetch into the base is a fast-forward or
/// nothing (no `+`), and git refuses to move a branch checked out in a work
/// tree of the base; then [`Unpushed::Preserve`] keeps them under a ref of
/// their own in the base, and otherwise [`GitError::Unpushed`] names the
/// commits and the ways to keep them.
fn keep_branch(
    ws: &Workspace,
    branch: &str,
    wait: WaitPolicy,
    policy: Unpushed,
) -> Result<Option<Preserved>, GitError> {
    if !ws.path.join(".git").is_dir() {
        return Ok(None); // never got as far as a clone
    }
    let full = format!("refs/heads/{branch}");
    let Some(tip) = commit_of(&ws.path, &full)? else {
        return Ok(None); // the branch was deleted in the workspace
    };
    let new = git::run(
        &ws.path,
        [
            "log",
            "--ignore-missing",
            "--format=%h %s",
            tip.as_str(),
            "--not",
            "--remotes",
            ws.commit.as_str(),
        ],
    )?;
    if new.is_empty() {
        return Ok(None);
    }
    let commits = |reason: String| BranchCommits {
        id: ws.id.clone(),
        path: ws.path.clone(),
        run_id: ws.run_id.clone(),
        branch: branch.to_string(),
        count: new.lines().count(),
        commits: new
            .lines()
            .take(LISTED_COMMITS)
            .map(str::to_string)
            .collect(),
        reason,
    };
    let unpushed = |reason: String| GitError::Unpushed {
        commits: Box::new(commits(reason)),
        base: ws.base_repo.clone(),
    };
    let base = Repo::open(&ws.base_repo)
        .map_err(|e| unpushed(format!("it cannot be opened: {}", baton_lock::one_line(&e))))?;
    let kept = commit_of(&base.path, &full)?;
    if let Some(kept) = &kept {
        let (out, _) = git::output(
            &base.path,
            ["merge-base", "--is-ancestor", tip.as_str(), kept.as_str()],
        )?;
        if out.status.success() {
            return Ok(None); // the base's branch has them already
        }
    }
    let out = fetch_into(&base, ws, &format!("{full}:{full}"), wait)?;
    if out.status.success() {
        return Ok(None);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    // A refused update is not reported by a quiet fetch.
    let reason = match (said.is_empty(), &kept) {
        (false, _) => said,
        (true, Some(kept)) => format!(
            "its branch '{branch}' is at {}, which lacks them: not a fast-forward",
            &kept[..kept.len().min(12)]
        ),
        (true, None) => format!("git fetch failed ({})", out.status),
    };
    if policy != Unpushed::Preserve {
        return Err(unpushed(reason));
    }
    // A ref of their own, new by name (the run id is unique): the fetch
    // creates it or fails, and never moves anything that exists.
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "");
    let reference = format!("refs/baton/kept/{branch}/{stamp}-{}", ws.run_id);
    let out = fetch_into(&base, ws, &format!("{full}:{reference}"), wait)?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(unpushed(format!(
            "{reason}; keeping them under {reference} failed too: {}",
            said.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("git fetch failed")
        )));
    }
    Ok(Some(Preserved {
        reference,
        base: base.path.clone(),
        commits: commits(reason),
    }))
}

/// `git fetch --quiet <workspace> REFSPEC` in the base, under its lock.
fn fetch_into(
    base: &Repo,
    ws: &Workspace,
    refspec: &str,
    wait: WaitPolicy,
) -> Result<crate::status::Output, GitError> {
    let (out, _) = base.output_locked(
        wait,
        &ws.run_id,
        &[
            "fetch".as_ref(),
            "--quiet".as_ref(),
            ws.path.as_os_str(),
            refspec.as_ref(),
        ],
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn remove_failure_remedy_matches_the_cause() {
        let ws = Workspace::sample(PathBuf::from("/b/workspaces/w1"), PathBuf::from("/src"));
        let of = |code: i32| remedy(&io::Error::from_raw_os_error(code), &ws);
        // The system's codes: ENOTEMPTY, EACCES, EIO; Windows
        // ERROR_DIR_NOT_EMPTY, ERROR_ACCESS_DENIED, ERROR_GEN_FAILURE.
        #[cfg(unix)]
        let (not_empty, denied, io_error) = (
            rustix::io::Errno::NOTEMPTY.raw_os_error(),
            rustix::io::Errno::ACCESS.raw_os_error(),
            rustix::io::Errno::IO.raw_os_error(),
        );
        #[cfg(windows)]
        let (not_empty, denied, io_error) = (145, 5, 31);
        let busy = of(not_empty);
        assert!(
            busy.contains("still writing") && !busy.contains("chmod"),
            "{busy}"
        );
        let writable = if cfg!(windows) {
            "attrib -r"
        } else {
            "chmod -R u+w"
        };
        assert!(of(denied).contains(writable));
        for code in [not_empty, io_error] {
            assert!(of(code).contains("baton workspace remove w1"));
        }
    }
}
