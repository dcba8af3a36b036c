//! Settling the rows of holders whose session ended without releasing.
//!
//! The server frees a lock the instant its holder's session ends, but the
//! holder's command may still be running: the supervisor of a session that
//! was terminated, or that lost its network, is only then stopping it
//! (TERM, grace, KILL). So a new holder does not start while a conflicting
//! row of an ended session remains (a supervisor deletes its rows once its
//! command is gone). A row of this machine whose supervisor is dead is
//! settled at once: what is left of its command's process group is
//! terminated (identity-checked) and the row removed. A row of another
//! machine whose supervisor never confirms (the machine died) is given up
//! on after the longest a live supervisor needs to notice and stop its
//! command: heartbeat interval + heartbeat limit + its grace + 1 s.
//! On Windows the command's processes are in its supervisor's Job Object
//! and die with it: there, a late supervisor of this machine is itself
//! terminated rather than a process group.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_lock::{CancelToken, HolderRecord, LockError, LockRequest, Mode};

use crate::error::PgError;
use crate::session::Session;

/// How often a pending row is looked at again.
const RECHECK: Duration = Duration::from_millis(50);

/// Grace assumed when a row records none (the run default).
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// A row of an ended session that conflicts with the grant to be made.
struct DeadRow {
    token: i64,
    record: Option<HolderRecord>,
}

/// Waits until no row of an ended session conflicts with a grant of `slot`
/// in `req.mode`, settling what can be settled from here. Returns the
/// record of the latest holder settled (it ended without releasing: the
/// next holder is told, `previous_holder_died`).
pub(crate) fn dead_holders(
    session: &Session,
    req: &LockRequest,
    id: i32,
    slot: u32,
    deadline: Option<Instant>,
    group: bool,
) -> Result<Option<HolderRecord>, PgError> {
    let mut first_seen: HashMap<i64, Instant> = HashMap::new();
    let mut latest: Option<(i64, HolderRecord)> = None;
    loop {
        let rows = conflicting(session, req.mode, id, slot)?;
        if rows.is_empty() {
            return Ok(latest.map(|(_, r)| r));
        }
        let mut pending = false;
        for row in rows {
            let seen = *first_seen.entry(row.token).or_insert_with(Instant::now);
            if settle(&row, seen) {
                delete(session, id, row.token)?;
                if let Some(mut rec) = row.record {
                    if !matches!(&latest, Some((t, _)) if *t >= row.token) {
                        rec.token = u64::try_from(row.token).unwrap_or(0);
                        rec.previous = None;
                        latest = Some((row.token, rec));
                    }
                }
            } else {
                pending = true;
            }
        }
        if !pending {
            continue;
        }
        // A group run also looks for its mark here: a newer run's cancel
        // that lands between two of our statements is lost.
        if req.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
            || (group && marked(session, req)?)
        {
            return Err(LockError::Cancelled {
                name: req.name.to_string(),
            }
            .into());
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(LockError::Busy {
                name: req.name.to_string(),
                path: session.db.url().into(),
                holder: Some(
                    "a holder whose database session ended, still stopping its command".into(),
                ),
                waited: Duration::ZERO,
                policy: req.wait,
            }
            .into());
        }
        // Sleep in the server, not here: a group run that a newer run
        // marks meanwhile is told by `pg_cancel_backend`, which only
        // reaches a statement in progress (the caller reads the mark).
        let c = Arc::clone(&session.client);
        let secs = RECHECK.as_secs_f64();
        let slept = session.run("wait for a holder that ended", |_| async move {
            c.execute("SELECT pg_sleep($1)", &[&secs]).await.map(|_| ())
        });
        if let Err(e) = slept {
            if req.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
                return Err(LockError::Cancelled {
                    name: req.name.to_string(),
                }
                .into());
            }
            return Err(e);
        }
    }
}

/// Whether the group run `req` (its key and run id) was marked superseded.
fn marked(session: &Session, req: &LockRequest) -> Result<bool, PgError> {
    let c = Arc::clone(&session.client);
    let (key, run) = (req.name.to_string(), req.run_id.clone().unwrap_or_default());
    session.run("read the run's mark", |_| async move {
        let row = c
            .query_opt(
                "SELECT superseded_by IS NOT NULL FROM baton_group_runs \
                 WHERE key = $1 AND run_id = $2",
                &[&key, &run],
            )
            .await?;
        Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
    })
}

/// Whether `row` may be removed now; terminates what is left of its
/// command here when its supervisor is known dead.
fn settle(row: &DeadRow, first_seen: Instant) -> bool {
    let Some(rec) = &row.record else {
        return true; // written by a newer baton: nothing we could act on
    };
    let grace = rec
        .command_group
        .map_or(DEFAULT_GRACE, |g| Duration::from_millis(g.grace_ms));
    let bound = crate::session::FENCE + grace + Duration::from_secs(1);
    let expired = first_seen.elapsed() >= bound;
    let here =
        rec.process.host == baton_lock::hostname() && rec.process.boot_id == baton_lock::boot_id();
    if !here {
        if expired {
            tracing::warn!(token = row.token, host = %rec.process.host, pid = rec.process.pid, "a holder whose session ended never confirmed that its command stopped; going ahead");
        }
        return expired;
    }
    let supervisor_dead = rec.process.liveness() == baton_lock::Liveness::Dead;
    if !(supervisor_dead || expired) {
        return false; // it is stopping its command; it deletes the row when done
    }
    if let Some(g) = rec.command_group {
        stop_command(rec, g, supervisor_dead);
    }
    true
}

/// Terminates what is left of the process group a holder recorded
/// (identity-checked: a reused group id is left alone).
#[cfg(unix)]
fn stop_command(_rec: &HolderRecord, g: baton_lock::CommandGroup, _supervisor_dead: bool) {
    baton_proc::terminate_group(
        g.pgid,
        baton_proc::GroupIdentity::Recorded {
            leader_start_time: g.leader_start_time,
            session: g.session,
        },
        Duration::from_millis(g.grace_ms),
    );
}

/// Windows: a command runs in a Job Object that only its supervisor holds,
/// and that kills every process in it when it closes. A dead supervisor
/// left nothing running; a live one that never confirmed is terminated
/// (identity-checked by its start time, which its open handle pins), and
/// its command's processes die with its job.
#[cfg(windows)]
fn stop_command(rec: &HolderRecord, _g: baton_lock::CommandGroup, supervisor_dead: bool) {
    if supervisor_dead {
        return;
    }
    let expected = || rec.process.liveness() == baton_lock::Liveness::Alive;
    if let Err(e) = baton_proc::terminate_verified(rec.process.pid, DEFAULT_GRACE, expected) {
        tracing::warn!(
            pid = rec.process.pid,
            "cannot stop the supervisor of a holder whose session ended: {e}"
        );
    }
}

/// Rows of ended sessions that conflict with a grant of `slot` in `mode`.
fn conflicting(session: &Session, mode: Mode, id: i32, slot: u32) -> Result<Vec<DeadRow>, PgError> {
    let c = Arc::clone(&session.client);
    let slot = i32::try_from(slot).unwrap_or(0);
    let rows = session.run(
        "look for holders that ended without releasing",
        |_| async move {
            c.query(
            "SELECT token, mode, record FROM baton_lock_holders h WHERE lock_id = $1 AND slot = $2 \
             AND NOT baton_holder_live(h.session_pid, h.session_start)",
            &[&id, &slot],
        )
        .await
        },
    )?;
    Ok(rows
        .into_iter()
        .filter(|r| mode != Mode::Shared || r.get::<_, String>(1) != "shared")
        .map(|r| DeadRow {
            token: r.get(0),
            record: serde_json::from_value(r.get(2)).ok(),
        })
        .collect())
}

fn delete(session: &Session, id: i32, token: i64) -> Result<(), PgError> {
    let c = Arc::clone(&session.client);
    session.run("remove a dead holder's row", |_| async move {
        c.execute(
            "DELETE FROM baton_lock_holders WHERE lock_id = $1 AND token = $2",
            &[&id, &token],
        )
        .await
        .map(|_| ())
    })
}

/// Windows: a late supervisor of this machine is terminated (its command's
/// Job Object closes with it), but only the very process recorded.
#[cfg(all(test, windows))]
mod windows_tests {
    use std::process::{Child, Command, Stdio};

    use baton_lock::{CommandGroup, HolderKind, HolderRecord, ProcessIdentity};

    use super::*;

    /// A stand-in supervisor: `cmd.exe` waiting for a line on its stdin,
    /// which the test keeps open.
    fn supervisor() -> Child {
        Command::new("cmd.exe")
            .args(["/c", "set /p line="])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn row(process: ProcessIdentity) -> DeadRow {
        let group = CommandGroup {
            pgid: process.pid,
            leader_start_time: process.start_time,
            grace_ms: 100,
            session: 0,
            stopping_since_ms: None,
        };
        let record = HolderRecord {
            process,
            owner: "test".into(),
            operation: None,
            run_id: "run".into(),
            acquired_at: "2026-01-01T00:00:00Z".into(),
            token: 7,
            mode: "exclusive".into(),
            slot: 0,
            kind: HolderKind::Run,
            command_group: Some(group),
            acquired_for: None,
            abandoned: false,
            previous: None,
            caller_thread: None,
            previous_outcome: None,
        };
        DeadRow {
            token: 7,
            record: Some(record),
        }
    }

    /// Seen long enough ago that a live supervisor is late.
    fn long_ago() -> Instant {
        Instant::now() - (crate::session::FENCE + Duration::from_secs(5))
    }

    fn exited_within(child: &mut Child, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_late_live_supervisor_is_terminated() {
        let mut child = supervisor();
        let pid = i32::try_from(child.id()).unwrap();
        let identity = ProcessIdentity::of_pid(pid).unwrap();
        assert!(
            !settle(&row(identity.clone()), Instant::now()),
            "not late yet: wait"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "left running while not late"
        );
        assert!(settle(&row(identity), long_ago()), "late: settled");
        assert!(
            exited_within(&mut child, Duration::from_secs(5)),
            "the late supervisor still runs"
        );
    }

    #[test]
    fn a_reused_pid_is_not_terminated() {
        let mut child = supervisor();
        let pid = i32::try_from(child.id()).unwrap();
        let mut identity = ProcessIdentity::of_pid(pid).unwrap();
        identity.start_time += 1; // recorded for an earlier process with this pid
        assert!(
            settle(&row(identity), long_ago()),
            "the recorded supervisor is dead"
        );
        assert!(
            !exited_within(&mut child, Duration::from_millis(500)),
            "another process was terminated"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
