#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Regression tests from a hostile review of `baton serve`: races and
//! inputs a careless or malicious client can produce, each against a real
//! service running real commands.

use crate::serve_common;

use serde_json::json;
use serve_common::Server;

/// A cancel that lands between the store's claim of a job and the job
/// becoming live on this node used to answer 409 `not_on_this_node` and
/// leave the job running. Every cancel of a job just submitted must
/// cancel it.
#[test]
fn a_cancel_racing_with_the_claim_always_cancels() {
    let s = Server::start(
        r#"
max_concurrency = 4
max_queue_depth = 50
grace = "1s"
[templates.sleep]
command = ["sleep", "30"]
"#,
        &[],
    );
    for _ in 0..300 {
        let id = s.submit(json!({"template": "sleep"}));
        let (code, v) = s.cancel(&id);
        assert_eq!(code, 200, "cancel of {id}: {v}");
        assert_eq!(v["status"], "cancelled", "cancel of {id}: {v}");
    }
}

/// The store file removed under a running service: the service used to go
/// on storing (and acknowledging) jobs in the unlinked file, reporting
/// itself healthy, and lost every one of them at the next start. It must
/// say it is degraded and refuse jobs instead.
#[test]
fn a_store_file_removed_under_the_service_is_reported_not_used() {
    let mut s = Server::start(
        r#"
[templates.echo]
command = ["echo", "{prompt}"]
"#,
        &[],
    );
    let id = s.submit(json!({"template": "echo", "prompt": "before"}));
    s.wait_final(&id);
    for f in ["serve.db", "serve.db-wal", "serve.db-shm"] {
        let _ = std::fs::remove_file(s.dir.join(f));
    }
    let (code, v) = s.get("/health");
    assert_eq!(code, 503, "health with the store file gone: {v}");
    assert_eq!(v["status"], "degraded", "{v}");
    let (code, v) = s.post("/v1/jobs", &json!({"template": "echo", "prompt": "lost"}));
    assert_eq!(code, 503, "a submission with the store file gone: {v}");
    assert_eq!(v["error"]["code"], "store_unavailable", "{v}");
    s.kill9();
}

/// The store holds every prompt, yet was created world-readable (0644 with
/// the usual umask), it and its -wal and -shm files, while the job files
/// beside it are 0700: a store outside the baton dir exposed prompts.
#[test]
fn the_store_file_is_the_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let mut s = Server::start(
        r#"
store = "sqlite://{tmp}/elsewhere/jobs.db"
[templates.echo]
command = ["echo", "{prompt}"]
"#,
        &[],
    );
    let id = s.submit(json!({"template": "echo", "prompt": "a secret"}));
    s.wait_final(&id);
    // (No -shm file: the store is used in exclusive locking mode.)
    for f in ["jobs.db", "jobs.db-wal", "jobs.db.lock"] {
        let path = s.tmp.path().join("elsewhere").join(f);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o077, 0, "{} has mode {mode:o}", path.display());
    }
    s.kill9();
}

/// A prompt with a NUL byte (valid JSON: "\u0000") was accepted with 202,
/// then the job failed with "could not start command" and no reason: the
/// prompt is an argument and a variable, neither of which can hold it. It
/// is refused at submission, on every route that takes a prompt.
#[test]
fn a_prompt_with_a_nul_byte_is_refused_at_submission() {
    let mut s = Server::start(
        r#"
allow_raw_commands = true
[templates.echo]
command = ["echo", "{prompt}"]
"#,
        &[],
    );
    let (code, v) = s.post(
        "/v1/jobs",
        &json!({"template": "echo", "prompt": "a\u{0}b"}),
    );
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("prompt"),
        "{v}"
    );
    let (code, v) = s.post("/v1/jobs", &json!({"command": ["echo", "a\u{0}b"]}));
    assert_eq!(code, 400, "{v}");
    let (code, v) = s.post("/execute", &json!({"prompt": "a\u{0}b"}));
    assert_eq!(code, 400, "{v}");
    let (code, v) = s.post(
        "/v1/chat/completions",
        &json!({"model": "echo", "messages": [{"role": "user", "content": "a\u{0}b"}]}),
    );
    assert_eq!(code, 400, "{v}");
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "{list}");
    s.kill9();
}

/// Connections that never send a request (or send its headers a byte at
/// a time) were held for ever: any client that can reach the port could
/// take every descriptor of the service, and then its jobs could not get
/// pipes or the store. The service closes such a connection once the
/// headers have not come in time.
#[test]
fn a_connection_that_sends_no_request_is_closed() {
    use std::io::{Read, Write};
    use std::time::Duration;
    let mut s = Server::start(
        r#"
[templates.echo]
command = ["echo", "{prompt}"]
"#,
        &[],
    );
    let mut idle = std::net::TcpStream::connect(&s.addr).unwrap();
    let mut partial = std::net::TcpStream::connect(&s.addr).unwrap();
    partial
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // Far beyond the service's header timeout: reaching it means the
    // connection was held open.
    for c in [&mut idle, &mut partial] {
        c.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        let mut rest = Vec::new();
        let r = c.read_to_end(&mut rest);
        assert!(
            !matches!(&r, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
            "the service never closed an idle connection: {r:?}"
        );
    }
    // And it still serves.
    let (code, v) = s.get("/health");
    assert_eq!(code, 200, "{v}");
    s.kill9();
}
