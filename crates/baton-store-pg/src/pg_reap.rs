//! The rescuer's half in the shared store: takes over the jobs of nodes
//! that stopped beating. Design: see `docs/src/design/service.md`, "The
//! rescuer: timing and fencing", and `docs/src/design/postgres.md`, "A
//! frozen node".
//!
//! A node is dead when its liveness lock is free (its session ended). A
//! node whose process is stopped (`SIGSTOP`, a debugger, a paused
//! container) keeps its session, since its kernel still answers the TCP
//! keepalives, and so its lock: its guardians stop its jobs at the fence,
//! but the store would show them running, holding the cluster's slots, for
//! as long as it is frozen. So a node whose heartbeat is older than the
//! settle wait has its session ended (`pg_terminate_backend` of the backend
//! recorded as holding its lock, as `baton lock break` does for a lock),
//! and its jobs are taken over as a dead node's; its other connections
//! (its `application_name`) are ended too, since one frozen inside a
//! transaction holds that transaction's locks. Such a node is taken over
//! sooner ([`Settle::stopped`], the fence + 1 s) than one whose session
//! ended ([`Settle::dead`], + its grace): stopped, it stops nothing itself,
//! so its grace buys nothing. Thawed, it finds its
//! session ended, as after a network loss: it stops what it still runs
//! (nothing: its guardians did) and establishes a new session.

use std::time::Duration;

use baton_pg::one_line;

use super::pg_pool::{too_slow, OP_LIMIT};
use super::pg_session::{application_name, NODE_CLASS};
use super::pg_sql::{lock_all, mark_interrupted, plan, running_on, Retry};
use baton_store::{Job, Recovered, Settle, StoreError};

type PgResult<T> = Result<T, tokio_postgres::Error>;

/// How long a takeover waits for the liveness lock of a node whose session
/// it ended (the server ends a terminated backend asynchronously); the
/// next round tries again.
const ENDED_WAIT: Duration = Duration::from_secs(2);

/// Takes over the jobs of nodes other than `me` whose session has ended and
/// whose heartbeat is older than `settle.dead`, or whose heartbeat is older
/// than `settle.stopped` while their session holds their lock (it is ended
/// here).
pub(super) async fn reap(
    mut c: deadpool_postgres::Object,
    me: &str,
    retry: Retry<'_>,
    settle: Settle,
    now: i64,
) -> Result<Vec<Recovered>, StoreError> {
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let waits = Waits {
        dead_ms: ms(settle.dead),
        stopped_ms: ms(settle.stopped),
    };
    let settle_ms = waits.dead_ms.min(waits.stopped_ms);
    let op = "take over the jobs of dead nodes";
    let candidates = match tokio::time::timeout(
        OP_LIMIT,
        c.query(
            // Nodes that ran jobs, and nodes whose callers waited for queued
            // jobs (chat completions), that stopped beating.
            "SELECT DISTINCT j.node, n.num FROM ( \
               SELECT node FROM baton_jobs \
               WHERE status = 'running' AND node IS NOT NULL AND node <> $1 \
               UNION SELECT waiter FROM baton_jobs \
               WHERE status = 'queued' AND waiter IS NOT NULL AND waiter <> $1 \
             ) j LEFT JOIN baton_nodes n ON n.id = j.node \
             WHERE n.heartbeat_at IS NULL \
                OR n.heartbeat_at < now() - make_interval(secs => $2::int8 / 1000.0)",
            &[&me, &settle_ms],
        ),
    )
    .await
    {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => {
            return Err(StoreError::Query {
                op,
                message: one_line(&e),
            })
        }
        Err(_) => return Err(too_slow(op)),
    };
    let mut out = Vec::new();
    for row in candidates {
        let node: String = row.get(0);
        let num: Option<i32> = row.get(1);
        let step = take_over(&mut c, &node, num, waits, retry, now);
        match tokio::time::timeout(OP_LIMIT, step).await {
            Ok(Ok(plan)) => out.extend(
                plan.into_iter()
                    .map(|(job, requeued)| Recovered { job, requeued }),
            ),
            other => {
                // The connection may still hold the node's lock: close it.
                drop(deadpool_postgres::Object::take(c));
                return Err(match other {
                    Ok(Err(e)) => StoreError::Query {
                        op,
                        message: one_line(&e),
                    },
                    _ => too_slow(op),
                });
            }
        }
    }
    Ok(out)
}

/// [`Settle`] in milliseconds.
#[derive(Clone, Copy)]
struct Waits {
    dead_ms: i64,
    stopped_ms: i64,
}

/// Takes over `node`'s jobs if it is dead, holding its liveness lock
/// meanwhile (so a restart of that node cannot recover them at the same
/// moment); ends its session first if its heartbeat stopped while its
/// session holds the lock.
async fn take_over(
    c: &mut deadpool_postgres::Object,
    node: &str,
    num: Option<i32>,
    waits: Waits,
    retry: Retry<'_>,
    now: i64,
) -> PgResult<Vec<(Job, bool)>> {
    // A session that ended by itself: the node may be alive, cut off, and
    // still stopping its jobs' escaped processes; one ended here: stopped.
    let mut settle_ms = waits.dead_ms;
    if let Some(num) = num {
        if !try_lock(c, num).await? {
            if !end_stalled_session(c, node, num, waits.stopped_ms).await? {
                return Ok(Vec::new());
            }
            settle_ms = waits.stopped_ms;
            let until = tokio::time::Instant::now() + ENDED_WAIT;
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if try_lock(c, num).await? {
                    break;
                }
                if tokio::time::Instant::now() >= until {
                    return Ok(Vec::new());
                }
            }
        }
    }
    let marked = async {
        let tx = c.transaction().await?;
        lock_all(&tx).await?;
        // Still silent, now that its lock is held here: a node whose
        // session came back meanwhile (it beat, or a restart registered
        // it) stops its own jobs; they are not taken over under it.
        let silent: bool = tx
            .query_one(
                "SELECT COALESCE((SELECT heartbeat_at < now() - \
                     make_interval(secs => $2::int8 / 1000.0) \
                     FROM baton_nodes WHERE id = $1), true)",
                &[&node, &settle_ms],
            )
            .await?
            .get(0);
        if !silent {
            return Ok(Vec::new());
        }
        let plan = plan(running_on(&tx, node).await?, retry);
        let why = format!("its node '{node}' died while the job ran");
        mark_interrupted(&tx, &plan, now, &why).await?;
        // Its callers' queued jobs: their connections ended with it, and
        // their clients retry elsewhere; run now, a prompt would run twice
        // (as `cancel_abandoned` at a node's own restart).
        let abandoned = tx
            .query(
                "UPDATE baton_jobs SET status = 'cancelled', finished_at = $1, \
                 error = 'cancelled while queued: the node its caller waited on died' \
                 WHERE status = 'queued' AND waiter = $2 RETURNING id",
                &[&now, &node],
            )
            .await?;
        tx.commit().await?;
        for row in abandoned {
            let id: String = row.get(0);
            tracing::warn!(target: "baton_serve::store", job = %id, node = %node, "cancelled a queued job whose caller waited on a dead node");
        }
        Ok::<_, tokio_postgres::Error>(plan)
    }
    .await;
    if let Some(num) = num {
        c.execute(
            "SELECT pg_advisory_unlock($1::int4, $2::int4)",
            &[&NODE_CLASS, &num],
        )
        .await?;
    }
    marked
}

/// Takes node `num`'s liveness lock if it is free.
async fn try_lock(c: &deadpool_postgres::Object, num: i32) -> PgResult<bool> {
    Ok(c.query_one(
        "SELECT pg_try_advisory_lock($1::int4, $2::int4)",
        &[&NODE_CLASS, &num],
    )
    .await?
    .get(0))
}

/// Ends the session that holds node `num`'s liveness lock if it is the
/// node's own (the backend it recorded) and its heartbeat is still older
/// than the settle wait, in one statement: a node that beat meanwhile
/// keeps its session. Whether a session was ended. A database user that
/// may not end it (not the same role, a superuser or a member of
/// `pg_signal_backend`) is told in the log, and the node stays listed live.
async fn end_stalled_session(
    c: &deadpool_postgres::Object,
    node: &str,
    num: i32,
    settle_ms: i64,
) -> PgResult<bool> {
    let ended = c
        .query_opt(
            "SELECT l.pid, (extract(epoch FROM now() - n.heartbeat_at) * 1000)::int8, \
                 pg_terminate_backend(l.pid) \
             FROM baton_nodes n JOIN pg_locks l ON l.locktype = 'advisory' \
                 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND l.classid = $1::int4::oid AND l.objid = n.num::oid AND l.objsubid = 2 \
                 AND l.granted AND l.pid = n.backend_pid \
             WHERE n.num = $2 AND n.id = $3 \
                 AND n.heartbeat_at < now() - make_interval(secs => $4::int8 / 1000.0)",
            &[&NODE_CLASS, &num, &node, &settle_ms],
        )
        .await;
    match ended {
        Ok(Some(row)) => {
            let (pid, silent_ms, ended): (i32, i64, bool) = (row.get(0), row.get(1), row.get(2));
            // Its other connections too: one frozen inside a transaction
            // holds that transaction's locks (the claims' or the queue's,
            // which every node and this takeover wait for) until the
            // server ends it.
            let others = c
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() AND application_name = $1 \
                     AND pid <> pg_backend_pid()",
                    &[&application_name(node)],
                )
                .await;
            if let Err(e) = others {
                tracing::warn!(target: "baton_serve::store", node = %node, error = %one_line(&e), "cannot end the other connections of a node that stopped beating");
            }
            tracing::warn!(
                target: "baton_serve::store",
                node = %node,
                backend = pid,
                silent_ms,
                ended,
                "ended the database session of a node that stopped beating but kept its session (a stopped process?): its jobs are taken over"
            );
            Ok(ended)
        }
        Ok(None) => Ok(false),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            tracing::warn!(
                target: "baton_serve::store",
                node = %node,
                error = %one_line(&e),
                "a node stopped beating but keeps its session, and this database user may not end it (grant it pg_signal_backend): its jobs hold their slots until it beats again or its session ends"
            );
            Ok(false)
        }
        Err(e) => Err(e),
    }
}
