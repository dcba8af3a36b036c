//! The scheduler: claims jobs while this node has free slots, and runs each
//! claimed job on a blocking thread through the run library
//! ([`crate::exec::run_job`]).
//!
//! `max_concurrency` is the store's (the cluster's) cap, checked by the
//! store's claim (strict FIFO, see [`crate::store::Store::claim_next`]);
//! `node_max_concurrency` this node's, checked here against the jobs it
//! runs plus the previous instance's jobs still being stopped.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_lock::BatonDir;
use baton_run::RunControl;
use tokio::sync::{watch, Notify};

use crate::config::Config;
use crate::exec::run_job;
use crate::exec::{ExecContext, Hooks, StartedIn};
use crate::journal::StartJournal;
use crate::metrics::Metrics;
use crate::model::{now_ms, GroupMode, Job, JobStatus};
use crate::store::Store;

use super::lifecycle::Lifecycle;
use super::lives::{Live, Lives};

/// Claims and runs jobs; one per service.
pub(crate) struct Scheduler {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: Arc<Config>,
    pub(crate) node: String,
    pub(crate) lives: Arc<Lives>,
    pub(crate) lifecycle: Arc<Lifecycle>,
    pub(crate) wake: Arc<Notify>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) journal: Arc<StartJournal>,
    /// The baton dir (groups, workspaces).
    pub(crate) dir: BatonDir,
    /// `<baton dir>/serve/jobs`.
    pub(crate) jobs_root: PathBuf,
    /// Where jobs' groups live.
    pub(crate) groups: baton_run::Backend,
}

impl Scheduler {
    /// Claims jobs while slots are free, then sleeps until woken (a
    /// submission, a job's end) or a slow safety poll; returns when the
    /// service drains.
    pub(crate) async fn run(self: Arc<Scheduler>) {
        let cap = self.config.max_concurrency;
        let node_cap = self.config.node_cap();
        loop {
            if self.lifecycle.is_draining() {
                return;
            }
            loop {
                let taken = self.lives.active() + self.lives.recovering_count();
                if taken >= node_cap || self.lifecycle.is_draining() || !self.store.is_live() {
                    break;
                }
                // Every free slot in one claim (one transaction).
                let free = node_cap - taken;
                let claiming = self.lives.claim().await;
                let claimed = self.store.claim_many(&self.node, cap, free, now_ms()).await;
                if let Ok(jobs) = &claimed {
                    for job in jobs {
                        self.start(job.clone());
                    }
                }
                drop(claiming);
                match claimed {
                    Ok(jobs) if jobs.len() as u64 == free => {}
                    Ok(_) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot claim a job; retrying in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        break;
                    }
                }
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
    }

    /// Makes a claimed job live and runs it in the background; its end is
    /// stored (retried while the store is unavailable), then it leaves the
    /// live jobs and the scheduler is woken.
    fn start(self: &Arc<Scheduler>, job: Job) {
        let control = RunControl::new();
        // On a store several nodes share, another node takes a dead or
        // stalled node's jobs over: each job runs with a guardian that
        // kills its whole command when this process dies or stops
        // vouching for it (its session's heartbeats) in time.
        let fence = self
            .store
            .events()
            .is_some()
            .then(|| baton_proc::Fence::new(crate::store::FENCE));
        let (stdout_tx, stdout_rx) = watch::channel(0u64);
        let (done_tx, done_rx) = watch::channel(false);
        self.lives.running().insert(
            job.spec.id.clone(),
            Live {
                control: control.clone(),
                stdout: stdout_rx,
                done: done_rx,
                group: job.spec.group.clone(),
                seq: job.seq,
                order: job.spec.order.clone(),
                fence: fence.as_ref().map(baton_proc::Fence::source),
            },
        );
        // A session lost between the claim and here: the loss's event may
        // have gone through the live jobs before this one was among them.
        // The store says it is not live before it sends that event, so one
        // of the two sees the job (see `events`): it ends interrupted
        // before its command starts, as its fence would not vouch for it.
        if !self.store.is_live() {
            tracing::warn!(job = %job.spec.id, "stopping: this node lost its database session");
            control.interrupt();
        }
        let scheduler = Arc::clone(self);
        tokio::spawn(async move {
            let id = job.spec.id.clone();
            let queue_wait = job.started_at.map(|s| s - job.spec.created_at).unwrap_or(0);
            let hooks = scheduler.hooks(&id, stdout_tx);
            let ctx = ExecContext {
                dir: scheduler.dir.clone(),
                config: Arc::clone(&scheduler.config),
                jobs_root: scheduler.jobs_root.clone(),
                shutting_down: Arc::clone(&scheduler.lifecycle.shutting_down),
                groups: scheduler.groups.clone(),
                guard: fence.map(|fence| baton_proc::GuardSpec {
                    program: guard_program().clone(),
                    fence,
                }),
            };
            if let (GroupMode::Supersede, Some(g)) = (job.spec.mode, &job.spec.group) {
                scheduler
                    .supersede_older(&id, job.seq, job.spec.order.as_deref(), g)
                    .await;
            }
            let ran = job.clone();
            let finish = match tokio::task::spawn_blocking(move || {
                run_job(&ctx, &ran, control, hooks)
            })
            .await
            {
                Ok(f) => f,
                Err(e) => crate::exec::thread_failed(&e),
            };
            let mut finish = finish;
            if finish.status == JobStatus::Interrupted
                && scheduler.config.retries_interrupted(&job.spec.template)
                && job.attempts <= 1
            {
                finish.status = JobStatus::Queued;
                finish.error = finish.error.map(|e| format!("{e}; queued again"));
            }
            let run_ms = job.started_at.map(|s| finish.finished_at - s).unwrap_or(0);
            scheduler
                .metrics
                .finished(queue_wait, run_ms, finish.status);
            tracing::info!(job = %id, status = finish.status.as_str(), exit_code = ?finish.exit_code, "job ended");
            // The end must be stored; retry while the store is unavailable.
            let mut delay = Duration::from_millis(100);
            loop {
                match scheduler.store.finish(&id, &finish).await {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::error!(job = %id, error = %e, "cannot store a job's end; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
            scheduler.lives.running().remove(&id);
            let _ = done_tx.send(true);
            scheduler.wake.notify_one();
        });
    }

    /// What the run of job `id` tells the service as it goes.
    fn hooks(&self, id: &str, stdout_progress: watch::Sender<u64>) -> Hooks {
        let handle = tokio::runtime::Handle::current();
        let store = Arc::clone(&self.store);
        let recorder_id = id.to_string();
        let journal = Arc::clone(&self.journal);
        Hooks {
            on_start: Arc::new(move |group, workspace: Option<StartedIn>| {
                // The command waits for this (between its start and its
                // exec): its process group goes into the start journal with
                // one write, which survives a crash of the service, so a
                // restarted service can stop what is left of it. The store
                // learns it afterwards, off the command's path: the
                // command's start does not wait on a store round trip.
                if let Err(e) = journal.record(&recorder_id, group) {
                    tracing::warn!(job = %recorder_id, error = %e, "cannot record the job's process group");
                }
                let store = Arc::clone(&store);
                let id = recorder_id.clone();
                handle.spawn(async move {
                    if let Some(w) = workspace {
                        store
                            .set_workspace(&id, &w.path, w.abandoned_ref.as_deref())
                            .await?;
                    }
                    store.set_process_group(&id, group).await
                });
            }),
            stdout_progress,
        }
    }
}

/// The program a job's guardian runs: the `baton` binary installed next to
/// this one when there is one (it starts in a fraction of the time of the
/// service's own binary, and every job starts a guardian), else this
/// program itself. Both run a guardian when given `__baton-guard`.
fn guard_program() -> &'static std::path::PathBuf {
    static PROGRAM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(crate::sys::guard_program)
}
