//! `baton git ...`: pushes that land every commit, and `.gitattributes`
//! for line-record files (syntax and output only; the work is done by
//! `baton_git`).

use std::path::PathBuf;
use std::time::Duration;

use baton_git::{
    init_attributes, push, AttributesRequest, Backoff, PushRequest, ATTRIBUTES_COMMIT_MESSAGE,
};
use baton_lock::{BatonDir, WaitPolicy};
use clap::Subcommand;

use super::guard::{cmd_guard, GuardCommand};
use crate::args::GitLockWaitArg;
use crate::duration::parse_duration;
use crate::exit_codes::for_git_error;
use crate::say::{fail, print_json};

/// `baton git ...` commands.
#[derive(Debug, Subcommand)]
pub enum GitCommand {
    /// Push HEAD; on a non-fast-forward rejection fetch, rebase and retry. Never forces.
    #[command(after_help = "Examples:
  baton git push
  baton git push --remote origin --branch main --attempts 8

Pushes to one remote branch from this machine wait in line for each other, whatever their
baton dirs: the line is in the remote's own <git dir>/baton when the remote is a local path,
else in the per-user <temp dir>/baton-<uid>. With --backend (BATON_BACKEND) the line is on
the database instead, so pushers on every machine using it wait for each other. A rejection as
non-fast-forward is answered by fetching the remote branch, rebasing onto it and pushing
again: the first retry at once, later ones after --base-delay, doubling up to --max-delay,
each +-25% random. If the rebase conflicts it is aborted, the local commits are left exactly
as they were and the conflicting paths are listed.

Inside a run of a group in mode supersede, each push is announced to the run's supervisor
first (BATON_LANDING_DIR, BATON_LANDING_KEY): a newer run's supersede waits for a push in
flight (at most the run's --grace), and a run whose push landed ends with its own status and
BATON_RUN_PUSHED=1 for its --on-superseded hook. A push that would start after the supersede
is not sent (79).

Exit status: 0 pushed; 1 rebase conflict (nothing pushed, local commits unchanged);
75 still rejected after --attempts, or a lock stayed busy; 79 the run it is part of was
superseded (not sent); 125 other failures (git's message is shown).")]
    Push {
        /// The repository to push from.
        #[arg(long, value_name = "PATH", default_value = ".")]
        repo: PathBuf,
        /// The remote [default: the branch's configured remote, else origin].
        #[arg(long, value_name = "NAME")]
        remote: Option<String>,
        /// The remote branch [default: the current branch's name]. A name that would shadow
        /// another ref (origin/..., a remote's name, refs/..., heads/..., remotes/..., tags/...)
        /// or that git refuses is refused (125).
        #[arg(long, value_name = "NAME")]
        branch: Option<String>,
        /// Pushes tried in all.
        #[arg(long, value_name = "N", default_value = "5", value_parser = clap::value_parser!(u32).range(1..=100))]
        attempts: u32,
        /// Delay before the second retry; doubled before each later one.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
        base_delay: Duration,
        /// Longest delay between retries.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "16s")]
        max_delay: Duration,
        #[command(flatten)]
        wait: GitLockWaitArg,
        /// Print JSON {run_id, repo, remote, branch, commit, attempts, rebases}.
        #[arg(long)]
        json: bool,
    },

    /// Add `*.jsonl merge=union` (or each --pattern) to .gitattributes, so concurrent appends
    /// merge cleanly.
    #[command(after_help = "Examples:
  baton git init-attributes
  baton git init-attributes --commit
  baton git init-attributes --pattern '*.jsonl' --pattern 'logs/*.ndjson' --pattern CHANGES.md

Only for files whose lines are independent records: a union merge keeps both sides' lines
and never reports a conflict. Lines already present are left alone. The file is left
uncommitted unless --commit: then, under the repository's lock, .gitattributes alone is
committed (whatever else is staged stays staged) if it differs from HEAD, with the message
'Merge line-record files as a union of lines (baton git init-attributes)'; the commit is
named on stderr. Your hooks run.

Exit status: 0 done; 75 the repository lock stayed busy past --git-lock-wait; 125 failed
(with --commit, a failed commit leaves the file updated, and says so).")]
    InitAttributes {
        /// The repository.
        #[arg(long, value_name = "PATH", default_value = ".")]
        repo: PathBuf,
        /// Files to merge as a union of lines (a .gitattributes pattern; repeatable) [default: *.jsonl].
        #[arg(long = "pattern", value_name = "GLOB")]
        patterns: Vec<String>,
        /// Commit .gitattributes (only it) when it differs from HEAD.
        #[arg(long)]
        commit: bool,
        #[command(flatten)]
        wait: GitLockWaitArg,
    },

    /// A pre-commit hook that refuses a commit touching a path another live holder reserved
    /// (`baton reserve`): install, uninstall, check.
    #[command(subcommand)]
    Guard(GuardCommand),
}

/// Runs a `baton git` command; returns the exit code. The caller's baton dir
/// is used by the guard only: a push queues in the remote's place, whatever
/// the caller's, or on the lock backend when it is shared (PostgreSQL).
pub(crate) fn cmd_git(dir: &BatonDir, cmd: GitCommand, flags: &crate::commands::Flags<'_>) -> u8 {
    match cmd {
        GitCommand::Guard(cmd) => cmd_guard(dir, cmd, flags),
        GitCommand::Push {
            repo,
            remote,
            branch,
            attempts,
            base_delay,
            max_delay,
            wait,
            json,
        } => {
            let mut req = PushRequest::new(repo);
            req.remote = remote;
            req.branch = branch;
            req.backoff = Backoff {
                attempts,
                base_delay,
                max_delay,
                ..Backoff::default()
            };
            req.lock_wait = WaitPolicy::from(wait.git_lock_wait);
            req.run_id = std::env::var("BATON_RUN_ID")
                .ok()
                .filter(|r| !r.is_empty())
                .or_else(|| Some(crate::logging::run_id().to_string()));
            req.log = true;
            req.queue = flags.backend.push_queue();
            req.landing = baton_git::landing::Landing::from_env();
            match push(&req) {
                Ok(r) if json => {
                    crate::say::committed();
                    print_json(&r)
                }
                Ok(_) => 0,
                Err(e) => fail(&e, for_git_error(&e)),
            }
        }
        GitCommand::InitAttributes {
            repo,
            patterns,
            commit,
            wait,
        } => {
            let mut req = AttributesRequest::new(repo);
            req.patterns = patterns;
            req.commit = commit;
            req.lock_wait = WaitPolicy::from(wait.git_lock_wait);
            match init_attributes(&req) {
                Ok(report) => {
                    for (what, lines) in [
                        ("added", &report.added),
                        ("already present:", &report.present),
                    ] {
                        for line in lines {
                            errln!("baton: {what} '{line}' in '{}'", report.path.display());
                        }
                    }
                    match &report.committed {
                        Some(c) => errln!(
                            "baton: committed '{}' as {c} ({ATTRIBUTES_COMMIT_MESSAGE})",
                            report.path.display()
                        ),
                        None if commit => errln!(
                            "baton: '{}' is committed already: nothing to commit",
                            report.path.display()
                        ),
                        None if !report.added.is_empty() => errln!(
                            "baton: '{}' is not committed: commit it, or run again with --commit",
                            report.path.display()
                        ),
                        None => {}
                    }
                    0
                }
                Err(e) => fail(&e, for_git_error(&e)),
            }
        }
    }
}
