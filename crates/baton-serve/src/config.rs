//! The service's configuration: a TOML file, then command-line overrides,
//! validated as a whole before anything starts (one line naming the key).
//!
//! The keys that bound what a request or a job can do (README, "Job
//! service"):
//!
//! - `max_body_bytes` (default 1 MiB, at least 1024): every POST body.
//! - `max_prompt_bytes` (default 100 KiB, at most [`PROMPT_BYTES_CEILING`]):
//!   a larger prompt gets 400 at submit; the ceiling keeps the prompt under
//!   Linux's limit of one argument (the prompt is one, and `BATON_PROMPT`).
//! - `allowed_hosts`, `allowed_origins`: names the [`crate::browser`] checks
//!   accept besides the service's own.
//! - Durations (`job_ttl` at least 1s; timeouts at least 1ms; none below
//!   1ms but 0 where 0 means something; none above ten years): see
//!   `config/durations.rs`.
//! - Per template: `inherit_env` (variables of the service's environment
//!   its jobs get besides [`BASE_ENV`] and `env`: a job's environment
//!   starts empty) and `prompt_may_start_with_dash` (see
//!   [`Template::prompt_after_double_dash`]).
//! - `header_read_timeout`, `request_body_timeout` (30 s; then 408 and the
//!   connection closes), `max_connections` (1024, lowered to what the open
//!   files limit leaves room for; beyond: 503): see [`crate::conn`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod connections;
mod durations;
pub(crate) mod hosts;

pub use connections::ConnectionLimits;
use durations::{duration, in_range, nonzero};
pub use durations::{MAX_SETTING_DURATION, MIN_JOB_TTL};

/// A configuration problem, naming the setting and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Everything `baton serve` runs with.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The bearer token required on every route but `/health` (and the
    /// dashboard page itself); required on a non-loopback address.
    pub token: Option<String>,
    /// Jobs running at once: across every node of a PostgreSQL store, on
    /// this node with SQLite.
    pub max_concurrency: u64,
    /// Jobs running at once on this node (at most `max_concurrency`);
    /// `None`: only `max_concurrency` limits it.
    pub node_max_concurrency: Option<u64>,
    /// Running + queued jobs never exceed this.
    pub max_queue_depth: u64,
    /// Finished jobs (and their logs) are removed this long after they end.
    pub job_ttl: Duration,
    /// A job's timeout when neither it nor its template names one.
    pub default_timeout: Duration,
    /// The longest timeout a request may ask for.
    pub max_timeout: Duration,
    /// Between TERM and KILL when a job is stopped.
    pub grace: Duration,
    /// On SIGTERM, how long running jobs may go on before they are cancelled.
    pub drain_timeout: Duration,
    /// Where jobs live (parsed from the `store` URL).
    pub store: crate::store::StoreUrl,
    /// The template used when a request names none.
    pub default_template: Option<String>,
    /// The commands jobs may run, by name.
    pub templates: BTreeMap<String, Template>,
    /// Whether a request may give its own argv (`command`).
    pub allow_raw_commands: bool,
    /// The most output kept per job and stream, in bytes.
    pub max_log_bytes: u64,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The largest prompt, in bytes (at most [`PROMPT_BYTES_CEILING`]: a
    /// prompt is one argument and one variable of the command).
    pub max_prompt_bytes: usize,
    /// `Host` names accepted besides the listen address and loopback names
    /// (see [`crate::browser`]).
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`scheme://host[:port]`) allowed besides the
    /// service's own (see [`crate::browser`]).
    pub allowed_origins: Vec<String>,
    /// How long clients may take, and how many connections are served.
    pub connections: ConnectionLimits,
}

/// A command jobs may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// argv; an element that is exactly `{prompt}` is replaced by the prompt.
    pub command: Vec<String>,
    /// Variables set for the command, after `${VAR}` expansion from the
    /// service's own environment.
    pub env: Vec<(String, String)>,
    /// Its jobs' timeout, unless the request names a shorter one.
    pub timeout: Option<Duration>,
    /// A workspace per job, cloned from a base repository.
    pub workspace: Option<WorkspaceTemplate>,
    /// Queue an interrupted job again (once) on restart instead of marking it interrupted.
    pub retry_on_interrupt: bool,
    /// The working directory when there is no workspace.
    pub cwd: Option<PathBuf>,
    /// Variables of the service's environment the command gets too,
    /// besides [`BASE_ENV`] and `env` (a job's environment starts empty).
    pub inherit_env: Vec<String>,
    /// Whether a prompt may start with `-` although no `--` precedes
    /// `{prompt}` in `command` (for a command that never reads its prompt
    /// argument as an option, e.g. `sh -c 'script' sh {prompt}`).
    pub prompt_may_start_with_dash: bool,
}

impl Template {
    /// Whether the prompt's argument comes after an `--` (end of options),
    /// so that a prompt starting with `-` cannot be read as an option.
    pub fn prompt_after_double_dash(&self) -> bool {
        match self.command.iter().position(|a| a == "{prompt}") {
            Some(at) => self.command[1..at].iter().any(|a| a == "--"),
            None => true,
        }
    }
}

/// The variables of the service's own environment every job gets (when the
/// service has them); anything else reaches a job only through its
/// template's `env` or `inherit_env`.
#[cfg(unix)]
pub const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM",
];

/// The variables of the service's own environment every job gets (when the
/// service has them); anything else reaches a job only through its
/// template's `env` or `inherit_env`. On Windows, what a program needs to
/// start and find its files (`SystemRoot`: without it a process cannot
/// load its sockets or its crypto providers), compared without case.
#[cfg(windows)]
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "PATHEXT",
    "SystemRoot",
    "SystemDrive",
    "windir",
    "ComSpec",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "USERNAME",
    "HOMEDRIVE",
    "HOMEPATH",
    "APPDATA",
    "LOCALAPPDATA",
    "ProgramData",
    "ProgramFiles",
    "LANG",
    "TZ",
];

/// The largest `max_prompt_bytes`: Linux refuses (E2BIG) an argument or a
/// variable longer than `MAX_ARG_STRLEN` (128 KiB, its NUL included), and
/// the prompt is both an argument and `BATON_PROMPT=<prompt>`.
pub const PROMPT_BYTES_CEILING: usize = 128 * 1024 - 1 - "BATON_PROMPT=".len();

/// The default `max_prompt_bytes` (100 KiB).
pub const DEFAULT_MAX_PROMPT_BYTES: usize = 100 * 1024;

/// How a template's jobs get their workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceTemplate {
    /// The base repository (a warm clone).
    pub repo: PathBuf,
    /// The branch the base follows; jobs start from it (and may ask for
    /// their own): `refs/remotes/origin/<branch>` when the template fetches,
    /// else `refs/heads/<branch>` of the base, always by that full name.
    /// Refused at load if it is not a branch name baton takes
    /// ([`baton_git::branch_name_refusal`]).
    pub branch: Option<String>,
    /// `clone` (default) or `worktree`.
    pub strategy: baton_git::Strategy,
    /// Refresh the base from origin at most this often (0: never fetch).
    pub fetch_debounce: Option<Duration>,
    /// A command run in the workspace before the job's (e.g. `git-crypt unlock KEY`).
    pub setup: Option<Vec<String>>,
}

/// Command-line overrides; `None` keeps the file's (or the default) value.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--max-concurrency`.
    pub max_concurrency: Option<u64>,
    /// `--node-max-concurrency`.
    pub node_max_concurrency: Option<u64>,
    /// `--max-queue-depth`.
    pub max_queue_depth: Option<u64>,
    /// `--job-ttl`.
    pub job_ttl: Option<Duration>,
    /// `--store`.
    pub store: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    token: Option<String>,
    max_concurrency: Option<u64>,
    node_max_concurrency: Option<u64>,
    max_queue_depth: Option<u64>,
    job_ttl: Option<String>,
    default_timeout: Option<String>,
    max_timeout: Option<String>,
    grace: Option<String>,
    drain_timeout: Option<String>,
    store: Option<String>,
    default_template: Option<String>,
    allow_raw_commands: Option<bool>,
    max_log_bytes: Option<u64>,
    max_body_bytes: Option<usize>,
    max_prompt_bytes: Option<usize>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    header_read_timeout: Option<String>,
    request_body_timeout: Option<String>,
    max_connections: Option<usize>,
    #[serde(default)]
    templates: BTreeMap<String, FileTemplate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTemplate {
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    timeout: Option<String>,
    workspace: Option<FileWorkspace>,
    #[serde(default)]
    retry_on_interrupt: bool,
    cwd: Option<PathBuf>,
    #[serde(default)]
    inherit_env: Vec<String>,
    #[serde(default)]
    prompt_may_start_with_dash: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWorkspace {
    repo: PathBuf,
    branch: Option<String>,
    strategy: Option<String>,
    fetch_debounce: Option<String>,
    setup: Option<Vec<String>>,
}

/// The default address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

impl Config {
    /// Reads `file` (if given), applies `overrides` and the environment
    /// (`BATON_SERVE_TOKEN`), and validates the result.
    ///
    /// # Errors
    ///
    /// One line naming the file or setting and what is wrong with it.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let parsed: FileConfig = match file {
            None => FileConfig::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError(format!("cannot read config file '{}': {e}", path.display()))
                })?;
                toml::from_str(&text).map_err(|e| {
                    let msg = e.message().to_string();
                    ConfigError(format!("invalid config file '{}': {msg}", path.display()))
                })?
            }
        };
        let env_token = std::env::var("BATON_SERVE_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        let listen_text = overrides
            .listen
            .clone()
            .or(parsed.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let listen: SocketAddr = listen_text.parse().map_err(|_| {
            ConfigError(format!(
                "invalid listen address '{listen_text}': use IP:PORT, e.g. 127.0.0.1:7420"
            ))
        })?;
        let token = env_token.or(parsed.token).filter(|t| !t.is_empty());
        if !listen.ip().is_loopback() && token.is_none() {
            return Err(ConfigError(format!(
                "refusing to listen on {listen} without a token: set `token` in the config file \
                 or BATON_SERVE_TOKEN (a loopback address needs none)"
            )));
        }
        let max_concurrency = overrides
            .max_concurrency
            .or(parsed.max_concurrency)
            .unwrap_or(10);
        if max_concurrency == 0 {
            return Err(ConfigError(
                "invalid max_concurrency 0: at least 1 job must be able to run".into(),
            ));
        }
        let node_max_concurrency = overrides
            .node_max_concurrency
            .or(parsed.node_max_concurrency);
        if let Some(n) = node_max_concurrency {
            if n == 0 || n > max_concurrency {
                return Err(ConfigError(format!(
                    "invalid node_max_concurrency {n}: it must be at least 1 and at most \
                     max_concurrency ({max_concurrency})"
                )));
            }
        }
        let max_queue_depth = overrides
            .max_queue_depth
            .or(parsed.max_queue_depth)
            .unwrap_or(100);
        if max_queue_depth < max_concurrency {
            return Err(ConfigError(format!(
                "invalid max_queue_depth {max_queue_depth}: it counts running jobs too, so it \
                 must be at least max_concurrency ({max_concurrency})"
            )));
        }
        let job_ttl = match overrides.job_ttl {
            Some(d) => d,
            None => duration(
                "job_ttl",
                parsed.job_ttl.as_deref(),
                Duration::from_secs(3600),
            )?,
        };
        let ttl_text = humantime::format_duration(job_ttl).to_string();
        in_range("job_ttl", &ttl_text, job_ttl, MIN_JOB_TTL)?;
        let default_timeout = duration(
            "default_timeout",
            parsed.default_timeout.as_deref(),
            Duration::from_secs(900),
        )?;
        nonzero("default_timeout", default_timeout)?;
        let max_timeout = duration(
            "max_timeout",
            parsed.max_timeout.as_deref(),
            Duration::from_secs(24 * 3600),
        )?;
        nonzero("max_timeout", max_timeout)?;
        let grace = duration("grace", parsed.grace.as_deref(), Duration::from_secs(10))?;
        let drain_timeout = duration(
            "drain_timeout",
            parsed.drain_timeout.as_deref(),
            Duration::from_secs(60),
        )?;
        let max_prompt_bytes = parsed.max_prompt_bytes.unwrap_or(DEFAULT_MAX_PROMPT_BYTES);
        if max_prompt_bytes == 0 || max_prompt_bytes > PROMPT_BYTES_CEILING {
            return Err(ConfigError(format!(
                "invalid max_prompt_bytes {max_prompt_bytes}: use 1 to {PROMPT_BYTES_CEILING} \
                 (a prompt is one argument of the command, and Linux refuses one over 128 KiB)"
            )));
        }
        let max_body_bytes = parsed.max_body_bytes.unwrap_or(1024 * 1024);
        if max_body_bytes < 1024 {
            return Err(ConfigError(format!(
                "invalid max_body_bytes {max_body_bytes}: use at least 1024"
            )));
        }
        let allowed_hosts = hosts::check_hosts(&parsed.allowed_hosts)?;
        let allowed_origins = hosts::check_origins(&parsed.allowed_origins)?;
        let connections = connections::connections(
            parsed.header_read_timeout.as_deref(),
            parsed.request_body_timeout.as_deref(),
            parsed.max_connections,
        )?;
        let mut templates = BTreeMap::new();
        // The service variables each template's `env` takes its values from
        // (`${VAR}`): its secrets, which no other template may inherit.
        let secrets: Vec<(String, Vec<String>)> = parsed
            .templates
            .iter()
            .map(|(name, t)| {
                (
                    name.clone(),
                    t.env.values().flat_map(|v| referenced(v)).collect(),
                )
            })
            .collect();
        for (name, t) in parsed.templates {
            templates.insert(name.clone(), template(&name, t)?);
        }
        for (name, t) in &templates {
            for var in &t.inherit_env {
                let owner = secrets
                    .iter()
                    .find(|(other, vars)| other != name && vars.contains(var));
                if let Some((other, _)) = owner {
                    return Err(ConfigError(format!(
                        "invalid templates.{name}.inherit_env: '{var}' is what template '{other}' \
                         takes its env from (${{{var}}}); set it in this template's env instead \
                         if it is meant to share it"
                    )));
                }
            }
        }
        if let Some(d) = &parsed.default_template {
            if !templates.contains_key(d) {
                return Err(ConfigError(format!(
                    "invalid default_template '{d}': no [templates.{d}] in the config file"
                )));
            }
        }
        let default_template = parsed.default_template.or_else(|| {
            (templates.len() == 1)
                .then(|| templates.keys().next().cloned())
                .flatten()
        });
        let store = overrides
            .store
            .as_deref()
            .or(parsed.store.as_deref())
            .unwrap_or("sqlite://serve.db")
            .parse()
            .map_err(|e: crate::store::StoreError| ConfigError(e.to_string()))?;
        Ok(Config {
            listen,
            token,
            max_concurrency,
            node_max_concurrency,
            max_queue_depth,
            job_ttl,
            default_timeout,
            max_timeout,
            grace,
            drain_timeout,
            store,
            default_template,
            templates,
            allow_raw_commands: parsed.allow_raw_commands.unwrap_or(false),
            max_log_bytes: parsed.max_log_bytes.unwrap_or(16 * 1024 * 1024),
            max_body_bytes,
            max_prompt_bytes,
            allowed_hosts,
            allowed_origins,
            connections,
        })
    }
}

impl Config {
    /// Whether a job of `template` that was interrupted (its node died or
    /// lost its session) is queued again: the template's `retry_on_interrupt`.
    pub fn retries_interrupted(&self, template: &str) -> bool {
        self.templates
            .get(template)
            .is_some_and(|t| t.retry_on_interrupt)
    }

    /// The most jobs this node runs at once: `node_max_concurrency`, else
    /// `max_concurrency`.
    pub fn node_cap(&self) -> u64 {
        self.node_max_concurrency
            .unwrap_or(self.max_concurrency)
            .min(self.max_concurrency)
    }

    /// The `capacity` `/health` reports: with a PostgreSQL store the
    /// cluster's `max_concurrency`; with SQLite (one node) what this node
    /// may run, `min(max_concurrency, node_max_concurrency)`.
    pub fn capacity(&self) -> u64 {
        if self.store.is_shared() {
            self.max_concurrency
        } else {
            self.node_cap()
        }
    }
}

fn template(name: &str, t: FileTemplate) -> Result<Template, ConfigError> {
    let field = |f: &str| format!("templates.{name}.{f}");
    if t.command.is_empty() || t.command[0].is_empty() {
        return Err(ConfigError(format!(
            "invalid {}: it must name a program",
            field("command")
        )));
    }
    if t.command
        .iter()
        .any(|a| a.contains("{prompt}") && a != "{prompt}")
    {
        return Err(ConfigError(format!(
            "invalid {}: {{prompt}} may only be a whole argument, never part of one",
            field("command")
        )));
    }
    let mut env = Vec::new();
    for (k, v) in t.env {
        if k.is_empty() || k.contains('=') || k.starts_with("BATON_") {
            return Err(ConfigError(format!(
                "invalid {}: '{k}' is not a variable a template may set",
                field("env")
            )));
        }
        env.push((
            k,
            expand_env(&v).map_err(|e| ConfigError(format!("invalid {}: {e}", field("env"))))?,
        ));
    }
    let timeout = match t.timeout.as_deref() {
        None => None,
        Some(v) => Some(nonzero(
            &field("timeout"),
            duration(&field("timeout"), Some(v), Duration::ZERO)?,
        )?),
    };
    let mut inherit_env = Vec::new();
    for k in t.inherit_env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || k.starts_with("BATON_") {
            return Err(ConfigError(format!(
                "invalid {}: '{k}' is not a variable a template may inherit",
                field("inherit_env")
            )));
        }
        inherit_env.push(k);
    }
    let workspace = match t.workspace {
        None => None,
        Some(w) => {
            let strategy = match w.strategy.as_deref() {
                None | Some("clone") => baton_git::Strategy::Clone,
                Some("worktree") => baton_git::Strategy::Worktree,
                Some(other) => {
                    return Err(ConfigError(format!(
                        "invalid {} '{other}': use clone or worktree",
                        field("workspace.strategy")
                    )))
                }
            };
            if !w.repo.is_absolute() {
                return Err(ConfigError(format!(
                    "invalid {} '{}': use an absolute path",
                    field("workspace.repo"),
                    w.repo.display()
                )));
            }
            let fetch_debounce = match w.fetch_debounce.as_deref() {
                None => None,
                Some(v) => Some(duration(
                    &field("workspace.fetch_debounce"),
                    Some(v),
                    Duration::ZERO,
                )?),
            };
            // The branch the template's jobs start from, named in full at
            // run time (`refs/remotes/origin/<b>`, `refs/heads/<b>`): a short
            // name of another namespace (`origin/main`) would name nothing.
            if let Some(b) = &w.branch {
                if let Some(why) = baton_git::branch_name_refusal(b, &[]) {
                    return Err(ConfigError(format!(
                        "invalid {} '{b}': {why} (name the branch of the base, e.g. 'main')",
                        field("workspace.branch")
                    )));
                }
            }
            if w.setup.as_ref().is_some_and(|s| s.is_empty()) {
                return Err(ConfigError(format!(
                    "invalid {}: it must name a program",
                    field("workspace.setup")
                )));
            }
            Some(WorkspaceTemplate {
                repo: w.repo,
                branch: w.branch,
                strategy,
                fetch_debounce,
                setup: w.setup,
            })
        }
    };
    Ok(Template {
        command: t.command,
        env,
        timeout,
        workspace,
        retry_on_interrupt: t.retry_on_interrupt,
        cwd: t.cwd,
        inherit_env,
        prompt_may_start_with_dash: t.prompt_may_start_with_dash,
    })
}

/// The variables `value` names as `${VAR}`.
fn referenced(value: &str) -> Vec<String> {
    value
        .split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(var, _)| var.to_string()))
        .collect()
}

/// Expands `${VAR}` from the service's environment (unset: an error, so a
/// missing secret is found at start, not by the first job).
fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unterminated ${{ in '{value}'"))?;
        let var = &after[..end];
        let v = std::env::var(var)
            .map_err(|_| format!("${{{var}}} is not set in the service's environment"))?;
        out.push_str(&v);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_only_as_a_whole_argument() {
        let t = FileTemplate {
            command: vec!["sh".into(), "-c".into(), "echo {prompt}".into()],
            env: BTreeMap::new(),
            timeout: None,
            workspace: None,
            retry_on_interrupt: false,
            cwd: None,
            inherit_env: Vec::new(),
            prompt_may_start_with_dash: false,
        };
        let e = template("x", t).err().map(|e| e.0).unwrap_or_default();
        assert!(e.contains("templates.x.command"), "{e}");
    }

    #[test]
    fn a_template_branch_that_shadows_another_ref_is_refused() {
        let with_branch = |branch: &str| FileTemplate {
            command: vec!["true".into()],
            env: BTreeMap::new(),
            timeout: None,
            workspace: Some(FileWorkspace {
                // Absolute on every system (`/srv/base` is not on Windows).
                repo: std::env::temp_dir().join("base"),
                branch: Some(branch.into()),
                strategy: None,
                fetch_debounce: None,
                setup: None,
            }),
            retry_on_interrupt: false,
            cwd: None,
            inherit_env: Vec::new(),
            prompt_may_start_with_dash: false,
        };
        for bad in ["origin/main", "refs/heads/main", "tags/v1", "HEAD", "-x"] {
            let e = template("x", with_branch(bad))
                .err()
                .map(|e| e.0)
                .unwrap_or_default();
            assert!(
                e.contains("templates.x.workspace.branch") && e.contains(bad),
                "{bad}: {e}"
            );
        }
        let ok = template("x", with_branch("release/1.2")).unwrap();
        let branch = ok.workspace.and_then(|w| w.branch);
        assert_eq!(branch.as_deref(), Some("release/1.2"));
    }

    #[test]
    fn env_expansion_names_the_missing_variable() {
        let e = expand_env("a${BATON_TEST_SURELY_UNSET_VAR}b").unwrap_err();
        assert!(e.contains("BATON_TEST_SURELY_UNSET_VAR"), "{e}");
        assert_eq!(expand_env("plain").unwrap(), "plain");
    }
}
