//! The running service: the state its HTTP handlers share, and its parts,
//! each holding what it needs of it:
//!
//! - the scheduler: claims jobs (a global semaphore of
//!   `max_concurrency` slots kept by the store, a node's own cap, strict
//!   FIFO) and runs each on a blocking thread through the run library;
//! - the rescuer (a shared store): takes over the jobs of dead nodes;
//! - the cleaner: evicts finished jobs, compacts the start journal;
//! - `recovery`: what the previous instance of this node left;
//! - `events`: what other nodes tell this one;
//! - `lifecycle`: the drain; `waiters`: callers waiting for a result.
//!
//! Groups are the run library's, on the same baton dir as every
//! `baton run --group` (or the PostgreSQL store's database).
//!
//! Design: see `docs/src/design/service.md`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_lock::BatonDir;
use tokio::sync::Notify;

use crate::config::Config;
use crate::journal::StartJournal;
use crate::metrics::Metrics;
use crate::model::{now_ms, Job, JobStatus};
use crate::output::JobFiles;
use crate::store::{Store, StoreError, StoreUrl};

mod cleaner;
mod events;
mod lifecycle;
mod lives;
mod recovery;
mod rescuer;
mod scheduler;
mod supersede;
mod waiters;

pub use lives::Live;
pub use waiters::Waiting;

use cleaner::Cleaner;
use lifecycle::Lifecycle;
use lives::Lives;
use rescuer::Rescuer;
use scheduler::Scheduler;

/// The running service: shared by the HTTP handlers, the scheduler and the
/// maintenance tasks.
pub struct Service {
    /// The configuration.
    pub config: Arc<Config>,
    /// Where jobs live.
    pub store: Arc<dyn Store>,
    /// The baton dir (groups, workspaces, job files).
    pub dir: BatonDir,
    /// `<baton dir>/serve/jobs`.
    pub jobs_root: PathBuf,
    /// Where jobs' groups live: the baton dir, or with a PostgreSQL store
    /// that database, so a group is one group across every node.
    pub(crate) groups: baton_run::Backend,
    /// Each job start's process group (read after a crash).
    journal: Arc<StartJournal>,
    /// This node's name in the store.
    pub node: String,
    /// Metrics kept in memory.
    pub metrics: Arc<Metrics>,
    wake: Arc<Notify>,
    lives: Arc<Lives>,
    lifecycle: Arc<Lifecycle>,
    // Jobs whose callers wait for their result (see `waiters`).
    waiters: std::sync::Mutex<waiters::Waiters>,
}

impl Service {
    /// A service on `store`; nothing runs until [`Service::start`].
    ///
    /// # Errors
    ///
    /// The start journal (`<baton dir>/serve/starts.jsonl`) cannot be opened.
    pub fn new(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        dir: BatonDir,
    ) -> std::io::Result<Arc<Service>> {
        let jobs_root = dir.path().join("serve").join("jobs");
        let journal_path = dir.path().join("serve").join("starts.jsonl");
        let journal = StartJournal::open(&journal_path).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot open '{}': {e}", journal_path.display()),
            )
        })?;
        let node = store.node().to_string();
        let groups = groups_backend(&dir, &config.store)?;
        Ok(Arc::new(Service {
            groups,
            journal: Arc::new(journal),
            config,
            store,
            dir,
            jobs_root,
            node,
            metrics: Arc::default(),
            wake: Arc::new(Notify::new()),
            lives: Arc::default(),
            lifecycle: Arc::new(Lifecycle::new()),
            waiters: std::sync::Mutex::default(),
        }))
    }

    /// Recovers what a previous instance left (its jobs' leftovers are
    /// stopped in the background, their slots kept meanwhile: see
    /// `recovery`), evicts expired jobs, then starts the scheduler, the
    /// cleaner and, on a shared store, the event follower and the rescuer.
    /// They run until the drain is over.
    pub async fn start(self: &Arc<Service>) -> Result<(), StoreError> {
        self.recover().await?;
        let cleaner = Arc::new(self.cleaner());
        cleaner.evict().await;
        self.lifecycle.spawn(Arc::new(self.scheduler()).run());
        self.lifecycle.spawn(cleaner.run());
        if let Some(events) = self.store.events() {
            self.lifecycle.spawn(Arc::clone(self).follow_events(events));
            self.lifecycle.spawn(self.rescuer().run());
        }
        Ok(())
    }

    fn scheduler(&self) -> Scheduler {
        Scheduler {
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
            node: self.node.clone(),
            lives: Arc::clone(&self.lives),
            lifecycle: Arc::clone(&self.lifecycle),
            wake: Arc::clone(&self.wake),
            metrics: Arc::clone(&self.metrics),
            journal: Arc::clone(&self.journal),
            dir: self.dir.clone(),
            jobs_root: self.jobs_root.clone(),
            groups: self.groups.clone(),
        }
    }

    fn cleaner(&self) -> Cleaner {
        Cleaner {
            store: Arc::clone(&self.store),
            job_ttl: self.config.job_ttl,
            jobs_root: self.jobs_root.clone(),
            journal: Arc::clone(&self.journal),
            lives: Arc::clone(&self.lives),
        }
    }

    fn rescuer(&self) -> Rescuer {
        Rescuer {
            store: Arc::clone(&self.store),
            config: Arc::clone(&self.config),
            lifecycle: Arc::clone(&self.lifecycle),
        }
    }

    /// Removes finished jobs older than `job_ttl`, and their files.
    pub async fn evict(&self) {
        self.cleaner().evict().await;
    }

    /// The job `id` if it runs on this node.
    pub fn live(&self, id: &str) -> Option<Live> {
        self.lives.get(id)
    }

    /// How many jobs run on this node.
    pub fn active(&self) -> u64 {
        self.lives.active()
    }

    /// Wakes the scheduler (a job was stored or ended).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The files of job `id`.
    pub fn files(&self, id: &str) -> JobFiles {
        JobFiles::new(&self.jobs_root, id)
    }

    /// Cancels job `id`: a queued job at once, a running one with TERM,
    /// grace, KILL (waiting until it has ended, at most grace + 5 s).
    pub async fn cancel(&self, id: &str) -> Result<Cancelled, StoreError> {
        use crate::store::CancelQueued;
        match self.store.cancel_queued(id, now_ms()).await? {
            CancelQueued::Cancelled(job) => {
                self.metrics.finished(0, 0, JobStatus::Cancelled);
                Ok(Cancelled::Done(job))
            }
            CancelQueued::Unknown => Ok(Cancelled::Unknown),
            CancelQueued::NotQueued(JobStatus::Running) => {
                // Claimed a moment ago: wait until its claim has made it live.
                let Some(live) = self.lives.get_after_claim(id).await else {
                    return match self.store.get(id).await? {
                        Some(job) if job.status.is_final() => Ok(Cancelled::Finished(job.status)),
                        Some(_) => self.cancel_elsewhere(id).await,
                        None => Ok(Cancelled::Unknown),
                    };
                };
                live.control.cancel();
                let mut done = live.done.clone();
                let wait = self.config.grace + Duration::from_secs(5);
                let _ = tokio::time::timeout(wait, done.wait_for(|d| *d)).await;
                match self.store.get(id).await? {
                    Some(job) => Ok(Cancelled::Done(Box::new(job))),
                    None => Ok(Cancelled::Unknown),
                }
            }
            CancelQueued::NotQueued(status) => Ok(Cancelled::Finished(status)),
        }
    }

    /// Removes the record and files of job `id` if it has ended (what
    /// eviction does after `job_ttl`, now); a queued or running job is left
    /// as it is (cancel it first).
    pub async fn remove(&self, id: &str) -> Result<crate::store::RemoveFinished, StoreError> {
        let outcome = self.store.remove_finished(id).await?;
        if outcome == crate::store::RemoveFinished::Removed {
            if let Err(e) = self.files(id).remove() {
                tracing::warn!(job = %id, error = %e, "cannot remove a removed job's files");
            }
        }
        Ok(outcome)
    }

    /// Asks the node running job `id` to cancel it and waits for its end
    /// (at most grace + 5 s; the request is repeated every second in case
    /// that node's session was being re-established).
    async fn cancel_elsewhere(&self, id: &str) -> Result<Cancelled, StoreError> {
        let deadline = tokio::time::Instant::now() + self.config.grace + Duration::from_secs(5);
        let mut asked = None::<tokio::time::Instant>;
        loop {
            let Some(job) = self.store.get(id).await? else {
                return Ok(Cancelled::Unknown);
            };
            if job.status != JobStatus::Running || tokio::time::Instant::now() >= deadline {
                return Ok(Cancelled::Done(Box::new(job)));
            }
            if asked.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                if !self.store.request_cancel(id).await? {
                    return Ok(Cancelled::NotHere);
                }
                asked = Some(tokio::time::Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Where the jobs' groups live: the baton dir, or with a PostgreSQL store
/// that database (the one place the service builds a run backend).
fn groups_backend(dir: &BatonDir, store: &StoreUrl) -> std::io::Result<baton_run::Backend> {
    let url = match store {
        StoreUrl::Sqlite(_) => None,
        StoreUrl::Postgres(url) => Some(url.as_str()),
    };
    baton_run::Backend::open(dir, url)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))
}

/// The result of [`Service::cancel`].
#[derive(Debug)]
pub enum Cancelled {
    /// Cancelled (or ended meanwhile); the job as it is now.
    Done(Box<Job>),
    /// It had already ended with this status.
    Finished(JobStatus),
    /// Running, but not on this node.
    NotHere,
    /// No such job.
    Unknown,
}
