//! Running `git`, and where the locks that protect a repository live.
//!
//! git is driven through its CLI (docs/src/design/architecture.md, decision 9), so users' hooks,
//! credentials and config apply. Every command runs with `-C DIR`, stdin
//! closed, no terminal prompt, and without `GIT_DIR`-style variables
//! inherited from a hook that may have started baton (they would redirect the
//! command to another repository).
//!
//! **git dies with baton.** Every git command starts through baton-proc's
//! supervisor ([`baton_proc::Supervisor::run_streaming`]), like every other
//! child of baton: `PR_SET_PDEATHSIG(SIGKILL)` between fork and exec (and no
//! exec at all if baton already died), so a `kill -9` of baton in the middle
//! of a `clone` or `checkout` does not leave git writing into a workspace that
//! gc is about to remove. Linux sends the signal when the spawning *thread*
//! exits; the supervisor spawns and waits on the calling thread. macOS has no
//! such signal: there git gets the guardian a `baton run` gets
//! ([`baton_proc::GuardSpec::where_needed`]: baton itself, executed again,
//! which kills git's whole process group when the baton that started it
//! dies), in a program that serves as one (`baton` does; a library caller's
//! program calls [`baton_proc::dispatch_guardian`] in its `main`, else git
//! outlives a killed caller there). On Windows git's whole tree is in a Job
//! Object that dies with baton. git leads its
//! own process group; when baton is the terminal's foreground job and git runs
//! on baton's main thread (a command line, not the service), git's group gets
//! the terminal while it runs ([`baton_proc::RunSpec::terminal`]), so ssh can
//! still prompt there and a Ctrl-C reaches git. No timeout, and what git
//! leaves running when it exits is left alone (a credential cache daemon,
//! `gc --auto` in the background are meant to outlive it). Not covered:
//! processes git itself starts (hooks, filters, credential helpers) outlive a
//! SIGKILLed git.
//!
//! **A lock lives with what it protects**, never in the caller's baton dir,
//! so every caller on the machine meets in one place whatever its cwd,
//! `--dir` or `BATON_DIR`: a repository's lock in `<git common dir>/baton`
//! ([`Repo::baton_dir`]), the push queue of a remote branch in the remote
//! repository's own baton dir when the remote is a local path, else in the
//! per-user machine-wide baton dir ([`machine_dir`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton_lock::{acquire, BatonDir, LockError, LockGuard, LockName, LockRequest, WaitPolicy};
use baton_proc::{LeftoverPolicy, ProcError, RunSpec, Streams, Supervisor};
use sha2::{Digest, Sha256};

use crate::error::GitError;
use crate::status::{Output, Status};

/// How long a repository lock is waited for unless told otherwise.
pub const DEFAULT_GIT_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Variables that would point git at another repository than `-C DIR`.
const REPO_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_PREFIX",
];

/// `git -C dir args...`, ready to run, and its command line for messages.
pub(crate) fn command<I, S>(dir: &Path, args: I) -> (RunSpec, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let mut spec = RunSpec::new("git")
        .arg("-C")
        .arg(dir.as_os_str())
        .args(&args);
    // This process's environment without the variables that would redirect
    // git (the supervisor adds and replaces variables; it removes none).
    spec.clear_env = true;
    spec.env = std::env::vars_os()
        .filter(|(k, _)| !REPO_ENV.iter().any(|v| k == v))
        .collect();
    spec.env.push(("GIT_TERMINAL_PROMPT".into(), "0".into()));
    spec.stdio.stdin = baton_proc::Stdio::Null;
    spec.leftovers = LeftoverPolicy::Leave;
    spec.terminal = on_main_thread();
    // On macOS, no parent-death signal: git gets a guardian instead.
    spec.guard = baton_proc::GuardSpec::where_needed();
    let line = format!(
        "git -C {} {}",
        dir.display(),
        args.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    (spec, line)
}

/// Whether git may be handed the terminal: only from the main thread. A
/// command line program (`baton git push`, `baton run --workspace`) runs git
/// there, and giving git's group the terminal while it runs lets ssh prompt
/// and a Ctrl-C reach git. A program that hosts many runs (the service) runs
/// git on worker threads, where several gits may run at once and the
/// terminal, if it has one, must stay its own.
fn on_main_thread() -> bool {
    baton_proc::is_main_thread()
}

/// Turns a wait into a deadline fixed now, so that every lock taken during
/// one operation shares it (`--git-lock-wait 1s` bounds the whole operation).
pub(crate) fn deadline(wait: WaitPolicy) -> WaitPolicy {
    match wait {
        WaitPolicy::AtMost(_) => match wait.deadline_from(Instant::now()) {
            Some(t) => WaitPolicy::Until(t),
            None => WaitPolicy::Forever,
        },
        other => other,
    }
}

/// What is left of a wait fixed by [`deadline`], as the policy of one
/// acquisition (so that a busy lock reports "waiting at most 700ms").
pub(crate) fn remaining(wait: WaitPolicy) -> WaitPolicy {
    match wait {
        WaitPolicy::Until(t) => WaitPolicy::from(t.saturating_duration_since(Instant::now())),
        other => other,
    }
}

/// The per-user baton dir shared by every process of this user on this
/// machine, whatever their cwd or `BATON_DIR`: [`baton_lock::user_location`]
/// (the default baton dir, decision 10 of
/// docs/src/design/architecture.md). It holds the locks of
/// what has no directory of its own here: pushes to a network remote, and
/// repositories whose own baton dir cannot be used.
pub fn machine_dir() -> Result<BatonDir, GitError> {
    let (path, _) = baton_lock::user_location();
    BatonDir::open(path).map_err(|e| GitError::Lock(Box::new(e)))
}

/// Where the workspaces of the repository at or above `path` are recorded
/// and made when no baton dir is named (`--dir`, `BATON_DIR`): that
/// repository's own baton dir ([`Repo::baton_dir`]), so that workspaces stay
/// per repository and on its disk while lock names are per machine
/// (docs/src/design/architecture.md, decision 10).
pub fn workspace_home(path: &Path) -> Result<BatonDir, GitError> {
    Repo::open(path)?.baton_dir()
}

/// The baton dir whose workspaces a caller at `path` works on: `dir` when
/// the user named it (`named`: `--dir`, `BATON_DIR`), else the
/// [`workspace_home`] of the repository at or above `path`, else (outside
/// any repository) `dir`.
pub fn workspaces_of(dir: &BatonDir, named: bool, path: &Path) -> Result<BatonDir, GitError> {
    if named || baton_lock::git_common_dir(path).is_none() {
        return Ok(dir.clone());
    }
    workspace_home(path)
}

/// `<git dir>/baton` of a repository, else (another user's repository, a
/// read-only one) the [`machine_dir`].
pub(crate) fn baton_dir_of(common_dir: &Path) -> Result<BatonDir, GitError> {
    match BatonDir::open(common_dir.join("baton")) {
        Ok(dir) => Ok(dir),
        Err(LockError::UnsafeDir { .. }) => machine_dir(),
        Err(LockError::Io(ref e))
            if matches!(
                baton_fs::error_cause(&e.source),
                baton_fs::ErrorCause::Denied | baton_fs::ErrorCause::ReadOnly
            ) =>
        {
            machine_dir()
        }
        Err(e) => Err(GitError::Lock(Box::new(e))),
    }
}

/// Runs git and returns its output whatever its status.
pub(crate) fn output<I, S>(dir: &Path, args: I) -> Result<(Output, String), GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let (spec, line) = command(dir, args);
    output_spec(spec, line)
}

/// Runs git as `spec` (from [`command`], perhaps changed) says; `line` is
/// its command line for messages.
pub(crate) fn output_spec(spec: RunSpec, line: String) -> Result<(Output, String), GitError> {
    tracing::debug!(command = %line, "running git");
    let started = Instant::now();
    let spawn_failed = |source| GitError::Spawn {
        command: line.clone(),
        source,
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let streamed = Supervisor::new(spec)
        .run_streaming(
            Streams::new().stdout(&mut stdout).stderr(&mut stderr),
            |_| {},
        )
        .map_err(spawn_failed)?;
    for read in [streamed.stdout, streamed.stderr] {
        read.map_err(|source| {
            spawn_failed(ProcError::Io {
                op: "read the output of git",
                source,
            })
        })?;
    }
    let status = Status::of(streamed.finished.outcome);
    tracing::debug!(
        command = %line,
        status = %status,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "git finished"
    );
    Ok((
        Output {
            status,
            stdout,
            stderr,
        },
        line,
    ))
}

/// The oldest git baton works with (`rev-parse --path-format=absolute`
/// appeared in 2.31).
pub const MIN_GIT_VERSION: (u32, u32, u32) = (2, 31, 0);

/// The installed git, as `git --version` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitVersion {
    /// The output of `git --version`, trimmed (`git version 2.43.0`).
    pub text: String,
    /// Major, minor and patch numbers, when the text has them.
    pub number: Option<(u32, u32, u32)>,
}

impl GitVersion {
    /// Whether it is at least [`MIN_GIT_VERSION`] (false when unknown).
    pub fn is_supported(&self) -> bool {
        self.number.is_some_and(|n| n >= MIN_GIT_VERSION)
    }
}

/// Runs `git --version` (with baton's usual environment for git).
pub fn git_version() -> Result<GitVersion, GitError> {
    let text = run(Path::new("/"), ["--version"])?;
    Ok(GitVersion {
        number: parse_version(&text),
        text,
    })
}

/// `git version 2.43.0` (or `2.39.3 (Apple Git-146)`, `2.45.0.windows.1`) to numbers.
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text
        .strip_prefix("git version ")?
        .split_whitespace()
        .next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Runs git; fails with its stderr unless it succeeds; returns stdout, trimmed.
pub(crate) fn run<I, S>(dir: &Path, args: I) -> Result<String, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let (out, line) = output(dir, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(failed(line, &out))
    }
}

pub(crate) fn failed(command: String, out: &Output) -> GitError {
    GitError::Command {
        command,
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

/// A repository as baton sees it: where the user pointed, and its common git
/// dir (the key of its lock).
#[derive(Clone, Debug)]
pub struct Repo {
    /// The path given, canonicalized (a work tree, or a bare repository).
    pub path: PathBuf,
    /// The canonical common git dir (`git rev-parse --git-common-dir`).
    pub common_dir: PathBuf,
    /// The canonical git dir of this work tree (`git rev-parse --git-dir`):
    /// the common git dir, except in a linked worktree (`git worktree add`).
    pub git_dir: PathBuf,
    /// The top of the work tree, if the repository has one.
    pub toplevel: Option<PathBuf>,
}

impl Repo {
    /// Finds the repository at or above `path`.
    pub fn open(path: &Path) -> Result<Repo, GitError> {
        let canon = std::fs::canonicalize(path).map_err(|e| GitError::NotARepo {
            path: path.to_path_buf(),
            stderr: e.to_string(),
        })?;
        let (out, _) = output(
            &canon,
            [
                "--no-optional-locks",
                "rev-parse",
                "--path-format=absolute",
                "--git-dir",
                "--git-common-dir",
                "--is-bare-repository",
                "--show-toplevel",
            ],
        )?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let (Some(git_dir), Some(common), Some(bare)) = (lines.next(), lines.next(), lines.next())
        else {
            return Err(GitError::NotARepo {
                path: canon,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        };
        if !out.status.success() && bare != "true" {
            return Err(GitError::NotARepo {
                path: canon,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let common_dir = std::fs::canonicalize(common).map_err(|e| GitError::NotARepo {
            path: canon.clone(),
            stderr: format!("common git dir '{common}': {e}"),
        })?;
        let git_dir = std::fs::canonicalize(git_dir).map_err(|e| GitError::NotARepo {
            path: canon.clone(),
            stderr: format!("git dir '{git_dir}': {e}"),
        })?;
        let toplevel = match (bare, lines.next()) {
            ("false", Some(top)) if !top.is_empty() => Some(PathBuf::from(top)),
            _ => None,
        };
        Ok(Repo {
            path: toplevel.clone().unwrap_or(canon),
            common_dir,
            git_dir,
            toplevel,
        })
    }

    /// Whether this is a linked worktree (`git worktree add`, a workspace of
    /// the worktree strategy): a work tree sharing another's config and refs.
    pub fn is_linked_worktree(&self) -> bool {
        self.git_dir != self.common_dir
    }

    /// The name of this repository's lock: `git/` and 16 hex digits of the
    /// SHA-256 of its canonical common git dir.
    pub fn lock_name(&self) -> Result<LockName, GitError> {
        hashed_name("git", self.common_dir.as_os_str().as_encoded_bytes())
    }

    /// Where this repository's lock (and, unless a baton dir is named, its
    /// workspaces: [`workspace_home`]) lives: `<git common dir>/baton`,
    /// shared by all its worktrees and never tracked by git.
    /// When that directory cannot be used (it belongs to another user, or the
    /// repository is read-only) the per-user [`machine_dir`] takes its place.
    pub fn baton_dir(&self) -> Result<BatonDir, GitError> {
        baton_dir_of(&self.common_dir)
    }

    /// Takes this repository's lock for one git operation on its shared
    /// metadata. Hold the guard only for the duration of that command. The
    /// lock is in [`Repo::baton_dir`], whatever the caller's baton dir, so
    /// every process on the machine meets there.
    pub fn lock(
        &self,
        wait: WaitPolicy,
        operation: &str,
        run_id: &str,
    ) -> Result<LockGuard, GitError> {
        let req = LockRequest::new(self.lock_name()?)
            .wait(remaining(wait))
            .operation(format!("{operation} in {}", self.common_dir.display()))
            .run_id(run_id)
            .kind(baton_lock::HolderKind::Git);
        let failed = |source| GitError::RepoLock {
            repo: self.common_dir.clone(),
            operation: operation.to_string(),
            source: Box::new(source),
        };
        let dir = match self.baton_dir() {
            Ok(dir) => dir,
            Err(GitError::Lock(e)) => return Err(failed(*e)),
            Err(e) => return Err(e),
        };
        acquire(&dir, &req).map_err(failed)
    }

    /// Runs one git command in this repository while holding its lock;
    /// returns its output whatever its status.
    pub(crate) fn output_locked<S: AsRef<OsStr>>(
        &self,
        wait: WaitPolicy,
        run_id: &str,
        args: &[S],
    ) -> Result<(Output, String), GitError> {
        // The subcommand and its first argument, without `-c KEY=VALUE`s.
        let mut shown = Vec::new();
        let mut rest = args.iter().map(|a| a.as_ref().to_string_lossy());
        while let Some(a) = rest.next() {
            if a == "-c" {
                rest.next();
            } else {
                shown.push(a);
            }
        }
        shown.truncate(2);
        let what = format!("git {}", shown.join(" "));
        let guard = self.lock(wait, &what, run_id)?;
        let result = output(&self.path, args);
        drop(guard);
        result
    }

    /// Runs one git command in this repository while holding its lock.
    pub(crate) fn run_locked<S: AsRef<OsStr>>(
        &self,
        wait: WaitPolicy,
        run_id: &str,
        args: &[S],
    ) -> Result<String, GitError> {
        let (out, line) = self.output_locked(wait, run_id, args)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(failed(line, &out))
        }
    }
}

/// The commit `full_ref` points at in `repo`, if it exists.
pub(crate) fn commit_of(repo: &Path, full_ref: &str) -> Result<Option<String>, GitError> {
    let spec = format!("{full_ref}^{{commit}}");
    let (out, _) = output(
        repo,
        [
            "--no-optional-locks",
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            spec.as_str(),
        ],
    )?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string()))
}

/// `prefix/` and 16 hex digits of the SHA-256 of `key`.
pub(crate) fn hashed_name(prefix: &str, key: &[u8]) -> Result<LockName, GitError> {
    let digest = Sha256::digest(key);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(LockName::new(format!("{prefix}/{hex}"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(windows, ignore = "runs git: the wine test run has no Git for Windows")]
    fn git_versions_are_read_from_what_git_prints() {
        assert_eq!(parse_version("git version 2.43.0"), Some((2, 43, 0)));
        assert_eq!(
            parse_version("git version 2.39.3 (Apple Git-146)"),
            Some((2, 39, 3))
        );
        assert_eq!(
            parse_version("git version 2.45.0.windows.1"),
            Some((2, 45, 0))
        );
        assert_eq!(parse_version("git version 2.31"), Some((2, 31, 0)));
        assert_eq!(parse_version("hub version 1"), None);
        let old = GitVersion {
            text: String::new(),
            number: Some((2, 30, 9)),
        };
        assert!(!old.is_supported());
        let installed = git_version().unwrap();
        assert!(installed.number.is_some(), "{installed:?}");
    }

    #[test]
    #[cfg_attr(windows, ignore = "runs git: the wine test run has no Git for Windows")]
    fn a_failed_git_command_has_its_exit_code_and_its_error_output() {
        let (out, _) = output(Path::new("/"), ["--no-such-option"]).unwrap();
        assert_eq!(out.status.code(), Some(129), "{out:?}");
        assert!(!out.stderr.is_empty());
    }

    #[test]
    fn lock_names_are_short_distinct_and_stable() {
        let a = hashed_name("git", b"/srv/a/.git").unwrap();
        let b = hashed_name("git", b"/srv/b/.git").unwrap();
        assert_ne!(a, b);
        assert_eq!(a, hashed_name("git", b"/srv/a/.git").unwrap());
        assert_eq!(a.as_str().len(), "git/".len() + 16);
    }

    #[test]
    #[cfg_attr(windows, ignore = "runs git: the wine test run has no Git for Windows")]
    fn a_plain_directory_is_not_a_repository() {
        let tmp = tempfile::tempdir().unwrap();
        let err = Repo::open(tmp.path())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("is not a git repository"), "{err}");
    }
}
