//! A held lock and `fork()`.
//!
//! A baton lock is a kernel lock on an open file description, and a forked
//! child shares its parent's open files. Left alone, the child could
//! release the parent's lock (dropping its copy of the guard unlocks the
//! shared description), and its copy of the descriptor would keep the lock
//! held after the parent dies, until the child exits. So a child never
//! holds what its parent held:
//!
//! - the package registers [`after_fork_in_child`] with
//!   `os.register_at_fork`: right after `os.fork()` (and so in
//!   `multiprocessing`'s fork start method) the child closes its copies of
//!   every held lock's file without releasing anything
//!   ([`baton_lock::LockGuard::close_inherited`]);
//! - every hold remembers the pid that acquired it, so a child forked in
//!   another way (from C, without Python's fork hooks) sees `held == False`
//!   too, and its `release()`, `with` exit or garbage collection closes its
//!   copy instead of releasing.
//!
//! Limit: a lock that another thread was acquiring at the moment of the
//! fork (a wait in progress) has a file the child cannot reach; the child
//! keeps that copy open until it exits.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use pyo3::prelude::*;

use crate::hold::Hold;

/// Every hold that was granted in this process and may still be held.
static HOLDS: Mutex<Vec<Weak<Mutex<Hold>>>> = Mutex::new(Vec::new());

/// Remembers `hold` (just granted) for the fork hook; forgets holds that
/// are gone.
pub(crate) fn register(hold: &Arc<Mutex<Hold>>) {
    let mut holds = HOLDS.lock().unwrap_or_else(PoisonError::into_inner);
    holds.retain(|w| w.strong_count() > 0);
    holds.push(Arc::downgrade(hold));
}

/// Registered by the package with `os.register_at_fork(after_in_child=...)`:
/// closes the child's copies of the parent's held locks, releasing nothing.
#[pyfunction]
pub(crate) fn after_fork_in_child() {
    // Taken only with the GIL held, which the forking thread holds: never
    // copied locked. try_lock all the same: a child must not hang here.
    let Ok(mut holds) = HOLDS.try_lock() else {
        return;
    };
    for hold in holds.drain(..).filter_map(|w| w.upgrade()) {
        if let Ok(mut h) = hold.try_lock() {
            h.forget_if_inherited();
        }
    }
}
