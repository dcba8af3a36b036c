//! Restart recovery: what the previous instance of this node left.
//!
//! Every command it started (the start journal has each one's process
//! group, written before it ran) is stopped, and each job the store still
//! shows running here is then marked interrupted (or queued again, per
//! template). The stopping (TERM, grace, KILL) runs in the background, one
//! blocking thread per job, all at once: the service listens at once, and a
//! restart with many stubborn leftovers takes one grace, not one per job.
//!
//! Guaranteed:
//! - a job is marked only once nothing of it runs: until then it stays
//!   `running` in the store, so it keeps its slot (the store's
//!   `max_concurrency` count, and this node's cap through the recovering
//!   jobs of `Lives`) and no new job runs beside its leftovers;
//! - an instance killed in the middle of recovering leaves such a job
//!   running in the store, with its process group in the journal, for the
//!   next start to stop.
//!
//! Not guaranteed: a job whose end cannot be stored (the store is down) is
//! retried until it can be; its slot stays taken meanwhile.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{now_ms, Job, JobStatus, RecordedGroup};
use crate::store::{CancelQueued, StoreError};

use super::Service;

impl Service {
    /// Finds what the previous instance left and starts stopping it in the
    /// background (see the module docs). Returns once the jobs concerned
    /// are known and counted as taking their slots.
    pub(super) async fn recover(self: &Arc<Service>) -> Result<(), StoreError> {
        // Every command the previous instance started is stopped, not only
        // those the store still shows running here: on PostgreSQL another
        // node may have marked this node's jobs interrupted meanwhile. A job
        // the store shows running adds its stored group if the journal
        // lacks one.
        let mut groups = self.journal.read();
        let running = self
            .jobs_here(JobStatus::Running, |j| {
                j.node.as_deref() == Some(&self.node)
            })
            .await?;
        self.cancel_abandoned().await?;
        for job in &running {
            if let Some(g) = job.process_group {
                groups.entry(job.spec.id.clone()).or_insert(g);
            }
        }
        self.lives
            .recovering()
            .extend(running.iter().map(|j| j.spec.id.clone()));
        let mut tasks = tokio::task::JoinSet::new();
        for job in running {
            let group = groups.remove(&job.spec.id);
            let workspace = self.may_have_workspace(&job);
            tasks.spawn(Arc::clone(self).recover_job(job, group, workspace));
        }
        // Commands of jobs the store no longer shows running here.
        for (id, group) in groups {
            tasks.spawn_blocking(move || stop_group(&id, group));
        }
        let service = Arc::clone(self);
        self.lifecycle.spawn(async move {
            while tasks.join_next().await.is_some() {}
            // Nothing of the old jobs runs any more: keep only the journal
            // lines of the jobs this instance runs.
            let _ = tokio::task::spawn_blocking(move || {
                let live = |id: &str| service.live(id).is_some();
                if let Err(e) = service.journal.compact(&live, true) {
                    tracing::warn!(error = %e, "cannot compact the start journal");
                }
            })
            .await;
        });
        Ok(())
    }

    /// Whether job `job` may have a workspace (id = job id) to remove: one
    /// may exist without being recorded (killed between creating it and
    /// starting the command).
    fn may_have_workspace(&self, job: &Job) -> bool {
        job.workspace.is_some()
            || (job.spec.command.is_none()
                && self
                    .config
                    .templates
                    .get(&job.spec.template)
                    .is_some_and(|t| t.workspace.is_some()))
    }

    /// Stops one old job's leftovers and removes its workspace, then marks
    /// it (retrying while the store is unavailable) and frees its slot.
    async fn recover_job(
        self: Arc<Service>,
        job: Job,
        group: Option<RecordedGroup>,
        workspace: bool,
    ) {
        let id = job.spec.id.clone();
        let dir = self.dir.clone();
        let stopping = id.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(g) = group {
                stop_group(&stopping, g);
            }
            if workspace && baton_git::get(&dir, &stopping).is_ok() {
                // Nobody watches: commits the branch cannot take are kept
                // under a ref of their own rather than left on disk.
                let _ = baton_git::remove_with(
                    &dir,
                    &stopping,
                    baton_lock::WaitPolicy::AtMost(Duration::from_secs(30)),
                    baton_git::Unpushed::Preserve,
                );
            }
        })
        .await;
        let config = Arc::clone(&self.config);
        let retry = move |template: &str| config.retries_interrupted(template);
        let mut delay = Duration::from_millis(100);
        loop {
            match self
                .store
                .recover(&self.node, std::slice::from_ref(&id), &retry, now_ms())
                .await
            {
                Ok(recovered) => {
                    for r in recovered {
                        tracing::warn!(job = %r.job.spec.id, requeued = r.requeued, "job interrupted by the previous instance's end");
                    }
                    break;
                }
                Err(e) => {
                    tracing::error!(job = %id, error = %e, "cannot mark a job of the previous instance; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        self.lives.recovering().remove(&id);
        self.wake();
    }

    /// Cancels the queued jobs whose callers waited on this node's
    /// previous instance (chat completions): their connections ended with
    /// it (kill -9, a crash), and their clients retry; run now, a prompt
    /// would run twice.
    async fn cancel_abandoned(&self) -> Result<(), StoreError> {
        let abandoned = self
            .jobs_here(JobStatus::Queued, |j| {
                j.spec.waiter.as_deref() == Some(&self.node)
            })
            .await?;
        for job in abandoned {
            if let CancelQueued::Cancelled(_) =
                self.store.cancel_queued(&job.spec.id, now_ms()).await?
            {
                tracing::warn!(job = %job.spec.id, "cancelled a queued job whose caller waited on the previous instance");
            }
        }
        Ok(())
    }

    /// The jobs with `status` that `here` selects (at start: what the
    /// previous instance left).
    async fn jobs_here(
        &self,
        status: JobStatus,
        here: impl Fn(&Job) -> bool,
    ) -> Result<Vec<Job>, StoreError> {
        let mut found = Vec::new();
        let mut filter = crate::model::ListFilter {
            status: Some(status),
            group: None,
            limit: 500,
            before_seq: None,
        };
        loop {
            let page = self.store.list(&filter).await?;
            let last = page.last().map(|j| j.seq);
            let full = page.len() == filter.limit as usize;
            found.extend(page.into_iter().filter(|j| here(j)));
            match (full, last) {
                (true, Some(seq)) => filter.before_seq = Some(seq),
                _ => return Ok(found),
            }
        }
    }
}

/// Stops what is left of job `id`'s process group (TERM, grace, KILL).
fn stop_group(id: &str, group: RecordedGroup) {
    let found = group.stop();
    if found > 0 {
        tracing::warn!(job = %id, processes = found, "stopped what a job of the previous instance left running");
    }
}
