//! Refusing a lock a thread already holds or waits for (a self-deadlock).

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;
use std::thread::ThreadId;

use crate::error::LockError;
use baton_fs::IoResultExt;

/// Identifies a lock file and the thread that holds it, for re-entrancy checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeldKey {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    thread: ThreadId,
}

static HELD: Mutex<Vec<HeldKey>> = Mutex::new(Vec::new());

pub(crate) fn held_key(file: &File, path: &Path) -> Result<HeldKey, LockError> {
    let id = crate::sys::file_id(file).context("cannot inspect lock file", path)?;
    Ok(HeldKey {
        dev: id.dev,
        ino: id.ino,
        thread: std::thread::current().id(),
    })
}

/// Records that this thread holds or waits for the lock; false if it already does.
pub(crate) fn remember_held(key: HeldKey) -> bool {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if held.contains(&key) {
        return false;
    }
    held.push(key);
    true
}

pub(crate) fn forget_held(key: &HeldKey) {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = held.iter().position(|k| k == key) {
        held.swap_remove(i);
    }
}
