//! A blocking client of the baton job service (`baton serve`), used by
//! `baton job ...` and usable by tests and other Rust programs: submit, look
//! up, list, cancel, read or follow a job's log, wait for a job's end, and
//! map that end to baton's exit codes. Every failure is a [`ClientError`]
//! that names the server and the reason in one line and knows its exit code.
//! What it sends and receives are the wire types of `baton-api`, re-exported
//! here.
//!
//! Waiting uses the log's follow stream (`GET /v1/jobs/{id}/log?follow=true`),
//! which the server ends when the job ends: no polling on this side. If the
//! stream breaks before the job has ended, it is opened again and the bytes
//! already seen are skipped.
//!
//! ```no_run
//! use baton_client::{Client, SubmitRequest};
//!
//! let client = Client::new("http://127.0.0.1:7420", std::env::var("BATON_TOKEN").ok())?;
//! let req = SubmitRequest { prompt: Some("fix the tests".into()), ..SubmitRequest::default() };
//! let queued = client.submit(&req)?;
//! let job = client.wait(&queued.id, &mut std::io::sink())?;
//! std::process::exit(job.exit_code());
//! # Ok::<(), baton_client::ClientError>(())
//! ```

#![forbid(unsafe_code)]

use std::io::{self, Read, Write};
use std::time::Duration;

use baton_api::ErrorBody;

mod error;
mod local;

pub use baton_api::{
    GroupMode, JobList, JobStatus, JobView, ListQuery, Queued, SubmitRequest, WorkspaceOptions,
};
pub use error::ClientError;
pub use local::{read_token_file, LogStream, PromptSource};

/// The service's address when none is given.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7420";

/// How many times a broken follow stream is opened again before giving up.
const REOPENS: u32 = 5;

/// A connection to one job service.
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
    stream_agent: ureq::Agent,
}

type Response = ureq::http::Response<ureq::Body>;

impl Client {
    /// A client of the service at `server` (`http://host:port`), sending
    /// `token` as a bearer token when given.
    pub fn new(server: &str, token: Option<String>) -> Result<Client, ClientError> {
        let base = server.trim_end_matches('/').to_string();
        let bad = |reason: &str| ClientError::BadUrl {
            url: server.to_string(),
            reason: reason.to_string(),
        };
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| bad("use http://HOST:PORT (this client speaks plain HTTP)"))?;
        if rest.is_empty() || rest.contains('/') {
            return Err(bad("use http://HOST:PORT, without a path"));
        }
        let agent = |total: Option<Duration>| -> ureq::Agent {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_connect(Some(Duration::from_secs(10)))
                .timeout_global(total)
                .build()
                .into()
        };
        Ok(Client {
            base,
            token: token.filter(|t| !t.is_empty()),
            // A cancel waits for the job to stop (the server's grace + 5 s).
            agent: agent(Some(Duration::from_secs(600))),
            // A followed log lasts as long as the job.
            stream_agent: agent(None),
        })
    }

    /// The server's base URL.
    pub fn server(&self) -> &str {
        &self.base
    }

    /// Submits a job.
    pub fn submit(&self, job: &SubmitRequest) -> Result<Queued, ClientError> {
        let req = self.auth(self.agent.post(format!("{}/v1/jobs", self.base)));
        let resp = req.send_json(job).map_err(|e| self.transport(e))?;
        self.json(resp)
    }

    /// `/v1/jobs/{id}` on this server.
    fn job_url(&self, id: &str) -> String {
        format!("{}/v1/jobs/{}", self.base, path_segment(id))
    }

    /// The job `id`, with its output's tail.
    pub fn job(&self, id: &str) -> Result<JobView, ClientError> {
        let req = self.auth(self.agent.get(self.job_url(id)));
        let resp = req.call().map_err(|e| self.transport(e))?;
        self.json(resp)
    }

    /// A page of jobs, newest first.
    pub fn list(&self, q: &ListQuery) -> Result<JobList, ClientError> {
        let mut req = self.auth(self.agent.get(format!("{}/v1/jobs", self.base)));
        if let Some(s) = &q.status {
            req = req.query("status", s);
        }
        if let Some(g) = &q.group {
            req = req.query("group", g);
        }
        if let Some(l) = q.limit {
            req = req.query("limit", l.to_string());
        }
        if let Some(c) = &q.cursor {
            req = req.query("cursor", c);
        }
        let resp = req.call().map_err(|e| self.transport(e))?;
        self.json(resp)
    }

    /// Cancels job `id`: a queued job at once, a running one with TERM,
    /// grace, KILL (this call returns once it has ended). The job as it is
    /// afterwards (it may have ended otherwise meanwhile).
    pub fn cancel(&self, id: &str) -> Result<JobView, ClientError> {
        let url = format!("{}/cancel", self.job_url(id));
        let req = self
            .auth(self.agent.post(&url))
            .header("content-type", "application/json");
        let resp = req.send("{}").map_err(|e| self.transport(e))?;
        self.json(resp)
    }

    /// Writes the captured `stream` of job `id` to `out`; with `follow`,
    /// keeps writing until the job has ended (and everything it wrote was
    /// written). Returns the bytes written.
    pub fn log(
        &self,
        id: &str,
        stream: LogStream,
        follow: bool,
        out: &mut dyn Write,
    ) -> Result<u64, ClientError> {
        if !follow {
            return self.log_from(id, stream, false, 0, out);
        }
        let mut seen = 0;
        let mut reopens = 0;
        loop {
            match self.log_from(id, stream, true, seen, out) {
                Ok(n) => seen += n,
                Err(ClientError::Unreachable { .. }) if reopens < REOPENS => {}
                Err(e) => return Err(e),
            }
            // The server ends the stream when the job ends; a stream that
            // ended early (a broken connection) is opened again.
            if self.job(id)?.status.is_final() {
                // Whatever was written between the stream's end and now.
                return Ok(seen + self.log_from(id, stream, false, seen, out)?);
            }
            reopens += 1;
            if reopens > REOPENS {
                return Err(ClientError::Protocol {
                    server: self.base.clone(),
                    reason: format!("the log of job '{id}' kept ending before the job did"),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until job `id` has ended, writing its stdout to `out` as it
    /// comes (give `io::sink()` to discard it), and returns the job.
    pub fn wait(&self, id: &str, out: &mut dyn Write) -> Result<JobView, ClientError> {
        self.log(id, LogStream::Stdout, true, out)?;
        let job = self.job(id)?;
        if job.status.is_final() {
            Ok(job)
        } else {
            Err(ClientError::Protocol {
                server: self.base.clone(),
                reason: format!(
                    "job '{id}' is still {} after its log ended",
                    job.status.as_str()
                ),
            })
        }
    }

    /// One request for the log; the first `skip` bytes are not written.
    fn log_from(
        &self,
        id: &str,
        stream: LogStream,
        follow: bool,
        skip: u64,
        out: &mut dyn Write,
    ) -> Result<u64, ClientError> {
        let agent = if follow {
            &self.stream_agent
        } else {
            &self.agent
        };
        let mut req = self.auth(agent.get(format!("{}/log", self.job_url(id))));
        if follow {
            req = req.query("follow", "true");
        }
        if stream == LogStream::Stderr {
            req = req.query("stream", "stderr");
        }
        let resp = req.call().map_err(|e| self.transport(e))?;
        let resp = self.ok(resp)?;
        let mut body = resp.into_body().into_reader();
        let mut buf = vec![0u8; 64 * 1024];
        let mut skip = skip;
        let mut written = 0u64;
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(ClientError::Unreachable {
                        server: self.base.clone(),
                        reason: format!("the log stream broke: {e}"),
                    })
                }
            };
            let drop = usize::try_from(skip).unwrap_or(usize::MAX).min(n);
            skip -= drop as u64;
            if drop < n {
                out.write_all(&buf[drop..n]).map_err(ClientError::Output)?;
                out.flush().map_err(ClientError::Output)?;
                written += (n - drop) as u64;
            }
        }
        Ok(written)
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    fn transport(&self, e: ureq::Error) -> ClientError {
        ClientError::Unreachable {
            server: self.base.clone(),
            reason: match e {
                ureq::Error::Io(io) => io.to_string(),
                other => other.to_string(),
            },
        }
    }

    /// The response if it is a success, else the server's error.
    fn ok(&self, mut resp: Response) -> Result<Response, ClientError> {
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .unwrap_or_default();
        let (code, message) = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => (body.error.code, body.error.message),
            Err(_) => (
                String::new(),
                match text.lines().next().map(str::trim) {
                    Some(l) if !l.is_empty() => l.to_string(),
                    _ => format!("HTTP {status} with no message"),
                },
            ),
        };
        let server = self.base.clone();
        Err(match status {
            401 => ClientError::Unauthorized {
                server,
                message,
                hint: if self.token.is_some() {
                    "the token in BATON_TOKEN or --token-file is not the service's"
                } else {
                    "set BATON_TOKEN or --token-file to the service's token"
                },
            },
            429 | 503 => ClientError::Busy {
                server,
                message,
                retry_after: retry_after.unwrap_or(1),
            },
            _ => ClientError::Refused {
                server,
                status,
                code,
                message,
            },
        })
    }

    fn json<T: serde::de::DeserializeOwned>(&self, resp: Response) -> Result<T, ClientError> {
        let mut resp = self.ok(resp)?;
        resp.body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_json()
            .map_err(|e| ClientError::Protocol {
                server: self.base.clone(),
                reason: format!("cannot read the JSON answer: {e}"),
            })
    }
}

/// `id` as one URL path segment (ids are `[0-9a-z-]`; anything else,
/// dots included, is escaped, so that no id reads as `..`).
fn path_segment(id: &str) -> String {
    let mut s = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_without_a_path_are_accepted() {
        assert!(Client::new("http://127.0.0.1:7420/", None).is_ok());
        assert!(Client::new("https://example.com", None).is_err());
        assert!(Client::new("http://h:1/api", None).is_err());
        assert!(Client::new("127.0.0.1:7420", None).is_err());
    }

    #[test]
    fn ids_are_escaped_as_one_path_segment() {
        assert_eq!(path_segment("ab-1"), "ab-1");
        assert_eq!(path_segment("../x"), "%2E%2E%2Fx");
    }
}
