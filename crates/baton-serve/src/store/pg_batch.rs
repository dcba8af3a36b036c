//! Group commit on PostgreSQL: submissions that arrive while a submission
//! transaction is in flight share the next one (one hold of the queue's
//! advisory lock, one commit, one `NOTIFY baton_jobs`), each checked
//! against the depth cap and its group in arrival order, as one at a time
//! would be; likewise the service's bookkeeping (process groups,
//! workspaces, ends) shares a transaction. Every caller is answered only
//! after its batch has committed, so a job is acknowledged once it is
//! stored and a job's end is stored before its waiters hear of it or its
//! slot counts as free.
//!
//! A batch runs without savepoints (a duplicate id is refused by the
//! `INSERT ... ON CONFLICT DO NOTHING` alone, not by an error). If its
//! transaction fails anyway (a value the server rejects, a lost
//! connection), each of its members is run again alone, in arrival order,
//! in a transaction of its own, and gets that outcome: one that fails
//! fails alone, as before. Design: `SERVICE.md`, "The claim protocol".

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use super::pg_sql::{counts_from_row, job_from_row, lock_queue, to_i64, COLUMNS, COUNTS};
use super::postgres::{pooled, timed};
use super::StoreError;
use crate::model::{Counts, Finish, JobMode, JobStatus, NewJob, Submitted};

type PgResult<T> = Result<T, tokio_postgres::Error>;

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
            drop(self.queue.take());
            self.queue.flushing.store(false, Ordering::SeqCst);
        }
    }
}

/// Runs `run` on what waits in `queue`, a batch at a time, until nothing
/// waits: what arrives while a batch runs goes into the next one.
async fn flush<T, F>(queue: &Queue<T>, mut run: impl FnMut(Vec<T>) -> F)
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

/// A submission waiting for its batch.
pub(super) struct Submit {
    pub job: NewJob,
    pub max_depth: u64,
    pub answer: oneshot::Sender<Result<Submitted, StoreError>>,
}

/// The error of a caller whose batch was dropped before it answered.
pub(super) fn dropped(op: &'static str) -> StoreError {
    StoreError::Query {
        op,
        message: "the batch storing it was dropped".into(),
    }
}

/// Stores the waiting submissions until none waits.
pub(super) async fn flush_submits(pool: Pool, queue: Arc<Queue<Submit>>) {
    flush(&queue, |batch| store_submits(&pool, batch)).await;
}

async fn store_submits(pool: &Pool, batch: Vec<Submit>) {
    let t0 = std::time::Instant::now();
    let jobs: Vec<(&NewJob, u64)> = batch.iter().map(|s| (&s.job, s.max_depth)).collect();
    let done = submit_together(pool, &jobs).await;
    tracing::debug!(
        n = batch.len(),
        us = t0.elapsed().as_micros() as u64,
        ok = done.is_ok(),
        "submit batch"
    );
    match done {
        Ok(answers) => {
            for (s, answer) in batch.into_iter().zip(answers) {
                let _ = s.answer.send(answer);
            }
        }
        Err(e) if batch.len() == 1 => {
            if let Some(s) = batch.into_iter().next() {
                let _ = s.answer.send(Err(e));
            }
        }
        Err(_) => {
            // Each alone, in arrival order: one that fails fails alone.
            for s in batch {
                let answer = match submit_together(pool, &[(&s.job, s.max_depth)]).await {
                    Ok(mut answers) => answers.pop().unwrap_or(Err(dropped("store a job"))),
                    Err(e) => Err(e),
                };
                let _ = s.answer.send(answer);
            }
        }
    }
}

const INSERT: &str = "INSERT INTO baton_jobs (id, template, prompt, grp, mode, timeout_ms, \
    branch, command, created_at, status, waiter) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10) RETURNING ";

/// The queued jobs of the groups of a batch's supersede and coalesce jobs,
/// locked until its commit (a cancel waits, then finds them superseded).
const GROUPS_QUEUED: &str = "SELECT id, grp FROM baton_jobs WHERE status = 'queued' \
    AND grp = ANY($1) ORDER BY seq FOR UPDATE";

/// The ids of a batch that are stored already.
const TAKEN: &str = "SELECT id FROM baton_jobs WHERE id = ANY($1)";

const SUPERSEDE: &str = "UPDATE baton_jobs SET status = 'superseded', superseded_by = $1, \
    finished_at = $2 WHERE id = ANY($3) AND status = 'queued'";

/// Running jobs of the group on every node stop (each node stops its
/// own); the payload is `<seq> <job id> <group>`.
const NOTIFY_SUPERSEDE: &str = "SELECT pg_notify('baton_supersede', \
    seq::text || ' ' || id || ' ' || grp) FROM baton_jobs WHERE id = $1";

/// What a batch does with one submission, decided in arrival order from
/// what the store held when the batch took the queue's lock.
enum Plan<'a> {
    /// Refused: this answer.
    Answer(Result<Submitted, StoreError>),
    /// Stored at `position`, marking `superseded`.
    Store {
        job: &'a NewJob,
        command: Option<String>,
        timeout_ms: i64,
        superseded: Vec<String>,
        position: u64,
    },
}

/// What one pipelined statement of a batch gave.
enum Done {
    Row(tokio_postgres::Row),
    Rows(u64),
}

/// Stores `jobs` (each with its depth cap) in one transaction under the
/// queue's lock, each checked in order as if alone: the answer of each,
/// or the transaction's error (then nothing is stored). Four round trips
/// whatever the batch's size: the transaction's start; the lock and what
/// the checks read; the writes; the commit.
async fn submit_together(
    pool: &Pool,
    jobs: &[(&NewJob, u64)],
) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
    let op = "store a job";
    let mut c = pooled(pool, op).await?;
    let ids: Vec<&str> = jobs.iter().map(|(j, _)| j.id.as_str()).collect();
    let mut groups: Vec<&str> = jobs
        .iter()
        .filter_map(|(j, _)| match (&j.group, j.mode) {
            (Some(g), JobMode::Supersede | JobMode::Coalesce) => Some(g.as_str()),
            _ => None,
        })
        .collect();
    groups.sort_unstable();
    groups.dedup();
    timed(op, async {
        let tx = c.transaction().await?;
        let insert = format!("{INSERT}{COLUMNS}");
        let (count, in_groups, taken, insert, supersede, notify) = futures_util::try_join!(
            tx.prepare_cached(COUNTS),
            tx.prepare_cached(GROUPS_QUEUED),
            tx.prepare_cached(TAKEN),
            tx.prepare_cached(&insert),
            tx.prepare_cached(SUPERSEDE),
            tx.prepare_cached(NOTIFY_SUPERSEDE),
        )?;
        let by_id: [&(dyn ToSql + Sync); 1] = [&ids];
        // Sent together, run in order: the lock first.
        let ((), now, queued, taken) = futures_util::try_join!(
            lock_queue(&tx),
            tx.query_one(&count, &[]),
            async {
                match groups.is_empty() {
                    true => Ok(Vec::new()),
                    false => tx.query(&in_groups, &[&groups]).await,
                }
            },
            tx.query(&taken, &by_id),
        )?;
        let plans = plan(jobs, counts_from_row(&now), &queued, &taken);
        let mut steps: Vec<Step<'_>> = Vec::new();
        for p in &plans {
            let Plan::Store {
                job,
                command,
                timeout_ms,
                superseded,
                ..
            } = p
            else {
                continue;
            };
            let tx = &tx;
            let (insert, supersede, notify) = (&insert, &supersede, &notify);
            steps.push(Box::pin(async move {
                let params: [&(dyn ToSql + Sync); 10] = [
                    &job.id,
                    &job.template,
                    &job.prompt,
                    &job.group,
                    &job.mode.as_str(),
                    timeout_ms,
                    &job.branch,
                    command,
                    &job.created_at,
                    &job.waiter,
                ];
                tx.query_one(insert, &params).await.map(Done::Row)
            }));
            if !superseded.is_empty() {
                steps.push(Box::pin(async move {
                    tx.execute(supersede, &[&job.id, &job.created_at, superseded])
                        .await
                        .map(Done::Rows)
                }));
            }
            if job.mode == JobMode::Supersede && job.group.is_some() {
                steps.push(Box::pin(async move {
                    tx.execute(notify, &[&job.id]).await.map(Done::Rows)
                }));
            }
        }
        let stored = !steps.is_empty();
        if stored {
            steps.push(Box::pin(async {
                tx.batch_execute("NOTIFY baton_jobs").await.map(|()| Done::Rows(0))
            }));
        }
        let mut done = futures_util::future::try_join_all(steps).await?.into_iter();
        let mut answers = Vec::with_capacity(plans.len());
        for p in plans {
            match p {
                Plan::Answer(answer) => answers.push(answer),
                Plan::Store {
                    job,
                    superseded,
                    position,
                    ..
                } => {
                    let Some(Done::Row(row)) = done.next() else {
                        return Ok(Err(op));
                    };
                    if !superseded.is_empty() {
                        // Locked since the plan: each is marked.
                        let marked = done.next();
                        if !matches!(marked, Some(Done::Rows(n)) if n == superseded.len() as u64) {
                            return Ok(Err(op));
                        }
                    }
                    if job.mode == JobMode::Supersede && job.group.is_some() {
                        done.next();
                    }
                    answers.push(Ok(Submitted::Queued {
                        job: Box::new(job_from_row(&row)),
                        position,
                        superseded,
                    }));
                }
            }
        }
        tx.commit().await?;
        Ok(Ok(answers))
    })
    .await?
    .map_err(|op| StoreError::Query {
        op,
        message: "the store changed under a batch of submissions".into(),
    })
}

type Step<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = PgResult<Done>> + Send + 'a>>;

/// Decides each submission in arrival order, as one at a time would: the
/// depth cap against `now` (kept up to date here), a duplicate id, and the
/// queued jobs of its group a supersede or coalesce job marks (`queued`:
/// those of the batch's groups, oldest first).
fn plan<'a>(
    jobs: &[(&'a NewJob, u64)],
    mut now: Counts,
    queued: &[tokio_postgres::Row],
    taken: &[tokio_postgres::Row],
) -> Vec<Plan<'a>> {
    let mut ids: HashSet<String> = taken.iter().map(|r| r.get(0)).collect();
    let mut in_group: HashMap<String, Vec<String>> = HashMap::new();
    for r in queued {
        in_group.entry(r.get(1)).or_default().push(r.get(0));
    }
    let mut plans = Vec::with_capacity(jobs.len());
    for (job, max_depth) in jobs {
        if now.running + now.queued >= *max_depth {
            plans.push(Plan::Answer(Ok(Submitted::Full { counts: now })));
            continue;
        }
        if !ids.insert(job.id.clone()) {
            plans.push(Plan::Answer(Err(StoreError::Query {
                op: "store a job",
                message: format!("a job with the id '{}' is stored already", job.id),
            })));
            continue;
        }
        let superseded = match (&job.group, job.mode) {
            (Some(g), JobMode::Supersede | JobMode::Coalesce) => {
                std::mem::replace(in_group.entry(g.clone()).or_default(), vec![job.id.clone()])
            }
            (Some(g), _) => {
                if let Some(queued) = in_group.get_mut(g) {
                    queued.push(job.id.clone());
                }
                Vec::new()
            }
            (None, _) => Vec::new(),
        };
        // The queued jobs, this one included.
        let position = (now.queued + 1).saturating_sub(superseded.len() as u64);
        now.queued = position;
        plans.push(Plan::Store {
            job,
            command: job
                .command
                .as_ref()
                .map(|c| serde_json::to_string(c).unwrap_or_default()),
            timeout_ms: to_i64(job.timeout_ms),
            superseded,
            position,
        });
    }
    plans
}

/// A change of the service's bookkeeping.
pub(super) enum Change {
    /// A running job's process group (JSON).
    Group { id: String, json: String },
    /// A running job's workspace.
    Workspace { id: String, path: String },
    /// A running job's end.
    Finish { id: String, finish: Finish },
}

impl Change {
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
        n = batch.len(),
        us = t0.elapsed().as_micros() as u64,
        ok = done.is_ok(),
        "bookkeeping batch"
    );
    let failed = |w: &Write, message: String| StoreError::Query {
        op: w.change.op(),
        message,
    };
    match done {
        Ok(rows) => {
            for (w, n) in batch.into_iter().zip(rows) {
                let _ = w.answer.send(Ok(n == 1));
            }
        }
        Err(message) if batch.len() == 1 => {
            if let Some(w) = batch.into_iter().next() {
                let e = failed(&w, message);
                let _ = w.answer.send(Err(e));
            }
        }
        Err(_) => {
            for w in batch {
                let answer = match change_together(pool, node, &[&w.change]).await {
                    Ok(rows) => Ok(rows.first() == Some(&1)),
                    Err(message) => Err(failed(&w, message)),
                };
                let _ = w.answer.send(answer);
            }
        }
    }
}

const SET_GROUP: &str = "UPDATE baton_jobs SET pgroup = $1 WHERE id = $2 \
    AND status = 'running' AND node = $3";
const SET_WORKSPACE: &str = "UPDATE baton_jobs SET workspace = $1 WHERE id = $2 AND node = $3";
// Only this node's run: a job taken over (interrupted, queued again, maybe
// running elsewhere) is not ended by its old node.
const REQUEUE: &str = "UPDATE baton_jobs SET status = 'queued', priority = 1, \
    started_at = NULL, node = NULL, pgroup = NULL, workspace = NULL, error = $1 \
    WHERE id = $2 AND status = 'running' AND node = $3";
const END: &str = "UPDATE baton_jobs SET status = $1, exit_code = $2, error = $3, \
    superseded_by = $4, finished_at = $5, pgroup = NULL \
    WHERE id = $6 AND status = 'running' AND node = $7";

/// Makes `changes` in one transaction, their statements pipelined (none
/// depends on another's outcome); the rows each changed, or why the
/// transaction failed (then nothing changed).
async fn change_together(pool: &Pool, node: &str, changes: &[&Change]) -> Result<Vec<u64>, String> {
    let op = "store the service's bookkeeping";
    let mut c = pooled(pool, op).await.map_err(message)?;
    let statuses: Vec<&str> = changes
        .iter()
        .map(|c| match c {
            Change::Finish { finish, .. } => finish.status.as_str(),
            _ => "",
        })
        .collect();
    timed(op, async {
        let tx = c.transaction().await?;
        let (group, workspace, requeue, end) = futures_util::try_join!(
            tx.prepare_cached(SET_GROUP),
            tx.prepare_cached(SET_WORKSPACE),
            tx.prepare_cached(REQUEUE),
            tx.prepare_cached(END),
        )?;
        let steps = changes.iter().zip(&statuses).map(|(change, status)| {
            let tx = &tx;
            let (group, workspace, requeue, end) = (&group, &workspace, &requeue, &end);
            async move {
                match change {
                    Change::Group { id, json } => tx.execute(group, &[json, id, &node]).await,
                    Change::Workspace { id, path } => {
                        tx.execute(workspace, &[path, id, &node]).await
                    }
                    // Interrupted, and its template retries: queued again.
                    Change::Finish { id, finish } if finish.status == JobStatus::Queued => {
                        tx.execute(requeue, &[&finish.error, id, &node]).await
                    }
                    Change::Finish { id, finish } => {
                        tx.execute(
                            end,
                            &[
                                status,
                                &finish.exit_code,
                                &finish.error,
                                &finish.superseded_by,
                                &finish.finished_at,
                                id,
                                &node,
                            ],
                        )
                        .await
                    }
                }
            }
        });
        let rows: Vec<u64> = futures_util::future::try_join_all(steps).await?;
        if changes.iter().any(|c| matches!(c, Change::Finish { .. })) {
            tx.batch_execute("NOTIFY baton_jobs").await?;
        }
        tx.commit().await?;
        PgResult::Ok(rows)
    })
    .await
    .map_err(message)
}

fn message(e: StoreError) -> String {
    match e {
        StoreError::Query { message, .. } => message,
        other => other.to_string(),
    }
}
