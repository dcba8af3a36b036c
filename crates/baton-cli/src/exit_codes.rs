//! Mapping errors to exit codes. The codes themselves, and what each means,
//! are the contract in `baton_contract::exit` (one table, tested); this
//! module only decides which error gets which.

use baton_git::GitError;
use baton_lock::LockError;
use baton_run::RunError;

use baton_contract::exit::{self, to_status};

/// A state change was made (or, for a failed append that could not be
/// undone, may have been made in part), but could not be confirmed durable.
pub const CHANGED_NOT_DURABLE: u8 = exit::CHANGED_NOT_DURABLE as u8;
/// Not acquired (busy, wait elapsed), or a compare-and-swap / token check failed.
pub const NOT_ACQUIRED: u8 = exit::NOT_ACQUIRED as u8;
/// baton itself failed.
pub const BATON_FAILED: u8 = exit::BATON_FAILED as u8;
/// The database session holding the locks (or reservation) ended while the command ran.
pub const LOCK_LOST: u8 = exit::LOCK_LOST as u8;
/// `baton git push`: the rebase onto the remote branch conflicted.
pub const PUSH_CONFLICT: u8 = exit::GIT_CONFLICT as u8;
/// `baton workspace list` / `gc`: some registry records could not be read.
pub const SOME_UNREADABLE: u8 = exit::SOME_UNREADABLE as u8;
/// A command or filter ran past its timeout and was killed.
pub const TIMED_OUT: u8 = exit::TIMED_OUT as u8;
/// A filter or command could not be executed.
pub const NOT_EXECUTABLE: u8 = exit::NOT_EXECUTABLE as u8;
/// A filter or command was not found.
pub const NOT_FOUND: u8 = exit::NOT_FOUND as u8;

/// The exit code for an error of a lock operation.
pub fn for_lock_error(e: &LockError) -> u8 {
    match e {
        LockError::Busy { .. } | LockError::StaleToken { .. } => NOT_ACQUIRED,
        _ => BATON_FAILED,
    }
}

/// The exit code for an error of a run or hold.
pub fn for_run_error(e: &RunError) -> u8 {
    match e {
        RunError::Lock(l) => for_lock_error(l),
        RunError::Proc(p) => to_status(p.exit_code()),
        RunError::Holder { busy: true, .. } | RunError::NotAdmitted(_) => NOT_ACQUIRED,
        RunError::LockLost { .. } | RunError::Fenced { .. } => exit::LOCK_LOST as u8,
        // A workspace's lock (or the repository's) stayed busy, as for `workspace create`.
        RunError::Workspace(g) if g.is_busy() => NOT_ACQUIRED,
        _ => BATON_FAILED,
    }
}

/// The exit code of a finished command, clamped into the 0–255 range.
pub fn for_child(code: i32) -> u8 {
    to_status(code)
}

/// The exit code for a failed git operation.
pub fn for_git_error(e: &GitError) -> u8 {
    match e {
        GitError::Conflict { .. } => PUSH_CONFLICT,
        GitError::Superseded { .. } => exit::SUPERSEDED as u8,
        e if e.is_busy() => NOT_ACQUIRED,
        _ => BATON_FAILED,
    }
}
