//! The client's data: what is submitted, a job as the service shows it
//! (and which exit code its end stands for), lists, prompts and tokens.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_contract::exit;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::ClientError;
use crate::model::{JobMode, JobStatus};

/// A job to submit (`POST /v1/jobs`); `None` leaves a field to the server.
#[derive(Clone, Debug, Default)]
pub struct Submission {
    /// The template to run.
    pub template: Option<String>,
    /// The prompt.
    pub prompt: Option<String>,
    /// The concurrency group.
    pub group: Option<String>,
    /// How the job joins its group.
    pub mode: Option<JobMode>,
    /// The job's timeout, counted from the start of execution.
    pub timeout: Option<Duration>,
    /// The branch its workspace works on.
    pub branch: Option<String>,
}

impl Submission {
    pub(super) fn body(&self) -> Value {
        let mut v = json!({});
        if let Some(t) = &self.template {
            v["template"] = json!(t);
        }
        if let Some(p) = &self.prompt {
            v["prompt"] = json!(p);
        }
        if let Some(g) = &self.group {
            v["group"] = json!(g);
        }
        if let Some(m) = self.mode {
            v["mode"] = json!(m.as_str());
        }
        if let Some(t) = self.timeout {
            v["timeout"] = json!(format!("{}ms", t.as_millis().max(1)));
        }
        if let Some(b) = &self.branch {
            v["workspace"] = json!({ "branch": b });
        }
        v
    }
}

/// The answer to a submission: `202 {id, status, position}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Queued {
    /// The job's id.
    pub id: String,
    /// `queued`.
    pub status: JobStatus,
    /// Its 1-based place among the queued jobs.
    pub position: u64,
}

/// A job as the service shows it (`GET /v1/jobs/{id}`; in lists without
/// `output`). Times are RFC 3339.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// Its id (also its run id).
    pub id: String,
    /// The template it runs.
    pub template: String,
    /// Where it is.
    pub status: JobStatus,
    /// The command's exit code, once it ended.
    pub exit_code: Option<i32>,
    /// Why it did not succeed, in one line.
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
    pub mode: JobMode,
    /// Its timeout.
    pub timeout_ms: u64,
    /// The branch its workspace works on.
    pub branch: Option<String>,
    /// Its workspace's path.
    pub workspace: Option<String>,
    /// The run that superseded it.
    pub superseded_by: Option<String>,
    /// Times it was started.
    pub attempts: u32,
    /// The tail of its stdout (only when one job is asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl Job {
    /// The exit code that stands for this job's end in baton's table:
    /// succeeded 0; failed its command's code (125 if it has none); timed
    /// out 124; cancelled and superseded 79; skipped 75; interrupted (the
    /// service stopped while it ran) 125. A job that has not ended: 125.
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobList {
    /// The jobs.
    pub jobs: Vec<Job>,
    /// Pass as `cursor` for the next page; `None` on the last.
    pub next_cursor: Option<String>,
}

/// Which jobs to list.
#[derive(Clone, Debug, Default)]
pub struct ListQuery {
    /// Only jobs with this status.
    pub status: Option<JobStatus>,
    /// Only jobs of this group.
    pub group: Option<String>,
    /// At most this many (the server's default when `None`).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Which of a job's captured streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    /// Its standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// Where a prompt comes from.
#[derive(Clone, Debug)]
pub enum PromptSource {
    /// The text itself.
    Text(String),
    /// A file.
    File(PathBuf),
    /// Standard input, to its end.
    Stdin,
}

impl PromptSource {
    /// Reads the prompt.
    pub fn read(&self) -> Result<String, ClientError> {
        let read_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClientError::File {
                what: "the prompt",
                path,
                source,
            }
        };
        match self {
            PromptSource::Text(t) => Ok(t.clone()),
            PromptSource::File(p) => std::fs::read_to_string(p).map_err(read_err(p)),
            PromptSource::Stdin => {
                let mut s = String::new();
                io::stdin()
                    .read_to_string(&mut s)
                    .map_err(read_err(Path::new("-")))?;
                Ok(s)
            }
        }
    }
}

/// Reads a token from a file: its first line, without surrounding blanks.
pub fn read_token_file(path: &Path) -> Result<String, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClientError::File {
        what: "the token file",
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: JobStatus, code: Option<i32>) -> Job {
        Job {
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
            mode: JobMode::Queue,
            timeout_ms: 1,
            branch: None,
            workspace: None,
            superseded_by: None,
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
    fn the_contract_names_every_job_status_in_order() {
        let ours: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(ours, baton_contract::json::JOB_STATUSES);
    }
}
