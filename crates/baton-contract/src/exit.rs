//! Exit codes (docs/src/design/architecture.md, "Exit codes"). No other file writes these numbers.
//!
//! | code | constant | meaning |
//! |---|---|---|
//! | 0 | [`SUCCESS`] | done (for `baton run`: the command exited 0) |
//! | the command's | — | `baton run`: the command ran; its own status passes through |
//! | 128+N | [`SIGNALED_BASE`] + N | `baton run`: the command was killed by signal N |
//! | 1 | [`GIT_CONFLICT`] | `baton git push`: a rebase conflict (local commits untouched) |
//! | 1 | [`DOCTOR_WARNINGS`] | `baton doctor`: baton works here, with warnings (each names a remedy) |
//! | 1 | [`SOME_UNREADABLE`] | `baton workspace list` / `gc`: done for every readable record; some registry records could not be read (each named on stderr) |
//! | 74 | [`CHANGED_NOT_DURABLE`] | `baton state`: changed, but durability unknown; check before repeating |
//! | 75 | [`NOT_ACQUIRED`] | not acquired: busy with `--no-wait`, `--wait` elapsed, skipped, `--max-pending`, a stale token or version, a branch held by another workspace (`--reset-branch`) |
//! | 76 | [`LOCK_LOST`] | `baton run --backend postgres://...`: the database session holding the lock ended, or the run's guardian stopped the command because the supervisor did not prove its session lived in time; the command was stopped (or never started) |
//! | 79 | [`SUPERSEDED`] | superseded by a newer run of the same group (or cancelled) |
//! | 124 | [`TIMED_OUT`] | the command ran past `--timeout` (a `state edit` filter past `--filter-timeout`) and was killed |
//! | 125 | [`BATON_FAILED`] | baton itself failed: bad usage, bad input, I/O error |
//! | 126 | [`NOT_EXECUTABLE`] | the command could not be executed |
//! | 127 | [`NOT_FOUND`] | the command was not found |
//!
//! `baton job submit --wait` (and `--follow`) exits with the job's end in
//! the same table: succeeded 0; failed, the command's own code (128+N if
//! killed by signal N; 125 if it has none); timed out [`TIMED_OUT`];
//! cancelled or superseded [`SUPERSEDED`]; skipped (mode skip, group busy)
//! [`NOT_ACQUIRED`]; interrupted (the service stopped while it ran)
//! [`BATON_FAILED`]. Every `baton job` command exits [`NOT_ACQUIRED`] when
//! the service is full or draining (HTTP 429/503: try again later) and
//! [`BATON_FAILED`] when it cannot be reached or refuses the request
//! (401, 400, 403, 404, 409).

/// Success.
pub const SUCCESS: i32 = 0;
/// `baton git push`: the rebase onto the remote conflicted.
pub const GIT_CONFLICT: i32 = 1;
/// `baton doctor`: every check passed or warned, none failed; a failure
/// (baton cannot work there) is [`BATON_FAILED`].
pub const DOCTOR_WARNINGS: i32 = 1;
/// `baton workspace list` and `gc`: every readable registry record was
/// listed (collected), but some records could not be read (corrupt or
/// unreadable); each is named on stderr with its path and the reason, and
/// left alone. A failure to remove a workspace is [`BATON_FAILED`].
pub const SOME_UNREADABLE: i32 = 1;
/// `baton state`: the change was made (or an append failed part-way and
/// could not be undone) but could not be confirmed durable (sysexits' EX_IOERR).
pub const CHANGED_NOT_DURABLE: i32 = 74;
/// Not acquired: busy, wait elapsed, skipped by the group, stale token or version.
pub const NOT_ACQUIRED: i32 = 75;
/// `baton run` on the PostgreSQL backend: the database session holding
/// its locks ended (terminated, server restart, network loss) while the
/// command ran, so the command was stopped (TERM, grace, KILL).
pub const LOCK_LOST: i32 = 76;
/// Superseded by a newer run of the group, or cancelled (also a job's end
/// for `baton job submit --wait`).
pub const SUPERSEDED: i32 = 79;
/// The command ran past its timeout and was killed.
pub const TIMED_OUT: i32 = 124;
/// baton itself failed (bad usage, bad input, I/O error).
pub const BATON_FAILED: i32 = 125;
/// The command exists but could not be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// The command was not found.
pub const NOT_FOUND: i32 = 127;
/// A command killed by signal N exits `SIGNALED_BASE + N`, as in shells.
pub const SIGNALED_BASE: i32 = 128;

/// Every code baton itself decides, with its meaning (for `--help` texts and tests).
pub const TABLE: &[(i32, &str)] = &[
    (SUCCESS, "done"),
    (
        GIT_CONFLICT,
        "git push: rebase conflict; doctor: warnings; workspace list/gc: unreadable records",
    ),
    (CHANGED_NOT_DURABLE, "state: changed, durability unknown"),
    (NOT_ACQUIRED, "not acquired"),
    (LOCK_LOST, "lock lost: database session ended"),
    (SUPERSEDED, "superseded"),
    (TIMED_OUT, "timed out"),
    (BATON_FAILED, "baton failed"),
    (NOT_EXECUTABLE, "command not executable"),
    (NOT_FOUND, "command not found"),
];

/// The process exit status for `code`: codes outside 0–255 (which a process
/// cannot exit with) become [`BATON_FAILED`].
pub fn to_status(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(BATON_FAILED as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_fit_a_process_status() {
        for (i, (a, _)) in TABLE.iter().enumerate() {
            assert!((0..=255).contains(a));
            assert!(TABLE[i + 1..].iter().all(|(b, _)| a != b), "{a} twice");
        }
        assert_eq!(to_status(300), 125);
        assert_eq!(to_status(-1), 125);
        assert_eq!(to_status(SIGNALED_BASE + 9), 137);
    }
}
