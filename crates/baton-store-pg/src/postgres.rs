//! The shared store: PostgreSQL, for several `baton serve` nodes that are
//! one service. TLS follows the URL's `sslmode`/`sslrootcert`, with libpq's
//! meaning (`baton_pg::client_config`).
//!
//! Batches of submissions serialise on one transaction-level advisory lock
//! (`QUEUE_KEY`), claims on another (`CLAIM_KEY`), takeovers take both, so
//! the depth and concurrency caps are exact at every instant across nodes
//! (a claim leaves the depth as it was, a submission the running jobs);
//! FIFO is a `bigserial`. Submissions and the bookkeeping are group-committed
//! (`pg_batch.rs`); a claim takes every free slot of the node in one
//! transaction, its statements pipelined; statements are prepared once per
//! pooled connection. After a submit, a finish or
//! a re-queue the transaction sends `NOTIFY baton_jobs`; cancels of jobs
//! running elsewhere go out as `NOTIFY baton_cancel, '<id>'`. Node liveness
//! is the session in `pg_session.rs`; `reap` takes over the jobs of nodes
//! whose liveness lock is free.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{broadcast, oneshot};

use baton_pg::one_line;

use super::pg_batch::{self, dropped, Change, Queue, Write};
use super::pg_pool::{pool_error, pooled, too_slow, OP_LIMIT};
use super::pg_reap;
use super::pg_session::{self, Shared, NODE_CLASS};
use super::pg_sql::{
    counts, get_job, job_from_row, lock_all, lock_claims, mark_interrupted, migrate, nodes, plan,
    running_on, to_i64, Retry, COLUMNS,
};
use super::pg_submit::{self, Submit};
use baton_store::{
    CancelQueued, Counts, Finish, Job, JobStatus, ListFilter, NewJob, NodeInfo, RecordedGroup,
    Recovered, RemoveFinished, Store, StoreError, StoreEvent, Submitted,
};

type PgResult<T> = Result<T, tokio_postgres::Error>;

/// Jobs in a PostgreSQL database shared by the nodes of one service.
pub struct PgStore {
    pool: Pool,
    node: String,
    shared: Arc<Shared>,
    /// Submissions waiting for the next group commit.
    submits: Arc<Queue<Submit>>,
    /// Bookkeeping waiting for the next group commit.
    writes: Arc<Queue<Write>>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgStore")
    }
}

impl PgStore {
    /// Connects to `url`, creates or migrates the schema, and establishes
    /// this node's session (liveness lock, LISTEN).
    ///
    /// # Errors
    ///
    /// A one-line message naming what failed.
    pub async fn open(url: &str, node: String) -> Result<PgStore, String> {
        let (mut cfg, tls) = baton_pg::client_config(url).map_err(config_error)?;
        baton_pg::liveness::client_keepalives(&mut cfg);
        // Every connection of this node says whose it is, so a rescuer that
        // ends a frozen node's session ends its other connections too (see
        // `pg_reap`), unless the URL names the application itself.
        if cfg.get_application_name().is_none() {
            cfg.application_name(pg_session::application_name(&node));
        }
        let manager = Manager::from_config(
            cfg.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(OP_LIMIT))
            .create_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| e.to_string())?;
        let mut client = pool.get().await.map_err(|e| tls_error(&tls, &e))?;
        migrate(&mut client).await?;
        drop(client);
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            live: AtomicBool::new(false),
            num: AtomicI32::new(0),
            backend: AtomicI32::new(0),
            events,
        });
        pg_session::start(cfg, tls, node.clone(), Arc::clone(&shared)).await?;
        Ok(PgStore {
            pool,
            node,
            shared,
            submits: Arc::default(),
            writes: Arc::default(),
        })
    }

    /// A pooled connection.
    async fn conn(&self, op: &'static str) -> Result<deadpool_postgres::Object, StoreError> {
        pooled(&self.pool, op).await
    }

    /// Makes `change` in the next batch of bookkeeping (see `pg_batch`);
    /// returns once that batch has committed: whether it changed a row.
    async fn bookkeeping(&self, change: Change) -> Result<bool, StoreError> {
        let op = change.op();
        let (answer, rx) = oneshot::channel();
        if self.writes.push(Write { change, answer }) {
            let (pool, node) = (self.pool.clone(), self.node.clone());
            tokio::spawn(pg_batch::flush_writes(pool, node, Arc::clone(&self.writes)));
        }
        rx.await.unwrap_or_else(|_| Err(dropped(op)))
    }
}

/// Whether this node's liveness lock is held by its own session (`$3`,
/// that session's backend pid).
///
/// Granted to another session it says nothing of this node, and a claim
/// that took it so would start jobs the others consider dead: a rescuer
/// holds a dead node's lock from before its takeover's transaction until
/// after its commit, and a claim of that node queued behind the takeover on
/// the claims' lock checks in between (its session ended after its
/// scheduler looked at `is_live`, and the claim ran on: the pool's wait and
/// the statements' each take up to `OP_LIMIT`); a second process with this
/// node id takes the lock as soon as this one's session ends. Such a
/// claim's job would run unvouched under its fence's first `FENCE`, while
/// the rescuer's next round takes it over (queued again, it runs elsewhere
/// too): two runs at once. A backend pid is reused only after the OS's pid
/// space wraps around; the session's own backend holds the lock until it
/// exits.
///
/// And only while its heartbeat is younger than the fence (`$4`, ms): a
/// rescuer ends the session of a node whose heartbeat is older than the
/// settle wait (a stopped process keeps its session), and that node's
/// claim, thawed just then, must not pass while its backend is still on
/// its way out (`pg_reap.rs`). A node that beats claims: its heartbeat is
/// at most `HEARTBEAT` old.
const HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
    AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2 AND granted \
    AND pid = $3) AND EXISTS (SELECT 1 FROM baton_nodes WHERE num = $2 \
    AND heartbeat_at > now() - make_interval(secs => $4::int8 / 1000.0))";

/// Whether a claim may find something: fewer than `$1` jobs run and some
/// are queued (read without the claims' lock, so only a hint).
const WORTH_CLAIMING: &str = "SELECT (SELECT COUNT(*) FROM baton_jobs \
    WHERE status = 'running') < $1 AND EXISTS (SELECT 1 FROM baton_jobs WHERE status = 'queued')";

/// How many jobs run (in the whole store: the cluster's cap).
const RUNNING: &str = "SELECT COUNT(*) FROM baton_jobs WHERE status = 'running'";

/// Moves the oldest claimable queued job (see `Store::claim_next`) to
/// running on `$2` at `$1`.
const CLAIM: &str = "UPDATE baton_jobs SET status = 'running', started_at = $1, node = $2, \
    attempts = attempts + 1, pgroup = NULL, workspace = NULL \
    WHERE id = (SELECT id FROM baton_jobs WHERE status = 'queued' \
        AND NOT (grp IS NOT NULL AND mode IN ('queue', 'coalesce') AND grp IN \
            (SELECT grp FROM baton_jobs WHERE status = 'running' AND grp IS NOT NULL)) \
        ORDER BY priority DESC, seq LIMIT 1 FOR UPDATE SKIP LOCKED) \
    RETURNING ";

/// `f`, within `OP_LIMIT`, its error as a store error. A transaction
/// dropped unfinished is rolled back by the driver.
async fn timed<T>(
    op: &'static str,
    f: impl std::future::Future<Output = PgResult<T>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(OP_LIMIT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(StoreError::Query {
            op,
            message: one_line(&e),
        }),
        Err(_) => Err(too_slow(op)),
    }
}

/// A URL the store cannot use (the store's error already shows the URL).
fn config_error(e: baton_pg::PgError) -> String {
    match e {
        baton_pg::PgError::Url { reason, .. } => format!("invalid URL: {reason}"),
        baton_pg::PgError::Tls { failure, .. } => failure.to_string(),
        other => other.to_string(),
    }
}

/// A first connection's error: the TLS check that failed, if one did.
fn tls_error(tls: &baton_pg::Tls, e: &deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(b) => tls
            .failure(b)
            .map_or_else(|| one_line(b), |failure| failure.to_string()),
        other => pool_error(other),
    }
}

#[async_trait]
impl Store for PgStore {
    fn node(&self) -> &str {
        &self.node
    }

    fn events(&self) -> Option<broadcast::Receiver<StoreEvent>> {
        Some(self.shared.events.subscribe())
    }

    fn is_live(&self) -> bool {
        self.shared.live.load(Ordering::SeqCst)
    }

    async fn nodes(&self) -> Result<Option<Vec<NodeInfo>>, StoreError> {
        let op = "list the nodes";
        let c = self.conn(op).await?;
        timed(op, nodes(&c)).await.map(Some)
    }

    async fn submit(&self, job: NewJob, max_depth: u64) -> Result<Submitted, StoreError> {
        // Group commit: the submission joins the waiting ones; one flusher
        // at a time stores them, a batch per transaction (see `pg_batch`).
        let (answer, rx) = oneshot::channel();
        let submit = Submit {
            job,
            max_depth,
            answer,
        };
        if self.submits.push(submit) {
            let (pool, queue) = (self.pool.clone(), Arc::clone(&self.submits));
            tokio::spawn(pg_submit::flush_submits(pool, queue));
        }
        rx.await.unwrap_or_else(|_| Err(dropped("store a job")))
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let op = "read a job";
        let c = self.conn(op).await?;
        timed(op, get_job(&c, id)).await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let op = "list jobs";
        let c = self.conn(op).await?;
        let status = filter.status.map(JobStatus::as_str);
        let limit = i64::from(filter.limit);
        timed(op, async {
            let rows = c
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM baton_jobs WHERE ($1::text IS NULL OR status = $1) \
                         AND ($2::text IS NULL OR grp = $2) AND ($3::bigint IS NULL OR seq < $3) \
                         ORDER BY seq DESC LIMIT $4"
                    ),
                    &[&status, &filter.group, &filter.before_seq, &limit],
                )
                .await?;
            Ok(rows.iter().map(job_from_row).collect())
        })
        .await
    }

    async fn claim_many(
        &self,
        node: &str,
        max_running: u64,
        n: u64,
        now: i64,
    ) -> Result<Vec<Job>, StoreError> {
        let op = "claim a job";
        let num = self.shared.num.load(Ordering::SeqCst);
        let backend = self.shared.backend.load(Ordering::SeqCst);
        let c = self.conn(op).await?;
        let claimed = timed(op, async {
            let claim = format!("{CLAIM}{COLUMNS}");
            let (worth, held, running, claim) = futures_util::try_join!(
                c.prepare_cached(WORTH_CLAIMING),
                c.prepare_cached(HELD),
                c.prepare_cached(RUNNING),
                c.prepare_cached(&claim),
            )?;
            // Without the claims' lock first: most wake-ups (every node hears
            // of every submission and end) find the cap reached or nothing
            // queued, and need not hold the lock that other claims wait for. A stale "no" is followed by the wake-up of
            // what made room (its NOTIFY comes after its commit).
            let cap = to_i64(max_running);
            if n == 0 || !c.query_one(&worth, &[&cap]).await?.get::<_, bool>(0) {
                return Ok(Vec::new());
            }
            let fence_ms = i64::try_from(baton_pg::FENCE.as_millis()).unwrap_or(i64::MAX);
            let node_lock: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&NODE_CLASS, &num, &backend, &fence_ms];
            // Sent together, run in order: the lock before the reads.
            let ((), (), held, running) = futures_util::try_join!(
                c.batch_execute("BEGIN"),
                lock_claims(&c),
                // Only while this node's session holds its liveness lock: a
                // node whose session has gone (and whose jobs others take
                // over) claims nothing (see `HELD`).
                c.query_one(&held, &node_lock),
                c.query_one(&running, &[]),
            )?;
            // The start is when the claim holds the claims' lock (claims of
            // several nodes wait for each other here): taken before, a stored start
            // could precede the stored end of the job whose slot it took.
            let now = now.max(baton_store::now_ms());
            let running = u64::try_from(running.get::<_, i64>(0)).unwrap_or(0);
            let free = match held.get::<_, bool>(0) {
                true => n.min(max_running.saturating_sub(running)),
                false => 0,
            };
            // Each the oldest claimable job, seeing the claims before it (a
            // queue job whose group got one here waits); sent together with
            // the COMMIT (which a failed claim makes a rollback).
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&now, &node];
            let claims = (0..free).map(|_| c.query_opt(&claim, &params));
            let (claimed, ()) = futures_util::try_join!(
                futures_util::future::try_join_all(claims),
                c.batch_execute("COMMIT"),
            )?;
            Ok(claimed.iter().flatten().map(job_from_row).collect())
        })
        .await;
        if claimed.is_err() {
            // It may be in the middle of the transaction: not for another.
            drop(deadpool_postgres::Object::take(c));
        }
        claimed
    }

    async fn set_process_group(&self, id: &str, group: RecordedGroup) -> Result<(), StoreError> {
        let json = serde_json::to_string(&group).unwrap_or_default();
        let id = id.to_string();
        self.bookkeeping(Change::Group { id, json }).await.map(drop)
    }

    async fn set_workspace(
        &self,
        id: &str,
        path: &str,
        abandoned_ref: Option<&str>,
    ) -> Result<(), StoreError> {
        let (id, path) = (id.to_string(), path.to_string());
        let abandoned_ref = abandoned_ref.map(str::to_string);
        self.bookkeeping(Change::Workspace {
            id,
            path,
            abandoned_ref,
        })
        .await
        .map(drop)
    }

    async fn finish(&self, id: &str, f: &Finish) -> Result<bool, StoreError> {
        let (id, finish) = (id.to_string(), f.clone());
        self.bookkeeping(Change::Finish { id, finish }).await
    }

    async fn cancel_queued(&self, id: &str, now: i64) -> Result<CancelQueued, StoreError> {
        let op = "cancel a job";
        let mut c = self.conn(op).await?;
        timed(op, async {
            let tx = c.transaction().await?;
            let row = tx
                .query_opt(
                    "SELECT status FROM baton_jobs WHERE id = $1 FOR UPDATE",
                    &[&id],
                )
                .await?;
            let Some(row) = row else {
                return Ok(CancelQueued::Unknown);
            };
            let status: String = row.get(0);
            let status = JobStatus::parse(&status).unwrap_or(JobStatus::Failed);
            if status != JobStatus::Queued {
                return Ok(CancelQueued::NotQueued(status));
            }
            let row = tx
                .query_one(
                    &format!(
                        "UPDATE baton_jobs SET status = 'cancelled', finished_at = $1, \
                         error = 'cancelled while queued' WHERE id = $2 RETURNING {COLUMNS}"
                    ),
                    &[&now, &id],
                )
                .await?;
            tx.commit().await?;
            Ok(CancelQueued::Cancelled(Box::new(job_from_row(&row))))
        })
        .await
    }

    async fn request_cancel(&self, id: &str) -> Result<bool, StoreError> {
        let op = "ask another node to cancel a job";
        let c = self.conn(op).await?;
        timed(
            op,
            c.execute("SELECT pg_notify('baton_cancel', $1)", &[&id]),
        )
        .await
        .map(|_| true)
    }

    async fn recover(
        &self,
        node: &str,
        ids: &[String],
        retry: Retry<'_>,
        now: i64,
    ) -> Result<Vec<Recovered>, StoreError> {
        let op = "mark interrupted jobs";
        let mut c = self.conn(op).await?;
        timed(op, async {
            let tx = c.transaction().await?;
            lock_all(&tx).await?;
            let mut jobs = running_on(&tx, node).await?;
            jobs.retain(|j| ids.contains(&j.spec.id));
            let plan = plan(jobs, retry);
            mark_interrupted(&tx, &plan, now, "interrupted by a restart").await?;
            tx.commit().await?;
            Ok(plan
                .into_iter()
                .map(|(job, requeued)| Recovered { job, requeued })
                .collect())
        })
        .await
    }

    async fn reap(
        &self,
        retry: Retry<'_>,
        settle: baton_store::Settle,
        now: i64,
    ) -> Result<Vec<Recovered>, StoreError> {
        let c = self.conn("take over the jobs of dead nodes").await?;
        pg_reap::reap(c, &self.node, retry, settle, now).await
    }

    async fn evict(&self, before: i64) -> Result<Vec<String>, StoreError> {
        let op = "evict finished jobs";
        let c = self.conn(op).await?;
        let rows = timed(
            op,
            c.query(
                "DELETE FROM baton_jobs WHERE finished_at IS NOT NULL AND finished_at < $1 \
                 AND status NOT IN ('queued', 'running') RETURNING id",
                &[&before],
            ),
        )
        .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn remove_finished(&self, id: &str) -> Result<RemoveFinished, StoreError> {
        let op = "remove a finished job";
        let c = self.conn(op).await?;
        timed(op, async {
            let removed = c
                .query_opt(
                    "DELETE FROM baton_jobs WHERE id = $1 AND status NOT IN ('queued', 'running') \
                     RETURNING id",
                    &[&id],
                )
                .await?;
            if removed.is_some() {
                return Ok(RemoveFinished::Removed);
            }
            let row = c
                .query_opt("SELECT status FROM baton_jobs WHERE id = $1", &[&id])
                .await?;
            Ok(match row {
                Some(r) => {
                    let s: String = r.get(0);
                    RemoveFinished::Active(JobStatus::parse(&s).unwrap_or(JobStatus::Running))
                }
                None => RemoveFinished::Unknown,
            })
        })
        .await
    }

    async fn counts(&self) -> Result<Counts, StoreError> {
        let op = "count jobs";
        let c = self.conn(op).await?;
        timed(op, counts(&c)).await
    }

    async fn status_counts(&self) -> Result<Vec<(JobStatus, u64)>, StoreError> {
        let op = "count jobs by status";
        let c = self.conn(op).await?;
        let rows = timed(
            op,
            c.query(
                "SELECT status, COUNT(*) FROM baton_jobs GROUP BY status",
                &[],
            ),
        )
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let s: String = r.get(0);
                let n: i64 = r.get(1);
                JobStatus::parse(&s).map(|st| (st, u64::try_from(n).unwrap_or(0)))
            })
            .collect())
    }
}
