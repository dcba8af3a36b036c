//! Garbage collection of workspaces: those of dead owners (a run killed in
//! its workspace), and with `older_than` old ones nobody uses.
//!
//! gc never touches a workspace being created or removed right now (its lock
//! is busy; gc does not wait for it), and it drops a record only once the
//! directory is gone.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_lock::{BatonDir, Liveness, WaitPolicy};
use serde::Serialize;

use crate::error::GitError;
use crate::git::Repo;
use crate::registry;
use crate::workspace::{remove_if, Removal, Strategy, Workspace};

/// What `gc` should remove besides workspaces of dead owners.
#[derive(Clone, Copy, Debug)]
pub struct GcOptions {
    /// Also remove workspaces older than this whose owner lives but that no
    /// process uses (no process has its working directory inside).
    pub older_than: Option<Duration>,
    /// How long to wait for each repository lock.
    pub git_lock_wait: WaitPolicy,
}

/// A workspace gc could not remove.
#[derive(Clone, Debug, Serialize)]
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
pub struct GcReport {
    /// Workspaces removed.
    pub removed: Vec<Workspace>,
    /// Workspaces being created or removed by another process: left alone.
    pub skipped: Vec<GcSkipped>,
    /// Workspaces that could not be removed.
    pub failed: Vec<GcFailure>,
    /// Base repositories in which `git worktree prune` ran.
    pub pruned: Vec<PathBuf>,
}

/// Removes workspaces whose owner is dead (and, with `older_than`, unused old
/// ones), then runs `git worktree prune` in every base repository with
/// worktrees. A failure to remove one workspace is reported and does not stop
/// the others.
pub fn gc(dir: &BatonDir, opts: &GcOptions) -> Result<GcReport, GitError> {
    let mut report = GcReport::default();
    let mut bases: Vec<PathBuf> = Vec::new();
    for rec in registry::all(dir)? {
        let ws = match rec {
            Ok(ws) => ws,
            Err(e) => {
                report.failed.push(GcFailure {
                    id: String::new(),
                    path: PathBuf::new(),
                    run_id: String::new(),
                    error: baton_lock::one_line(&e),
                });
                continue;
            }
        };
        if ws.strategy == Strategy::Worktree && !bases.contains(&ws.base_repo) {
            bases.push(ws.base_repo.clone());
        }
        let due = |ws: &Workspace| {
            let dead = ws.owner.liveness() == Liveness::Dead;
            let stale = opts.older_than.is_some_and(|d| ws.age() >= d) && !in_use(&ws.path);
            dead || stale
        };
        if !due(&ws) {
            continue;
        }
        // Checked again under the workspace's lock: the record may have
        // changed, and a creation in progress holds that lock.
        match remove_if(dir, &ws.id, opts.git_lock_wait, due) {
            Ok(Removal::Removed(ws)) => report.removed.push(*ws),
            Ok(Removal::NotDue | Removal::Gone) => {}
            Ok(Removal::Busy(reason)) => report.skipped.push(GcSkipped {
                id: ws.id.clone(),
                path: ws.path.clone(),
                run_id: ws.run_id.clone(),
                reason,
            }),
            Err(e) => report.failed.push(GcFailure {
                id: ws.id.clone(),
                path: ws.path.clone(),
                run_id: ws.run_id.clone(),
                error: baton_lock::one_line(&e),
            }),
        }
    }
    for base in bases {
        let Ok(repo) = Repo::open(&base) else {
            continue;
        };
        match repo.run_locked(opts.git_lock_wait, "gc", &["worktree", "prune"]) {
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

/// Whether any process we can see has its working directory inside `path`.
fn in_use(path: &Path) -> bool {
    let Ok(procs) = fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        p.file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
            && fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(path))
    })
}
