//! Where a workspace on a branch starts, and `--reset-branch`.
//!
//! A branch that exists on the remote (`<remote>/B` in the base, as its
//! last fetch saw it: `--fetch` prunes branches the remote deleted) is
//! continued, never restarted: an issue branch that an agent pushes on
//! every run must not start again at `main` and fight its own pushed
//! commits (issue 36). So, with `--ref R --branch B`:
//! - `B` not on the remote: the workspace starts exactly at `R` (a local
//!   `B` with commits `R` lacks is refused, [`GitError::BranchNotAtRef`]).
//! - `<remote>/B` in `R` (merged, or never ahead): it starts at `R`, moving
//!   `B` forward to it — a fast-forward, which drops nothing.
//! - `R` lacks commits of `<remote>/B`: it continues the pushed branch from
//!   `<remote>/B` (said on stderr; the record's `reference` names
//!   `refs/remotes/<remote>/B`), provided the local `B` holds nothing that
//!   is not there (equal or behind); else refused. What `R` adds is not
//!   merged in: a merge may conflict, and that is the command's to handle
//!   (`git merge R` in the run), not the workspace's.
//!
//! Without `--ref`, an existing local `B` is checked out as it is, and a
//! `B` only the remote has is made from `<remote>/B` (as `git checkout B`
//! does), not from `HEAD`.
//!
//! `--reset-branch` ([`WorkspaceRequest::reset_branch`]) starts `B` over at
//! that same start point instead of refusing: it drops only the local
//! commits that were never pushed (nor are in `R`).
//!
//! Every ref of `B` is read and moved by its full name (`refs/heads/B`,
//! `refs/remotes/<remote>/B`, `refs/baton/abandoned/B/...`), and `B` itself
//! never shadows another namespace (refname.rs): no tag, remote-tracking
//! branch or other ref of the base can answer in its place.
//!
//! **Starting over never loses work**: the old tip is first kept under
//! `refs/baton/abandoned/<B>/<UTC time>-<run id>` in the base repository
//! (published before the branch moves), then `B` is moved to the start with a
//! compare-and-swap on its old value. A reset is refused while a live
//! workspace in the registry holds `B` ([`GitError::BranchHeld`], exit 75)
//! or a work tree of the base has it checked out. The check and the record
//! of the new workspace are made under the repository's lock, so of two
//! creations racing to reset one branch exactly one gets it; the other sees
//! the winner's record and is refused, naming it. The remote branch is never
//! touched: a push from the new workspace still lands on top of it.

use std::path::Path;
use std::time::SystemTime;

use baton_lock::{BatonDir, Liveness};

use crate::error::{BranchHolder, GitError};
use crate::git::{self, commit_of, Repo};
use crate::record::Workspace;
use crate::registry;
use crate::request::WorkspaceRequest;

/// Where a workspace starts, and what was done to its branch to get there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// The ref started from (as asked, or `refs/remotes/<remote>/B` when a
    /// pushed branch is continued, or `refs/heads/B` itself without a ref:
    /// full names, which no other namespace answers to).
    pub reference: String,
    /// Its commit.
    pub commit: String,
    /// The pushed branch is continued instead of `--ref` (which lacks its
    /// commits): `(--ref as given, its commit)`.
    pub instead_of: Option<(String, String)>,
    /// The branch's old tip, kept under this ref before a reset moved it:
    /// `(ref, commit)`.
    pub abandoned: Option<(String, String)>,
}

/// The branch's tip and its remote-tracking branch's, as the base knows them.
struct Tips {
    local: Option<String>,
    /// `(refs/remotes/<remote>/B, commit)`.
    remote: Option<(String, String)>,
}

fn tips(repo: &Repo, branch: &str) -> Result<Tips, GitError> {
    let local = commit_of(&repo.path, &format!("refs/heads/{branch}"))?;
    let key = format!("branch.{branch}.remote");
    let (out, _) = git::output(&repo.path, ["config", "--get", key.as_str()])?;
    let configured = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let remote = if out.status.success() && !configured.is_empty() && configured != "." {
        configured
    } else {
        "origin".to_string()
    };
    let tracking_ref = format!("refs/remotes/{remote}/{branch}");
    let tracking = commit_of(&repo.path, &tracking_ref)?.map(|c| (tracking_ref, c));
    Ok(Tips {
        local,
        remote: tracking,
    })
}

fn resolve(repo: &Repo, reference: &str) -> Result<String, GitError> {
    commit_of(&repo.path, reference)?.ok_or_else(|| GitError::UnknownRef {
        repo: repo.path.clone(),
        reference: reference.to_string(),
    })
}

/// Whether `ancestor` is `descendant` or reachable from it in `repo`.
pub(crate) fn contains(repo: &Path, descendant: &str, ancestor: &str) -> Result<bool, GitError> {
    if ancestor == descendant {
        return Ok(true);
    }
    let (out, line) = git::output(repo, ["merge-base", "--is-ancestor", ancestor, descendant])?;
    match out.status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(git::failed(line, &out)),
    }
}

/// Where a workspace for `req` starts (module doc); reads only. With
/// [`WorkspaceRequest::reset_branch`] and a local branch with commits the
/// start lacks, [`reset`] must then move the branch.
pub(crate) fn start_point(repo: &Repo, req: &WorkspaceRequest) -> Result<Start, GitError> {
    let start = |reference: String, commit: String| Start {
        reference,
        commit,
        instead_of: None,
        abandoned: None,
    };
    let Some(branch) = &req.branch else {
        let reference = req.reference.clone().unwrap_or_else(|| "HEAD".into());
        let commit = resolve(repo, &reference)?;
        return Ok(start(reference, commit));
    };
    let tips = tips(repo, branch)?;
    let Some(reference) = req.reference.clone() else {
        return Ok(match (tips.local, tips.remote) {
            (Some(tip), _) => start(format!("refs/heads/{branch}"), tip),
            // As `git checkout B` does: a branch only the remote has is
            // made from the pushed one, never from HEAD (its push would
            // then fight the pushed branch).
            (None, Some((name, pushed))) => start(name, pushed),
            (None, None) => start("HEAD".into(), resolve(repo, "HEAD")?),
        });
    };
    let commit = resolve(repo, &reference)?;
    // The pushed branch is continued when --ref lacks its commits;
    // otherwise --ref holds all of it and the branch moves forward to --ref.
    let (target, instead_of) = match tips.remote {
        Some((name, pushed)) if !contains(&repo.path, &commit, &pushed)? => {
            ((name, pushed), Some((reference.clone(), commit.clone())))
        }
        _ => ((reference.clone(), commit.clone()), None),
    };
    let local_in_target = match &tips.local {
        Some(tip) => contains(&repo.path, &target.1, tip)?,
        None => true,
    };
    // A reset drops only what is in neither: the commits never pushed.
    if local_in_target || req.reset_branch {
        return Ok(Start {
            instead_of,
            ..start(target.0, target.1)
        });
    }
    Err(GitError::BranchNotAtRef {
        repo: repo.path.clone(),
        branch: branch.clone(),
        branch_commit: tips.local.unwrap_or_default(),
        reference,
        ref_commit: commit,
    })
}

/// Moves `branch` of the base to `start.commit` for a reset, after keeping
/// its old tip under `refs/baton/abandoned/...` when the move would drop
/// commits (a tip already in `start.commit` is simply moved forward). The
/// caller holds the repository's lock and has checked [`holder`].
pub(crate) fn reset(
    repo: &Repo,
    branch: &str,
    start: &mut Start,
    run_id: &str,
) -> Result<(), GitError> {
    let full = format!("refs/heads/{branch}");
    let Some(old) = commit_of(&repo.path, &full)? else {
        return Ok(()); // created by the checkout
    };
    if contains(&repo.path, &start.commit, &old)? {
        return Ok(()); // nothing to drop: the checkout moves it forward
    }
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now())
        .to_string()
        .replace(['-', ':'], "");
    let kept = format!("refs/baton/abandoned/{branch}/{stamp}-{run_id}");
    let why = format!("baton: --reset-branch of {branch} (run {run_id})");
    // Published before the branch moves: whatever happens next, the old
    // tip stays reachable. The empty old value: only if it is new.
    git::run(
        &repo.path,
        [
            "update-ref",
            "-m",
            why.as_str(),
            kept.as_str(),
            old.as_str(),
            "",
        ],
    )?;
    // Compare-and-swap: a branch moved meanwhile (by git without baton)
    // is not overwritten.
    git::run(
        &repo.path,
        [
            "update-ref",
            "-m",
            why.as_str(),
            full.as_str(),
            start.commit.as_str(),
            old.as_str(),
        ],
    )?;
    start.abandoned = Some((kept, old));
    Ok(())
}

/// Who holds `branch` of `repo`, if anyone: a workspace in the registry of
/// `dir` whose owner is not known dead (other than `me`), or a work tree of
/// the base that has it checked out. The caller holds the repository's lock
/// (a creation records its workspace under it), so the answer stands until
/// it lets go.
pub(crate) fn holder(
    dir: &BatonDir,
    repo: &Repo,
    branch: &str,
    me: &str,
) -> Result<Option<GitError>, GitError> {
    for ws in registry::all(dir)?.into_iter().flatten() {
        if ws.id != me
            && ws.base_git_dir == repo.common_dir
            && ws.branch.as_deref() == Some(branch)
            && ws.owner.liveness() != Liveness::Dead
        {
            return Ok(Some(held(repo, branch, &ws)));
        }
    }
    // A worktree whose directory vanished does not count.
    git::run(&repo.path, ["worktree", "prune"])?;
    let list = git::run(&repo.path, ["worktree", "list", "--porcelain"])?;
    let full = format!("branch refs/heads/{branch}");
    let mut path = None;
    for line in list.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = Some(p.to_string());
        } else if line == full {
            return Ok(Some(GitError::Invalid(format!(
                "branch '{branch}' of '{}' is checked out at '{}': --reset-branch cannot move it under that work tree; switch it to another branch there first, or name another --branch",
                repo.path.display(),
                path.unwrap_or_default()
            ))));
        }
    }
    Ok(None)
}

fn held(repo: &Repo, branch: &str, ws: &Workspace) -> GitError {
    GitError::BranchHeld(Box::new(BranchHolder {
        repo: repo.path.clone(),
        branch: branch.to_string(),
        id: ws.id.clone(),
        run_id: ws.run_id.clone(),
        pid: ws.owner.pid,
        path: ws.path.clone(),
    }))
}
