//! Group commit on PostgreSQL: what arrives while a batch is in flight
//! shares the next transaction, and every caller is answered only after its
//! batch has committed, so a job is acknowledged once it is stored and a
//! job's end is stored before its waiters hear of it or its slot counts as
//! free. Submissions are batched in `pg_submit`; the service's bookkeeping
//! (process groups, workspaces, ends) here: one round trip a batch, its
//! `BEGIN`, statements and `COMMIT` pipelined, one `NOTIFY baton_jobs` for
//! its ends.
//!
//! A batch runs without savepoints. If the server refuses one of its
//! statements (a value it rejects), the batch is rolled back and each of
//! its members runs again alone, in arrival order, and gets that outcome:
//! one that fails fails alone, as when each had a transaction of its own.
//! If the connection or the time fails instead, every member gets that
//! error. A connection whose transaction was begun by hand and failed is
//! closed, never returned to the pool in the middle of it. Design:
//! `docs/src/design/service.md`, "The claim protocol".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::oneshot;

use baton_pg::one_line;

use super::pg_pool::{pooled, too_slow, OP_LIMIT};
use baton_store::{Finish, JobStatus, StoreError};

type PgResult<T> = Result<T, tokio_postgres::Error>;

/// One statement of a pipeline.
pub(super) type Step<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = PgResult<T>> + Send + 'a>>;

/// What waits for the next batch, and whether a flusher takes it.
pub(super) struct Queue<T> {
    items: Mutex<Vec<T>>,
    flushing: AtomicBool,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            items: Mutex::new(Vec::new()),
            flushing: AtomicBool::new(false),
        }
    }
}

impl<T> Queue<T> {
    /// Queues `item`; true when the caller must start a flusher (none runs).
    pub(super) fn push(&self, item: T) -> bool {
        self.items
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(item);
        !self.flushing.swap(true, Ordering::SeqCst)
    }

    fn take(&self) -> Vec<T> {
        std::mem::take(&mut *self.items.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Ends the flusher if nothing waits (true); an item queued after this
    /// starts a new one.
    fn stop_if_empty(&self) -> bool {
        let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        if items.is_empty() {
            self.flushing.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }
}

/// Lets the next push start a flusher if this one ends without emptying
/// its queue (its task was dropped or panicked); what waits is then
/// dropped, and its callers are told so.
struct Flusher<'a, T> {
    queue: &'a Queue<T>,
    stopped: bool,
}

impl<T> Drop for Flusher<'_, T> {
    fn drop(&mut self) {
        if !self.stopped {
            // Under the queue's lock: a push after it starts a flusher.
            let mut items = self
                .queue
                .items
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let dropped = std::mem::take(&mut *items);
            self.queue.flushing.store(false, Ordering::SeqCst);
            drop(items);
            drop(dropped);
        }
    }
}

/// Runs `run` on what waits in `queue`, a batch at a time, until nothing
/// waits: what arrives while a batch runs goes into the next one.
pub(super) async fn flush<T, F>(queue: &Queue<T>, mut run: impl FnMut(Vec<T>) -> F)
where
    F: std::future::Future<Output = ()>,
{
    let mut flusher = Flusher {
        queue,
        stopped: false,
    };
    while !queue.stop_if_empty() {
        run(queue.take()).await;
    }
    flusher.stopped = true;
}

/// The error of a caller whose batch was dropped before it answered.
pub(super) fn dropped(op: &'static str) -> StoreError {
    StoreError::Query {
        op,
        message: "the batch storing it was dropped".into(),
    }
}

/// Why a batch's transaction failed.
pub(super) struct Failed {
    /// The error each member gets.
    pub error: StoreError,
    /// Whether the server refused a statement (the members may be run
    /// again one at a time) rather than the connection or the time failing.
    pub refused: bool,
}

impl Failed {
    /// A failure before any statement was sent.
    pub(super) fn not_run(error: StoreError) -> Failed {
        Failed {
            error,
            refused: false,
        }
    }
}

/// `f` within `OP_LIMIT`, its failure told apart (see [`Failed`]).
pub(super) async fn attempt<T>(
    op: &'static str,
    f: impl std::future::Future<Output = PgResult<T>>,
) -> Result<T, Failed> {
    match tokio::time::timeout(OP_LIMIT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Failed {
            refused: e.as_db_error().is_some(),
            error: StoreError::Query {
                op,
                message: one_line(&e),
            },
        }),
        Err(_) => Err(Failed::not_run(too_slow(op))),
    }
}

/// A change of the service's bookkeeping.
pub(super) enum Change {
    /// A running job's process group (JSON).
    Group { id: String, json: String },
    /// A running job's workspace (and where a reset kept its branch's old tip).
    Workspace {
        id: String,
        path: String,
        abandoned_ref: Option<String>,
    },
    /// A running job's end.
    Finish { id: String, finish: Finish },
}

impl Change {
    /// What it does, for its error.
    pub(super) fn op(&self) -> &'static str {
        match self {
            Change::Group { .. } => "record a job's process group",
            Change::Workspace { .. } => "record a job's workspace",
            Change::Finish { .. } => "record a job's end",
        }
    }
}

/// A change waiting for its batch; its answer: whether it changed a row.
pub(super) struct Write {
    pub change: Change,
    pub answer: oneshot::Sender<Result<bool, StoreError>>,
}

/// Stores the waiting bookkeeping until none waits; only this node's runs
/// (`node`) are changed.
pub(super) async fn flush_writes(pool: Pool, node: String, queue: Arc<Queue<Write>>) {
    flush(&queue, |batch| store_writes(&pool, &node, batch)).await;
}

async fn store_writes(pool: &Pool, node: &str, batch: Vec<Write>) {
    let t0 = std::time::Instant::now();
    let changes: Vec<&Change> = batch.iter().map(|w| &w.change).collect();
    let done = change_together(pool, node, &changes).await;
    tracing::debug!(
        target: "baton_serve::store",
        n = batch.len(),
        us = t0.elapsed().as_micros() as u64,
        ok = done.is_ok(),
        "bookkeeping batch"
    );
    let failed = |w: &Write, e: &StoreError| StoreError::Query {
        op: w.change.op(),
        message: match e {
            StoreError::Query { message, .. } => message.clone(),
            other => other.to_string(),
        },
    };
    match done {
        Ok(rows) => {
            for (w, n) in batch.into_iter().zip(rows) {
                let _ = w.answer.send(Ok(n == 1));
            }
        }
        Err(Failed { refused: true, .. }) if batch.len() > 1 => {
            for w in batch {
                let answer = match change_together(pool, node, &[&w.change]).await {
                    Ok(rows) => Ok(rows.first() == Some(&1)),
                    Err(f) => Err(failed(&w, &f.error)),
                };
                let _ = w.answer.send(answer);
            }
        }
        Err(f) => {
            for w in batch {
                let e = failed(&w, &f.error);
                let _ = w.answer.send(Err(e));
            }
        }
    }
}

const SET_GROUP: &str = "UPDATE baton_jobs SET pgroup = $1 WHERE id = $2 \
    AND status = 'running' AND node = $3";
const SET_WORKSPACE: &str = "UPDATE baton_jobs SET workspace = $1, \
    abandoned_ref = COALESCE($4, abandoned_ref) WHERE id = $2 AND node = $3";
// Only this node's run: a job taken over (interrupted, queued again, maybe
// running elsewhere) is not ended by its old node.
const REQUEUE: &str = "UPDATE baton_jobs SET status = 'queued', priority = 1, \
    started_at = NULL, node = NULL, pgroup = NULL, workspace = NULL, error = $1 \
    WHERE id = $2 AND status = 'running' AND node = $3";
const END: &str = "UPDATE baton_jobs SET status = $1, exit_code = $2, error = $3, \
    superseded_by = $4, finished_at = $5, pgroup = NULL \
    WHERE id = $6 AND status = 'running' AND node = $7";

/// Makes `changes` in one transaction, sent in one pipeline with its
/// `BEGIN` and `COMMIT` (none depends on another's outcome; one that fails
/// makes the `COMMIT` a rollback): the rows each changed.
async fn change_together(pool: &Pool, node: &str, changes: &[&Change]) -> Result<Vec<u64>, Failed> {
    let op = "store the service's bookkeeping";
    let c = pooled(pool, op).await.map_err(Failed::not_run)?;
    let statuses: Vec<&str> = changes
        .iter()
        .map(|c| match c {
            Change::Finish { finish, .. } => finish.status.as_str(),
            _ => "",
        })
        .collect();
    let ends = changes.iter().any(|c| matches!(c, Change::Finish { .. }));
    let done = attempt(op, async {
        let (group, workspace, requeue, end) = futures_util::try_join!(
            c.prepare_cached(SET_GROUP),
            c.prepare_cached(SET_WORKSPACE),
            c.prepare_cached(REQUEUE),
            c.prepare_cached(END),
        )?;
        let mut steps: Vec<Step<'_, u64>> = vec![Box::pin(async {
            c.batch_execute("BEGIN").await.map(|()| 0)
        })];
        for (change, status) in changes.iter().zip(&statuses) {
            let c = &c;
            let (group, workspace, requeue, end) = (&group, &workspace, &requeue, &end);
            steps.push(Box::pin(async move {
                match change {
                    Change::Group { id, json } => c.execute(group, &[json, id, &node]).await,
                    Change::Workspace {
                        id,
                        path,
                        abandoned_ref,
                    } => {
                        c.execute(workspace, &[path, id, &node, abandoned_ref])
                            .await
                    }
                    // Interrupted, and its template retries: queued again.
                    Change::Finish { id, finish } if finish.status == JobStatus::Queued => {
                        c.execute(requeue, &[&finish.error, id, &node]).await
                    }
                    Change::Finish { id, finish } => {
                        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
                            status,
                            &finish.exit_code,
                            &finish.error,
                            &finish.superseded_by,
                            &finish.finished_at,
                            id,
                            &node,
                        ];
                        c.execute(end, &params).await
                    }
                }
            }));
        }
        if ends {
            steps.push(Box::pin(async {
                c.batch_execute("NOTIFY baton_jobs").await.map(|()| 0)
            }));
        }
        steps.push(Box::pin(async {
            c.batch_execute("COMMIT").await.map(|()| 0)
        }));
        let rows = futures_util::future::try_join_all(steps).await?;
        // The changes' own, without BEGIN, NOTIFY and COMMIT.
        PgResult::Ok(rows[1..=changes.len()].to_vec())
    })
    .await;
    if done.is_err() {
        // It may be in the middle of the transaction: not for another.
        drop(deadpool_postgres::Object::take(c));
    }
    done
}
