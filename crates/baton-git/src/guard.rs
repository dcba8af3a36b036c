//! The pre-commit guard of path reservations (`baton git guard`): its hook
//! in a repository's hooks dir, chained after a hook already there, and
//! the paths a commit touches.
//!
//! The hooks dir is git's (`git rev-parse --git-path hooks`: `core.hooksPath`
//! if set, else the common git dir's `hooks`, shared by every worktree). A
//! hook already there is renamed `pre-commit.baton-chained` and run first
//! by baton's; its failure fails the commit. Uninstalling puts it back.

use std::path::{Path, PathBuf};

use baton_fs::IoResultExt;

use crate::error::GitError;
use crate::git::{self, Repo};

/// The line that marks baton's hook.
const MARK: &str = "# baton git guard: pre-commit hook";
/// The name an existing hook is kept under.
const CHAINED: &str = "pre-commit.baton-chained";

/// What [`install_guard`] did.
#[derive(Clone, Debug)]
pub struct GuardInstalled {
    /// The hook written.
    pub hook: PathBuf,
    /// Where the hook that was there before is kept (and run first), if any.
    pub chained: Option<PathBuf>,
    /// Whether the guard was installed already (then only its command line
    /// was brought up to date).
    pub already: bool,
}

/// What [`uninstall_guard`] did.
#[derive(Clone, Debug)]
pub struct GuardRemoved {
    /// The hook path.
    pub hook: PathBuf,
    /// Whether baton's hook was there (else nothing changed).
    pub was_installed: bool,
    /// Whether the chained hook was put back.
    pub restored: bool,
}

/// The hooks dir of the repository at or above `repo`.
pub fn hooks_dir(repo: &Path) -> Result<PathBuf, GitError> {
    let r = Repo::open(repo)?;
    let out = git::run(
        &r.path,
        ["rev-parse", "--path-format=absolute", "--git-path", "hooks"],
    )?;
    Ok(PathBuf::from(out))
}

/// Installs the guard's pre-commit hook, which runs `check` (a shell
/// command line, e.g. `'/usr/bin/baton' git guard check`) after the hook
/// already there, if any. Installing twice chains nothing twice.
pub fn install_guard(repo: &Path, check: &str) -> Result<GuardInstalled, GitError> {
    let dir = hooks_dir(repo)?;
    std::fs::create_dir_all(&dir).context("cannot create the hooks dir", &dir)?;
    let hook = dir.join("pre-commit");
    let chained = dir.join(CHAINED);
    let already = is_ours(&hook);
    if !already && hook.symlink_metadata().is_ok() {
        if chained.symlink_metadata().is_ok() {
            return Err(GitError::Invalid(format!(
                "cannot install the guard: both '{}' and '{}' exist; remove or merge one of them first",
                hook.display(),
                chained.display()
            )));
        }
        std::fs::rename(&hook, &chained).context("cannot keep the existing hook as", &chained)?;
    }
    let script = format!(
        "#!/bin/sh\n{MARK}\n\
         # Installed by `baton git guard install`; `baton git guard uninstall` puts back the\n\
         # hook that was here (kept as {CHAINED}, run first: its failure fails the commit).\n\
         # Refuses a commit touching a path another live holder reserved exclusively.\n\
         chained=\"$(dirname \"$0\")/{CHAINED}\"\n\
         if [ -x \"$chained\" ]; then\n    \"$chained\" \"$@\" || exit $?\n\
         fi\n\
         exec {check}\n"
    );
    write_executable(&hook, &script)?;
    Ok(GuardInstalled {
        chained: chained.symlink_metadata().is_ok().then_some(chained),
        hook,
        already,
    })
}

/// Removes the guard's hook and puts back the hook it chained, if any.
pub fn uninstall_guard(repo: &Path) -> Result<GuardRemoved, GitError> {
    let dir = hooks_dir(repo)?;
    let hook = dir.join("pre-commit");
    let chained = dir.join(CHAINED);
    if !is_ours(&hook) {
        return Ok(GuardRemoved {
            hook,
            was_installed: false,
            restored: false,
        });
    }
    std::fs::remove_file(&hook).context("cannot remove the guard's hook", &hook)?;
    let restored = chained.symlink_metadata().is_ok();
    if restored {
        std::fs::rename(&chained, &hook).context("cannot put back the chained hook as", &hook)?;
    }
    Ok(GuardRemoved {
        hook,
        was_installed: true,
        restored,
    })
}

fn is_ours(hook: &Path) -> bool {
    std::fs::read_to_string(hook).is_ok_and(|t| t.lines().any(|l| l == MARK))
}

fn write_executable(path: &Path, text: &str) -> Result<(), GitError> {
    baton_fs::write_atomic(path, text.as_bytes(), baton_fs::Durability::Data)
        .map_err(baton_fs::WriteError::into_path_error)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .context("cannot make the hook executable", path)?;
    }
    Ok(())
}

/// The repo-relative paths (`/`-separated) the commit being made touches:
/// what is staged in the index git gives its hooks (`GIT_INDEX_FILE`, a
/// temporary one for `git commit -a` or `git commit PATH`), both sides of
/// a rename.
pub fn staged_paths(repo: &Path) -> Result<Vec<String>, GitError> {
    let r = Repo::open(repo)?;
    let args = ["diff", "--cached", "--name-only", "--no-renames", "-z"];
    let (mut spec, line) = git::command(&r.path, args);
    if let Some(index) = std::env::var_os("GIT_INDEX_FILE").filter(|i| !i.is_empty()) {
        // Relative to the hook's working directory (the work tree's top).
        let index = std::env::current_dir()
            .map(|cwd| cwd.join(&index))
            .unwrap_or_else(|_| PathBuf::from(&index));
        spec.env
            .push(("GIT_INDEX_FILE".into(), index.into_os_string()));
    }
    let out = git::output_spec(spec, line)?;
    if !out.0.status.success() {
        return Err(git::failed(out.1, &out.0));
    }
    Ok(out
        .0
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}
