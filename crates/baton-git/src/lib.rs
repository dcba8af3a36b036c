//! Git safety for parallel agents (docs/src/design/architecture.md, decision 9).
//!
//! - **A repository lock**, keyed by the canonical path of the repository's
//!   common git dir and kept in that repository (`<git common dir>/baton`,
//!   [`Repo::baton_dir`]), so every caller on the machine meets there whatever
//!   its cwd or baton dir. It is held only for the duration of each git
//!   command that writes shared metadata (`worktree add/prune`, `clone
//!   --local` from it, `fetch` into it), never while an agent runs. Different
//!   repositories never block each other; the wait is bounded
//!   ([`DEFAULT_GIT_LOCK_WAIT`], one deadline per operation) and a timeout
//!   names the repository and the holder.
//! - **Workspaces** ([`create`], [`list`], [`remove`], [`gc`]): an isolated
//!   checkout per run, by `git clone --local` or `git worktree add`, recorded
//!   in a registry in the baton dir with its owner's process identity, so the
//!   leftovers of a crashed run are found and removed, and the workspace of a
//!   live owner, or one still being created, never is.
//! - **Branches** (the `branch` module): a workspace on a branch that was
//!   pushed continues the pushed branch when `--ref` lacks its commits (it
//!   never restarts at `--ref`), else starts exactly at `--ref`; a local
//!   branch with commits that were never pushed is refused unless
//!   [`WorkspaceRequest::reset_branch`] drops them, keeping its old tip
//!   under `refs/baton/abandoned/` (refused while another live workspace
//!   holds the branch: [`GitError::BranchHeld`]).
//! - **Branch names** ([`branch_name_refusal`], [`check_branch_name`]): a
//!   branch baton makes, works on or pushes never shadows another ref
//!   (`origin/main` would answer for `refs/remotes/origin/main`, `refs/...`,
//!   `tags/...`: [`GitError::BadBranchName`]), and every ref of a branch is
//!   read and moved by its full name (`refs/heads/<b>`,
//!   `refs/remotes/<remote>/<b>`), so nothing in the base can stand in for
//!   what was meant (the `refname` module).
//! - **Push** ([`push`]): serialised per remote branch on this machine, in
//!   the remote's own baton dir (a local remote) or the per-user
//!   [`machine_dir`] (a network one); a non-fast-forward rejection is
//!   answered by fetch, rebase and a retry with exponential backoff and
//!   jitter. A conflict aborts the rebase and leaves the local commits as
//!   they were. Nothing is ever force-pushed.
//! - **Relative remote URLs** (`../remote.git`): in a linked worktree (a
//!   workspace of the worktree strategy) every git command baton runs that
//!   talks to a remote reads them against the main work tree's top, as git
//!   does from the base, for that command only (the `remote` module); a
//!   clone workspace's origin is that path, made absolute.
//!
//! - **Attributes** ([`init_attributes`]): `PATTERN merge=union` lines in
//!   `.gitattributes`, optionally committed under the repository lock.
//!
//! git is always driven through its CLI, so users' hooks, credentials and
//! configuration apply; status checks use `--no-optional-locks`; a git child
//! dies with the baton process that started it.
//!
//! ## Platforms
//!
//! Linux, macOS and Windows; this crate calls no platform API itself (what
//! it needs is in baton-fs, baton-proc and baton-lock). What differs:
//!
//! - **git dies with baton**: on Linux by the parent-death signal (git
//!   alone, not what it starts); on Windows git's whole tree is in a Job
//!   Object that dies with baton; on macOS with a guardian, as a `baton
//!   run`'s command (baton executed again, killing git's process group when
//!   the baton that started it dies), in a program that serves as one
//!   (`baton`; another calls `baton_proc::dispatch_guardian` in its `main`;
//!   see `docs/src/design/signals.md`, "Platforms"). git gets the terminal (and
//!   ssh can prompt) only on unix.
//! - **Remotes**: on Windows a drive letter (`C:/srv/r.git`, `C:\srv\r.git`,
//!   `file:///C:/srv/r.git`) is a local path, as Git for Windows reads it,
//!   so such a push queues in that repository's baton dir.
//! - **Removal advice** names each system's tools (`chmod`, `lsof`,
//!   `findmnt`; on Windows `attrib` and Resource Monitor).
//! - **Disk usage** of a workspace: allocated blocks, each inode once, on
//!   unix; the files' lengths on Windows, where std's metadata has no file
//!   index, so each hard link counts.
//! - **Tests**: under wine (`scripts/test-windows`) there is no Git for
//!   Windows: the tests that run git are ignored there, the others run.

#![forbid(unsafe_code)]

mod attributes;
mod branch;
mod error;
mod gc;
mod git;
mod guard;
mod identity;
pub mod landing;
mod push;
mod record;
mod refname;
mod registry;
mod remote;
mod remove;
mod request;
mod root;
mod status;
mod workspace;

pub use attributes::{
    init_attributes, AttributesReport, AttributesRequest, ATTRIBUTES_COMMIT_MESSAGE,
    DEFAULT_UNION_PATTERN,
};
pub use error::{BranchCommits, BranchHolder, GitError};
pub use gc::{dead_owners, gc, GcFailure, GcOptions, GcReport, GcSkipped};
pub use git::{
    git_version, machine_dir, workspace_home, workspaces_of, GitVersion, Repo,
    DEFAULT_GIT_LOCK_WAIT, MIN_GIT_VERSION,
};
pub use guard::{
    hooks_dir, install_guard, staged_paths, uninstall_guard, GuardInstalled, GuardRemoved,
};
pub use identity::repository_identity;
pub use push::{push, Backoff, PushQueue, PushReport, PushRequest, QueueError};
pub use record::{validate_id, Listing, Strategy, UnreadableRecord, Workspace, WorkspaceInfo};
pub use refname::{
    branch_name_refusal, check_branch_name, remote_names, DEFAULT_REMOTE, RESERVED_BRANCH_PREFIXES,
};
pub use remove::{remove, remove_with, Preserved, Removed, Unpushed};
pub use request::WorkspaceRequest;
pub use root::ROOT_SETTING;
pub use workspace::{create, get, list, list_readable};
