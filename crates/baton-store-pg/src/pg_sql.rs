//! The PostgreSQL store's schema, its migration, and the SQL steps its
//! operations share.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use baton_pg::one_line;

use super::pg_session::NODE_CLASS;
use baton_store::{rfc3339, Counts, GroupMode, Job, JobStatus, NewJob, NodeInfo};

type PgResult<T> = Result<T, tokio_postgres::Error>;

/// 2: `waiter` (the node whose caller waits for the job). 3: the nodes'
/// `backend_pid` (the backend pid of the session that holds the liveness lock).
/// 4: `baton_depth` (running + queued jobs, kept by triggers).
/// 5: `reset_branch` and `abandoned_ref` (a job that starts its branch over).
/// 6: the depth set to 0 when `baton_jobs` is truncated.
/// 7: `order_key` (a job's ordering key in its group).
pub(super) const SCHEMA_VERSION: i32 = 7;

/// The advisory lock (transaction level) that serialises batches of
/// submissions (the depth cap), and takeovers.
pub(super) const QUEUE_KEY: i64 = 0x6261_746f_6e5f_7131; // "baton_q1"

/// The advisory lock (transaction level) that serialises claims (the
/// concurrency cap), and takeovers. Claims and submissions need not wait
/// for each other: a claim moves a job from queued to running, which
/// leaves the depth (running + queued) as it was, and a submission adds
/// no running job.
pub(super) const CLAIM_KEY: i64 = 0x6261_746f_6e5f_6331; // "baton_c1"

/// The advisory lock (transaction level) held while migrating.
const MIGRATE_KEY: i64 = 0x6261_746f_6e5f_6d31; // "baton_m1"

const SCHEMA_V1: &str = "
CREATE TABLE baton_jobs (
    seq           BIGSERIAL PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    template      TEXT NOT NULL,
    prompt        TEXT,
    grp           TEXT,
    mode          TEXT NOT NULL,
    timeout_ms    BIGINT NOT NULL,
    branch        TEXT,
    command       TEXT,
    created_at    BIGINT NOT NULL,
    status        TEXT NOT NULL,
    exit_code     INTEGER,
    error         TEXT,
    started_at    BIGINT,
    finished_at   BIGINT,
    workspace     TEXT,
    superseded_by TEXT,
    node          TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    pgroup        TEXT,
    priority      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX baton_jobs_queue ON baton_jobs(status, priority DESC, seq);
CREATE INDEX baton_jobs_finished ON baton_jobs(finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX baton_jobs_group ON baton_jobs(grp, status);
CREATE INDEX baton_jobs_node ON baton_jobs(node, status);
CREATE TABLE baton_nodes (
    num          SERIAL PRIMARY KEY,
    id           TEXT NOT NULL UNIQUE,
    host         TEXT,
    pid          INTEGER,
    started_at   TIMESTAMPTZ,
    heartbeat_at TIMESTAMPTZ
);
";

const SCHEMA_V2: &str = "ALTER TABLE baton_jobs ADD COLUMN IF NOT EXISTS waiter TEXT";

const SCHEMA_V3: &str = "ALTER TABLE baton_nodes ADD COLUMN IF NOT EXISTS backend_pid INTEGER";

/// The queue's depth (running + queued jobs) as one row that triggers keep
/// in every transaction that changes it, whatever baton runs it: a job
/// stored or deleted as running or queued, or moved between those and the
/// ended statuses. A claim (queued to running) and a return to the queue
/// leave it alone, so they never wait for its row. Counted under the lock
/// that keeps writers of `baton_jobs` out until the commit.
const SCHEMA_V4: &str = "
LOCK TABLE baton_jobs IN SHARE ROW EXCLUSIVE MODE;
CREATE TABLE baton_depth (
    one   BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    depth BIGINT NOT NULL
);
CREATE FUNCTION baton_depth_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE baton_depth SET depth = depth + TG_ARGV[0]::bigint;
    RETURN NULL;
END $$;
CREATE TRIGGER baton_depth_insert AFTER INSERT ON baton_jobs FOR EACH ROW
    WHEN (NEW.status IN ('queued', 'running')) EXECUTE PROCEDURE baton_depth_add('1');
CREATE TRIGGER baton_depth_delete AFTER DELETE ON baton_jobs FOR EACH ROW
    WHEN (OLD.status IN ('queued', 'running')) EXECUTE PROCEDURE baton_depth_add('-1');
CREATE TRIGGER baton_depth_leave AFTER UPDATE OF status ON baton_jobs FOR EACH ROW
    WHEN (OLD.status IN ('queued', 'running') AND NEW.status NOT IN ('queued', 'running'))
    EXECUTE PROCEDURE baton_depth_add('-1');
CREATE TRIGGER baton_depth_enter AFTER UPDATE OF status ON baton_jobs FOR EACH ROW
    WHEN (OLD.status NOT IN ('queued', 'running') AND NEW.status IN ('queued', 'running'))
    EXECUTE PROCEDURE baton_depth_add('1');
INSERT INTO baton_depth (depth)
    SELECT COUNT(*) FROM baton_jobs WHERE status IN ('queued', 'running');
";

const SCHEMA_V5: &str = "ALTER TABLE baton_jobs \
    ADD COLUMN IF NOT EXISTS reset_branch BOOLEAN NOT NULL DEFAULT FALSE, \
    ADD COLUMN IF NOT EXISTS abandoned_ref TEXT";

/// A `TRUNCATE` of `baton_jobs` (an operator emptying the table) fires no
/// row trigger: it empties the depth too (it holds the table's exclusive
/// lock, so no other writer counts meanwhile).
const SCHEMA_V6: &str = "
CREATE OR REPLACE FUNCTION baton_depth_clear() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE baton_depth SET depth = 0;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS baton_depth_truncate ON baton_jobs;
CREATE TRIGGER baton_depth_truncate AFTER TRUNCATE ON baton_jobs FOR EACH STATEMENT
    EXECUTE PROCEDURE baton_depth_clear();
";

const SCHEMA_V7: &str = "ALTER TABLE baton_jobs ADD COLUMN IF NOT EXISTS order_key TEXT";

pub(super) const COLUMNS: &str =
    "seq, id, template, prompt, grp, mode, timeout_ms, branch, command, \
    created_at, status, exit_code, error, started_at, finished_at, workspace, superseded_by, \
    node, attempts, pgroup, waiter, reset_branch, abandoned_ref, order_key";

pub(super) async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), String> {
    let tx = client.transaction().await.map_err(|e| one_line(&e))?;
    let step = async {
        tx.batch_execute(&format!(
            "SELECT pg_advisory_xact_lock({MIGRATE_KEY}); \
             CREATE TABLE IF NOT EXISTS baton_serve_schema (version INTEGER NOT NULL)"
        ))
        .await?;
        let version: Option<i32> = tx
            .query_one("SELECT max(version) FROM baton_serve_schema", &[])
            .await?
            .get(0);
        Ok::<_, tokio_postgres::Error>(version.unwrap_or(0))
    };
    let version = step.await.map_err(|e| one_line(&e))?;
    if version > SCHEMA_VERSION {
        return Err(format!(
            "it was written by a newer baton (schema {version}, this one knows {SCHEMA_VERSION})"
        ));
    }
    for (step, sql) in (1..).zip([
        SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7,
    ]) {
        if version < step {
            tx.batch_execute(sql).await.map_err(|e| one_line(&e))?;
            tx.execute(
                "INSERT INTO baton_serve_schema (version) VALUES ($1)",
                &[&step],
            )
            .await
            .map_err(|e| one_line(&e))?;
        }
    }
    tx.commit().await.map_err(|e| one_line(&e))
}

pub(super) fn job_from_row(r: &Row) -> Job {
    let command: Option<String> = r.get(8);
    let status: String = r.get(10);
    let mode: String = r.get(5);
    let pgroup: Option<String> = r.get(19);
    Job {
        seq: r.get(0),
        spec: NewJob {
            id: r.get(1),
            template: r.get(2),
            prompt: r.get(3),
            group: r.get(4),
            mode: GroupMode::parse(&mode).unwrap_or_default(),
            timeout_ms: u64::try_from(r.get::<_, i64>(6)).unwrap_or(0),
            branch: r.get(7),
            reset_branch: r.get(21),
            command: command.and_then(|c| serde_json::from_str(&c).ok()),
            created_at: r.get(9),
            waiter: r.get(20),
            order: r.get(23),
        },
        status: JobStatus::parse(&status).unwrap_or(JobStatus::Failed),
        exit_code: r.get(11),
        error: r.get(12),
        started_at: r.get(13),
        finished_at: r.get(14),
        workspace: r.get(15),
        abandoned_ref: r.get(22),
        superseded_by: r.get(16),
        node: r.get(17),
        attempts: u32::try_from(r.get::<_, i32>(18)).unwrap_or(0),
        process_group: pgroup.and_then(|p| serde_json::from_str(&p).ok()),
    }
}

pub(super) async fn get_job(c: &impl GenericClient, id: &str) -> PgResult<Option<Job>> {
    let select = c
        .prepare_cached(&format!("SELECT {COLUMNS} FROM baton_jobs WHERE id = $1"))
        .await?;
    let row = c.query_opt(&select, &[&id]).await?;
    Ok(row.as_ref().map(job_from_row))
}

/// Jobs running and queued now (see [`counts_from_row`]): the running
/// ones counted (at most the cluster's cap), the queued ones the depth
/// less those, read in one statement (one snapshot), so both are exact.
/// Counting the queued ones instead made every submission batch read the
/// whole queue.
pub(super) const COUNTS: &str = "SELECT r.n, d.depth - r.n FROM baton_depth d, \
    (SELECT COUNT(*) AS n FROM baton_jobs WHERE status = 'running') r";

pub(super) async fn counts(c: &impl GenericClient) -> PgResult<Counts> {
    let count = c.prepare_cached(COUNTS).await?;
    Ok(counts_from_row(&c.query_one(&count, &[]).await?))
}

/// The answer of [`COUNTS`].
pub(super) fn counts_from_row(r: &Row) -> Counts {
    Counts {
        running: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
        queued: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
    }
}

/// Takes the queue's lock until the end of the transaction; sent at once
/// (a request pipelined after it runs once the lock is held).
pub(super) async fn lock_queue(c: &impl GenericClient) -> PgResult<()> {
    c.batch_execute(&format!("SELECT pg_advisory_xact_lock({QUEUE_KEY})"))
        .await
}

/// Takes the claims' lock until the end of the transaction (see
/// [`lock_queue`]).
pub(super) async fn lock_claims(c: &impl GenericClient) -> PgResult<()> {
    c.batch_execute(&format!("SELECT pg_advisory_xact_lock({CLAIM_KEY})"))
        .await
}

/// Takes both locks, in the one order every taker of both follows: a
/// takeover (recovery, the rescuer) changes running jobs and the queue.
pub(super) async fn lock_all(c: &impl GenericClient) -> PgResult<()> {
    c.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({QUEUE_KEY}); SELECT pg_advisory_xact_lock({CLAIM_KEY})"
    ))
    .await
}

pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Marks `jobs` (running) interrupted, or queued again first in line when
/// `plan` says so; sends a wake-up if any was queued again.
pub(super) async fn mark_interrupted(
    c: &impl GenericClient,
    plan: &[(Job, bool)],
    now: i64,
    why: &str,
) -> PgResult<()> {
    for (job, again) in plan {
        if *again {
            c.execute(
                "UPDATE baton_jobs SET status = 'queued', priority = 1, started_at = NULL, \
                 node = NULL, pgroup = NULL, workspace = NULL, error = $2 \
                 WHERE id = $1 AND status = 'running'",
                &[&job.spec.id, &format!("{why}; queued again")],
            )
            .await?;
        } else {
            c.execute(
                "UPDATE baton_jobs SET status = 'interrupted', finished_at = $2, error = $3 \
                 WHERE id = $1 AND status = 'running'",
                &[&job.spec.id, &now, &why],
            )
            .await?;
        }
    }
    if plan.iter().any(|(_, again)| *again) {
        c.batch_execute("NOTIFY baton_jobs").await?;
    }
    Ok(())
}

pub(super) async fn running_on(c: &impl GenericClient, node: &str) -> PgResult<Vec<Job>> {
    let rows = c
        .query(
            &format!(
                "SELECT {COLUMNS} FROM baton_jobs WHERE status = 'running' AND node = $1 \
                 ORDER BY seq FOR UPDATE"
            ),
            &[&node],
        )
        .await?;
    Ok(rows.iter().map(job_from_row).collect())
}

pub(super) type Retry<'a> = &'a (dyn for<'b> Fn(&'b str) -> bool + Send + Sync);

pub(super) fn plan(jobs: Vec<Job>, retry: Retry<'_>) -> Vec<(Job, bool)> {
    jobs.into_iter()
        .map(|j| {
            // A job whose caller waited is not run again: its caller's
            // connection ended with its node.
            let again = j.spec.waiter.is_none() && retry(&j.spec.template) && j.attempts <= 1;
            (j, again)
        })
        .collect()
}

/// The nodes in `baton_nodes`: live (their liveness lock is held by their
/// own session, the backend in `backend_pid`, per `pg_locks`; by any session
/// for a node of a baton that did not record it) or seen in the last day or
/// still marked running jobs. A dead node whose jobs another node is taking
/// over (`reap` holds its lock meanwhile) is not live.
pub(super) async fn nodes(c: &impl GenericClient) -> PgResult<Vec<NodeInfo>> {
    let rows = c
        .query(
            "WITH n AS (SELECT n.id, n.host, n.pid, n.started_at, n.heartbeat_at, \
                 EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' \
                     AND l.database = (SELECT oid FROM pg_database \
                         WHERE datname = current_database()) \
                     AND l.classid = $1::int4::oid AND l.objid = n.num::oid \
                     AND l.objsubid = 2 AND l.granted \
                     AND (n.backend_pid IS NULL OR l.pid = n.backend_pid)) AS live, \
                 (SELECT COUNT(*) FROM baton_jobs j \
                     WHERE j.status = 'running' AND j.node = n.id) AS running \
                 FROM baton_nodes n) \
             SELECT id, host, pid, live, \
                 (extract(epoch FROM started_at) * 1000)::bigint, \
                 (extract(epoch FROM heartbeat_at) * 1000)::bigint, running \
             FROM n WHERE live OR running > 0 OR heartbeat_at > now() - interval '1 day' \
             ORDER BY id",
            &[&NODE_CLASS],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| NodeInfo {
            id: r.get(0),
            host: r.get(1),
            pid: r.get(2),
            live: r.get(3),
            started_at: r.get::<_, Option<i64>>(4).map(rfc3339),
            heartbeat_at: r.get::<_, Option<i64>>(5).map(rfc3339),
            running: u64::try_from(r.get::<_, i64>(6)).unwrap_or(0),
        })
        .collect())
}
