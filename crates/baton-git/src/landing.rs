//! A run's landing push is not superseded: the protocol between a group
//! run's supervisor (`baton run --group K --mode supersede`, a job of the
//! service) and `baton git push` inside its command.
//!
//! A run superseded just after its push landed used to be reported
//! superseded (79) although its work was published (issue 36). So a push
//! says when it is landing, and the supervisor defers the TERM of a
//! supersede while it is:
//!
//! 1. The supervisor gives its command [`LANDING_DIR_ENV`] (its baton dir's
//!    `groups/landing`) and [`LANDING_KEY_ENV`] (the group key): a lock of
//!    that name there is the run's *landing lock* (one running run per key
//!    in mode supersede, so one run owns it at a time), and a file next to
//!    it, `<key>.pushed`, its *landed* record, cleared when the command
//!    starts.
//! 2. `baton git push` announces each `git push` it sends ("landing") by
//!    taking the landing lock **shared**, without waiting
//!    ([`Landing::announce`]): pushes of one run never wait for each other.
//!    When the push lands, it appends the remote, branch and commit to the
//!    landed record ("landed", [`Announced::landed`]) and lets go; a push
//!    that fails just lets go ("failed"). A pusher killed mid-push lets go
//!    too: the kernel releases the lock.
//! 3. A supersede takes the landing lock **exclusive**, waiting at most the
//!    run's grace period ([`Landing::close`]): it waits for the pushes in
//!    flight, and keeps it until the command is over, so no push starts
//!    landing after that point — one that tries finds the lock busy and is
//!    refused ([`GitError::Superseded`], exit 79) before it sends anything.
//!    Then, if the landed record names a push, the run's work is published:
//!    the command may end by itself (within the grace again) with its own
//!    status; otherwise it is stopped at once as before (TERM, grace, KILL).
//!
//! Every step is ordered by the one lock (FIFO: a shared request behind a
//! waiting exclusive one is refused, not admitted), so a push is either
//! announced before the supersede closes the landing, and waited for, or
//! refused after it. What it does not cover: a push slower than the grace
//! is stopped with the command (its outcome unknown to the run, which is
//! then reported superseded), and a push run outside the command's
//! environment (without the variables) is not announced.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use baton_fs::IoResultExt;
use baton_lock::{
    acquire, BatonDir, LockError, LockGuard, LockName, LockRequest, Mode, WaitPolicy,
};

use crate::error::GitError;

/// The variable naming the landing's directory (`<baton dir>/groups/landing`).
pub const LANDING_DIR_ENV: &str = "BATON_LANDING_DIR";
/// The variable naming the landing's key (the run's group key).
pub const LANDING_KEY_ENV: &str = "BATON_LANDING_KEY";

/// The landing of one group run (module doc): its lock and its landed
/// record.
#[derive(Clone, Debug)]
pub struct Landing {
    dir: BatonDir,
    key: LockName,
}

impl Landing {
    /// The landing of the runs of group `key` in baton dir `dir`
    /// (`<dir>/groups/landing`, created if needed).
    pub fn new(dir: &BatonDir, key: &LockName) -> Result<Landing, GitError> {
        let dir = BatonDir::open(dir.path().join("groups").join("landing"))
            .map_err(|e| GitError::Lock(Box::new(e)))?;
        Ok(Landing {
            dir,
            key: key.clone(),
        })
    }

    /// The landing a supervisor announced to this process in
    /// [`LANDING_DIR_ENV`] and [`LANDING_KEY_ENV`], if both are set and
    /// valid (anything else: not inside a group run, nothing to announce).
    pub fn from_env() -> Option<Landing> {
        let dir = std::env::var_os(LANDING_DIR_ENV).filter(|d| !d.is_empty())?;
        let key = std::env::var(LANDING_KEY_ENV).ok()?;
        let key = LockName::new(key).ok()?;
        let dir = PathBuf::from(dir);
        if !dir.is_absolute() {
            return None;
        }
        let dir = BatonDir::open(dir).ok()?;
        Some(Landing { dir, key })
    }

    /// The variables that hand this landing to a command.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        vec![
            (
                LANDING_DIR_ENV.into(),
                self.dir.path().as_os_str().to_owned(),
            ),
            (LANDING_KEY_ENV.into(), self.key.as_str().into()),
        ]
    }

    fn record(&self) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.pushed", self.key.file_stem()))
    }

    /// Pusher: announces a push that is about to be sent (shared, no
    /// wait). [`GitError::Superseded`] when the run's supersede has closed
    /// the landing: the push must not be sent.
    pub fn announce(&self, run_id: &str) -> Result<Announced, GitError> {
        let req = LockRequest::new(self.key.clone())
            .mode(Mode::Shared)
            .wait(WaitPolicy::Immediately)
            .operation("git push: landing")
            .run_id(run_id.to_string());
        match acquire(&self.dir, &req) {
            Ok(guard) => Ok(Announced {
                record: self.record(),
                _guard: guard,
            }),
            Err(LockError::Busy { .. }) => Err(GitError::Superseded {
                key: self.key.to_string(),
            }),
            Err(e) => Err(GitError::Lock(Box::new(e))),
        }
    }

    /// Supervisor: forgets what an earlier run recorded (before its
    /// command starts).
    pub fn clear(&self) {
        let _ = fs::remove_file(self.record());
    }

    /// Supervisor, on a supersede: takes the landing lock exclusive, waiting
    /// up to `wait` for pushes in flight; `None` if they did not end in
    /// time. Hold the guard until the command is over.
    pub fn close(&self, wait: WaitPolicy) -> Option<LockGuard> {
        let req = LockRequest::new(self.key.clone())
            .mode(Mode::Exclusive)
            .wait(wait)
            .operation("run superseded: no push may start landing");
        match acquire(&self.dir, &req) {
            Ok(g) => Some(g),
            Err(e) => {
                tracing::debug!(error = %e, "the landing could not be closed");
                None
            }
        }
    }

    /// Whether a push of the run landed (its landed record names one).
    pub fn pushed(&self) -> bool {
        fs::metadata(self.record()).is_ok_and(|m| m.len() > 0)
    }
}

/// A push announced as landing: [`Announced::landed`] once it landed;
/// dropped without, it failed.
#[derive(Debug)]
#[must_use = "a landing announced is over when this is dropped"]
pub struct Announced {
    record: PathBuf,
    _guard: LockGuard,
}

impl Announced {
    /// The push landed: records it for the supervisor, then lets go.
    pub fn landed(self, remote: &str, branch: &str, commit: &str) -> Result<(), GitError> {
        append(&self.record, &format!("{remote} {branch} {commit}\n"))
    }
}

fn append(path: &Path, line: &str) -> Result<(), GitError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .context("cannot record a landed push in", path)?;
    Ok(())
}
