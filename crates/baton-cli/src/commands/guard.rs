//! `baton git guard ...`: the pre-commit hook that refuses a commit touching
//! a path another live holder reserved exclusively (the hook's files are
//! `baton_git`'s, the question `ReservationStore::check_files` of the
//! reservations of the baton dir or of `--backend`).

use std::path::PathBuf;

use baton_lock::BatonDir;
use clap::Subcommand;

use super::lock::Flags;
use super::reserve::{for_reserve_error, space_of};
use crate::exit_codes::{for_git_error, BATON_FAILED, NOT_ACQUIRED};
use crate::say::fail;

/// `baton git guard ...`.
#[derive(Debug, Subcommand)]
pub enum GuardCommand {
    /// Install the pre-commit hook (after the one already there, which is kept and run first).
    #[command(after_help = "Example:\n  baton git guard install

The hook goes in git's hooks dir (core.hooksPath if set, else <git common dir>/hooks: every
worktree of the repository). A pre-commit hook already there is kept as
pre-commit.baton-chained and run first; its failure fails the commit. Installing again only
brings the hook's command line up to date. When --dir was given (or BATON_DIR set), the hook
checks that baton dir. `baton git guard uninstall` puts the old hook back.")]
    Install {
        /// The repository [default: the working directory's].
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },
    /// Remove the hook and put back the one it chained.
    Uninstall {
        /// The repository [default: the working directory's].
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },
    /// What the hook runs: exit 75 naming the path and its holder if the commit touches a
    /// path (staged, both sides of a rename) another live holder reserved exclusively; 0 if
    /// not. A commit made under the reservation (`baton reserve PATH -- git commit ...`, or
    /// by the agent whose `baton mcp` holds it) is the holder's own and passes.
    Check {
        /// The repository [default: the working directory's].
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },
}

/// `baton git guard ...`; when the baton dir was named (`--dir`,
/// `BATON_DIR`) the hook names it too, and the `--backend` URL given on the
/// command line (or `BATON_BACKEND`) likewise: it is written into the hook,
/// password included.
pub(crate) fn cmd_guard(dir: &BatonDir, cmd: GuardCommand, flags: &Flags<'_>) -> u8 {
    match cmd {
        GuardCommand::Install { repo } => {
            let repo = repo.unwrap_or_else(|| PathBuf::from("."));
            let exe = match std::env::current_exe() {
                Ok(p) => p,
                Err(e) => {
                    errln!("baton: cannot find the baton executable's path: {e}");
                    return BATON_FAILED;
                }
            };
            let mut line = quote(&exe.to_string_lossy());
            if flags.named_dir {
                line.push_str(" --dir ");
                line.push_str(&quote(&dir.path().to_string_lossy()));
            }
            if let Some(url) = flags.backend_url {
                line.push_str(" --backend ");
                line.push_str(&quote(url));
            }
            line.push_str(" git guard check");
            match baton_git::install_guard(&repo, &line) {
                Ok(done) => {
                    let how = if done.already { "updated" } else { "installed" };
                    match &done.chained {
                        Some(c) => errln!(
                            "baton: {how} the guard in '{}', after the hook kept as '{}'",
                            done.hook.display(),
                            c.display()
                        ),
                        None => errln!("baton: {how} the guard in '{}'", done.hook.display()),
                    }
                    0
                }
                Err(e) => fail(&e, for_git_error(&e)),
            }
        }
        GuardCommand::Uninstall { repo } => {
            let repo = repo.unwrap_or_else(|| PathBuf::from("."));
            match baton_git::uninstall_guard(&repo) {
                Ok(done) if !done.was_installed => {
                    errln!("baton: no guard installed in '{}'", done.hook.display());
                    0
                }
                Ok(done) => {
                    let tail = if done.restored {
                        ", the hook it chained put back"
                    } else {
                        ""
                    };
                    errln!(
                        "baton: removed the guard from '{}'{tail}",
                        done.hook.display()
                    );
                    0
                }
                Err(e) => fail(&e, for_git_error(&e)),
            }
        }
        GuardCommand::Check { repo } => {
            let space = match space_of(repo.as_deref()) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let files = match baton_git::staged_paths(space.root()) {
                Ok(f) => f,
                Err(e) => return fail(&e, for_git_error(&e)),
            };
            if files.is_empty() {
                return 0;
            }
            match flags
                .backend
                .reservations()
                .check_files(&space, &files, None)
            {
                Ok(hits) if hits.is_empty() => 0,
                Ok(hits) => {
                    for (file, c) in &hits {
                        errln!(
                            "baton: commit refused: '{file}' is covered by {}",
                            c.describe()
                        );
                    }
                    NOT_ACQUIRED
                }
                Err(e) => fail(&e, for_reserve_error(&e)),
            }
        }
    }
}

/// `s` in single quotes for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}
