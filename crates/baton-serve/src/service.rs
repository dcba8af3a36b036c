//! The service's state and its scheduler: a global semaphore of
//! `max_concurrency` slots kept by the store (a claim moves the oldest
//! queued job to running only while fewer than that many run), a node's own
//! cap (`node_max_concurrency`: it claims only while it runs fewer), strict FIFO,
//! and for each claimed job one blocking thread that runs it through the run
//! library. Groups are the run library's, on the same baton dir as every
//! `baton run --group`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use baton_lock::BatonDir;
use baton_run::RunControl;
use tokio::sync::{broadcast, watch, Notify};

use crate::config::Config;
use crate::exec::{run_job, ExecContext, Hooks};
use crate::journal::StartJournal;
use crate::metrics::Metrics;
use crate::model::{now_ms, Finish, Job, JobMode, JobStatus};
use crate::output::JobFiles;
use crate::store::{Store, StoreError, StoreEvent, StoreUrl};

mod recovery;
mod supersede;
mod waiters;

pub use waiters::Waiting;

/// How often a node looks for the jobs of dead nodes (shared stores).
const REAP_EVERY: Duration = Duration::from_secs(3);

/// A job running on this node.
#[derive(Clone)]
pub struct Live {
    /// Stops it.
    pub control: RunControl,
    /// Bytes of stdout captured so far.
    pub stdout: watch::Receiver<u64>,
    /// Becomes true when it has ended and its end is stored.
    pub done: watch::Receiver<bool>,
    /// Its concurrency group.
    pub group: Option<String>,
    /// Its place in the FIFO order (older jobs have smaller numbers).
    pub seq: i64,
    /// On a shared store: this node's session vouching for the job's
    /// guardian (each heartbeat answered extends its fence).
    pub fence: Option<baton_proc::FenceSource>,
}

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
    pub metrics: Metrics,
    wake: Notify,
    live: Mutex<HashMap<String, Live>>,
    // Held from a claim in the store until its job is in `live`: a cancel
    // that finds a job running but not live waits for it, instead of
    // taking it for another node's.
    claiming: tokio::sync::Mutex<()>,
    draining: AtomicBool,
    shutting_down: Arc<AtomicBool>,
    // Jobs of the previous instance whose leftovers are being stopped:
    // they still hold their slots (see `recovery`).
    recovering: Mutex<HashSet<String>>,
    // Jobs whose callers wait for their result (see `waiters`).
    waiters: Mutex<waiters::Waiters>,
    // Becomes true when the drain is over: answers that follow a job end.
    drained: watch::Sender<bool>,
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
        let groups = groups_backend(&config.store)?;
        Ok(Arc::new(Service {
            groups,
            journal: Arc::new(journal),
            config,
            store,
            dir,
            jobs_root,
            node,
            metrics: Metrics::default(),
            wake: Notify::new(),
            live: Mutex::new(HashMap::new()),
            claiming: tokio::sync::Mutex::new(()),
            draining: AtomicBool::new(false),
            shutting_down: Arc::new(AtomicBool::new(false)),
            recovering: Mutex::new(HashSet::new()),
            waiters: Mutex::new(waiters::Waiters::default()),
            drained: watch::channel(false).0,
        }))
    }

    /// Recovers what a previous instance left (its jobs' leftovers are
    /// stopped in the background, their slots kept meanwhile: see
    /// `recovery`), then starts the scheduler and the eviction task.
    pub async fn start(self: &Arc<Service>) -> Result<(), StoreError> {
        self.recover().await?;
        self.evict().await;
        tokio::spawn(Arc::clone(self).dispatch());
        tokio::spawn(Arc::clone(self).evict_periodically());
        if let Some(events) = self.store.events() {
            tokio::spawn(Arc::clone(self).follow_events(events));
            tokio::spawn(Arc::clone(self).reap_periodically());
        }
        Ok(())
    }

    /// What other nodes (through a shared store) tell this one.
    async fn follow_events(self: Arc<Service>, mut events: broadcast::Receiver<StoreEvent>) {
        loop {
            match events.recv().await {
                Ok(StoreEvent::Wake) | Err(broadcast::error::RecvError::Lagged(_)) => self.wake(),
                Ok(StoreEvent::Cancel(id)) => {
                    let live = match self.live(&id) {
                        Some(l) => Some(l),
                        None => {
                            // Claimed a moment ago: wait until it is live.
                            drop(self.claiming.lock().await);
                            self.live(&id)
                        }
                    };
                    if let Some(live) = live {
                        tracing::info!(job = %id, "cancel requested by another node");
                        live.control.cancel();
                    }
                }
                Ok(StoreEvent::Supersede { group, by, seq }) => {
                    let older: Vec<(String, Live)> = self
                        .lives()
                        .iter()
                        .filter(|(_, l)| l.group.as_deref() == Some(group.as_str()) && l.seq < seq)
                        .map(|(id, l)| (id.clone(), l.clone()))
                        .collect();
                    for (id, live) in older {
                        tracing::info!(job = %id, by = %by, "superseded by a newer job of its group");
                        live.control.supersede(by.clone());
                    }
                }
                Ok(StoreEvent::Live(true)) => self.wake(),
                Ok(StoreEvent::Alive(sent)) => {
                    for live in self.lives().values() {
                        if let Some(f) = &live.fence {
                            f.vouch(sent);
                        }
                    }
                }
                Ok(StoreEvent::Live(false)) => {
                    let lives: Vec<(String, Live)> = self
                        .lives()
                        .iter()
                        .map(|(id, l)| (id.clone(), l.clone()))
                        .collect();
                    for (id, live) in lives {
                        tracing::warn!(job = %id, "stopping: this node lost its database session");
                        // Nobody cancelled it: it ends interrupted (and is
                        // queued again if its template says so).
                        live.control.interrupt();
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Every few seconds: jobs of nodes that died are marked interrupted
    /// (or queued again), by whichever node looks first.
    async fn reap_periodically(self: Arc<Service>) {
        loop {
            tokio::time::sleep(REAP_EVERY).await;
            if self.is_draining() || !self.store.is_live() {
                continue;
            }
            let config = Arc::clone(&self.config);
            let retry = move |template: &str| config.retries_interrupted(template);
            // A dead node's jobs are taken over only once their guardians
            // have stopped them (the fence after its last heartbeat), or the
            // node itself has (it notices within the same bound, then TERM,
            // grace, KILL): never two runs of one job at once.
            let settle = baton_pg::FENCE + self.config.grace + Duration::from_secs(1);
            match self.store.reap(&retry, settle, now_ms()).await {
                Ok(reaped) => {
                    for r in reaped {
                        tracing::warn!(job = %r.job.spec.id, node = ?r.job.node, requeued = r.requeued, "job of a dead node taken over");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot look for dead nodes' jobs"),
            }
        }
    }

    /// Becomes true once the drain is over and the service is about to
    /// stop: an answer that follows a job (a log, a stream) ends then, so
    /// its client gets a complete answer rather than a cut connection.
    pub fn drain_over(&self) -> watch::Receiver<bool> {
        self.drained.subscribe()
    }

    /// Whether the service is draining (no new jobs accepted).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// The job `id` if it runs on this node.
    pub fn live(&self, id: &str) -> Option<Live> {
        self.lives().get(id).cloned()
    }

    /// How many jobs run on this node.
    pub fn active(&self) -> u64 {
        self.lives().len() as u64
    }

    /// Wakes the scheduler (a job was stored or ended).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The files of job `id`.
    pub fn files(&self, id: &str) -> JobFiles {
        JobFiles::new(&self.jobs_root, id)
    }

    fn lives(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The scheduler: claims jobs while slots are free, then sleeps until
    /// woken (a submission, a job's end) or a slow safety poll.
    /// `max_concurrency` is the store's (the cluster's) cap, checked by the
    /// claim; `node_max_concurrency` this node's, checked here.
    async fn dispatch(self: Arc<Service>) {
        let cap = self.config.max_concurrency;
        let node_cap = self.config.node_cap();
        loop {
            if self.is_draining() {
                return;
            }
            while self.active() + self.recovering_count() < node_cap
                && !self.is_draining()
                && self.store.is_live()
            {
                let claiming = self.claiming.lock().await;
                let claimed = self.store.claim_next(&self.node, cap, now_ms()).await;
                if let Ok(Some(job)) = &claimed {
                    self.launch(job.clone());
                }
                drop(claiming);
                match claimed {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
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

    fn launch(self: &Arc<Service>, job: Job) {
        let control = RunControl::new();
        // On a store several nodes share, another node takes a dead or
        // stalled node's jobs over: each job runs with a guardian that
        // kills its whole command when this process dies or stops
        // vouching for it (its session's heartbeats) in time.
        let fence = self
            .store
            .events()
            .is_some()
            .then(|| baton_proc::Fence::new(baton_pg::FENCE));
        let (stdout_tx, stdout_rx) = watch::channel(0u64);
        let (done_tx, done_rx) = watch::channel(false);
        self.lives().insert(
            job.spec.id.clone(),
            Live {
                control: control.clone(),
                stdout: stdout_rx,
                done: done_rx,
                group: job.spec.group.clone(),
                seq: job.seq,
                fence: fence.as_ref().map(baton_proc::Fence::source),
            },
        );
        let service = Arc::clone(self);
        tokio::spawn(async move {
            let id = job.spec.id.clone();
            let queue_wait = job.started_at.map(|s| s - job.spec.created_at).unwrap_or(0);
            let handle = tokio::runtime::Handle::current();
            let store = Arc::clone(&service.store);
            let recorder_id = id.clone();
            let journal = Arc::clone(&service.journal);
            let hooks = Hooks {
                on_start: Arc::new(move |group, workspace: Option<String>| {
                    // The command waits for this (between fork and exec):
                    // its process group goes into the start journal with
                    // one write, which survives a crash of the service, so
                    // a restarted service can stop what is left of it. The
                    // store learns it afterwards, off the command's path: a
                    // forked child waiting on a store round trip makes every
                    // write of this multi-threaded process a copy-on-write
                    // fault meanwhile.
                    if let Err(e) = journal.record(&recorder_id, group) {
                        tracing::warn!(job = %recorder_id, error = %e, "cannot record the job's process group");
                    }
                    let store = Arc::clone(&store);
                    let id = recorder_id.clone();
                    handle.spawn(async move {
                        if let Some(w) = workspace {
                            store.set_workspace(&id, &w).await?;
                        }
                        store.set_process_group(&id, group).await
                    });
                }),
                stdout_progress: stdout_tx,
            };
            let ctx = ExecContext {
                dir: service.dir.clone(),
                config: Arc::clone(&service.config),
                jobs_root: service.jobs_root.clone(),
                shutting_down: Arc::clone(&service.shutting_down),
                groups: service.groups.clone(),
                guard: fence.map(|fence| baton_proc::GuardSpec {
                    program: guard_program().clone(),
                    fence,
                }),
            };
            if let (JobMode::Supersede, Some(g)) = (job.spec.mode, &job.spec.group) {
                service.supersede_older(&id, job.seq, g).await;
            }
            let ran = job.clone();
            let finish = match tokio::task::spawn_blocking(move || {
                run_job(&ctx, &ran, control, hooks)
            })
            .await
            {
                Ok(f) => f,
                Err(e) => Finish {
                    status: JobStatus::Failed,
                    exit_code: Some(baton_contract::exit::BATON_FAILED),
                    error: Some(format!("the job's thread failed: {e}")),
                    superseded_by: None,
                    finished_at: now_ms(),
                },
            };
            let mut finish = finish;
            if finish.status == JobStatus::Interrupted
                && service.config.retries_interrupted(&job.spec.template)
                && job.attempts <= 1
            {
                finish.status = JobStatus::Queued;
                finish.error = finish.error.map(|e| format!("{e}; queued again"));
            }
            let run_ms = job.started_at.map(|s| finish.finished_at - s).unwrap_or(0);
            service.metrics.finished(queue_wait, run_ms, finish.status);
            tracing::info!(job = %id, status = finish.status.as_str(), exit_code = ?finish.exit_code, "job ended");
            // The end must be stored; retry while the store is unavailable.
            let mut delay = Duration::from_millis(100);
            loop {
                match service.store.finish(&id, &finish).await {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::error!(job = %id, error = %e, "cannot store a job's end; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
            service.lives().remove(&id);
            let _ = done_tx.send(true);
            service.wake();
        });
    }

    /// Removes finished jobs older than `job_ttl`, and their files.
    pub async fn evict(&self) {
        let ttl = i64::try_from(self.config.job_ttl.as_millis()).unwrap_or(i64::MAX);
        match self.store.evict(now_ms().saturating_sub(ttl)).await {
            Ok(ids) => {
                for id in ids {
                    if let Err(e) = self.files(&id).remove() {
                        tracing::warn!(job = %id, error = %e, "cannot remove an evicted job's files");
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot evict finished jobs"),
        }
    }

    async fn evict_periodically(self: Arc<Service>) {
        let every =
            (self.config.job_ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
        loop {
            tokio::time::sleep(every).await;
            self.evict().await;
            let service = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || {
                let live = |id: &str| service.lives().contains_key(id) || service.is_recovering(id);
                if let Err(e) = service.journal.compact(&live, false) {
                    tracing::warn!(error = %e, "cannot compact the start journal");
                }
            })
            .await;
        }
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
                let live = match self.live(id) {
                    Some(l) => Some(l),
                    None => {
                        drop(self.claiming.lock().await);
                        self.live(id)
                    }
                };
                let Some(live) = live else {
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
            if asked.map_or(true, |t| t.elapsed() >= Duration::from_secs(1)) {
                if !self.store.request_cancel(id).await? {
                    return Ok(Cancelled::NotHere);
                }
                asked = Some(tokio::time::Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops accepting jobs, cancels the queued jobs callers wait for (they
    /// are answered 503: see `waiters`), lets running ones finish for up to
    /// `drain_timeout`, then cancels them; other queued jobs stay for the
    /// next start.
    pub async fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.wake();
        self.cancel_waiting().await;
        let deadline = tokio::time::Instant::now() + self.config.drain_timeout;
        tracing::info!(
            running = self.active(),
            "draining: waiting for running jobs"
        );
        while self.active() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if self.active() > 0 {
            self.shutting_down.store(true, Ordering::SeqCst);
            let lives: Vec<Live> = self.lives().values().cloned().collect();
            tracing::warn!(
                running = lives.len(),
                "drain timeout: cancelling running jobs"
            );
            for l in &lives {
                l.control.cancel();
            }
            for l in lives {
                let mut done = l.done.clone();
                let _ = tokio::time::timeout(
                    self.config.grace + Duration::from_secs(5),
                    done.wait_for(|d| *d),
                )
                .await;
            }
        }
        self.drained.send_replace(true);
    }
}

/// Where the jobs' groups live: the baton dir, or with a PostgreSQL store
/// that database (the one place the service builds a run backend).
fn groups_backend(store: &StoreUrl) -> std::io::Result<baton_run::Backend> {
    match store {
        StoreUrl::Sqlite(_) => Ok(baton_run::Backend::Local),
        StoreUrl::Postgres(url) => {
            let db = baton_pg::Database::new(url).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?;
            Ok(baton_run::Backend::Postgres(Arc::new(db)))
        }
    }
}

/// The program a job's guardian runs: the `baton` binary installed next to
/// this one when there is one (it starts in a fraction of the time of the
/// service's own binary, and every job starts a guardian), else this
/// program itself. Both run a guardian when given `__baton-guard`.
fn guard_program() -> &'static std::path::PathBuf {
    static PROGRAM: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PROGRAM.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .map(|me| me.with_file_name("baton"))
            .filter(|small| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::metadata(small)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| std::path::PathBuf::from("/proc/self/exe"))
    })
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
