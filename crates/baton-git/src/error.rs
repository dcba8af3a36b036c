//! Typed errors of git operations.

use std::io;
use std::path::PathBuf;

use baton_lock::LockError;
use serde::Serialize;

/// Everything that can go wrong in a git operation of baton.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// `git` could not be started at all.
    #[error("cannot run `{command}` (is git installed and on PATH?)")]
    Spawn {
        /// The command line.
        command: String,
        /// The cause.
        #[source]
        source: baton_proc::ProcError,
    },
    /// A git command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line, with the directory it ran in (`git -C DIR ...`).
        command: String,
        /// How it ended (`exit status 128`, ...).
        status: String,
        /// What git printed on stderr, trimmed.
        stderr: String,
    },
    /// The path is not inside a git repository.
    #[error("'{}' is not a git repository: {stderr}", path.display())]
    NotARepo {
        /// The path given.
        path: PathBuf,
        /// What git said.
        stderr: String,
    },
    /// The ref does not name a commit in the base repository.
    #[error("'{reference}' is not a commit in repository '{}'", repo.display())]
    UnknownRef {
        /// The repository.
        repo: PathBuf,
        /// The ref asked for.
        reference: String,
    },
    /// `--branch` exists and has commits that neither `--ref` nor the
    /// branch's remote-tracking branch contains: a workspace on it cannot
    /// start at `--ref` (or the pushed branch) without dropping them
    /// (unless asked to reset it).
    #[error("branch '{branch}' of '{}' is at {branch_commit}, which neither '{reference}' ({ref_commit}) nor its pushed branch contains: the workspace cannot start at --ref on that branch; drop --ref to continue the branch where it is, name a new --branch to start at --ref, or drop the commits that were never pushed with --reset-branch (it starts over at the pushed branch, else at --ref; the old tip is kept under refs/baton/abandoned/{branch}/)", repo.display())]
    BranchNotAtRef {
        /// The base repository.
        repo: PathBuf,
        /// The branch.
        branch: String,
        /// Where the branch is.
        branch_commit: String,
        /// The ref asked for.
        reference: String,
        /// The commit it names.
        ref_commit: String,
    },
    /// `baton git push` inside a group run that a newer run superseded: the
    /// supervisor has closed the run's landing (`landing` module), so the
    /// push was not sent.
    #[error("the run of group '{key}' was superseded by a newer run: the push was not sent")]
    Superseded {
        /// The group key.
        key: String,
    },
    /// `--reset-branch` was refused: a live workspace holds the branch (it
    /// was made on it and its owner still runs). Busy, as a lock is: try
    /// again once it is gone.
    #[error("branch '{}' of '{}' is held by workspace '{}' (run {}, owner pid {}, at '{}'): --reset-branch does not move a branch another run works on; wait for that run to end, or name another --branch", .0.branch, .0.repo.display(), .0.id, .0.run_id, .0.pid, .0.path.display())]
    BranchHeld(Box<BranchHolder>),
    /// `init-attributes --commit` wrote `.gitattributes` but could not
    /// commit it (a hook refused, no identity, ...): the file stays changed.
    #[error("'{}' was updated but not committed", path.display())]
    AttributesNotCommitted {
        /// The file.
        path: PathBuf,
        /// Why the commit failed.
        #[source]
        source: Box<GitError>,
    },
    /// The repository lock could not be taken (busy past the wait, or an I/O error).
    #[error("cannot lock repository '{}' for `{operation}`", repo.display())]
    RepoLock {
        /// The repository's common git dir.
        repo: PathBuf,
        /// The git operation that needed the lock.
        operation: String,
        /// The cause; [`LockError::Busy`] names the holder.
        #[source]
        source: Box<LockError>,
    },
    /// The push lock of a remote branch could not be taken.
    #[error("cannot lock pushes to '{remote}' branch '{branch}'")]
    PushLock {
        /// The remote's URL.
        remote: String,
        /// The remote branch.
        branch: String,
        /// The cause; [`LockError::Busy`] names the holder.
        #[source]
        source: Box<LockError>,
    },
    /// The shared push queue (the lock backend) cannot be used.
    #[error("cannot queue pushes to '{remote}' branch '{branch}' on the lock backend: {reason}")]
    PushQueue {
        /// The remote's URL.
        remote: String,
        /// The remote branch.
        branch: String,
        /// Why, in one line.
        reason: String,
    },
    /// Another lock error (e.g. the lock of one workspace).
    #[error(transparent)]
    Lock(Box<LockError>),
    /// An I/O error, with what was being done and the path it concerns.
    #[error(transparent)]
    Io(#[from] baton_fs::PathError),
    /// A workspace record in the registry is not valid.
    #[error("workspace record '{}' is not valid JSON (remove it if the workspace is gone)", path.display())]
    BadRecord {
        /// The record file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The request is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// A branch name baton does not make or work on: git refuses it, or it
    /// would shadow another namespace (`origin/main`, `refs/...`; see
    /// [`crate::branch_name_refusal`]).
    #[error("invalid branch name '{}': {reason}", shown(branch))]
    BadBranchName {
        /// The name given.
        branch: String,
        /// Why it is refused.
        reason: String,
    },
    /// No workspace has this id.
    #[error("no workspace with id '{id}' (see `baton workspace list`)")]
    NoSuchWorkspace {
        /// The id.
        id: String,
    },
    /// A workspace with this id exists already.
    #[error("a workspace with id '{id}' exists already at '{}'", path.display())]
    WorkspaceExists {
        /// The id.
        id: String,
        /// Its path.
        path: PathBuf,
    },
    /// A workspace directory could not be removed.
    #[error("cannot remove workspace '{id}' at '{}' (run {run_id}); {remedy}", path.display())]
    RemoveFailed {
        /// The workspace id.
        id: String,
        /// Its path.
        path: PathBuf,
        /// The run that created it.
        run_id: String,
        /// What to do about it.
        remedy: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A clone workspace has commits on its branch that exist nowhere else,
    /// and they could not be handed to the base repository's branch (it is
    /// checked out there, it has diverged, or the base is gone): the
    /// workspace is left as it is.
    #[error("workspace '{}' at '{}' has {} unpushed commit(s) on branch '{}' that cannot be kept in '{}' ({}): push them (`baton git push --repo '{}'`), keep them under another name (`git -C '{}' fetch '{}' {}:{}-kept`), or discard them with `baton workspace remove {} --discard`", .commits.id, .commits.path.display(), .commits.count, .commits.branch, .base.display(), .commits.reason, .commits.path.display(), .base.display(), .commits.path.display(), .commits.branch, .commits.branch, .commits.id)]
    Unpushed {
        /// The workspace, its branch and the commits.
        commits: Box<BranchCommits>,
        /// The base repository.
        base: PathBuf,
    },
    /// A rebase (or `git am`) is in progress in the work tree, as one left
    /// by a `baton git push` killed during its rebase: HEAD is not the
    /// branch, so pushing it would not push the branch's commits.
    #[error("a rebase is in progress in '{}' ('{}'; left by an interrupted `baton git push`, or begun by hand): finish it (`git rebase --continue`) or undo it (`git rebase --abort`), then push again", repo.display(), state.display())]
    RebaseInProgress {
        /// The work tree.
        repo: PathBuf,
        /// git's state directory of the rebase (`rebase-merge`, `rebase-apply`).
        state: PathBuf,
    },
    /// HEAD is detached and no branch was named.
    #[error("HEAD of '{}' is detached: name the branch to push with --branch", repo.display())]
    DetachedHead {
        /// The repository.
        repo: PathBuf,
    },
    /// The rebase onto the remote branch conflicts; the local commits are unchanged.
    #[error("run {run_id} in '{}': rebase onto {onto} conflicts in {}; the rebase was aborted and the local commits are unchanged (nothing was pushed): rebase onto {onto} by hand, resolve the conflicts and push again", repo.display(), paths.join(", "))]
    Conflict {
        /// The repository pushed from.
        repo: PathBuf,
        /// The run id of the push.
        run_id: String,
        /// What it was rebased onto (`origin/main`).
        onto: String,
        /// The conflicting paths.
        paths: Vec<String>,
    },
    /// Every attempt was rejected.
    #[error("run {run_id} in '{}': push to {remote} {branch} was rejected {attempts} times (non-fast-forward); giving up, local commits unchanged", repo.display())]
    Exhausted {
        /// The repository pushed from.
        repo: PathBuf,
        /// The run id of the push.
        run_id: String,
        /// The remote.
        remote: String,
        /// The remote branch.
        branch: String,
        /// Attempts made.
        attempts: u32,
    },
}

impl GitError {
    /// Whether this is a lock that stayed busy (or a push that stayed
    /// rejected) rather than a fault: the `75` of the exit codes
    /// (docs/src/design/architecture.md).
    pub fn is_busy(&self) -> bool {
        match self {
            GitError::RepoLock { source, .. }
            | GitError::PushLock { source, .. }
            | GitError::Lock(source) => matches!(**source, LockError::Busy { .. }),
            GitError::Exhausted { .. } | GitError::BranchHeld(_) => true,
            _ => false,
        }
    }
}

impl From<LockError> for GitError {
    fn from(e: LockError) -> Self {
        GitError::Lock(Box::new(e))
    }
}

/// The workspace that holds a branch ([`GitError::BranchHeld`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchHolder {
    /// The base repository.
    pub repo: PathBuf,
    /// The branch.
    pub branch: String,
    /// The workspace that holds it.
    pub id: String,
    /// Its run.
    pub run_id: String,
    /// Its owner's pid.
    pub pid: i32,
    /// Its path.
    pub path: PathBuf,
}

/// Commits of a workspace's branch that exist nowhere else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BranchCommits {
    /// The workspace id.
    pub id: String,
    /// Its path.
    pub path: PathBuf,
    /// The run that created it.
    pub run_id: String,
    /// The branch.
    pub branch: String,
    /// How many commits.
    pub count: usize,
    /// The newest of them (at most 20), as `abbreviated-hash subject`.
    pub commits: Vec<String>,
    /// Why the base could not take them (git's words).
    pub reason: String,
}

impl BranchCommits {
    /// What [`GitError::Unpushed`] says; any other error is handed back.
    pub(crate) fn from_error(e: GitError) -> Result<BranchCommits, GitError> {
        match e {
            GitError::Unpushed { commits, .. } => Ok(*commits),
            e => Err(e),
        }
    }
}

/// `name` for a one-line message: its control characters escaped (`\n`).
pub(crate) fn shown(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
