//! A workspace as the registry records it, how it was made, its id's rules
//! and its lock: what creating, listing, removing and gc all speak of.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use baton_lock::{
    acquire, BatonDir, Liveness, LockGuard, LockName, LockRequest, ProcessIdentity, WaitPolicy,
};
use serde::{Deserialize, Serialize};

use crate::error::GitError;
use crate::git;

/// How a workspace is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// `git clone --local`: objects hardlinked, a fully independent `.git`.
    #[default]
    Clone,
    /// `git worktree add`: shares the base's `.git`.
    Worktree,
}

impl Strategy {
    /// `clone` or `worktree`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Clone => "clone",
            Strategy::Worktree => "worktree",
        }
    }
}

/// A workspace, as recorded in the registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workspace {
    /// Its id (unique in the baton dir).
    pub id: String,
    /// Where it is.
    pub path: PathBuf,
    /// The workspace root it was made in, when one was chosen (flag or
    /// setting) rather than the baton dir's (`null`: the baton dir's).
    #[serde(default)]
    pub root: Option<PathBuf>,
    /// How it was made.
    pub strategy: Strategy,
    /// The base repository's path.
    pub base_repo: PathBuf,
    /// The base repository's common git dir (the key of its lock).
    pub base_git_dir: PathBuf,
    /// The ref asked for (the branch, when an existing branch was
    /// continued without a ref).
    pub reference: String,
    /// The commit the workspace started at.
    pub commit: String,
    /// The branch checked out, if any.
    pub branch: Option<String>,
    /// The process whose death makes it garbage.
    pub owner: ProcessIdentity,
    /// The run it belongs to.
    pub run_id: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When `--reset-branch` moved the branch from commits `--ref` lacks:
    /// the ref in the base that keeps its old tip
    /// (`refs/baton/abandoned/<branch>/<time>-<run id>`); else `null`.
    #[serde(default)]
    pub abandoned_ref: Option<String>,
    /// The old tip kept under [`Workspace::abandoned_ref`]; else `null`.
    #[serde(default)]
    pub abandoned_commit: Option<String>,
}

impl Workspace {
    /// Time since creation (zero if the clock went back or the record is odd).
    pub fn age(&self) -> Duration {
        humantime::parse_rfc3339(&self.created_at)
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or_default()
    }

    /// A record of workspace `w1` (run `r1`, a clone of `base`'s HEAD,
    /// owned by this process) at `path`, for unit tests.
    #[cfg(test)]
    pub(crate) fn sample(path: PathBuf, base: PathBuf) -> Workspace {
        Workspace {
            id: "w1".into(),
            path,
            root: None,
            strategy: Strategy::Clone,
            base_git_dir: base.join(".git"),
            base_repo: base,
            reference: "HEAD".into(),
            commit: "0".repeat(40),
            branch: None,
            owner: baton_lock::ProcessIdentity::current(),
            run_id: "r1".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            abandoned_ref: None,
            abandoned_commit: None,
        }
    }
}

/// A workspace with what `list` measures.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkspaceInfo {
    /// The record.
    #[serde(flatten)]
    pub workspace: Workspace,
    /// Bytes on disk (each inode counted once; objects hardlinked with the base count too).
    pub size_bytes: u64,
    /// Seconds since creation.
    pub age_secs: u64,
    /// Whether its owner still runs.
    pub owner_alive: Liveness,
    /// Whether its directory exists.
    pub exists: bool,
}

/// A workspace registry record that cannot be read (not valid JSON, not a
/// record, unreadable file): reported, never removed or guessed at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UnreadableRecord {
    /// The record file.
    pub path: PathBuf,
    /// Why it cannot be read (with the path, as one line).
    pub error: String,
}

impl UnreadableRecord {
    /// The record of `e`, an error reading one registry record of `dir`.
    pub(crate) fn of(dir: &BatonDir, e: &GitError) -> UnreadableRecord {
        let path = match e {
            GitError::BadRecord { path, .. } => path.clone(),
            GitError::Io(p) => p.path.clone(),
            _ => dir.path().join("workspaces").join(".registry"),
        };
        UnreadableRecord {
            path,
            error: baton_lock::one_line(e),
        }
    }
}

/// What [`list_readable`](crate::list_readable) found.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The workspaces whose records could be read, oldest first.
    pub workspaces: Vec<WorkspaceInfo>,
    /// The records that could not be read.
    pub unreadable: Vec<UnreadableRecord>,
}

/// Checks an id: 1 to 64 characters of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_id(id: &str) -> Result<(), GitError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && id.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(GitError::Invalid(format!(
            "invalid workspace id {id:?}: use 1 to 64 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"
        )))
    }
}

/// Takes the lock of workspace `id` (held while it is created or removed).
pub(crate) fn lock_workspace(
    dir: &BatonDir,
    id: &str,
    wait: WaitPolicy,
    operation: &str,
    run_id: &str,
) -> Result<LockGuard, GitError> {
    let mut req = LockRequest::new(LockName::new(format!("workspace/{id}"))?)
        .wait(git::remaining(wait))
        .operation(operation)
        .kind(baton_lock::HolderKind::Git);
    if !run_id.is_empty() {
        req = req.run_id(run_id);
    }
    Ok(acquire(dir, &req)?)
}
