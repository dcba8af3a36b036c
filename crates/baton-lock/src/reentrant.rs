//! Refusing a lock a thread already holds or waits for (a self-deadlock).

use std::fs::File;
use std::path::Path;
use std::thread::ThreadId;

use crate::error::LockError;
use crate::fork_safe::ForkSafe;
use crate::request::LockRequest;
use crate::wait::WaitPolicy;
use baton_fs::IoResultExt;
use std::time::Instant;

/// Identifies a lock file and the thread that holds it, for re-entrancy checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeldKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    thread: ThreadId,
}

/// Taken by `acquire` and every release, from any thread, so never a plain
/// mutex: a fork while another thread is inside would copy it held, and the
/// child's fork hook (baton-py's, which forgets inherited holds) would hang
/// on it. A child starts with an empty table: it holds nothing.
/// Each entry says whether its hold admits another holder (shared, or a
/// semaphore of more than one slot).
static HELD: ForkSafe<Vec<(HeldKey, bool)>> = ForkSafe::new(Vec::new());

/// The key of `file` for `thread` (the thread the lock is acquired for).
pub(crate) fn held_key(
    file: &File,
    path: &Path,
    thread: Option<ThreadId>,
) -> Result<HeldKey, LockError> {
    let id = crate::sys::file_id(file).context("cannot inspect lock file", path)?;
    Ok(HeldKey {
        dev: id.dev,
        ino: id.ino,
        thread: thread.unwrap_or_else(|| std::thread::current().id()),
    })
}

/// Records that this thread holds or waits for the lock; false if it
/// already does in a way that would block this request: a request that
/// admits other holders (`shares`: shared, or a semaphore of more slots) may
/// join the thread's own holds that admit them too (two readers, two slots).
pub(crate) fn remember_held(key: HeldKey, shares: bool) -> bool {
    let mut held = HELD.lock();
    if held.iter().any(|(k, s)| *k == key && !(shares && *s)) {
        return false;
    }
    held.push((key, shares));
    true
}

pub(crate) fn forget_held(key: &HeldKey) {
    let mut held = HELD.lock();
    if let Some(i) = held.iter().position(|(k, _)| k == key) {
        held.swap_remove(i);
    }
}

/// The answer to a request for a lock its thread already holds (through
/// another guard) or waits for: waiting forever would deadlock, so that is
/// refused; a bounded wait is busy at once (only this thread could release
/// it, and it is here).
pub(crate) fn reentrant(req: &LockRequest, path: &Path, start: Instant) -> LockError {
    match req.wait {
        WaitPolicy::Forever => LockError::Reentrant {
            name: req.name.to_string(),
        },
        policy => LockError::Busy {
            name: req.name.to_string(),
            path: path.to_path_buf(),
            holder: Some("this thread, through another handle".into()),
            waited: start.elapsed(),
            policy,
        },
    }
}
