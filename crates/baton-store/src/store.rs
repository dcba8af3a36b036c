//! The operations the service needs from a job store, and their answers.
//! No driver type crosses this boundary; every method is one atomic step
//! (a transaction).

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::model::{
    Counts, Finish, Job, JobStatus, ListFilter, NewJob, NodeInfo, RecordedGroup, Submitted,
};

/// A store failure.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no engine this build knows.
    #[error("unsupported store URL '{0}': use sqlite://PATH or postgres://USER@HOST/DB")]
    UnsupportedUrl(String),
    /// The store could not be opened or created.
    #[error("cannot open the job store '{url}': {message}")]
    Open {
        /// The store's URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A query failed.
    #[error("job store error while trying to {op}: {message}")]
    Query {
        /// What was being done.
        op: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// What happened to a cancel of a queued job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelQueued {
    /// It was queued and is now cancelled.
    Cancelled(Box<Job>),
    /// It is in another state (running, finished); nothing changed.
    NotQueued(JobStatus),
    /// No such job.
    Unknown,
}

/// What happened to a removal of a finished job's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoveFinished {
    /// It had ended; its record is gone.
    Removed,
    /// It has not ended (queued or running); nothing changed.
    Active(JobStatus),
    /// No such job.
    Unknown,
}

/// What restart recovery did with a job that was running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    /// The job, as it was.
    pub job: Job,
    /// Whether it was queued again (`retry_on_interrupt`) rather than
    /// marked interrupted.
    pub requeued: bool,
}

/// Something a shared store tells the service of its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreEvent {
    /// A job was stored, ended or queued again somewhere: try to claim.
    Wake,
    /// Some node asks for job `id` to be cancelled if it runs here.
    Cancel(String),
    /// Job `by` (mode supersede) was stored in `group`: the group's jobs
    /// running here stop as superseded by it.
    Supersede {
        /// The group key.
        group: String,
        /// The newer job's id.
        by: String,
        /// Its sequence number: only older jobs stop.
        seq: i64,
    },
    /// This node's liveness session was lost (`false`: stop the jobs running
    /// here, claim nothing) or is back (`true`).
    Live(bool),
    /// This node's liveness session answered a heartbeat sent at this
    /// instant: it vouches for the jobs running here (their guardians'
    /// fences, see `baton_proc::guard`).
    Alive(std::time::Instant),
}

/// The operations the service needs from a job store.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// This node's name in the store (the `node` of the jobs it runs).
    fn node(&self) -> &str {
        "local"
    }

    /// Events from other nodes, for a store shared by several; `None` for
    /// a store only one node uses.
    fn events(&self) -> Option<broadcast::Receiver<StoreEvent>> {
        None
    }

    /// Whether this node may run jobs now (a shared store: it holds its
    /// liveness session).
    fn is_live(&self) -> bool {
        true
    }

    /// The nodes of a store several nodes share (each with its liveness and
    /// its running jobs): the live ones, and those that ran jobs or
    /// heartbeat in the last day. `None` for a store only one node uses.
    async fn nodes(&self) -> Result<Option<Vec<NodeInfo>>, StoreError> {
        Ok(None)
    }

    /// Why the store cannot keep what it is given now (its last write
    /// failed, e.g. an unwritable file or a full disk), if so.
    fn problem(&self) -> Option<String> {
        None
    }

    /// Asks the node running job `id` to cancel it. False if this store has
    /// no other nodes to ask.
    async fn request_cancel(&self, _id: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Jobs running on nodes that are gone (their liveness lock is free)
    /// and whose last heartbeat is older than `settle.dead` (by then their
    /// guardians have killed what they ran, or the node itself stopped it)
    /// are queued again or marked interrupted, as [`Store::recover`] does;
    /// so are those of nodes whose session holds the lock but whose
    /// heartbeat is older than `settle.stopped` (a stopped process: its
    /// session is ended first). Returns them as they were.
    async fn reap(
        &self,
        _retry: &(dyn for<'a> Fn(&'a str) -> bool + Send + Sync),
        _settle: Settle,
        _now: i64,
    ) -> Result<Vec<Recovered>, StoreError> {
        Ok(Vec::new())
    }

    /// Stores `job` as queued unless running + queued jobs already reach
    /// `max_depth`; in modes supersede and coalesce, marks the queued jobs
    /// of its group superseded by it, in the same step.
    async fn submit(&self, job: NewJob, max_depth: u64) -> Result<Submitted, StoreError>;

    /// The job with this id.
    async fn get(&self, id: &str) -> Result<Option<Job>, StoreError>;

    /// Jobs matching `filter`, newest first.
    async fn list(&self, filter: &ListFilter) -> Result<Vec<Job>, StoreError>;

    /// Moves up to `n` of the oldest queued jobs to running on `node`, in
    /// one step (one transaction), while fewer than `max_running` jobs run,
    /// and returns them oldest first; fewer (or none) when the queue or the
    /// cap runs out. A job in mode queue or coalesce whose group already has
    /// a running job is passed over: it could only wait for the group's slot
    /// while holding a service slot (it keeps its place and runs once the
    /// group is free). The caller starts the jobs in their claim order.
    async fn claim_many(
        &self,
        node: &str,
        max_running: u64,
        n: u64,
        now: i64,
    ) -> Result<Vec<Job>, StoreError>;

    /// [`Store::claim_many`] of one job.
    async fn claim_next(
        &self,
        node: &str,
        max_running: u64,
        now: i64,
    ) -> Result<Option<Job>, StoreError> {
        let mut claimed = self.claim_many(node, max_running, 1, now).await?;
        Ok(claimed.pop())
    }

    /// Records the process group of a running job's command.
    async fn set_process_group(&self, id: &str, group: RecordedGroup) -> Result<(), StoreError>;

    /// Records a running job's workspace path, and where its reset kept
    /// its branch's old tip when it dropped commits (`None` leaves what was
    /// recorded: an earlier attempt's reset still stands).
    async fn set_workspace(
        &self,
        id: &str,
        path: &str,
        abandoned_ref: Option<&str>,
    ) -> Result<(), StoreError>;

    /// Ends a running job. Returns false if it was not running.
    async fn finish(&self, id: &str, finish: &Finish) -> Result<bool, StoreError>;

    /// Cancels a job if it is queued.
    async fn cancel_queued(&self, id: &str, now: i64) -> Result<CancelQueued, StoreError>;

    /// After a restart: each job of `ids` still marked running on `node`
    /// (the previous instance's, once nothing of it runs) is queued again
    /// (first in line) when `retry(template)` says so and it has not been
    /// retried yet, else marked interrupted. Returns them as they were.
    async fn recover(
        &self,
        node: &str,
        ids: &[String],
        retry: &(dyn for<'a> Fn(&'a str) -> bool + Send + Sync),
        now: i64,
    ) -> Result<Vec<Recovered>, StoreError>;

    /// Removes finished jobs that ended before `before`; returns their ids.
    async fn evict(&self, before: i64) -> Result<Vec<String>, StoreError>;

    /// Removes the record of job `id` if it has ended (its files are the
    /// caller's to remove), as eviction would after `job_ttl`.
    async fn remove_finished(&self, id: &str) -> Result<RemoveFinished, StoreError>;

    /// Jobs running and queued now.
    async fn counts(&self) -> Result<Counts, StoreError>;

    /// Jobs per status (all of them, for metrics).
    async fn status_counts(&self) -> Result<Vec<(JobStatus, u64)>, StoreError>;
}

/// How long after a node's last answered heartbeat its jobs may be taken
/// over ([`Store::reap`]; see `docs/src/design/service.md`, "The rescuer: timing and fencing").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// A node whose session ended (its liveness lock is free): it may be
    /// alive, cut off, still stopping its jobs' escaped processes (TERM,
    /// grace, KILL) after its guardians killed their commands at the fence.
    pub dead: std::time::Duration,
    /// A node whose session still holds its lock while it stopped beating
    /// (a stopped or wedged process, its kernel answering keepalives): it
    /// stops nothing itself, its guardians killed its commands at the fence,
    /// so waiting out a grace buys nothing.
    pub stopped: std::time::Duration,
}

impl Settle {
    /// The same wait for both (tests: `Settle::uniform(Duration::ZERO)`).
    pub fn uniform(d: std::time::Duration) -> Settle {
        Settle {
            dead: d,
            stopped: d,
        }
    }
}
