//! What a workspace is created from ([`WorkspaceRequest`]): apart from the
//! creation itself (`workspace.rs`), so that the steps it uses (the branch's
//! start point, `branch.rs`) read it without importing the creation.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use baton_lock::{ProcessIdentity, WaitPolicy};

use crate::git::DEFAULT_GIT_LOCK_WAIT;
use crate::record::Strategy;

/// What workspace to create.
#[derive(Clone, Debug)]
pub struct WorkspaceRequest {
    /// The base repository (any path inside it).
    pub repo: PathBuf,
    /// The commit to check out (any rev of the base, as git reads it: a
    /// caller that means a remote-tracking branch writes
    /// `refs/remotes/<remote>/<branch>`, which nothing else can shadow);
    /// default `HEAD`.
    pub reference: Option<String>,
    /// A branch to work on: created at `reference` if neither the base nor
    /// its remote has it. If the base has it and there is no `reference`,
    /// it is checked out as it is. When it was pushed and `reference` lacks
    /// its commits, the pushed branch (`refs/remotes/<remote>/<branch>`,
    /// which the record's `reference` then names) is continued; otherwise
    /// the workspace starts exactly at `reference` and the branch is moved
    /// forward to it. A local branch with commits that the start lacks is
    /// refused ([`GitError::BranchNotAtRef`]). See the `branch` module. A name git refuses, or one that would shadow
    /// another namespace (`origin/main`, `refs/...`, `tags/...`), is
    /// refused ([`GitError::BadBranchName`], [`crate::check_branch_name`]).
    pub branch: Option<String>,
    /// Start over: with `reference` and `branch`, when the local branch has
    /// commits that were never pushed (and `reference` lacks), keep its old
    /// tip under `refs/baton/abandoned/...` and move it to where the
    /// workspace starts: the pushed branch if `reference` lacks its
    /// commits, else `reference` (refused while a live workspace holds the
    /// branch: [`GitError::BranchHeld`]). See the `branch` module.
    pub reset_branch: bool,
    /// Clone (default) or worktree.
    pub strategy: Strategy,
    /// The workspace's id; default the run id.
    pub id: Option<String>,
    /// The run this workspace belongs to; a new run id if absent.
    pub run_id: Option<String>,
    /// The process whose death makes the workspace garbage; default the caller.
    pub owner: Option<ProcessIdentity>,
    /// Copy the ignored files listed in the base's `.worktreeinclude`.
    pub include_ignored: bool,
    /// Where to make the workspace; default the base's `baton.workspaceRoot`
    /// setting, else `<baton dir>/workspaces` (the registry stays there).
    pub root: Option<PathBuf>,
    /// Refresh the base from its origin first.
    pub fetch: bool,
    /// Fetches within this long of the last one are skipped (shared).
    pub fetch_debounce: Duration,
    /// A fetch that began before this moment is never fresh enough to
    /// skip this one, however recent: a run that waited for its group slot
    /// or its locks sets it to the moment it got them, so that it starts
    /// from what the run before it pushed (that run pushed before it let
    /// go). `None`: the debounce alone decides.
    pub fetched_since: Option<SystemTime>,
    /// How long to wait for locks (the repository's, the workspace's), all
    /// together: one deadline for the whole creation.
    pub git_lock_wait: WaitPolicy,
}

impl WorkspaceRequest {
    /// A detached clone of `HEAD` of `repo`, with default waits.
    pub fn new(repo: impl Into<PathBuf>) -> WorkspaceRequest {
        WorkspaceRequest {
            repo: repo.into(),
            reference: None,
            branch: None,
            reset_branch: false,
            strategy: Strategy::Clone,
            id: None,
            run_id: None,
            owner: None,
            include_ignored: false,
            root: None,
            fetch: false,
            fetch_debounce: Duration::from_secs(30),
            fetched_since: None,
            git_lock_wait: WaitPolicy::AtMost(DEFAULT_GIT_LOCK_WAIT),
        }
    }
}
