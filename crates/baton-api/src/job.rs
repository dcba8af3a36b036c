//! A job as the service shows it, a page of jobs, and a submission's answer.

use baton_contract::exit;
use serde::{Deserialize, Serialize};

use crate::mode::GroupMode;
use crate::status::JobStatus;

/// The answer to a submission: `202 {id, status, position}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Queued {
    /// The job's id.
    pub id: String,
    /// `queued`.
    pub status: JobStatus,
    /// Its 1-based place among the queued jobs.
    pub position: u64,
}

/// A job as the service shows it (`GET /v1/jobs/{id}`, with `output`; in
/// lists and the answer to a cancel, without). Times are RFC 3339,
/// durations milliseconds; `null` stands for "none".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobView {
    /// Its id (also its run id and its workspace's id).
    pub id: String,
    /// The template it runs.
    pub template: String,
    /// Where it is.
    pub status: JobStatus,
    /// The command's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Why it failed, was skipped or interrupted, in one line.
    pub error: Option<String>,
    /// When it was submitted.
    pub created_at: String,
    /// When it got a slot.
    pub started_at: Option<String>,
    /// When it ended.
    pub finished_at: Option<String>,
    /// Time in the queue, so far or in all.
    pub queue_wait_ms: Option<i64>,
    /// Time since it got a slot, so far or in all.
    pub run_ms: Option<i64>,
    /// Its concurrency group.
    pub group: Option<String>,
    /// How it joins its group.
    pub mode: GroupMode,
    /// Its ordering key in its group (`order` of its submission, as
    /// given; absent from services older than it: read as `None`).
    #[serde(default)]
    pub order: Option<String>,
    /// Its timeout, counted from the start of execution.
    pub timeout_ms: u64,
    /// The branch its workspace works on.
    pub branch: Option<String>,
    /// Whether it starts its branch over (`workspace.reset_branch` of its
    /// submission; absent from services older than it: read as `false`).
    #[serde(default)]
    pub reset_branch: bool,
    /// Where its branch's old tip was kept when its workspace started the
    /// branch over (`refs/baton/abandoned/<branch>/<time>-<job id>` in the
    /// template's repository); null when nothing was dropped.
    #[serde(default)]
    pub abandoned_ref: Option<String>,
    /// Its workspace's path, while or after it had one.
    pub workspace: Option<String>,
    /// The run that superseded it.
    pub superseded_by: Option<String>,
    /// The node that runs or ran it (absent from services older than
    /// nodes: read as `None`).
    #[serde(default)]
    pub node: Option<String>,
    /// Times it was started (more than 1 after `retry_on_interrupt`).
    pub attempts: u32,
    /// The tail of its stdout (only when one job is asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub output: Option<String>,
}

impl JobView {
    /// The exit code that stands for this job's end in baton's table
    /// (`baton_contract::exit`): succeeded 0; failed its command's code (125
    /// if it has none); timed out 124; cancelled and superseded 79; skipped
    /// 75; interrupted (the service stopped while it ran) 125. A job that
    /// has not ended: 125.
    pub fn exit_code(&self) -> i32 {
        match self.status {
            JobStatus::Succeeded => exit::SUCCESS,
            JobStatus::Failed => self
                .exit_code
                .filter(|c| *c != exit::SUCCESS)
                .unwrap_or(exit::BATON_FAILED),
            JobStatus::TimedOut => exit::TIMED_OUT,
            JobStatus::Cancelled | JobStatus::Superseded => exit::SUPERSEDED,
            JobStatus::Skipped => exit::NOT_ACQUIRED,
            JobStatus::Interrupted | JobStatus::Queued | JobStatus::Running => exit::BATON_FAILED,
        }
    }
}

/// A page of `GET /v1/jobs`, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct JobList {
    /// The jobs (without `output`).
    pub jobs: Vec<JobView>,
    /// Pass as `cursor` for the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: JobStatus, code: Option<i32>) -> JobView {
        JobView {
            id: "j".into(),
            template: "t".into(),
            status,
            exit_code: code,
            error: None,
            created_at: String::new(),
            started_at: None,
            finished_at: None,
            queue_wait_ms: None,
            run_ms: None,
            group: None,
            mode: GroupMode::Queue,
            order: None,
            timeout_ms: 1,
            branch: None,
            reset_branch: false,
            abandoned_ref: None,
            workspace: None,
            superseded_by: None,
            node: None,
            attempts: 0,
            output: None,
        }
    }

    #[test]
    fn a_jobs_end_maps_to_batons_exit_codes() {
        assert_eq!(job(JobStatus::Succeeded, Some(0)).exit_code(), 0);
        assert_eq!(job(JobStatus::Failed, Some(3)).exit_code(), 3);
        assert_eq!(job(JobStatus::Failed, None).exit_code(), 125);
        assert_eq!(job(JobStatus::Failed, Some(0)).exit_code(), 125);
        assert_eq!(job(JobStatus::TimedOut, Some(124)).exit_code(), 124);
        assert_eq!(job(JobStatus::Cancelled, None).exit_code(), 79);
        assert_eq!(job(JobStatus::Superseded, Some(143)).exit_code(), 79);
        assert_eq!(job(JobStatus::Skipped, Some(75)).exit_code(), 75);
        assert_eq!(job(JobStatus::Interrupted, None).exit_code(), 125);
    }

    #[test]
    fn a_job_has_the_contracts_fields() {
        let fields = |v: &serde_json::Value| -> Vec<String> {
            let mut f: Vec<String> = v
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            f.sort();
            f
        };
        let mut j = job(JobStatus::Queued, None);
        let listed = serde_json::to_value(&j).unwrap_or_default();
        assert_eq!(fields(&listed), crate::contract::job_listed().fields);
        j.output = Some(String::new());
        let shown = serde_json::to_value(&j).unwrap_or_default();
        assert_eq!(fields(&shown), crate::contract::job().fields);
    }
}
