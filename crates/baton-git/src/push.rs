//! `baton git push`: land local commits on a remote branch without losing
//! any and without storms.
//!
//! Pushes to one remote branch from this machine are serialised by a lock,
//! so local agents queue instead of all being rejected at once. The lock
//! lives with the remote, not in the pusher's baton dir, so clones with
//! different baton dirs meet on it: for a remote that is a local repository,
//! `git-push/<hash of its canonical git dir and the branch>` in that
//! repository's own baton dir (`<git dir>/baton`); for a network remote,
//! `git-push/<hash of the URL and the branch>` in the per-user machine-wide
//! baton dir ([`machine_dir`]). Two spellings of one network remote (ssh and
//! https) are two queues, and pushers of other users or machines are not in
//! the queue; their pushes are handled by the rebase and retry below. A non-fast-forward rejection can
//! then only come from a push that was not in our line (another machine, a
//! push without baton), and is answered by fetch, rebase onto the remote
//! branch and another push. The first retry follows its rebase at once (the
//! rejection is explained by what the fetch brought); each later one waits
//! an exponentially growing delay with +-25% jitter, so pushers on different
//! machines spread out. A rebase conflict aborts the rebase and resets the
//! branch to the commits it had before the first attempt. Nothing is ever
//! force-pushed: the refspec never carries `+` and no `--force` is passed.
//!
//! With a queue that other machines share ([`PushRequest::queue`]: the
//! lock backend, PostgreSQL), pushes to one remote branch wait in that line
//! instead, under the same name, so pushers on every machine using it queue
//! behind each other as local ones do.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_lock::{acquire, new_run_id, BatonDir, LockRequest, WaitPolicy};
use serde::Serialize;

use crate::error::GitError;
use crate::git::{self, hashed_name, machine_dir, Repo, DEFAULT_GIT_LOCK_WAIT};
use crate::remote::{local_path, resolve_url, RemoteCall};

/// Retry policy of a push.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Pushes tried in all (at least 1).
    pub attempts: u32,
    /// Delay before the second retry; doubled before each later one.
    pub base_delay: Duration,
    /// Upper bound of a delay (before jitter).
    pub max_delay: Duration,
    /// Relative jitter: each delay is multiplied by a random factor in
    /// `1 - jitter ..= 1 + jitter`.
    pub jitter: f64,
}

impl Default for Backoff {
    /// 5 attempts, 1s doubling to at most 16s, +-25% jitter.
    fn default() -> Self {
        Backoff {
            attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(16),
            jitter: 0.25,
        }
    }
}

impl Backoff {
    /// The delay before attempt `attempt` (1-based): none before the first
    /// two, then `base`, `2*base`, ... capped at `max`, jittered.
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt <= 2 {
            return Duration::ZERO;
        }
        let doublings = (attempt - 3).min(30);
        let raw = self
            .base_delay
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        let factor = 1.0 + self.jitter.clamp(0.0, 1.0) * (2.0 * random_unit() - 1.0);
        raw.mul_f64(factor.max(0.0))
    }
}

/// A uniformly distributed number in `[0, 1)` from the kernel's random source.
fn random_unit() -> f64 {
    (baton_fs::random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// What to push.
#[derive(Clone, Debug)]
pub struct PushRequest {
    /// A path in the repository to push from; `HEAD` is pushed.
    pub repo: PathBuf,
    /// The remote; default the branch's configured remote, else `origin`.
    pub remote: Option<String>,
    /// The remote branch; default the current branch's name.
    pub branch: Option<String>,
    /// Retry policy.
    pub backoff: Backoff,
    /// How long to wait for the push lock and the repository lock.
    pub lock_wait: WaitPolicy,
    /// The run id recorded in locks and log lines; a new one if absent.
    pub run_id: Option<String>,
    /// Print a line on stderr for every rejection and retry.
    pub log: bool,
    /// A queue other machines share (the lock backend) to wait in instead
    /// of this machine's; see the module doc.
    pub queue: Option<Arc<dyn PushQueue>>,
    /// The supervising group run's landing: each `git push` is announced
    /// there first, and recorded as landed after ([`crate::landing`]).
    pub landing: Option<crate::landing::Landing>,
}

/// A line for pushes that machines share: takes the turn a lock request
/// names, as [`baton_lock::acquire`] does in a baton dir.
pub trait PushQueue: Send + Sync + std::fmt::Debug {
    /// Takes the turn `lock` names, waiting as its policy says; the turn
    /// lasts until the returned value is dropped.
    ///
    /// # Errors
    ///
    /// [`QueueError::Lock`] ([`baton_lock::LockError::Busy`] when the wait
    /// ended), [`QueueError::Unavailable`] when the queue cannot be used.
    fn take(&self, lock: &LockRequest) -> Result<Box<dyn Send>, QueueError>;
}

/// This machine's line: a lock in a baton dir (see [`push_queue`]).
#[derive(Debug)]
struct LocalQueue(BatonDir);

impl PushQueue for LocalQueue {
    fn take(&self, lock: &LockRequest) -> Result<Box<dyn Send>, QueueError> {
        match acquire(&self.0, lock) {
            Ok(guard) => Ok(Box::new(guard)),
            Err(e) => Err(QueueError::Lock(e)),
        }
    }
}

/// Why a [`PushQueue`] gave no turn.
#[derive(Debug)]
pub enum QueueError {
    /// The lock was not granted (busy, cancelled, refused).
    Lock(baton_lock::LockError),
    /// The queue cannot be used (its database is unreachable, ...): one line.
    Unavailable(String),
}

impl PushRequest {
    /// Pushes `HEAD` of `repo` with the default policy.
    pub fn new(repo: impl Into<PathBuf>) -> PushRequest {
        PushRequest {
            repo: repo.into(),
            remote: None,
            branch: None,
            backoff: Backoff::default(),
            lock_wait: WaitPolicy::AtMost(DEFAULT_GIT_LOCK_WAIT),
            run_id: None,
            log: false,
            queue: None,
            landing: None,
        }
    }
}

/// A push that landed.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PushReport {
    /// The run id of the push.
    pub run_id: String,
    /// The work tree pushed from.
    pub repo: PathBuf,
    /// The remote's name.
    pub remote: String,
    /// The remote branch.
    pub branch: String,
    /// The commit now at the remote branch.
    pub commit: String,
    /// Pushes tried.
    pub attempts: u32,
    /// Rebases done onto the remote branch.
    pub rebases: u32,
}

/// Pushes `HEAD` to the remote branch; rebases and retries on non-fast-forward.
/// A work tree with a rebase in progress is refused
/// ([`GitError::RebaseInProgress`]).
///
/// ```no_run
/// let report = baton_git::push(&baton_git::PushRequest::new("."))?;
/// println!("{} at {}", report.branch, report.commit);
/// # Ok::<(), baton_git::GitError>(())
/// ```
pub fn push(req: &PushRequest) -> Result<PushReport, GitError> {
    let run_id = req.run_id.clone().unwrap_or_else(new_run_id);
    let repo = Repo::open(&req.repo)?;
    let work = repo.toplevel.clone().ok_or_else(|| {
        GitError::Invalid(format!(
            "'{}' has no work tree: push from a work tree",
            repo.path.display()
        ))
    })?;
    // A rebase left in progress (by a push killed during its rebase, or by
    // hand) has HEAD detached away from the branch: pushing HEAD would
    // "succeed" without the branch's commits.
    if let Some(state) = ["rebase-merge", "rebase-apply"]
        .iter()
        .map(|d| repo.git_dir.join(d))
        .find(|d| d.is_dir())
    {
        return Err(GitError::RebaseInProgress { repo: work, state });
    }
    // What we push (read before queueing: only our own rebase moves it) and
    // the branch checked out (`HEAD` when detached), in one git command.
    let head = git::run(&work, ["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"])?;
    let mut head = head.lines();
    let orig = head.next().unwrap_or_default().to_string();
    let local = head
        .next()
        .and_then(|r| r.strip_prefix("refs/heads/"))
        .map(str::to_string);
    let branch = match (&req.branch, &local) {
        (Some(b), _) | (None, Some(b)) => b.clone(),
        (None, None) => return Err(GitError::DetachedHead { repo: work }),
    };
    // A named branch must be one git would make (`git branch` refuses
    // `--force`, `a..b`, `x:y`) and one that shadows nothing (`origin/main`
    // in the remote would shadow its own remote-tracking branch, refname.rs):
    // pushed as `HEAD:refs/heads/<branch>`, it would otherwise create such a
    // branch on the remote, or fail in git.
    if let Some(b) = &req.branch {
        crate::refname::check_branch_in(&repo, b)?;
    }
    // A remote name is passed to git as an argument: never as an option.
    if let Some(r) = &req.remote {
        if r.is_empty() || r.starts_with('-') || r.chars().any(char::is_control) {
            return Err(GitError::Invalid(format!("invalid remote name {r:?}")));
        }
    }
    let remote = match &req.remote {
        Some(r) => r.clone(),
        None => local
            .as_ref()
            .and_then(|l| git::run(&work, ["config", "--get", &format!("branch.{l}.remote")]).ok())
            .filter(|r| !r.is_empty() && r != ".")
            .unwrap_or_else(|| "origin".into()),
    };
    // A relative path is read against the base's top, as git does from
    // the base, also in a linked worktree (remote.rs).
    let url = resolve_url(
        &repo,
        &git::run(&work, ["remote", "get-url", remote.as_str()])?,
    )?;
    let call = RemoteCall::new(&repo, &remote)?;
    let log = |msg: &str| {
        tracing::debug!(repo = %work.display(), "git push: {msg}");
        if req.log {
            // Not eprintln!: a closed or full stderr must not end the push.
            let _ = writeln!(
                std::io::stderr(),
                "baton: git push (run {run_id}) in '{}': {msg}",
                work.display()
            );
        }
    };

    let lock_failed = |source: baton_lock::LockError| GitError::PushLock {
        remote: url.clone(),
        branch: branch.clone(),
        source: Box::new(source),
    };
    let lock_request = |key: &mut Vec<u8>| -> Result<LockRequest, GitError> {
        key.push(0);
        key.extend_from_slice(branch.as_bytes());
        Ok(LockRequest::new(hashed_name("git-push", key)?)
            .wait(req.lock_wait)
            .operation(format!(
                "git push {remote} {branch} from {}",
                work.display()
            ))
            .run_id(run_id.clone())
            .kind(baton_lock::HolderKind::Git))
    };
    // Whether another push went first: if the queue is free we take it at
    // once, else we wait our turn, and then whoever went before us has most
    // likely moved the remote branch.
    // This machine's line, in the remote's place, unless one that other
    // machines share was given.
    let (queue, mut key): (Arc<dyn PushQueue>, Vec<u8>) = match &req.queue {
        Some(shared) => (Arc::clone(shared), queue_key(&work, &url)),
        None => match push_queue(&work, &url) {
            Ok((dir, key)) => (Arc::new(LocalQueue(dir)), key),
            Err(GitError::Lock(e)) => return Err(lock_failed(*e)),
            Err(e) => return Err(e),
        },
    };
    let lock = lock_request(&mut key)?;
    tracing::debug!(remote = %url, branch = %branch, queue = ?queue, "waiting for the push queue of the remote branch");
    let failed = |e: QueueError| match e {
        QueueError::Lock(e) => lock_failed(e),
        QueueError::Unavailable(reason) => GitError::PushQueue {
            remote: url.clone(),
            branch: branch.clone(),
            reason,
        },
    };
    let (guard, waited) = match queue.take(&lock.clone().wait(WaitPolicy::Immediately)) {
        Ok(turn) => (turn, false),
        Err(QueueError::Lock(baton_lock::LockError::Busy { .. })) => {
            (queue.take(&lock).map_err(failed)?, true)
        }
        Err(e) => return Err(failed(e)),
    };

    let refspec = format!("HEAD:refs/heads/{branch}");
    let onto_name = format!("{remote}/{branch}");
    let fetch_spec = format!("refs/heads/{branch}");
    // Fetch the remote branch and rebase onto it.
    let catch_up = || -> Result<(), GitError> {
        repo.run_locked(
            req.lock_wait,
            &run_id,
            &call.args(&["fetch", "--quiet", call.name.as_str(), fetch_spec.as_str()]),
        )?;
        // FETCH_HEAD is this work tree's own (git keeps it per worktree)
        // and names the one branch just fetched.
        rebase(&work, "FETCH_HEAD", &onto_name, &orig, &run_id)
    };
    let mut rebases = 0;
    if waited {
        // Catch up first instead of sending a push that the remote would
        // reject: behind a queue of pushers that saves every one of them a
        // round trip to the remote inside the queue (bench/git_bench.py).
        tracing::debug!("waited for the push queue: fetching and rebasing before the first push");
        catch_up()?;
        rebases += 1;
    }
    let attempts = req.backoff.attempts.max(1);
    for attempt in 1..=attempts {
        tracing::debug!(attempt, attempts, "git push: attempt");
        // Landing: a supersede of the run waits for this push (or, once
        // it has begun, refuses it here before anything is sent).
        let announced = match &req.landing {
            Some(l) => Some(l.announce(&run_id)?),
            None => None,
        };
        let (out, line) = git::output(
            &work,
            call.args(&["push", "--quiet", call.name.as_str(), refspec.as_str()]),
        )?;
        if out.status.success() {
            drop(guard);
            let commit = git::run(&work, ["rev-parse", "--verify", "HEAD"]);
            if let Some(a) = announced {
                // The push landed whatever happens here: say so, do not fail.
                let at = commit.as_deref().unwrap_or("HEAD");
                if let Err(e) = a.landed(&remote, &branch, at) {
                    log(&format!(
                        "warning: {e}: the run will not know this push landed"
                    ));
                    tracing::warn!(error = %e, "landed push not recorded");
                }
            }
            let commit = commit?;
            if attempt > 1 {
                log(&format!(
                    "pushed {commit} to {onto_name} (attempt {attempt}/{attempts})"
                ));
            }
            return Ok(PushReport {
                run_id,
                repo: work,
                remote,
                branch,
                commit,
                attempts: attempt,
                rebases,
            });
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !retryable(&stderr) {
            return Err(git::failed(line, &out));
        }
        if attempt == attempts {
            log(&format!("attempt {attempt}/{attempts} rejected; giving up"));
            return Err(GitError::Exhausted {
                repo: work,
                run_id,
                remote,
                branch,
                attempts,
            });
        }
        let delay = req.backoff.delay(attempt + 1);
        log(&format!(
            "attempt {attempt}/{attempts} rejected (non-fast-forward); fetching and rebasing onto {onto_name}{}",
            if delay.is_zero() {
                String::new()
            } else {
                format!(" after {}", humantime::format_duration(Duration::from_millis(delay.as_millis() as u64)))
            }
        ));
        std::thread::sleep(delay);
        catch_up()?;
        rebases += 1;
    }
    // Unreachable: the last attempt returns above.
    Err(GitError::Exhausted {
        repo: work,
        run_id,
        remote,
        branch,
        attempts,
    })
}

/// Where pushes to `url` queue: the baton dir their lock lives in, and the
/// key its name is made from. A remote that is a local repository queues in
/// its own baton dir, keyed by its canonical git dir (so every spelling of
/// its path meets there); any other in the [`machine_dir`], keyed by the URL.
fn push_queue(work: &Path, url: &str) -> Result<(BatonDir, Vec<u8>), GitError> {
    match local_remote(work, url) {
        Some(remote) => Ok((remote.baton_dir()?, remote_key(&remote))),
        None => Ok((machine_dir()?, url.as_bytes().to_vec())),
    }
}

/// The repository a remote that is a local path names, if it opens.
fn local_remote(work: &Path, url: &str) -> Option<Repo> {
    local_path(work, url).and_then(|path| Repo::open(&path).ok())
}

/// A local remote's key: its canonical git dir.
fn remote_key(remote: &Repo) -> Vec<u8> {
    remote.common_dir.as_os_str().as_encoded_bytes().to_vec()
}

/// The key of [`push_queue`]'s lock name, for a shared queue: the same
/// name wherever the remote is reached from by the same URL or path.
fn queue_key(work: &Path, url: &str) -> Vec<u8> {
    local_remote(work, url).map_or_else(|| url.as_bytes().to_vec(), |r| remote_key(&r))
}

/// Whether a failed push was rejected because the remote moved on.
fn retryable(stderr: &str) -> bool {
    stderr.contains("[rejected]")
        && (stderr.contains("non-fast-forward") || stderr.contains("fetch first"))
        || stderr.contains("[remote rejected]")
            && (stderr.contains("cannot lock ref") || stderr.contains("failed to update ref"))
}

/// Rebases the current branch onto `onto`; on failure aborts and restores `orig`.
fn rebase(
    work: &Path,
    onto: &str,
    onto_name: &str,
    orig: &str,
    run_id: &str,
) -> Result<(), GitError> {
    let (out, line) = git::output(work, ["rebase", "--quiet", "--no-autostash", onto])?;
    if out.status.success() {
        return Ok(());
    }
    let conflicted = git::run(work, ["diff", "--name-only", "--diff-filter=U"]).unwrap_or_default();
    let in_progress = ["rebase-merge", "rebase-apply"].iter().any(|d| {
        git::run(work, ["rev-parse", "--git-path", d])
            .map(|p| work.join(p).exists())
            .unwrap_or(false)
    });
    if in_progress {
        git::run(work, ["rebase", "--abort"])?;
    }
    // Back to exactly the commits we started with (an earlier attempt may have rebased them).
    git::run(work, ["reset", "--quiet", "--keep", orig])?;
    let paths: Vec<String> = conflicted.lines().map(str::to_string).collect();
    if paths.is_empty() {
        return Err(git::failed(line, &out));
    }
    Err(GitError::Conflict {
        repo: work.to_path_buf(),
        run_id: run_id.to_string(),
        onto: onto_name.to_string(),
        paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_retries_once_at_once_then_doubles_with_jitter_up_to_the_cap() {
        let b = Backoff::default();
        assert_eq!(b.delay(1), Duration::ZERO);
        assert_eq!(b.delay(2), Duration::ZERO);
        for (attempt, nominal) in [
            (3, 1.0),
            (4, 2.0),
            (5, 4.0),
            (6, 8.0),
            (7, 16.0),
            (40, 16.0),
        ] {
            for _ in 0..50 {
                let d = b.delay(attempt).as_secs_f64();
                assert!(
                    d >= nominal * 0.75 - 1e-9 && d <= nominal * 1.25 + 1e-9,
                    "{attempt}: {d}"
                );
            }
        }
        let spread: std::collections::HashSet<u128> =
            (0..20).map(|_| b.delay(3).as_micros()).collect();
        assert!(spread.len() > 1, "no jitter");
    }

    #[test]
    fn only_non_fast_forward_rejections_are_retried() {
        assert!(retryable(
            " ! [rejected]        HEAD -> main (fetch first)\nerror: failed to push"
        ));
        assert!(retryable(
            " ! [rejected]        HEAD -> main (non-fast-forward)"
        ));
        assert!(retryable(
            " ! [remote rejected] HEAD -> main (cannot lock ref 'refs/heads/main')"
        ));
        assert!(!retryable(
            " ! [remote rejected] HEAD -> main (pre-receive hook declined)"
        ));
        assert!(!retryable(
            "fatal: could not read Username: terminal prompts disabled"
        ));
    }
}
