//! `baton job ...`: a client of the job service (`baton serve`). Syntax and
//! output only; the HTTP calls and the waiting are `baton_client`'s, the
//! mapping of a job's end to an exit code `baton_api`'s.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use baton_client::{
    read_token_file, Client, ClientError, GroupMode, JobList, JobStatus, JobView, ListQuery,
    LogStream, PromptSource, SubmitRequest, WorkspaceOptions, DEFAULT_SERVER,
};
use baton_lock::LockName;
use clap::{Args, Subcommand};

use crate::args::{lock_name, ModeArg};
use crate::duration::parse_positive_duration;
use crate::exit_codes::for_child;
use crate::say::{fail, print_json};

/// `baton job`: which service, and what to do.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// The job service [default: $BATON_SERVER, else http://127.0.0.1:7420].
    #[arg(long, global = true, value_name = "URL")]
    pub server: Option<String>,

    /// Read the service's token from this file (its first line) [default: $BATON_TOKEN].
    #[arg(long, global = true, value_name = "FILE")]
    pub token_file: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: JobCommand,
}

/// A job status on the command line: its API name, described in `--help`.
fn status_parser() -> impl clap::builder::TypedValueParser<Value = JobStatus> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let names = JobStatus::ALL.map(|s| PossibleValue::new(s.as_str()).help(s.summary()));
    PossibleValuesParser::new(names)
        .try_map(|s| JobStatus::parse(&s).ok_or_else(|| format!("unknown job status '{s}'")))
}

/// `baton job ...` commands.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Submit a job: prints its id, or with --wait / --follow waits for its end.
    #[command(after_help = "Examples:
  baton job submit 'fix the failing test in crates/foo'
  baton job submit --template review --group pr/17 --mode supersede --prompt-file msg.txt
  git diff | baton job submit --template review -
  baton job submit --wait --timeout 20m 'update the changelog' > job-id
  baton job submit --follow 'summarise the open issues'   # its stdout, live
  baton job submit --template pipeline --branch agent/issue-7 --reset-branch 'redo issue 7'
  export BATON_SERVER=http://10.0.0.5:7420 BATON_TOKEN=\"$(cat ~/.baton-token)\"

The prompt is PROMPT, the content of --prompt-file, or stdin with `-`. Without --wait or
--follow, prints the job's id (--json: {id, status, position}) and exits 0 once the service
has stored it. --wait waits for the job's end (--json: the job, as `job status --json`);
--follow also writes its stdout as it comes (the id goes to stderr).

Exit status: without --wait, 0 when submitted. With --wait or --follow, the job's end:
0 succeeded; the command's own code when it failed (128+N if killed by signal N); 124 timed
out; 79 cancelled or superseded; 75 skipped (its group was busy, mode skip); 125
interrupted (the service stopped while it ran). Always: 75 if the service is full or
shutting down (try again after the time named); 125 if the server cannot be reached, refuses
the token, or refuses the request (the server's message is printed).")]
    Submit(Box<SubmitArgs>),

    /// Show a job: status, exit code, times, group, workspace.
    #[command(after_help = "Examples:
  baton job status 0190f3c2-7d1e-7a41
  baton job status \"$ID\" --json | jq -r .status

JSON: id, template, status (queued running succeeded failed timed_out cancelled superseded
skipped interrupted), exit_code, error, created_at, started_at, finished_at, queue_wait_ms,
run_ms, group, mode, order, timeout_ms, branch, reset_branch, abandoned_ref (where a reset kept the
branch's old tip), workspace, superseded_by, node, attempts, output (the tail of its stdout). Exit status: 0; 125 for an unknown (or evicted) job.")]
    Status {
        /// The job's id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// List jobs, newest first.
    #[command(after_help = "Examples:
  baton job list
  baton job list --status running
  baton job list --group issue/42 --limit 5 --json | jq -r '.jobs[].id'
  baton job list --limit 20 --cursor 1234        # the next page

JSON: {jobs: [a job as `job status --json` shows it, without output], next_cursor}.")]
    List {
        /// Only jobs with this status.
        #[arg(long, value_name = "STATUS", value_parser = status_parser())]
        status: Option<JobStatus>,
        /// Only jobs of this group.
        #[arg(long, value_name = "KEY", value_parser = lock_name)]
        group: Option<LockName>,
        /// At most this many jobs.
        #[arg(long, value_name = "N", default_value = "50", value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        /// Continue after a previous page: its `next_cursor` (printed last).
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Cancel a job: a queued one at once, a running one with TERM, grace, KILL.
    #[command(after_help = "Example:
  baton job cancel \"$ID\"

Returns once the job has ended, and prints how it ended (--json: the job). Exit status: 0
when the job is cancelled or ended meanwhile; 125 if it had already ended or is unknown.")]
    Cancel {
        /// The job's id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },

    /// Print a job's captured output; with --follow, until the job ends.
    #[command(after_help = "Examples:
  baton job log \"$ID\"
  baton job log \"$ID\" --follow
  baton job log \"$ID\" --stderr

The whole captured stream (size-capped per job by the service's max_log_bytes).
Exit status: 0 (whatever the job's end); 125 for an unknown (or evicted) job.")]
    Log {
        /// The job's id.
        id: String,
        /// Keep printing until the job has ended.
        #[arg(long)]
        follow: bool,
        /// Its stderr instead of its stdout.
        #[arg(long)]
        stderr: bool,
    },
}

/// `baton job submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The template to run [default: the service's default_template].
    #[arg(long, value_name = "NAME")]
    pub template: Option<String>,
    /// Run in this concurrency group, shared with `baton run --group` on the service's baton dir.
    #[arg(long, value_name = "KEY", value_parser = lock_name)]
    pub group: Option<LockName>,
    /// How the job relates to others of its group [default: queue].
    #[arg(long, value_enum, requires = "group", value_name = "MODE")]
    pub mode: Option<ModeArg>,
    /// Modes supersede and coalesce: the event the job answers, an integer or an RFC 3339 time
    /// (as `baton run --order`): a job whose key is older than the newest its group has seen
    /// ends superseded without running.
    /// Without it, BATON_ORDER gives the key to jobs in modes supersede and coalesce.
    #[arg(long, value_name = "KEY", requires = "group", value_parser = crate::args::order_key)]
    pub order: Option<baton_run::Order>,
    /// The job's timeout, counted from the start of execution [default: the template's].
    #[arg(long, value_name = "DURATION", value_parser = parse_positive_duration)]
    pub timeout: Option<Duration>,
    /// The branch the job's workspace works on (templates with a workspace).
    #[arg(long, value_name = "BRANCH")]
    pub branch: Option<String>,
    /// Start --branch over at the template's branch when it has commits that one lacks: its
    /// old tip is kept under refs/baton/abandoned/<branch>/<time>-<job id> (the job's
    /// abandoned_ref); the job fails while a live workspace holds the branch.
    #[arg(long, requires = "branch")]
    pub reset_branch: bool,
    /// Wait for the job's end and exit with its code.
    #[arg(long)]
    pub wait: bool,
    /// Wait, and write the job's stdout as it comes.
    #[arg(long, conflicts_with = "json")]
    pub follow: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Read the prompt from this file.
    #[arg(long, value_name = "FILE", conflicts_with = "prompt")]
    pub prompt_file: Option<PathBuf>,
    /// The prompt; `-` reads it from stdin.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
}

/// Runs a `baton job` command; returns the exit code.
pub fn run(args: JobArgs) -> u8 {
    crate::startup::restore_default_sigpipe();
    let token = match &args.token_file {
        Some(path) => match read_token_file(path) {
            Ok(t) => Some(t),
            Err(e) => return failed(&e),
        },
        None => std::env::var("BATON_TOKEN").ok(),
    };
    let server = args
        .server
        .or_else(|| std::env::var("BATON_SERVER").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let client = match Client::new(&server, token) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    match args.command {
        JobCommand::Submit(a) => submit(&client, *a),
        JobCommand::Status { id, json } => match client.job(&id) {
            Ok(job) if json => print_json(&job),
            Ok(job) => print_job(&job),
            Err(e) => failed(&e),
        },
        JobCommand::List {
            status,
            group,
            limit,
            cursor,
            json,
        } => {
            let q = ListQuery {
                status: status.map(|s| s.as_str().to_string()),
                group: group.map(|g| g.as_str().to_string()),
                limit: Some(limit),
                cursor,
            };
            match client.list(&q) {
                Ok(list) if json => print_json(&list),
                Ok(list) => print_list(&list),
                Err(e) => failed(&e),
            }
        }
        JobCommand::Cancel { id, json } => match client.cancel(&id) {
            Ok(job) if json => print_json(&job),
            Ok(job) => {
                match job.status {
                    JobStatus::Cancelled => outln!("job {}: cancelled", job.id),
                    s => outln!(
                        "job {}: ended {} before it was cancelled",
                        job.id,
                        s.as_str()
                    ),
                }
                0
            }
            Err(e) => failed(&e),
        },
        JobCommand::Log { id, follow, stderr } => {
            let stream = if stderr {
                LogStream::Stderr
            } else {
                LogStream::Stdout
            };
            match client.log(&id, stream, follow, &mut std::io::stdout().lock()) {
                Ok(_) => 0,
                Err(e) => failed(&e),
            }
        }
    }
}

fn submit(client: &Client, a: SubmitArgs) -> u8 {
    let order = match (a.order, a.mode) {
        (Some(o), _) => Some(o),
        (None, Some(ModeArg::Supersede | ModeArg::Coalesce)) if a.group.is_some() => {
            match crate::args::order_from_env() {
                Ok(o) => o,
                Err(e) => return crate::say::fail(&e, crate::exit_codes::BATON_FAILED),
            }
        }
        (None, _) => None,
    };
    let source = match (a.prompt_file, a.prompt) {
        (Some(f), _) => Some(PromptSource::File(f)),
        (None, Some(p)) if p == "-" => Some(PromptSource::Stdin),
        (None, Some(p)) => Some(PromptSource::Text(p)),
        (None, None) => None,
    };
    let prompt = match source.map(|s| s.read()).transpose() {
        Ok(p) => p,
        Err(e) => return failed(&e),
    };
    let sub = SubmitRequest {
        template: a.template,
        prompt,
        group: a.group.map(|g| g.as_str().to_string()),
        mode: a.mode.map(|m| GroupMode::from(m).as_str().to_string()),
        // Sent as given (an integer as a JSON number): the service checks it.
        order: order.map(|o| match o.kind() {
            baton_run::OrderKind::Integer => serde_json::Value::from(o.value()),
            baton_run::OrderKind::Time => serde_json::Value::from(o.text()),
        }),
        timeout: a.timeout.map(SubmitRequest::timeout_value),
        workspace: a.branch.map(|b| WorkspaceOptions {
            branch: Some(b),
            reset_branch: a.reset_branch,
        }),
        ..SubmitRequest::default()
    };
    let queued = match client.submit(&sub) {
        Ok(q) => q,
        Err(e) => return failed(&e),
    };
    if a.follow {
        errln!(
            "baton: job {} queued at position {}",
            queued.id,
            queued.position
        );
    } else if a.json && !a.wait {
        return print_json(&queued);
    } else if !a.json {
        outln!("{}", queued.id);
        let _ = std::io::stdout().flush();
    }
    if !a.wait && !a.follow {
        return 0;
    }
    let waited = if a.follow {
        client.wait(&queued.id, &mut std::io::stdout().lock())
    } else {
        client.wait(&queued.id, &mut std::io::sink())
    };
    let job = match waited {
        Ok(j) => j,
        Err(e) => {
            errln!(
                "baton: {} (job {} goes on; see `baton job status {}`)",
                baton_lock::one_line(&e),
                queued.id,
                queued.id
            );
            return for_child(e.exit_code());
        }
    };
    if a.json {
        print_json(&job);
    }
    if job.status != JobStatus::Succeeded {
        errln!(
            "baton: job {} {}{}",
            job.id,
            job.status.as_str(),
            job.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    for_child(job.exit_code())
}

fn failed(e: &ClientError) -> u8 {
    fail(e, for_child(e.exit_code()))
}

/// A duration in milliseconds, short: `340ms`, `12.3s`, `4m 5s`.
fn ms(v: Option<i64>) -> String {
    match v {
        None => "-".to_string(),
        Some(ms) if ms < 1000 => format!("{}ms", ms.max(0)),
        Some(ms) if ms < 60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) => {
            humantime::format_duration(Duration::from_secs(u64::try_from(ms / 1000).unwrap_or(0)))
                .to_string()
        }
    }
}

fn or_dash(v: Option<&str>) -> &str {
    v.unwrap_or("-")
}

fn print_job(j: &JobView) -> u8 {
    let mut rows: Vec<(&str, String)> = vec![
        ("id", j.id.clone()),
        ("status", j.status.as_str().to_string()),
        ("template", j.template.clone()),
        (
            "group",
            match &j.group {
                Some(g) => format!("{g} ({})", j.mode.as_str()),
                None => "-".to_string(),
            },
        ),
        (
            "exit code",
            j.exit_code.map_or("-".to_string(), |c| c.to_string()),
        ),
    ];
    if let Some(e) = &j.error {
        rows.push(("error", e.clone()));
    }
    rows.extend([
        ("created", j.created_at.clone()),
        ("started", or_dash(j.started_at.as_deref()).to_string()),
        ("finished", or_dash(j.finished_at.as_deref()).to_string()),
        ("queue wait", ms(j.queue_wait_ms)),
        ("run time", ms(j.run_ms)),
        (
            "timeout",
            ms(Some(i64::try_from(j.timeout_ms).unwrap_or(i64::MAX))),
        ),
    ]);
    for (k, v) in [
        ("branch", &j.branch),
        ("abandoned", &j.abandoned_ref),
        ("workspace", &j.workspace),
        ("superseded by", &j.superseded_by),
    ] {
        if let Some(v) = v {
            rows.push((k, v.clone()));
        }
    }
    if j.attempts > 1 {
        rows.push(("attempts", j.attempts.to_string()));
    }
    for (k, v) in rows {
        outln!("{:<15}{v}", format!("{k}:"));
    }
    0
}

fn print_list(list: &JobList) -> u8 {
    if list.jobs.is_empty() {
        outln!("no jobs");
        return 0;
    }
    let rows: Vec<[String; 7]> = list
        .jobs
        .iter()
        .map(|j| {
            [
                j.id.clone(),
                j.status.as_str().to_string(),
                j.template.clone(),
                or_dash(j.group.as_deref()).to_string(),
                ms(j.queue_wait_ms),
                ms(j.run_ms),
                j.exit_code.map_or("-".to_string(), |c| c.to_string()),
            ]
        })
        .collect();
    let head = ["ID", "STATUS", "TEMPLATE", "GROUP", "WAIT", "RUN", "EXIT"];
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let text: Vec<String> = cells
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        outln!("{}", text.join("  ").trim_end());
    };
    line(&head.map(String::from));
    for r in &rows {
        line(r);
    }
    if let Some(c) = &list.next_cursor {
        outln!("(more: --cursor {c})");
    }
    0
}
