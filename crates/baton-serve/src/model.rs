//! Jobs as the store keeps them and the API shows them.

use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Stored, waiting for a slot.
    Queued,
    /// Given a slot: waiting for its group, preparing its workspace, or running.
    Running,
    /// The command exited 0.
    Succeeded,
    /// The command exited non-zero or was killed by a signal, its setup
    /// failed, or it could not be started.
    Failed,
    /// Killed after its timeout (counted from the start of execution).
    TimedOut,
    /// Cancelled through the API (or by a shutdown that outlived its drain).
    Cancelled,
    /// A newer job or run of its group superseded it.
    Superseded,
    /// Mode skip, and its group was busy.
    Skipped,
    /// The service stopped (crash, kill -9) while it ran.
    Interrupted,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 9] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::TimedOut,
        JobStatus::Cancelled,
        JobStatus::Superseded,
        JobStatus::Skipped,
        JobStatus::Interrupted,
    ];

    /// The name used in the API and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::TimedOut => "timed_out",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Superseded => "superseded",
            JobStatus::Skipped => "skipped",
            JobStatus::Interrupted => "interrupted",
        }
    }

    /// The status named `s`.
    pub fn parse(s: &str) -> Option<JobStatus> {
        JobStatus::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the job has ended (nothing of it runs or will run).
    pub fn is_final(self) -> bool {
        !matches!(self, JobStatus::Queued | JobStatus::Running)
    }
}

/// How a job joins its group (the CLI's `--mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobMode {
    /// Wait for the group's slot.
    #[default]
    Queue,
    /// Stop the group's running job and older waiters.
    Supersede,
    /// Replace the group's waiting job; let the running one finish.
    Coalesce,
    /// Do not run if the group is busy.
    Skip,
}

impl JobMode {
    /// The name used in the API and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            JobMode::Queue => "queue",
            JobMode::Supersede => "supersede",
            JobMode::Coalesce => "coalesce",
            JobMode::Skip => "skip",
        }
    }

    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<JobMode> {
        [
            JobMode::Queue,
            JobMode::Supersede,
            JobMode::Coalesce,
            JobMode::Skip,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }
}

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
    pub mode: JobMode,
    /// Its timeout in milliseconds, counted from the start of execution.
    pub timeout_ms: u64,
    /// The branch its workspace works on.
    pub branch: Option<String>,
    /// Raw argv (only when the configuration allows raw commands).
    pub command: Option<Vec<String>>,
    /// When it was submitted (ms since the epoch).
    pub created_at: i64,
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
    pub fn stop(&self) -> usize {
        baton_proc::terminate_group(
            self.pgid,
            baton_proc::GroupIdentity::Recorded {
                leader_start_time: self.leader_start_time,
                session: self.session,
            },
            std::time::Duration::from_millis(self.grace_ms),
        )
        .len()
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeInfo {
    /// Its node id (the `node` of the jobs it runs).
    pub id: String,
    /// The host it last ran on.
    pub host: Option<String>,
    /// Its last process id there.
    pub pid: Option<i32>,
    /// Whether its liveness lock is held now (it may claim jobs).
    pub live: bool,
    /// When its current (or last) process first connected, RFC 3339.
    pub started_at: Option<String>,
    /// Its last heartbeat, RFC 3339.
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
