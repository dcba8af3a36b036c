//! The request `lock acquire` starts the background holder with
//! ([`HoldRequest`]), and its wire form in [`HOLD_REQUEST_ENV`], which every
//! earlier baton wrote with the same field names.

use std::time::Duration;

use baton_lock::{LockError, LockName, Mode, WaitPolicy};
use serde::{Deserialize, Serialize};

/// Environment variable carrying the request to the background holder.
pub(crate) const HOLD_REQUEST_ENV: &str = "BATON_HOLD_REQUEST";

/// What the background holder should take and for how long.
#[derive(Clone, Debug)]
pub(crate) struct HoldRequest {
    /// The lock.
    pub name: LockName,
    /// How it is taken (exclusive, shared, semaphore).
    pub mode: Mode,
    /// How long to wait for it.
    pub wait: WaitPolicy,
    /// Release after this long.
    pub ttl: Option<Duration>,
    /// Recorded owner.
    pub owner: Option<String>,
    /// Recorded operation.
    pub operation: Option<String>,
    /// Release when this process (the caller of `acquire`: pid, start time)
    /// exits; the start time tells a reused pid apart.
    pub caller: Option<(i32, u64)>,
    /// Time between TERM and KILL when the caller must be stopped before the
    /// hold ends (ttl, break); 10 s when absent.
    pub grace: Option<Duration>,
    /// The run id to record; a new one when absent.
    pub run_id: Option<String>,
    /// Let the holder write its diagnostics (`-v`) to the caller's stderr
    /// until it reports; after the report its stderr is /dev/null, so that
    /// `$(baton lock acquire ...)` and pipes on stderr do not wait for it.
    pub share_stderr: bool,
    /// Global arguments given to the holder before `__hold`, such as the
    /// caller's `-vv --log-format json`.
    pub holder_args: Vec<String>,
    /// The `--backend` URL the lock lives in, as given (password included);
    /// the baton dir when absent.
    pub backend: Option<String>,
}

/// [`HoldRequest`] as it travels in [`HOLD_REQUEST_ENV`]. The field names
/// are those of every earlier baton: a holder started by another version
/// of the binary reads the same request.
#[derive(Serialize, Deserialize)]
pub(super) struct WireRequest {
    name: String,
    shared: bool,
    /// Semaphore slots (1: an exclusive or shared lock).
    max: u32,
    /// `None` waits forever, `Some(0)` not at all.
    wait_ms: Option<u64>,
    ttl_ms: Option<u64>,
    owner: Option<String>,
    operation: Option<String>,
    watch_pid: Option<i32>,
    watch_start_time: Option<u64>,
    #[serde(default)]
    grace_ms: Option<u64>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    share_stderr: bool,
    #[serde(default)]
    holder_args: Vec<String>,
    #[serde(default)]
    backend: Option<String>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&HoldRequest> for WireRequest {
    fn from(r: &HoldRequest) -> WireRequest {
        let (shared, max) = match r.mode {
            Mode::Shared => (true, 1),
            Mode::Semaphore(n) => (false, n),
            _ => (false, 1),
        };
        WireRequest {
            name: r.name.to_string(),
            shared,
            max,
            wait_ms: match r.wait {
                WaitPolicy::Forever => None,
                WaitPolicy::AtMost(d) => Some(millis(d)),
                _ => Some(0),
            },
            ttl_ms: r.ttl.map(millis),
            owner: r.owner.clone(),
            operation: r.operation.clone(),
            watch_pid: r.caller.map(|c| c.0),
            watch_start_time: r.caller.map(|c| c.1),
            grace_ms: r.grace.map(millis),
            run_id: r.run_id.clone(),
            share_stderr: r.share_stderr,
            holder_args: r.holder_args.clone(),
            backend: r.backend.clone(),
        }
    }
}

impl TryFrom<WireRequest> for HoldRequest {
    type Error = LockError;

    fn try_from(w: WireRequest) -> Result<HoldRequest, LockError> {
        Ok(HoldRequest {
            name: LockName::new(w.name)?,
            // An exclusive lock is a semaphore of one slot, as it always was
            // for a holder.
            mode: if w.shared {
                Mode::Shared
            } else {
                Mode::Semaphore(w.max)
            },
            wait: match w.wait_ms {
                None => WaitPolicy::Forever,
                Some(ms) => WaitPolicy::from(Duration::from_millis(ms)),
            },
            ttl: w.ttl_ms.map(Duration::from_millis),
            owner: w.owner,
            operation: w.operation,
            caller: w.watch_pid.zip(w.watch_start_time),
            grace: w.grace_ms.map(Duration::from_millis),
            run_id: w.run_id,
            share_stderr: w.share_stderr,
            holder_args: w.holder_args,
            backend: w.backend,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

    use super::*;

    fn read(json: &str) -> HoldRequest {
        HoldRequest::try_from(serde_json::from_str::<WireRequest>(json).unwrap()).unwrap()
    }

    /// The request as baton wrote it before `grace_ms`, `run_id`,
    /// `share_stderr`, `holder_args` and `backend` existed: a holder of
    /// this binary started by such a baton still takes the lock it was asked.
    #[test]
    fn a_request_of_an_earlier_baton_is_read() {
        let req = read(
            r#"{"name":"repo/main","shared":false,"max":1,"wait_ms":30000,"ttl_ms":600000,
                "owner":null,"operation":"deploy","watch_pid":42,"watch_start_time":7}"#,
        );
        assert_eq!(req.name.as_str(), "repo/main");
        assert_eq!(req.mode, Mode::Semaphore(1));
        assert_eq!(req.wait, WaitPolicy::AtMost(Duration::from_secs(30)));
        assert_eq!(req.ttl, Some(Duration::from_secs(600)));
        assert_eq!(req.operation.as_deref(), Some("deploy"));
        assert_eq!(req.caller, Some((42, 7)));
        assert_eq!(req.grace, None);
        assert!(req.backend.is_none() && req.holder_args.is_empty() && !req.share_stderr);
        let shared = read(
            r#"{"name":"x","shared":true,"max":1,"wait_ms":0,"ttl_ms":null,"owner":null,
                "operation":null,"watch_pid":null,"watch_start_time":null}"#,
        );
        assert_eq!(shared.mode, Mode::Shared);
        assert_eq!(shared.wait, WaitPolicy::Immediately);
        assert_eq!(shared.caller, None);
    }

    /// What `acquire` sends carries every field under its old name, and
    /// reads back as what was sent.
    #[test]
    fn a_request_travels_under_its_old_field_names() {
        let sent = HoldRequest {
            name: LockName::new("gpu").unwrap(),
            mode: Mode::Semaphore(3),
            wait: WaitPolicy::Forever,
            ttl: None,
            owner: Some("me@host".into()),
            operation: None,
            caller: Some((1234, 99)),
            grace: Some(Duration::from_millis(1500)),
            run_id: Some("r1".into()),
            share_stderr: true,
            holder_args: vec!["-v".into()],
            backend: Some("postgres://u@h/db".into()),
        };
        let json = serde_json::to_value(WireRequest::from(&sent)).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "backend",
                "grace_ms",
                "holder_args",
                "max",
                "name",
                "operation",
                "owner",
                "run_id",
                "share_stderr",
                "shared",
                "ttl_ms",
                "wait_ms",
                "watch_pid",
                "watch_start_time"
            ]
        );
        assert_eq!(json["max"], 3);
        assert_eq!(json["wait_ms"], serde_json::Value::Null);
        let back = read(&json.to_string());
        assert_eq!(back.name, sent.name);
        assert_eq!(back.mode, sent.mode);
        assert_eq!(back.wait, sent.wait);
        assert_eq!(back.caller, sent.caller);
        assert_eq!(back.grace, sent.grace);
        assert_eq!(back.backend, sent.backend);
    }
}
