//! `baton workspace ...`: isolated workspaces of a repository, one per run
//! or agent (syntax and output only; the work is done by `baton_git`).

use std::path::PathBuf;
use std::time::Duration;

use baton_git::{
    create, gc, list_readable, remove_with, BranchCommits, GcOptions, Strategy, Unpushed,
    Workspace, WorkspaceRequest,
};
use baton_lock::{BatonDir, WaitPolicy};
use clap::{Args, Subcommand, ValueEnum};

use crate::args::{caller, GitLockWaitArg};
use crate::duration::parse_duration;
use crate::exit_codes::{for_git_error, BATON_FAILED, SOME_UNREADABLE};
use crate::say::{fail, print_json};
use crate::size::human_size;

/// Workspace strategies on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StrategyArg {
    /// `git clone --local`: objects hardlinked, an independent .git; origin is the base's origin.
    Clone,
    /// `git worktree add`: shares the base's .git (branches, objects, config).
    Worktree,
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Strategy {
        match s {
            StrategyArg::Clone => Strategy::Clone,
            StrategyArg::Worktree => Strategy::Worktree,
        }
    }
}

/// The workspace flags of `baton run`.
#[derive(Debug, Args, Clone)]
pub struct RunWorkspaceArgs {
    /// Run the command in a fresh workspace of this repository (BATON_WORKSPACE is set; the
    /// workspace is removed when the command ends, however it ends; commits on --branch that
    /// the base's branch cannot take, because it is checked out there or moved on meanwhile,
    /// are kept in the base under refs/baton/kept/BRANCH/..., which the run names).
    #[arg(long, value_name = "REPO")]
    pub workspace: Option<PathBuf>,

    /// Commit the workspace starts from, exactly [default: an existing --branch where it is, else
    /// HEAD of the repository].
    #[arg(long = "ref", value_name = "REF", requires = "workspace")]
    pub reference: Option<String>,

    /// Branch to work on in the workspace: created at --ref; if it was pushed and --ref lacks
    /// its commits, the pushed branch (<remote>/NAME) is continued (said on stderr; --ref is not
    /// merged in); if it exists, continued where it is, or with --ref moved forward to it;
    /// refused, naming both commits, if it has commits that neither --ref nor the pushed branch
    /// has. A name that would shadow another ref (origin/..., a remote's name, refs/...,
    /// heads/..., remotes/..., tags/...) or that git refuses is refused (125).
    #[arg(long, value_name = "NAME", requires = "workspace")]
    pub branch: Option<String>,

    /// Start --branch over, dropping its commits that were never pushed: if it has commits that
    /// neither the pushed branch (<remote>/NAME) nor --ref has, keep its old tip under
    /// refs/baton/abandoned/<branch>/<time>-<run id> in the repository (named on stderr), then
    /// move it to the pushed branch (when --ref lacks its commits) or to --ref. Refused (exit 75)
    /// while another live workspace holds the branch.
    #[arg(long, requires_all = ["reference", "branch"])]
    pub reset_branch: bool,

    /// How the workspace is made.
    #[arg(long, value_enum, default_value = "clone", requires = "workspace")]
    pub strategy: StrategyArg,

    /// Leave the workspace in place after the command. It then belongs to the process that ran
    /// `baton run` (usually your shell or agent), as with `workspace create`: `baton workspace
    /// gc` removes it once that process has exited; `baton workspace remove` removes it at once.
    #[arg(long, requires = "workspace")]
    pub keep_workspace: bool,

    /// Copy the git-ignored files listed in the repository's .worktreeinclude into the workspace.
    #[arg(long, requires = "workspace")]
    pub include_ignored: bool,

    /// Make the workspace in this directory [default: the repository's `baton.workspaceRoot`
    /// git setting, else <baton dir>/workspaces].
    #[arg(long, value_name = "DIR", requires = "workspace")]
    pub workspace_root: Option<PathBuf>,

    /// First refresh the repository from its origin (`git fetch origin`), shared with other
    /// fetches within --fetch-debounce.
    #[arg(long, requires = "workspace")]
    pub fetch: bool,

    /// Skip the fetch if the repository was fetched this recently, by a fetch begun after
    /// this run started (so every push that completed before it is seen). With --group or
    /// --lock, only a fetch begun after this run got them counts: the run before it may have
    /// pushed.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s", requires = "fetch")]
    pub fetch_debounce: Duration,

    /// Longest wait for the repository's and the workspace's locks, all together.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "workspace")]
    pub git_lock_wait: Option<Duration>,
}

impl RunWorkspaceArgs {
    /// The workspace `baton run` should create, if any.
    pub fn request(&self) -> Option<WorkspaceRequest> {
        let repo = self.workspace.clone()?;
        let mut req = WorkspaceRequest::new(repo);
        req.reference = self.reference.clone();
        req.branch = self.branch.clone();
        req.reset_branch = self.reset_branch;
        req.strategy = self.strategy.into();
        req.include_ignored = self.include_ignored;
        req.root = self.workspace_root.clone();
        req.fetch = self.fetch;
        req.fetch_debounce = self.fetch_debounce;
        if let Some(w) = self.git_lock_wait {
            req.git_lock_wait = WaitPolicy::from(w);
        }
        Some(req)
    }
}

/// `baton workspace ...` commands.
#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Create an isolated checkout of a repository and print its path.
    #[command(after_help = "Examples:
  WS=$(baton workspace create --repo . --branch agent/fix-42) && cd \"$WS\"
  baton workspace create --repo ~/src/app --strategy worktree --ref origin/main --json
  baton workspace create --fetch --ref origin/main --branch agent/issue-7 --reset-branch
  git -C ~/src/app config baton.workspaceRoot /fast/workspaces   # this repository's root

clone (default): `git clone --local` (objects hardlinked, a fully independent .git), origin
re-pointed to the base's own origin URL. worktree: `git worktree add`, sharing the base's .git.
Only the git commands on the base's shared metadata run under the repository's lock (in
<git common dir>/baton, whatever your baton dir); checking files out does not. The workspace
lives under <baton dir>/workspaces/ (or --workspace-root, or the directory the repository's
git setting baton.workspaceRoot names, relative to its top), its path contains the run id,
and it is recorded in the baton dir with its owner (the process that ran this command,
usually your shell): once the owner has exited, `baton workspace gc` removes it. Here the
baton dir is the base's own, <git common dir>/baton, unless --dir or BATON_DIR names one.
When a clone on --branch is removed, commits on the branch that exist nowhere else are
fetched into the base's branch first; if the base cannot take them (the branch is checked
out there, or has diverged) the removal is refused and names them (`baton workspace remove
ID --discard` drops them). A run's own workspace (`baton run --workspace`) keeps them under
refs/baton/kept/BRANCH/<UTC time>-<run id> in the base instead, and goes.

A branch that was pushed (<remote>/NAME in the repository, as its last fetch saw it; --fetch
prunes branches the remote deleted) and whose commits --ref lacks is continued from the
pushed branch, never restarted at --ref (--ref is not merged in: run `git merge` in the
workspace for that). Otherwise, with --ref and an existing --branch the workspace starts
exactly at --ref (the branch is moved forward). A local branch with commits the start lacks
is refused, naming both commits; --reset-branch drops those commits that were never pushed,
keeping the old tip under refs/baton/abandoned/ (list them: `git for-each-ref
refs/baton/abandoned/`). The remote branch is never moved.

Exit status: 0 created; 75 the repository lock stayed busy past --git-lock-wait, or another
live workspace holds the branch (--reset-branch); 125 failed.")]
    Create {
        /// The base repository (any path inside it).
        #[arg(long, value_name = "PATH", default_value = ".")]
        repo: PathBuf,
        /// Commit to start from, exactly [default: an existing --branch where it is, else HEAD].
        #[arg(long = "ref", value_name = "REF")]
        reference: Option<String>,
        /// Branch to work on: created at --ref; if it was pushed and --ref lacks its commits,
        /// the pushed branch (<remote>/NAME) is continued (said on stderr; --ref is not merged
        /// in); if it exists, continued where it is, or with --ref moved forward to it; refused,
        /// naming both commits, if it has commits that neither --ref nor the pushed branch has.
        /// A name that would shadow another ref (origin/..., a remote's name, refs/...,
        /// heads/..., remotes/..., tags/...) or that git refuses is refused (125).
        #[arg(long, value_name = "NAME")]
        branch: Option<String>,
        /// Start --branch over, dropping its commits that were never pushed: if it has commits
        /// that neither the pushed branch (<remote>/NAME) nor --ref has, keep its old tip under
        /// refs/baton/abandoned/<branch>/<time>-<run id> (named on stderr and in --json as
        /// abandoned_ref), then move it to the pushed branch (when --ref lacks its commits) or
        /// to --ref. Refused (exit 75) while another live workspace holds the branch.
        #[arg(long, requires_all = ["reference", "branch"])]
        reset_branch: bool,
        /// How the workspace is made.
        #[arg(long, value_enum, default_value = "clone")]
        strategy: StrategyArg,
        /// Id of the workspace (1-64 of A-Z a-z 0-9 . _ -) [default: the run id].
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        /// First refresh the base from its origin (`git fetch origin`), shared with other
        /// creates within --fetch-debounce.
        #[arg(long)]
        fetch: bool,
        /// Skip the fetch if the base was fetched this recently.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "30s")]
        fetch_debounce: Duration,
        /// Copy the git-ignored files listed in the repository's .worktreeinclude.
        #[arg(long)]
        include_ignored: bool,
        /// Make the workspace in this directory [default: the repository's
        /// `baton.workspaceRoot` git setting, else <baton dir>/workspaces].
        #[arg(long, value_name = "DIR")]
        workspace_root: Option<PathBuf>,
        #[command(flatten)]
        wait: GitLockWaitArg,
        /// Print the workspace record as JSON.
        #[arg(long)]
        json: bool,
    },

    /// List workspaces: id, strategy, age, size on disk, owner, path.
    #[command(
        after_help = "Example:\n  baton workspace list --json | jq '.[] | select(.owner_alive == \"dead\")'\n\nA registry record that cannot be read is named on stderr (path and reason) and the others are\nlisted. Exit status: 0 listed; 1 listed, but some records could not be read; 125 failed."
    )]
    List {
        /// The repository whose workspaces these are (any path inside it) [default: the one
        /// around the working directory; outside any, the baton dir's].
        #[arg(long, value_name = "PATH", default_value = ".")]
        repo: PathBuf,
        /// Print JSON: the records with size_bytes, age_secs, owner_alive, exists.
        #[arg(long)]
        json: bool,
    },

    /// Remove a workspace (its directory, its worktree entry, its record).
    #[command(after_help = "Examples:
  baton workspace remove fix-42
  baton workspace remove fix-42 --discard

A clone made with --branch hands the commits on its branch that exist nowhere else (not
pushed, not in the base) to the base's branch of the same name first. When the base cannot
take them (the branch is checked out there, or has diverged) the removal is refused and names
them; --discard removes the workspace anyway and names the branch and the commits dropped.

Exit status: 0 removed; 75 a lock stayed busy past --git-lock-wait; 125 failed or refused.")]
    Remove {
        /// The workspace id.
        id: String,
        /// The repository whose workspaces these are (any path inside it) [default: the one
        /// around the working directory; outside any, the baton dir's].
        #[arg(long, value_name = "PATH", default_value = ".")]
        repo: PathBuf,

        /// Remove it even if commits on its branch exist nowhere else (they are named).
        #[arg(long)]
        discard: bool,
        #[command(flatten)]
        wait: GitLockWaitArg,
    },

    /// Remove workspaces whose owner died, then `git worktree prune` their repositories.
    #[command(after_help = "Examples:
  baton workspace gc
  baton workspace gc --older-than 2h --json

The workspace of a live owner (boot id + pid + start time) is never removed, however old;
nor is one being created or removed right now (reported as skipped). A clone whose branch has
commits that exist nowhere else and that the base cannot take is kept and reported with the
commits (not a failure); --discard removes it too and names what was dropped. A workspace that
cannot be removed is reported with its path and a remedy; the others are still removed.
A registry record that cannot be read is left as it is and named on stderr (path and reason;
`unreadable` in --json); the others are still collected.
Exit status: 0 if everything due was removed, skipped or kept; 1 if so, but some registry
records could not be read; 125 if something could not be removed.")]
    Gc {
        /// The repository whose workspaces these are (any path inside it) [default: the one
        /// around the working directory; outside any, the baton dir's].
        #[arg(long, value_name = "PATH", default_value = ".")]
        repo: PathBuf,
        /// Only remove workspaces (of dead owners) at least this old.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        older_than: Option<Duration>,
        /// Also remove clones whose branch has commits that exist nowhere else (they are named).
        #[arg(long)]
        discard: bool,
        #[command(flatten)]
        wait: GitLockWaitArg,
        /// Print JSON {removed, discarded, kept, skipped, failed, unreadable, pruned}.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `baton workspace` command; returns the exit code.
pub(crate) fn cmd_workspace(dir: &BatonDir, cmd: WorkspaceCommand, named_dir: bool) -> u8 {
    let repo = match &cmd {
        WorkspaceCommand::Create { repo, .. }
        | WorkspaceCommand::List { repo, .. }
        | WorkspaceCommand::Remove { repo, .. }
        | WorkspaceCommand::Gc { repo, .. } => repo.clone(),
    };
    let dir = match baton_git::workspaces_of(dir, named_dir, &repo) {
        Ok(d) => d,
        Err(e) => return fail(&e, for_git_error(&e)),
    };
    let dir = &dir;
    match cmd {
        WorkspaceCommand::Create {
            repo,
            reference,
            branch,
            reset_branch,
            strategy,
            id,
            fetch,
            fetch_debounce,
            include_ignored,
            workspace_root,
            wait,
            json,
        } => {
            let mut req = WorkspaceRequest::new(repo);
            req.root = workspace_root;
            req.reference = reference;
            req.branch = branch;
            req.reset_branch = reset_branch;
            req.strategy = strategy.into();
            req.id = id;
            req.fetch = fetch;
            req.fetch_debounce = fetch_debounce;
            req.include_ignored = include_ignored;
            req.owner = Some(caller());
            req.git_lock_wait = WaitPolicy::from(wait.git_lock_wait);
            match create(dir, &req) {
                Ok(ws) => {
                    say_start(&ws, req.reference.as_deref());
                    if json {
                        print_json(&ws)
                    } else {
                        outln!("{}", ws.path.display());
                        0
                    }
                }
                Err(e) => fail(&e, for_git_error(&e)),
            }
        }
        WorkspaceCommand::List { json, .. } => {
            let listing = match list_readable(dir) {
                Ok(l) => l,
                Err(e) => return fail(&e, for_git_error(&e)),
            };
            let status = print_listing(&listing.workspaces, json);
            for u in &listing.unreadable {
                errln!(
                    "baton: workspace list: skipped an unreadable registry record: {}",
                    u.error
                );
            }
            if listing.unreadable.is_empty() || status != 0 {
                status
            } else {
                SOME_UNREADABLE
            }
        }
        WorkspaceCommand::Remove {
            id, discard, wait, ..
        } => {
            match remove_with(
                dir,
                &id,
                WaitPolicy::from(wait.git_lock_wait),
                unpushed(discard),
            ) {
                Ok(r) => {
                    let ws = &r.workspace;
                    errln!(
                        "baton: removed workspace '{}' at '{}' (run {})",
                        ws.id,
                        ws.path.display(),
                        ws.run_id
                    );
                    if let Some(d) = &r.discarded {
                        errln!("baton: {}", discarded(d));
                    }
                    0
                }
                Err(e) => fail(&e, for_git_error(&e)),
            }
        }
        WorkspaceCommand::Gc {
            older_than,
            discard,
            wait,
            json,
            ..
        } => {
            let opts = GcOptions {
                older_than,
                git_lock_wait: WaitPolicy::from(wait.git_lock_wait),
                unpushed: unpushed(discard),
            };
            let report = match gc(dir, &opts) {
                Ok(r) => r,
                Err(e) => return fail(&e, for_git_error(&e)),
            };
            crate::say::committed();
            let status = if json {
                print_json(&report)
            } else {
                for ws in &report.removed {
                    outln!(
                        "removed {} {} (run {})",
                        ws.id,
                        ws.path.display(),
                        ws.run_id
                    );
                }
                0
            };
            for d in &report.discarded {
                errln!("baton: gc: {}", discarded(d));
            }
            for k in &report.kept {
                errln!(
                    "baton: gc: kept workspace '{}' at '{}' (run {}): {}; push them, or drop them with `baton workspace remove {} --discard` (or `gc --discard`)",
                    k.id,
                    k.path.display(),
                    k.run_id,
                    commits(k),
                    k.id
                );
            }
            for s in &report.skipped {
                errln!(
                    "baton: gc: skipped workspace '{}' at '{}': {}",
                    s.id,
                    s.path.display(),
                    s.reason
                );
            }
            for f in &report.failed {
                errln!("baton: gc: {}", f.error);
            }
            for u in &report.unreadable {
                errln!(
                    "baton: gc: skipped an unreadable registry record (left as it is, its workspace, if any, not removed): {}",
                    u.error
                );
            }
            if !report.failed.is_empty() {
                BATON_FAILED
            } else if report.unreadable.is_empty() || status != 0 {
                status
            } else {
                SOME_UNREADABLE
            }
        }
    }
}

/// Says on stderr where a workspace on a branch started when that is not
/// simply `--ref`: the pushed branch continued instead, or a branch reset
/// and where its old tip is kept.
pub(crate) fn say_start(ws: &Workspace, asked: Option<&str>) {
    let Some(branch) = &ws.branch else {
        return;
    };
    if let (Some(kept), Some(old)) = (&ws.abandoned_ref, &ws.abandoned_commit) {
        errln!(
            "baton: branch '{branch}' was at {old}, which '{}' lacks: started it over at {} and kept its old tip as {kept} in '{}'",
            ws.reference,
            ws.commit,
            ws.base_repo.display()
        );
    }
    if let Some(asked) = asked.filter(|a| *a != ws.reference) {
        errln!(
            "baton: branch '{branch}' was pushed and '{asked}' lacks its commits: continuing the pushed branch {} at {} ('{asked}' is not merged in)",
            ws.reference,
            ws.commit
        );
    }
}

fn unpushed(discard: bool) -> Unpushed {
    if discard {
        Unpushed::Discard
    } else {
        Unpushed::Keep
    }
}

/// `branch 'b' has 2 commit(s) that exist nowhere else (abc1234 fix; def5678 wip): <reason>`.
fn commits(c: &BranchCommits) -> String {
    let more = c.count.saturating_sub(c.commits.len());
    let more = if more > 0 {
        format!("; and {more} more")
    } else {
        String::new()
    };
    format!(
        "branch '{}' has {} commit(s) that exist nowhere else ({}{more}), which the base cannot take ({})",
        c.branch,
        c.count,
        c.commits.join("; "),
        c.reason
    )
}

/// What `--discard` dropped with workspace `c.id`.
fn discarded(c: &BranchCommits) -> String {
    format!(
        "discarded with workspace '{}' (run {}): {}",
        c.id,
        c.run_id,
        commits(c)
    )
}

fn human_age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `workspace list`: the table (or JSON) of `all`; returns the exit code.
fn print_listing(all: &[baton_git::WorkspaceInfo], json: bool) -> u8 {
    if json {
        return print_json(&all);
    }
    outln!(
        "{:<20} {:<8} {:>8} {:>10} {:<6} PATH",
        "ID",
        "STRATEGY",
        "AGE",
        "SIZE",
        "OWNER"
    );
    for w in all {
        let owner = match w.owner_alive {
            baton_lock::Liveness::Alive => "alive",
            baton_lock::Liveness::Dead => "dead",
            baton_lock::Liveness::NotVisible => "hidden",
            baton_lock::Liveness::Unknown | baton_lock::Liveness::Inherited => "?",
        };
        outln!(
            "{:<20} {:<8} {:>8} {:>10} {:<6} {}{}",
            w.workspace.id,
            w.workspace.strategy.as_str(),
            human_age(w.age_secs),
            human_size(w.size_bytes),
            owner,
            w.workspace.path.display(),
            if w.exists { "" } else { " (missing)" }
        );
    }
    0
}
