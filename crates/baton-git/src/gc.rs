//! Garbage collection of workspaces: those whose owner is dead (a run killed
//! in its workspace, a shell that created one and exited).
//!
//! gc never touches the workspace of a live owner (identity: boot id, pid,
//! start time), nor one whose owner it cannot judge (recorded on another
//! host), nor one being created or removed right now (its lock is busy; gc
//! does not wait for it), and it drops a record only once the directory is
//! gone. A clone whose branch has commits that exist nowhere else and that
//! the base cannot take is kept and reported ([`GcReport::kept`]), not a
//! failure, unless the caller said to discard them. A registry record it
//! cannot read is left alone and reported ([`GcReport::unreadable`]): gc
//! cannot know whose workspace it was, and the other workspaces are still
//! collected.

use std::path::PathBuf;
use std::time::Duration;

use baton_lock::{BatonDir, Liveness, WaitPolicy};
use serde::Serialize;

use crate::error::BranchCommits;
use crate::error::GitError;
use crate::git::{self, Repo};
use crate::record::{Strategy, UnreadableRecord, Workspace};
use crate::registry;
use crate::remove::{remove_if, Removal, Unpushed};

/// What `gc` should remove.
#[derive(Clone, Copy, Debug)]
pub struct GcOptions {
    /// Only remove workspaces at least this old (so that a crashed run's
    /// workspace can be inspected for a while). It never widens what gc
    /// removes: a workspace whose owner lives is kept, however old.
    pub older_than: Option<Duration>,
    /// How long to wait for repository locks, all together.
    pub git_lock_wait: WaitPolicy,
    /// What to do with a clone whose branch has commits that exist nowhere
    /// else and cannot be handed to the base: keep it (reported in
    /// [`GcReport::kept`]) or remove it ([`GcReport::discarded`]).
    pub unpushed: Unpushed,
}

/// A workspace gc could not remove.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GcFailure {
    /// The workspace id (or the record file name).
    pub id: String,
    /// Its path.
    pub path: PathBuf,
    /// The run that created it.
    pub run_id: String,
    /// What went wrong, with the remedy.
    pub error: String,
}

/// A workspace due for removal that gc left alone because another process
/// is creating or removing it.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GcSkipped {
    /// The workspace id.
    pub id: String,
    /// Its path.
    pub path: PathBuf,
    /// The run that created it.
    pub run_id: String,
    /// Why it was left alone (the busy lock and its holder).
    pub reason: String,
}

/// What `gc` did.
#[derive(Clone, Debug, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GcReport {
    /// Workspaces removed.
    pub removed: Vec<Workspace>,
    /// Commits discarded with removed workspaces ([`Unpushed::Discard`]).
    pub discarded: Vec<BranchCommits>,
    /// Workspaces due for removal but kept, because their branch has
    /// commits that exist nowhere else ([`Unpushed::Keep`]): not a failure.
    pub kept: Vec<BranchCommits>,
    /// Workspaces being created or removed by another process: left alone.
    pub skipped: Vec<GcSkipped>,
    /// Workspaces that could not be removed.
    pub failed: Vec<GcFailure>,
    /// Registry records that could not be read (corrupt, unreadable): left
    /// alone, neither removed nor their workspace touched.
    pub unreadable: Vec<UnreadableRecord>,
    /// Base repositories in which `git worktree prune` ran.
    pub pruned: Vec<PathBuf>,
}

/// The workspaces that [`gc`] would remove now (their owner is dead), and
/// the records it cannot read, without touching anything; none when the
/// baton dir has no workspace registry yet (nothing is created).
pub fn dead_owners(dir: &BatonDir) -> Result<Vec<Result<Workspace, GitError>>, GitError> {
    if !dir.path().join("workspaces").join(".registry").is_dir() {
        return Ok(Vec::new());
    }
    Ok(registry::all(dir)?
        .into_iter()
        .filter(|r| match r {
            Ok(ws) => ws.owner.liveness() == Liveness::Dead,
            Err(_) => true,
        })
        .collect())
}

/// Removes workspaces whose owner is dead (with `older_than`, only old
/// ones), then runs `git worktree prune` in every base repository with
/// worktrees. A failure to remove one workspace is reported and does not stop
/// the others.
pub fn gc(dir: &BatonDir, opts: &GcOptions) -> Result<GcReport, GitError> {
    let wait = git::deadline(opts.git_lock_wait);
    // A creation that was killed leaves a half-made workspace its owner
    // (a long-lived runner, say) never learnt the id of: due whoever the
    // owner is. Checked again under the workspace's lock, which a creation
    // in progress holds.
    let due = |ws: &Workspace| {
        (ws.owner.liveness() == Liveness::Dead || registry::creation_abandoned(dir, &ws.id))
            && !matches!(opts.older_than, Some(min) if ws.age() < min)
    };
    let mut report = GcReport::default();
    let mut bases: Vec<PathBuf> = Vec::new();
    for rec in registry::all(dir)? {
        let ws = match rec {
            Ok(ws) => ws,
            Err(e) => {
                report.unreadable.push(UnreadableRecord::of(dir, &e));
                continue;
            }
        };
        if ws.strategy == Strategy::Worktree && !bases.contains(&ws.base_repo) {
            bases.push(ws.base_repo.clone());
        }
        if !due(&ws) {
            continue;
        }
        // Checked again under the workspace's lock: the record may have
        // changed, and a creation in progress holds that lock.
        match remove_if(dir, &ws.id, wait, opts.unpushed, due) {
            Ok(Removal::Removed(r)) => {
                report.removed.push(r.workspace);
                report.discarded.extend(r.discarded);
            }
            Ok(Removal::NotDue | Removal::Gone) => {}
            Ok(Removal::Busy(reason)) => report.skipped.push(GcSkipped {
                id: ws.id.clone(),
                path: ws.path.clone(),
                run_id: ws.run_id.clone(),
                reason,
            }),
            Err(e) => match BranchCommits::from_error(e) {
                Ok(kept) => report.kept.push(kept),
                Err(e) => report.failed.push(GcFailure {
                    id: ws.id.clone(),
                    path: ws.path.clone(),
                    run_id: ws.run_id.clone(),
                    error: baton_lock::one_line(&e),
                }),
            },
        }
    }
    for base in bases {
        let Ok(repo) = Repo::open(&base) else {
            continue;
        };
        match repo.run_locked(wait, "gc", &["worktree", "prune"]) {
            Ok(_) => report.pruned.push(repo.path),
            Err(e) => report.failed.push(GcFailure {
                id: String::new(),
                path: repo.path,
                run_id: String::new(),
                error: baton_lock::one_line(&e),
            }),
        }
    }
    Ok(report)
}
