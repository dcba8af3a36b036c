//! The embedded store: one SQLite file in WAL mode. What is promised to a
//! client (a job acknowledged, a cancel answered) is committed with
//! `synchronous=FULL`: synced (`fdatasync`, see `.cargo/config.toml`)
//! before the answer. What only the service
//! itself relies on (a claim, a process group, a job's end) is committed
//! with `synchronous=NORMAL`: in WAL mode that survives a crash or `kill -9`
//! of the service, and only a power loss can lose it — which also ends every
//! job's processes, and such a job is then reported interrupted (or queued
//! again) on the next start, never lost. The next FULL commit makes
//! everything before it durable too. Every method is one `BEGIN IMMEDIATE`
//! transaction on one connection, run on tokio's blocking pool;
//! submissions are stored by one flusher in batches (group commit), the
//! service's bookkeeping likewise by another (`sqlite_writes`), and the
//! WAL is checkpointed between them (see `checkpoint_if_due`). Debug events
//! (`BATON_LOG=baton_serve::store=debug`) time each query's phases: waiting
//! for a pool thread, for the connection, the query; and each batch's SQL
//! and commit, and each checkpoint.
//!
//! One service owns the file (see `sqlite_files`: a lock on
//! `<store>.lock`), so the connection runs in exclusive locking mode: no
//! `-shm` file is mapped, and a file made unwritable under the service makes
//! its writes fail (reported by `/health`) instead of crashing it.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};

use super::sqlite_files::{self, StoreFiles};
use super::sqlite_writes::{self, Writes};
use baton_store::{
    CancelQueued, Counts, Finish, GroupMode, Job, JobStatus, ListFilter, NewJob, RecordedGroup,
    Recovered, RemoveFinished, Store, StoreError, Submitted,
};

/// The WAL is copied into the database (a checkpoint: two syncs) after
/// this many commits of the service's own bookkeeping, by the one that
/// finds no submission waiting, never by a submission's commit: a client's
/// acknowledgement waits for its own sync only. About 4 pages a commit.
const CHECKPOINT_EVERY: u64 = 2_500;

/// SQLite's own checkpoint, only if no bookkeeping commit found a moment
/// without a waiting submission for this long a WAL (pages of 4 KiB): a
/// bound on the WAL's size, not the usual path. On a disk with less free
/// space than that, the WAL is kept at 1 MiB (`sqlite_files`).
const CHECKPOINT_AT_LEAST: i64 = 16_000;

/// 2: `waiter` (the node whose caller waits for the job).
/// 3: `reset_branch` and `abandoned_ref` (a job that starts its branch over).
/// 4: `order_key` (a job's ordering key in its group).
const SCHEMA_VERSION: i64 = 4;

/// Version 4's column.
const SCHEMA_V4: &str = "ALTER TABLE jobs ADD COLUMN order_key TEXT;";

/// Version 3's columns, added to a store made by an older baton.
const SCHEMA_V3: &str = "ALTER TABLE jobs ADD COLUMN reset_branch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN abandoned_ref TEXT;";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    template      TEXT NOT NULL,
    prompt        TEXT,
    grp           TEXT,
    mode          TEXT NOT NULL,
    timeout_ms    INTEGER NOT NULL,
    branch        TEXT,
    command       TEXT,
    created_at    INTEGER NOT NULL,
    status        TEXT NOT NULL,
    exit_code     INTEGER,
    error         TEXT,
    started_at    INTEGER,
    finished_at   INTEGER,
    workspace     TEXT,
    superseded_by TEXT,
    node          TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    pgroup        TEXT,
    priority      INTEGER NOT NULL DEFAULT 0,
    waiter        TEXT,
    reset_branch  INTEGER NOT NULL DEFAULT 0,
    abandoned_ref TEXT,
    order_key     TEXT
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(status, priority DESC, seq);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs(finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_group ON jobs(grp, status);
";

const COLUMNS: &str = "seq, id, template, prompt, grp, mode, timeout_ms, branch, command, \
    created_at, status, exit_code, error, started_at, finished_at, workspace, superseded_by, \
    node, attempts, pgroup, waiter, reset_branch, abandoned_ref, order_key";

/// A submission waiting for its batch's commit, and where its answer goes.
struct PendingSubmit {
    job: NewJob,
    max_depth: u64,
    pushed: std::time::Instant,
    answer: tokio::sync::oneshot::Sender<Result<Submitted, String>>,
}

/// Jobs in an SQLite file.
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// Submissions waiting for the next group commit.
    submits: Arc<Mutex<Vec<PendingSubmit>>>,
    /// Whether a flusher stores the waiting submissions (see `flush`).
    flushing: Arc<std::sync::atomic::AtomicBool>,
    /// Commits since the last checkpoint (see [`CHECKPOINT_EVERY`]).
    commits: Arc<std::sync::atomic::AtomicU64>,
    /// Bookkeeping writes waiting for the next group commit (see
    /// `sqlite_writes`).
    writes: Arc<Writes>,
    /// The connection's `synchronous` setting now (set only when it
    /// changes; read and written under the connection's lock).
    sync_now: Arc<std::sync::atomic::AtomicBool>,
    // The files' identities, their owner lock, the last write's failure.
    files: Arc<StoreFiles>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteStore")
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, applying the schema,
    /// once this process owns it: it takes the lock `<path>.lock` first and
    /// holds it until the store is dropped, so a second service on the same
    /// file is refused before it reads or changes anything.
    ///
    /// # Errors
    ///
    /// A message naming what failed (another owner: naming the store and
    /// the owner's pid).
    pub fn open(path: &Path) -> Result<SqliteStore, String> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create '{}': {e}", parent.display()))?;
        }
        let owner = sqlite_files::own(path)?;
        // Prompts are stored: the file (and the -wal and -shm files SQLite
        // creates with its mode) is the owner's only, wherever it is.
        crate::private_file(std::fs::OpenOptions::new().create(true).append(true))
            .open(path)
            .map_err(|e| format!("cannot create '{}': {e}", path.display()))?;
        let conn = Connection::open(path).map_err(|e| e.to_string())?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        // One process owns the store (its lock): SQLite's locks are held for
        // the connection's life and, set before the first WAL access, no
        // shared-memory `-shm` file is mapped (a mapped file made unwritable
        // under the service would crash it with SIGBUS).
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(|e| e.to_string())?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| e.to_string())?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(|e| e.to_string())?;
        conn.pragma_update(None, "wal_autocheckpoint", CHECKPOINT_AT_LEAST)
            .map_err(|e| e.to_string())?;
        // A WAL that grew past its usual size (under a long burst) is cut
        // back after its checkpoint; below this it is rewritten in place,
        // which syncs without a change of its size.
        conn.pragma_update(None, "journal_size_limit", CHECKPOINT_AT_LEAST * 4096)
            .map_err(|e| e.to_string())?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| e.to_string())?;
        if version > SCHEMA_VERSION {
            return Err(format!(
                "it was written by a newer baton (schema {version}, this one knows {SCHEMA_VERSION})"
            ));
        }
        // 0 is a new file (SCHEMA makes it whole); an older one gets the
        // columns added since, in one transaction with its new version.
        if (1..SCHEMA_VERSION).contains(&version) {
            let mut added = String::from("BEGIN;");
            if version == 1 {
                added.push_str("ALTER TABLE jobs ADD COLUMN waiter TEXT;");
            }
            if version < 3 {
                added.push_str(SCHEMA_V3);
            }
            added.push_str(SCHEMA_V4);
            added.push_str(&format!("PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"));
            conn.execute_batch(&added).map_err(|e| {
                format!(
                    "cannot add the columns of schema {SCHEMA_VERSION} to schema {version}: {e}"
                )
            })?;
        }
        conn.execute_batch(SCHEMA).map_err(|e| e.to_string())?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(|e| e.to_string())?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            submits: Arc::default(),
            flushing: Arc::default(),
            commits: Arc::default(),
            writes: Arc::default(),
            // Opened with FULL (above).
            sync_now: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            files: Arc::new(StoreFiles::new(path, owner)?),
        })
    }

    /// Stores the waiting submissions until none waits: one batch per
    /// transaction and sync, taken when the connection is free, so the
    /// submissions that arrive during a commit share the next one. One
    /// flusher at a time (`flushing`), not a query thread per submission:
    /// under a steady stream those piled up on the connection (and filled
    /// the blocking pool, 500 threads, 50 MiB).
    async fn flush(&self) {
        loop {
            {
                let pending = self.submits.lock().unwrap_or_else(PoisonError::into_inner);
                if pending.is_empty() {
                    self.flushing
                        .store(false, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
            }
            let submits = Arc::clone(&self.submits);
            let files = Arc::clone(&self.files);
            let ran = self
                .durably("store a job", move |conn| {
                    let batch = sqlite_writes::take_batch(
                        &mut submits.lock().unwrap_or_else(PoisonError::into_inner),
                    );
                    if batch.is_empty() {
                        return Ok(());
                    }
                    let mut answers = Vec::with_capacity(batch.len());
                    let n = batch.len();
                    let oldest = batch
                        .iter()
                        .map(|p| p.pushed.elapsed())
                        .max()
                        .unwrap_or_default();
                    let t0 = std::time::Instant::now();
                    let mut sql = std::time::Duration::ZERO;
                    let committed = (|| {
                        let mut tx =
                            conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                        let mut now = counts(&tx)?;
                        for p in batch {
                            // Each job in its own savepoint: one that fails leaves
                            // the others stored.
                            let mut one = tx.savepoint()?;
                            let mut after = now;
                            let done = submit_one(&one, &mut after, p.job, p.max_depth);
                            if done.is_ok() {
                                one.commit()?;
                                now = after;
                            } else {
                                one.rollback()?;
                            }
                            answers.push((p.answer, done));
                        }
                        sql = t0.elapsed();
                        tx.commit()
                    })();
                    tracing::debug!(
                        target: "baton_serve::store",
                        n,
                        oldest_us = oldest.as_micros() as u64,
                        sql_us = sql.as_micros() as u64,
                        commit_us = (t0.elapsed() - sql).as_micros() as u64,
                        "submit batch"
                    );
                    for (answer, done) in answers {
                        let _ = answer.send(match &committed {
                            Ok(()) => done.map_err(|e| files.failed(&e)),
                            Err(e) => Err(files.failed(e)),
                        });
                    }
                    committed
                })
                .await;
            if let Err(e) = ran {
                // The query did not run (the store is unwritable, say), or
                // its batch failed (answered): what waits now is refused.
                let message = match e {
                    StoreError::Query { message, .. } => message,
                    other => other.to_string(),
                };
                let refused = std::mem::take(
                    &mut *self.submits.lock().unwrap_or_else(PoisonError::into_inner),
                );
                for p in refused {
                    let _ = p.answer.send(Err(message.clone()));
                }
            }
        }
    }

    /// Runs `f`, which only reads (its failure is not a failed write).
    async fn reading<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.with_sync(op, "NORMAL", false, f).await
    }

    /// Runs `f`, which may write, committed with `synchronous=NORMAL` (see
    /// the module docs).
    async fn with<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.with_sync(op, "NORMAL", true, f).await
    }

    /// Runs `f`, which writes, committed with `synchronous=FULL`: on disk
    /// before it returns.
    async fn durably<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.with_sync(op, "FULL", true, f).await
    }

    async fn with_sync<T: Send + 'static>(
        &self,
        op: &'static str,
        sync: &'static str,
        writes: bool,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        let files = Arc::clone(&self.files);
        let submits = Arc::clone(&self.submits);
        let commits = Arc::clone(&self.commits);
        let sync_now = Arc::clone(&self.sync_now);
        let queued = std::time::Instant::now();
        let query = move || {
            let started = queued.elapsed();
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            let locked = queued.elapsed();
            files.check(&conn)?;
            // One statement less per query: the setting changes only
            // between a submission's batch (FULL) and bookkeeping (NORMAL).
            let full = sync == "FULL";
            let set = match sync_now.load(std::sync::atomic::Ordering::Relaxed) == full {
                true => Ok(()),
                false => conn.pragma_update(None, "synchronous", sync).inspect(|()| {
                    sync_now.store(full, std::sync::atomic::Ordering::Relaxed);
                }),
            };
            let done = set
                .and_then(|()| f(&mut conn))
                .map_err(|e| files.failed(&e));
            if writes {
                files.wrote(done.as_ref().err());
                files.watch_space(&conn, done.is_err(), CHECKPOINT_AT_LEAST);
            }
            let ran = queued.elapsed();
            if writes && sync == "NORMAL" && done.is_ok() {
                checkpoint_if_due(&conn, &commits, &submits);
            }
            drop(conn);
            tracing::debug!(
                target: "baton_serve::store",
                op,
                pool_us = started.as_micros() as u64,
                conn_us = (locked - started).as_micros() as u64,
                run_us = (ran - locked).as_micros() as u64,
                "store query"
            );
            done
        };
        let joined = tokio::task::spawn_blocking(query).await;
        match joined {
            Ok(r) => r.map_err(|message| StoreError::Query { op, message }),
            Err(e) => Err(StoreError::Query {
                op,
                message: format!("the query's thread failed: {e}"),
            }),
        }
    }
}

impl SqliteStore {
    /// Runs `f`, which writes the service's bookkeeping, in the next batch
    /// of such writes (see `sqlite_writes`), committed with
    /// `synchronous=NORMAL`; returns once that batch has committed.
    async fn bookkeeping<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (write, answer) = sqlite_writes::write(f);
        if self.writes.push(write) {
            let store = self.clone();
            tokio::spawn(async move { store.flush_writes().await });
        }
        match answer.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(StoreError::Query { op, message }),
            Err(_) => Err(StoreError::Query {
                op,
                message: self
                    .files
                    .problem()
                    .unwrap_or_else(|| "the batch storing it was dropped".to_string()),
            }),
        }
    }

    /// Stores the waiting bookkeeping writes until none waits, a batch per
    /// transaction, one flusher at a time (as `flush` does for submissions).
    async fn flush_writes(&self) {
        while !self.writes.stop_if_empty() {
            let writes = Arc::clone(&self.writes);
            let ran = self
                .with("store the service's bookkeeping", move |conn| {
                    let batch = writes.take();
                    let n = batch.len();
                    let t0 = std::time::Instant::now();
                    let done = match n {
                        0 => Ok(()),
                        _ => sqlite_writes::run_batch(conn, batch),
                    };
                    tracing::debug!(target: "baton_serve::store", n, us = t0.elapsed().as_micros() as u64, "bookkeeping batch");
                    done
                })
                .await;
            if ran.is_err() {
                // The batch did not run (the store's files were replaced,
                // say) or failed (its writers were told): what waits now
                // is refused (its writers read the store's problem).
                drop(self.writes.take());
            }
        }
    }
}

/// After a bookkeeping commit: copies the WAL into the database once
/// [`CHECKPOINT_EVERY`] commits have accumulated, unless a submission waits
/// (it would wait for the checkpoint's syncs; a later commit does it).
/// A failed checkpoint is retried by the next one; nothing is lost by it.
fn checkpoint_if_due(
    conn: &Connection,
    commits: &std::sync::atomic::AtomicU64,
    submits: &Mutex<Vec<PendingSubmit>>,
) {
    use std::sync::atomic::Ordering;
    if commits.fetch_add(1, Ordering::Relaxed) + 1 < CHECKPOINT_EVERY
        || !submits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    {
        return;
    }
    let t0 = std::time::Instant::now();
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1));
    tracing::debug!(target: "baton_serve::store", us = t0.elapsed().as_micros() as u64, pages = ?done, "checkpoint");
    if done.is_ok() {
        commits.store(0, Ordering::Relaxed);
    }
}

/// Stores one submission in the open transaction `tx` (see
/// [`SqliteStore::submit`]: a batch shares one commit); `now` is what runs
/// and waits in `tx`, kept up to date here (counted once per batch).
fn submit_one(
    tx: &Connection,
    now: &mut Counts,
    job: NewJob,
    max_depth: u64,
) -> rusqlite::Result<Submitted> {
    if now.running + now.queued >= max_depth {
        return Ok(Submitted::Full { counts: *now });
    }
    let command = job
        .command
        .as_ref()
        .map(|c| serde_json::to_string(c).unwrap_or_default());
    tx.prepare_cached(
        "INSERT INTO jobs (id, template, prompt, grp, mode, timeout_ms, branch, command, \
         created_at, status, waiter, reset_branch, order_key) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', ?10, ?11, ?12)",
    )?
    .execute(params![
        job.id,
        job.template,
        job.prompt,
        job.group,
        job.mode.as_str(),
        to_i64(job.timeout_ms),
        job.branch,
        command,
        job.created_at,
        job.waiter,
        job.reset_branch,
        job.order,
    ])?;
    let mut superseded = Vec::new();
    if let (Some(group), GroupMode::Supersede | GroupMode::Coalesce) = (&job.group, job.mode) {
        // Queued jobs with a newer ordering key stay (`outranks`).
        let mut queued = tx.prepare(
            "SELECT id, order_key FROM jobs WHERE grp = ?1 AND status = 'queued' AND id != ?2",
        )?;
        let rows = queued.query_map(params![group, job.id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        let mut mark = tx.prepare(
            "UPDATE jobs SET status = 'superseded', superseded_by = ?1, finished_at = ?2 \
             WHERE id = ?3 AND status = 'queued'",
        )?;
        for row in rows {
            let (id, order) = row?;
            if baton_store::outranks(job.order.as_deref(), order.as_deref()) {
                mark.execute(params![job.id, job.created_at, id])?;
                superseded.push(id);
            }
        }
    }
    let stored = get_job(tx, &job.id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
    // The position is the number of queued jobs, this one included.
    let position = (now.queued + 1).saturating_sub(superseded.len() as u64);
    now.queued = position;
    Ok(Submitted::Queued {
        job: Box::new(stored),
        position,
        superseded,
    })
}

fn job_from_row(r: &Row<'_>) -> rusqlite::Result<Job> {
    let command: Option<String> = r.get(8)?;
    let status: String = r.get(10)?;
    let mode: String = r.get(5)?;
    let pgroup: Option<String> = r.get(19)?;
    Ok(Job {
        seq: r.get(0)?,
        spec: NewJob {
            id: r.get(1)?,
            template: r.get(2)?,
            prompt: r.get(3)?,
            group: r.get(4)?,
            mode: GroupMode::parse(&mode).unwrap_or_default(),
            timeout_ms: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
            branch: r.get(7)?,
            reset_branch: r.get(21)?,
            command: command.and_then(|c| serde_json::from_str(&c).ok()),
            created_at: r.get(9)?,
            waiter: r.get(20)?,
            order: r.get(23)?,
        },
        status: JobStatus::parse(&status).unwrap_or(JobStatus::Failed),
        exit_code: r.get(11)?,
        error: r.get(12)?,
        started_at: r.get(13)?,
        finished_at: r.get(14)?,
        workspace: r.get(15)?,
        abandoned_ref: r.get(22)?,
        superseded_by: r.get(16)?,
        node: r.get(17)?,
        attempts: u32::try_from(r.get::<_, i64>(18)?).unwrap_or(0),
        process_group: pgroup.and_then(|p| serde_json::from_str(&p).ok()),
    })
}

fn get_job(conn: &Connection, id: &str) -> rusqlite::Result<Option<Job>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"))?
        .query_row([id], job_from_row)
        .optional()
}

/// How many jobs run (an index range of at most `max_concurrency` rows;
/// [`counts`] also counts the queue, which a claim does not need).
fn count_running(conn: &Connection) -> rusqlite::Result<u64> {
    conn.prepare_cached("SELECT COUNT(*) FROM jobs WHERE status = 'running'")?
        .query_row([], |r| Ok(u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0)))
}

/// Moves the oldest claimable queued job (see [`Store::claim_next`]) to
/// running on `node`; `None` if there is none. The caller checks the cap.
fn claim_one(conn: &Connection, node: &str, now: i64) -> rusqlite::Result<Option<Job>> {
    let next: Option<String> = conn
        .prepare_cached(
            "SELECT id FROM jobs WHERE status = 'queued' \
             AND NOT (grp IS NOT NULL AND mode IN ('queue', 'coalesce') AND grp IN \
                 (SELECT grp FROM jobs WHERE status = 'running' AND grp IS NOT NULL)) \
             ORDER BY priority DESC, seq LIMIT 1",
        )?
        .query_row([], |r| r.get(0))
        .optional()?;
    let Some(id) = next else {
        return Ok(None);
    };
    conn.prepare_cached(
        "UPDATE jobs SET status = 'running', started_at = ?1, node = ?2, \
         attempts = attempts + 1, pgroup = NULL, workspace = NULL WHERE id = ?3",
    )?
    .execute(params![now, node, id])?;
    get_job(conn, &id)
}

fn counts(conn: &Connection) -> rusqlite::Result<Counts> {
    conn.prepare_cached(
        "SELECT COALESCE(SUM(status = 'running'), 0), COALESCE(SUM(status = 'queued'), 0) \
         FROM jobs WHERE status IN ('running', 'queued')",
    )?
    .query_row([], |r| {
        Ok(Counts {
            running: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
            queued: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
        })
    })
}

/// A submission's answer from its batch.
fn answered(
    answer: Result<Result<Submitted, String>, tokio::sync::oneshot::error::RecvError>,
) -> Result<Submitted, StoreError> {
    match answer {
        Ok(Ok(submitted)) => Ok(submitted),
        Ok(Err(message)) => Err(StoreError::Query {
            op: "store a job",
            message,
        }),
        Err(_) => Err(StoreError::Query {
            op: "store a job",
            message: "the batch storing it was dropped".to_string(),
        }),
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[async_trait]
impl Store for SqliteStore {
    fn problem(&self) -> Option<String> {
        self.files.problem()
    }

    async fn submit(&self, job: NewJob, max_depth: u64) -> Result<Submitted, StoreError> {
        // Group commit: the submission joins the waiting ones; one flusher
        // at a time stores them, a batch per transaction and sync, and
        // answers each submitter (see `flush`).
        let (answer, rx) = tokio::sync::oneshot::channel();
        let start = {
            let mut pending = self.submits.lock().unwrap_or_else(PoisonError::into_inner);
            pending.push(PendingSubmit {
                job,
                max_depth,
                pushed: std::time::Instant::now(),
                answer,
            });
            !self
                .flushing
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        };
        if start {
            let store = self.clone();
            tokio::spawn(async move { store.flush().await });
        }
        answered(rx.await)
    }

    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let id = id.to_string();
        self.reading("read a job", move |conn| get_job(conn, &id))
            .await
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError> {
        let f = filter.clone();
        self.reading("list jobs", move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE (?1 IS NULL OR status = ?1) \
                 AND (?2 IS NULL OR grp = ?2) AND (?3 IS NULL OR seq < ?3) \
                 ORDER BY seq DESC LIMIT ?4"
            ))?;
            let rows = stmt.query_map(
                params![
                    f.status.map(JobStatus::as_str),
                    f.group,
                    f.before_seq,
                    i64::from(f.limit)
                ],
                job_from_row,
            )?;
            rows.collect()
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
        let node = node.to_string();
        self.bookkeeping("claim a job", move |conn| {
            let mut claimed = Vec::new();
            // Counted once: each claim here adds one.
            let mut running = count_running(conn)?;
            while (claimed.len() as u64) < n && running < max_running {
                match claim_one(conn, &node, now)? {
                    Some(job) => claimed.push(job),
                    None => break,
                }
                running += 1;
            }
            Ok(claimed)
        })
        .await
    }

    async fn set_process_group(&self, id: &str, group: RecordedGroup) -> Result<(), StoreError> {
        let id = id.to_string();
        let json = serde_json::to_string(&group).unwrap_or_default();
        self.bookkeeping("record a job's process group", move |conn| {
            conn.prepare_cached("UPDATE jobs SET pgroup = ?1 WHERE id = ?2 AND status = 'running'")?
                .execute(params![json, id])
                .map(drop)
        })
        .await
    }

    async fn set_workspace(
        &self,
        id: &str,
        path: &str,
        abandoned_ref: Option<&str>,
    ) -> Result<(), StoreError> {
        let (id, path) = (id.to_string(), path.to_string());
        let kept = abandoned_ref.map(str::to_string);
        self.bookkeeping("record a job's workspace", move |conn| {
            conn.execute(
                "UPDATE jobs SET workspace = ?1, abandoned_ref = COALESCE(?3, abandoned_ref) \
                 WHERE id = ?2",
                params![path, id, kept],
            )
            .map(drop)
        })
        .await
    }

    async fn finish(&self, id: &str, finish: &Finish) -> Result<bool, StoreError> {
        let id = id.to_string();
        let f = finish.clone();
        self.bookkeeping("record a job's end", move |conn| {
            if f.status == JobStatus::Queued {
                // Interrupted, and its template retries: queued again.
                let n = conn
                    .prepare_cached(
                        "UPDATE jobs SET status = 'queued', priority = 1, started_at = NULL, \
                     node = NULL, pgroup = NULL, workspace = NULL, error = ?1 \
                     WHERE id = ?2 AND status = 'running'",
                    )?
                    .execute(params![f.error, id])?;
                return Ok(n == 1);
            }
            let n = conn
                .prepare_cached(
                    "UPDATE jobs SET status = ?1, exit_code = ?2, error = ?3, superseded_by = ?4, \
                 finished_at = ?5, pgroup = NULL WHERE id = ?6 AND status = 'running'",
                )?
                .execute(params![
                    f.status.as_str(),
                    f.exit_code,
                    f.error,
                    f.superseded_by,
                    f.finished_at,
                    id
                ])?;
            Ok(n == 1)
        })
        .await
    }

    async fn cancel_queued(&self, id: &str, now: i64) -> Result<CancelQueued, StoreError> {
        let id = id.to_string();
        self.durably("cancel a job", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let Some(job) = get_job(&tx, &id)? else {
                return Ok(CancelQueued::Unknown);
            };
            if job.status != JobStatus::Queued {
                return Ok(CancelQueued::NotQueued(job.status));
            }
            tx.execute(
                "UPDATE jobs SET status = 'cancelled', finished_at = ?1, \
                 error = 'cancelled while queued' WHERE id = ?2",
                params![now, id],
            )?;
            let job = get_job(&tx, &id)?.ok_or(rusqlite::Error::QueryReturnedNoRows)?;
            tx.commit()?;
            Ok(CancelQueued::Cancelled(Box::new(job)))
        })
        .await
    }

    async fn recover(
        &self,
        node: &str,
        ids: &[String],
        retry: &(dyn for<'a> Fn(&'a str) -> bool + Send + Sync),
        now: i64,
    ) -> Result<Vec<Recovered>, StoreError> {
        let node = node.to_string();
        let ids: std::collections::HashSet<String> = ids.iter().cloned().collect();
        let running = self
            .reading("find interrupted jobs", move |conn| {
                let mut stmt = conn.prepare(&format!(
                    "SELECT {COLUMNS} FROM jobs WHERE status = 'running' AND node = ?1 ORDER BY seq"
                ))?;
                let rows = stmt.query_map([node], job_from_row)?;
                rows.collect::<rusqlite::Result<Vec<Job>>>()
            })
            .await?;
        let plan: Vec<(Job, bool)> = running
            .into_iter()
            .filter(|j| ids.contains(&j.spec.id))
            .map(|j| {
                // A job whose caller waited is not run again: the caller's
                // connection ended with the previous instance.
                let again = j.spec.waiter.is_none() && retry(&j.spec.template) && j.attempts <= 1;
                (j, again)
            })
            .collect();
        let todo = plan.clone();
        self.durably("mark interrupted jobs", move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for (job, again) in &todo {
                if *again {
                    tx.execute(
                        "UPDATE jobs SET status = 'queued', priority = 1, started_at = NULL, \
                         node = NULL, pgroup = NULL, workspace = NULL, \
                         error = 'interrupted by a restart; queued again' \
                         WHERE id = ?1 AND status = 'running'",
                        [&job.spec.id],
                    )?;
                } else {
                    tx.execute(
                        "UPDATE jobs SET status = 'interrupted', finished_at = ?1, pgroup = NULL, \
                         error = 'the service stopped while the job ran' \
                         WHERE id = ?2 AND status = 'running'",
                        params![now, job.spec.id],
                    )?;
                }
            }
            tx.commit()
        })
        .await?;
        Ok(plan
            .into_iter()
            .map(|(job, requeued)| Recovered { job, requeued })
            .collect())
    }

    async fn evict(&self, before: i64) -> Result<Vec<String>, StoreError> {
        self.with("evict finished jobs", move |conn| {
            let mut stmt = conn.prepare(
                "DELETE FROM jobs WHERE finished_at IS NOT NULL AND finished_at < ?1 \
                 AND status NOT IN ('queued', 'running') RETURNING id",
            )?;
            let rows = stmt.query_map([before], |r| r.get(0))?;
            rows.collect()
        })
        .await
    }

    async fn remove_finished(&self, id: &str) -> Result<RemoveFinished, StoreError> {
        let id = id.to_string();
        self.with("remove a finished job", move |conn| {
            let removed = conn
                .prepare_cached(
                    "DELETE FROM jobs WHERE id = ?1 AND status NOT IN ('queued', 'running') \
                     RETURNING id",
                )?
                .query_map([&id], |r| r.get::<_, String>(0))?
                .count();
            if removed > 0 {
                return Ok(RemoveFinished::Removed);
            }
            let status: Option<String> = conn
                .prepare_cached("SELECT status FROM jobs WHERE id = ?1")?
                .query_map([&id], |r| r.get(0))?
                .next()
                .transpose()?;
            Ok(match status {
                Some(s) => {
                    RemoveFinished::Active(JobStatus::parse(&s).unwrap_or(JobStatus::Running))
                }
                None => RemoveFinished::Unknown,
            })
        })
        .await
    }

    async fn counts(&self) -> Result<Counts, StoreError> {
        self.reading("count jobs", |conn| counts(conn)).await
    }

    async fn status_counts(&self) -> Result<Vec<(JobStatus, u64)>, StoreError> {
        self.reading("count jobs by status", |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT status, COUNT(*) FROM jobs GROUP BY status")?;
            let rows = stmt.query_map([], |r| {
                let s: String = r.get(0)?;
                let n: i64 = r.get(1)?;
                Ok((s, n))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (s, n) = row?;
                if let Some(st) = JobStatus::parse(&s) {
                    out.push((st, u64::try_from(n).unwrap_or(0)));
                }
            }
            Ok(out)
        })
        .await
    }
}
