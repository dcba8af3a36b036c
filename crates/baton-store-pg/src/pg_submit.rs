//! Submissions on PostgreSQL, group-committed (see `pg_batch`): those that
//! arrive while a batch is in flight share the next transaction, one hold
//! of the queue's lock, one commit and one `NOTIFY baton_jobs`.
//!
//! A batch is two round trips whatever its size. The first sends `BEGIN`,
//! the queue's lock, and what the checks read: the counts, the ids of the
//! batch that are stored already, and the queued jobs of the groups its
//! supersede and coalesce jobs join (locked until the commit, so a cancel
//! waits and then finds them superseded). Each submission is then decided
//! in arrival order as one at a time would decide it: the depth cap against
//! the counts so far, a duplicate id, the queued jobs of its group it marks,
//! its place. The second sends the writes and `COMMIT`, pipelined. What
//! changes the queue without the queue's lock (a claim, a cancel, a job's
//! end or its return to the queue) leaves the depth as it was or frees
//! room, or takes a queued job out: the batch is then as if it ran before
//! it. A queued job the batch read it supersedes (locked), so a claim that
//! skips it (`SKIP LOCKED`) skips a job that will not run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use super::pg_batch::{attempt, dropped, flush, Failed, Queue, Step};
use super::pg_pool::pooled;
use super::pg_sql::{counts_from_row, job_from_row, lock_queue, to_i64, COLUMNS, COUNTS};
use baton_store::{Counts, GroupMode, NewJob, StoreError, Submitted};

type Answer = Result<Submitted, StoreError>;

/// A submission waiting for its batch.
pub(super) struct Submit {
    pub job: NewJob,
    pub max_depth: u64,
    pub answer: oneshot::Sender<Answer>,
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
        target: "baton_serve::store",
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
        Err(Failed { refused: true, .. }) if batch.len() > 1 => {
            // The server refused a statement: each alone, in arrival order,
            // so that one that fails fails alone.
            for s in batch {
                let answer = match submit_together(pool, &[(&s.job, s.max_depth)]).await {
                    Ok(mut answers) => answers.pop().unwrap_or(Err(dropped("store a job"))),
                    Err(failed) => Err(failed.error),
                };
                let _ = s.answer.send(answer);
            }
        }
        Err(failed) => {
            for s in batch {
                let _ = s.answer.send(Err(failed.error.clone()));
            }
        }
    }
}

const INSERT: &str = "INSERT INTO baton_jobs (id, template, prompt, grp, mode, timeout_ms, \
    branch, command, created_at, status, waiter, reset_branch, order_key) \
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10, $11, $12) RETURNING ";

/// The queued jobs of the groups of a batch's supersede and coalesce jobs,
/// oldest first, locked until its commit.
const GROUPS_QUEUED: &str = "SELECT id, grp, order_key FROM baton_jobs WHERE status = 'queued' \
    AND grp = ANY($1) ORDER BY seq FOR UPDATE";

/// The ids of a batch that are stored already.
const TAKEN: &str = "SELECT id FROM baton_jobs WHERE id = ANY($1)";

const SUPERSEDE: &str = "UPDATE baton_jobs SET status = 'superseded', superseded_by = $1, \
    finished_at = $2 WHERE id = ANY($3) AND status = 'queued'";

/// Running jobs of the group on every node stop (each node stops its
/// own); the payload is `<seq> <job id> <group>`.
const NOTIFY_SUPERSEDE: &str = "SELECT pg_notify('baton_supersede', \
    seq::text || ' ' || id || ' ' || grp) FROM baton_jobs WHERE id = $1";

/// What a batch does with one submission.
enum Plan<'a> {
    /// Refused: this answer.
    Answer(Answer),
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
/// queue's lock, each decided in order as if alone: the answer of each, or
/// the transaction's failure (then nothing is stored).
async fn submit_together(pool: &Pool, jobs: &[(&NewJob, u64)]) -> Result<Vec<Answer>, Failed> {
    let op = "store a job";
    let c = pooled(pool, op).await.map_err(Failed::not_run)?;
    let ids: Vec<&str> = jobs.iter().map(|(j, _)| j.id.as_str()).collect();
    let mut groups: Vec<&str> = jobs
        .iter()
        .filter_map(|(j, _)| match (&j.group, j.mode) {
            (Some(g), GroupMode::Supersede | GroupMode::Coalesce) => Some(g.as_str()),
            _ => None,
        })
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let done = attempt(op, async {
        let insert = format!("{INSERT}{COLUMNS}");
        let (count, in_groups, taken, insert, supersede, notify) = futures_util::try_join!(
            c.prepare_cached(COUNTS),
            c.prepare_cached(GROUPS_QUEUED),
            c.prepare_cached(TAKEN),
            c.prepare_cached(&insert),
            c.prepare_cached(SUPERSEDE),
            c.prepare_cached(NOTIFY_SUPERSEDE),
        )?;
        let by_id: [&(dyn ToSql + Sync); 1] = [&ids];
        // Sent together, run in order: the lock before the reads.
        let ((), (), now, queued, taken) = futures_util::try_join!(
            c.batch_execute("BEGIN"),
            lock_queue(&c),
            c.query_one(&count, &[]),
            async {
                match groups.is_empty() {
                    true => Ok(Vec::new()),
                    false => c.query(&in_groups, &[&groups]).await,
                }
            },
            c.query(&taken, &by_id),
        )?;
        let plans = plan(jobs, counts_from_row(&now), &queued, &taken);
        let mut steps: Vec<Step<'_, Done>> = Vec::new();
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
            let c = &c;
            let (insert, supersede, notify) = (&insert, &supersede, &notify);
            steps.push(Box::pin(async move {
                let params: [&(dyn ToSql + Sync); 12] = [
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
                    &job.reset_branch,
                    &job.order,
                ];
                c.query_one(insert, &params).await.map(Done::Row)
            }));
            if !superseded.is_empty() {
                steps.push(Box::pin(async move {
                    c.execute(supersede, &[&job.id, &job.created_at, superseded])
                        .await
                        .map(Done::Rows)
                }));
            }
            if job.mode == GroupMode::Supersede && job.group.is_some() {
                steps.push(Box::pin(async move {
                    c.execute(notify, &[&job.id]).await.map(Done::Rows)
                }));
            }
        }
        if !steps.is_empty() {
            steps.push(Box::pin(async {
                c.batch_execute("NOTIFY baton_jobs").await.map(|()| Done::Rows(0))
            }));
        }
        // A statement that fails makes the COMMIT a rollback.
        steps.push(Box::pin(async {
            c.batch_execute("COMMIT").await.map(|()| Done::Rows(0))
        }));
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
                        answers.push(Err(dropped(op)));
                        continue;
                    };
                    if !superseded.is_empty() {
                        // Locked since they were read: each is marked.
                        let marked = done.next();
                        if !matches!(marked, Some(Done::Rows(n)) if n == superseded.len() as u64) {
                            tracing::error!(target: "baton_serve::store", job = %job.id, ?superseded, "a batch marked other jobs superseded than it read");
                        }
                    }
                    if job.mode == GroupMode::Supersede && job.group.is_some() {
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
        Ok(answers)
    })
    .await;
    if done.is_err() {
        // It may be in the middle of the transaction: not for another.
        drop(deadpool_postgres::Object::take(c));
    }
    done
}

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
    // Each queued job with its ordering key.
    let mut in_group: HashMap<String, Vec<(String, Option<String>)>> = HashMap::new();
    for r in queued {
        in_group
            .entry(r.get(1))
            .or_default()
            .push((r.get(0), r.get(2)));
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
            (Some(g), GroupMode::Supersede | GroupMode::Coalesce) => {
                // Queued jobs with a newer ordering key stay (`outranks`).
                let queued = in_group.entry(g.clone()).or_default();
                let (marked, kept): (Vec<_>, Vec<_>) =
                    std::mem::take(queued).into_iter().partition(|(_, order)| {
                        baton_store::outranks(job.order.as_deref(), order.as_deref())
                    });
                *queued = kept;
                queued.push((job.id.clone(), job.order.clone()));
                marked.into_iter().map(|(id, _)| id).collect()
            }
            (Some(g), _) => {
                if let Some(queued) = in_group.get_mut(g) {
                    queued.push((job.id.clone(), job.order.clone()));
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
