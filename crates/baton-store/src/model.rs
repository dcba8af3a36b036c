//! Jobs as the store keeps them. The API shows them as
//! [`baton_api::JobView`] (`From<&Job>`, here); their status and mode are
//! the wire model's own types.

use serde::{Deserialize, Serialize};

pub use baton_api::JobStatus;

/// How a job joins its group: baton's one group mode.
pub use baton_api::GroupMode;

/// A job to store: everything needed to run it, resolved at submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    /// Its id (also the run id and the workspace id).
    pub id: String,
    /// The template it runs.
    pub template: String,
    /// The prompt, if any.
    pub prompt: Option<String>,
    /// The concurrency group, if any.
    pub group: Option<String>,
    /// How it joins the group.
    pub mode: GroupMode,
    /// Its ordering key in the group (modes supersede and coalesce), as
    /// given; valid ([`baton_api::Order::parse`] takes it) once stored.
    pub order: Option<String>,
    /// Its timeout in milliseconds, counted from the start of execution.
    pub timeout_ms: u64,
    /// The branch its workspace works on.
    pub branch: Option<String>,
    /// Start `branch` over, dropping its commits that were never pushed (the
    /// old tip kept under `refs/baton/abandoned/...`; see `baton_git`).
    pub reset_branch: bool,
    /// Raw argv (only when the configuration allows raw commands).
    pub command: Option<Vec<String>>,
    /// When it was submitted (ms since the epoch).
    pub created_at: i64,
    /// The node whose caller waits for its result on an open connection (a
    /// chat completion): nobody else knows the job, so once that node is
    /// gone (restarted after kill -9, or dead) the job is not run any more.
    pub waiter: Option<String>,
}

/// Whether a job with the ordering key `newer`, arriving after one with
/// `older` in a supersede or coalesce group, supersedes it: unless both
/// have keys of one kind and `newer`'s is the older (as `baton run
/// --order`: equal keys and jobs without a key go by arrival).
pub fn outranks(newer: Option<&str>, older: Option<&str>) -> bool {
    let key = |k: Option<&str>| k.and_then(|k| baton_api::Order::parse(k).ok());
    match (key(newer), key(older)) {
        (Some(n), Some(o)) => n.compare(&o) != Some(std::cmp::Ordering::Less),
        _ => true,
    }
}

impl NewJob {
    /// Its ordering key, parsed.
    pub fn order_key(&self) -> Option<baton_api::Order> {
        self.order
            .as_deref()
            .and_then(|o| baton_api::Order::parse(o).ok())
    }
}

/// The recorded process group of a running job's command, so that a
/// restarted service can stop what a crashed one left running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedGroup {
    /// The process group id.
    pub pgid: i32,
    /// Its leader's start time (clock ticks since boot).
    pub leader_start_time: u64,
    /// Its session.
    pub session: i32,
    /// The grace period between TERM and KILL, in milliseconds.
    pub grace_ms: u64,
}

impl RecordedGroup {
    /// Stops what is left of the group (TERM, grace, KILL), checking the
    /// leader's start time and the session so that a reused id is never
    /// signalled; returns how many processes it found.
    /// A group that leads its session (a job's command has one of its
    /// own) has all that session stopped, in whatever group.
    #[cfg(unix)]
    pub fn stop(&self) -> usize {
        let grace = std::time::Duration::from_millis(self.grace_ms);
        if self.session == self.pgid {
            return baton_proc::terminate_session(self.pgid, self.leader_start_time, grace).len();
        }
        baton_proc::terminate_group(
            self.pgid,
            baton_proc::GroupIdentity::Recorded {
                leader_start_time: self.leader_start_time,
                session: self.session,
            },
            grace,
        )
        .len()
    }

    /// Windows: the command's process (`pgid` is its pid, and
    /// `leader_start_time` its creation time; there are no sessions) is
    /// terminated if it still runs; returns how many processes it found
    /// (0 or 1). What it started died with it when its supervisor's Job
    /// Object closed, so a crashed service leaves nothing else.
    #[cfg(windows)]
    pub fn stop(&self) -> usize {
        let (pid, start) = (self.pgid, self.leader_start_time);
        let same = || baton_proc::ProcessId::of(pid).is_some_and(|p| p.start_time == start);
        if !same() {
            return 0;
        }
        let grace = std::time::Duration::from_millis(self.grace_ms);
        usize::from(baton_proc::terminate_verified(pid, grace, same).is_ok())
    }
}

/// A stored job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The submission, as stored.
    pub spec: NewJob,
    /// FIFO order (strictly increasing with submission).
    pub seq: i64,
    /// Where it is.
    pub status: JobStatus,
    /// The command's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Why it failed, was skipped or interrupted, in one line.
    pub error: Option<String>,
    /// When it got a slot (ms since the epoch).
    pub started_at: Option<i64>,
    /// When it ended.
    pub finished_at: Option<i64>,
    /// Its workspace's path, while or after it had one.
    pub workspace: Option<String>,
    /// Where its branch's old tip was kept when its workspace started the
    /// branch over ([`NewJob::reset_branch`]).
    pub abandoned_ref: Option<String>,
    /// The run that superseded it.
    pub superseded_by: Option<String>,
    /// The node that runs or ran it.
    pub node: Option<String>,
    /// Times it was started (more than 1 after `retry_on_interrupt`).
    pub attempts: u32,
    /// Its command's process group, while it runs.
    pub process_group: Option<RecordedGroup>,
}

/// How a job ended, as the executor reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finish {
    /// Its final status.
    pub status: JobStatus,
    /// The command's exit code (baton's exit code table).
    pub exit_code: Option<i32>,
    /// Why, in one line, when it did not succeed.
    pub error: Option<String>,
    /// The run that superseded it.
    pub superseded_by: Option<String>,
    /// When it ended (ms since the epoch).
    pub finished_at: i64,
}

/// Which jobs to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only jobs with this status.
    pub status: Option<JobStatus>,
    /// Only jobs of this group.
    pub group: Option<String>,
    /// At most this many.
    pub limit: u32,
    /// Only jobs submitted before the job with this sequence number (newest first).
    pub before_seq: Option<i64>,
}

/// How many jobs are in each live state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Jobs holding a slot.
    pub running: u64,
    /// Jobs waiting for one.
    pub queued: u64,
}

/// A node of a service whose store several nodes share, as `/health`
/// shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct NodeInfo {
    /// Its node id (the `node` of the jobs it runs).
    pub id: String,
    /// The host it last ran on.
    pub host: Option<String>,
    /// Its last process id there.
    pub pid: Option<i32>,
    /// Whether its liveness lock (a session advisory lock) is held now, per
    /// `pg_locks`: it may claim jobs. A node that is not live has its
    /// running jobs taken over.
    pub live: bool,
    /// When its current (or last) process first connected, RFC 3339.
    pub started_at: Option<String>,
    /// Its last heartbeat, RFC 3339 (every 2 s while live).
    pub heartbeat_at: Option<String>,
    /// Jobs running on it now (as the store says).
    pub running: u64,
}

/// The result of a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Stored; `position` is its 1-based place among the queued jobs.
    Queued {
        /// The job as stored.
        job: Box<Job>,
        /// Its place in the queue.
        position: u64,
        /// Jobs of its group that it superseded while they waited.
        superseded: Vec<String>,
    },
    /// Not stored: running + queued would exceed the queue depth.
    Full {
        /// Jobs running and queued now.
        counts: Counts,
    },
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `ms` since the epoch as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(t).to_string()
}

/// A job as the API shows it, now (`queue_wait_ms` and `run_ms` of a job
/// that has not ended count to now), without `output`: the handler that
/// shows one job adds its stdout's tail.
impl From<&Job> for baton_api::JobView {
    fn from(job: &Job) -> baton_api::JobView {
        let now = now_ms();
        let queue_wait_ms = match job.started_at {
            Some(s) => Some(s - job.spec.created_at),
            None if job.status == JobStatus::Queued => Some(now - job.spec.created_at),
            None => None,
        };
        baton_api::JobView {
            id: job.spec.id.clone(),
            template: job.spec.template.clone(),
            status: job.status,
            exit_code: job.exit_code,
            error: job.error.clone(),
            created_at: rfc3339(job.spec.created_at),
            started_at: job.started_at.map(rfc3339),
            finished_at: job.finished_at.map(rfc3339),
            queue_wait_ms,
            run_ms: job.started_at.map(|s| job.finished_at.unwrap_or(now) - s),
            group: job.spec.group.clone(),
            mode: job.spec.mode,
            order: job.spec.order.clone(),
            timeout_ms: job.spec.timeout_ms,
            branch: job.spec.branch.clone(),
            reset_branch: job.spec.reset_branch,
            abandoned_ref: job.abandoned_ref.clone(),
            workspace: job.workspace.clone(),
            superseded_by: job.superseded_by.clone(),
            node: job.node.clone(),
            attempts: job.attempts,
            output: None,
        }
    }
}
