//! Where a job is in its life.

use serde::{Deserialize, Serialize};

/// Where a job is in its life (`status` of a job; the store keeps the same
/// names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

    /// What the status means, in a few words (the CLI's help lists them).
    pub fn summary(self) -> &'static str {
        match self {
            JobStatus::Queued => "Waiting for a slot",
            JobStatus::Running => "Holding a slot",
            JobStatus::Succeeded => "Exited 0",
            JobStatus::Failed => "Exited non-zero, was killed, or could not start",
            JobStatus::TimedOut => "Killed after its timeout",
            JobStatus::Cancelled => "Cancelled",
            JobStatus::Superseded => "Stopped by a newer job or run of its group",
            JobStatus::Skipped => "Not run: its group was busy (mode skip)",
            JobStatus::Interrupted => "The service stopped while it ran",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_names_every_job_status_in_order() {
        let ours: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(ours, baton_contract::json::JOB_STATUSES);
    }

    #[test]
    fn serde_uses_the_same_names() {
        for s in JobStatus::ALL {
            let json = serde_json::to_value(s).ok();
            assert_eq!(json.as_ref().and_then(|v| v.as_str()), Some(s.as_str()));
            assert_eq!(JobStatus::parse(s.as_str()), Some(s));
        }
    }
}
