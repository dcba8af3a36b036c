//! The exit-code contract of every `baton` command (DESIGN.md, "Exit codes").
//!
//! | code | meaning |
//! |---|---|
//! | child's code | the command ran; its own status is passed through (128+N if killed by signal N) |
//! | 74 | `baton state`: the change was made, but flushing it failed (durability unknown), or an append failed part-way and could not be undone; check the file before repeating the change |
//! | 75 | not acquired: busy with `--no-wait`, `--wait` elapsed; a stale `release --token` |
//! | 79 | superseded by a newer run |
//! | 124 | the command ran past `--timeout` and was killed |
//! | 125 | baton itself failed: bad usage, bad input, I/O error |
//! | 126 / 127 | the command could not be executed / was not found |
//!
//! 79, 124, 126 and 127 come from `baton_proc` (`Outcome::exit_code`,
//! `ProcError::exit_code`); the codes baton itself decides are below.

use baton_lock::LockError;
use baton_run::RunError;

/// A state change was made (or, for a failed append that could not be
/// undone, may have been made in part), but could not be confirmed durable:
/// repeating it blindly may apply it twice. (sysexits' EX_IOERR.)
pub const CHANGED_NOT_DURABLE: u8 = 74;
/// Not acquired (busy, wait elapsed), or a compare-and-swap / token check failed.
pub const NOT_ACQUIRED: u8 = 75;
/// baton itself failed.
pub const BATON_FAILED: u8 = 125;

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
        RunError::Proc(p) => u8::try_from(p.exit_code()).unwrap_or(BATON_FAILED),
        RunError::Holder { busy: true, .. } | RunError::NotAdmitted(_) => NOT_ACQUIRED,
        // A workspace's lock (or the repository's) stayed busy, as for `workspace create`.
        RunError::Workspace(g) if g.is_busy() => NOT_ACQUIRED,
        _ => BATON_FAILED,
    }
}

/// The exit code of a finished command, clamped into the 0–255 range.
pub fn for_child(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(BATON_FAILED)
}
