#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Submissions that arrive together share one commit (the SQLite store's
//! group commit): the rules each one is checked against still hold one by
//! one inside a batch, and a client that goes away while its submission
//! waits neither loses a stored job nor makes one run twice. A real
//! `baton serve`, real concurrent clients.

use crate::serve_common;

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{sh_config, Server};

/// Sends `body` as a `POST /v1/jobs` and closes the connection without
/// reading the answer (after `wait`).
fn post_and_leave(s: &Server, body: &Value, wait: Duration) {
    let body = body.to_string();
    let mut c = TcpStream::connect(&s.addr).unwrap();
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        s.addr,
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body.as_bytes()).unwrap();
    std::thread::sleep(wait);
}

/// The ids of every job the service holds.
fn all_ids(s: &Server) -> Vec<String> {
    let (code, list) = s.get("/v1/jobs?limit=1000");
    assert_eq!(code, 200, "{list}");
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_burst_of_submissions_fills_the_queue_to_its_depth_and_no_further() {
    let s = Server::start(
        &sh_config("max_queue_depth = 5"),
        &["--max-concurrency", "1"],
    );
    let t = s.tmp();
    let running = s.submit(json!({
        "prompt": format!("while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    s.wait_job(&running, Duration::from_secs(60), |j| {
        j["status"] == "running"
    });
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..40)
            .map(|_| scope.spawn(|| s.post("/v1/jobs", &json!({"prompt": "true"}))))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let mut positions: Vec<u64> = answers
        .iter()
        .filter(|(code, _)| *code == 202)
        .map(|(_, v)| v["position"].as_u64().unwrap())
        .collect();
    positions.sort_unstable();
    // One running + four queued reach the depth of 5.
    assert_eq!(positions, [1, 2, 3, 4], "{answers:?}");
    for (code, v) in &answers {
        assert!(*code == 202 || *code == 429, "{code}: {v}");
    }
    assert_eq!(all_ids(&s).len(), 5);
    std::fs::write(format!("{t}/go"), "").unwrap();
}

#[test]
fn clients_that_leave_while_their_submission_waits_get_each_stored_job_run_once() {
    let s = Server::start(&sh_config("max_queue_depth = 10000"), &[]);
    let t = s.tmp();
    std::thread::scope(|scope| {
        for i in 0..60u64 {
            let s = &s;
            let t = &t;
            scope.spawn(move || {
                let body = json!({"prompt": format!("echo {i} >> {t}/ran")});
                post_and_leave(s, &body, Duration::from_micros(i * 50));
            });
        }
    });
    // Each job the service stored runs, once; the others were never
    // stored. (A submission may still be on its way when the clients are
    // gone: listed again until what ran and what is stored agree.)
    let ran_file = Path::new(&t).join("ran");
    let start = Instant::now();
    let (stored, ran) = loop {
        let stored = all_ids(&s);
        for id in &stored {
            s.wait_final(id);
        }
        let ran = std::fs::read_to_string(&ran_file).unwrap_or_default();
        if ran.lines().count() == stored.len() && all_ids(&s).len() == stored.len() {
            break (stored, ran);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} jobs stored, {} runs: {ran}",
            stored.len(),
            ran.lines().count()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for id in &stored {
        assert_eq!(s.job(id)["status"], "succeeded", "{id}");
    }
    let mut lines: Vec<&str> = ran.lines().collect();
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), stored.len(), "a job ran twice: {ran}");
    // The service still answers and stores.
    let after = s.submit(json!({"prompt": "true"}));
    s.wait_final(&after);
}
