#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! A full disk under the jobs' output (issue 21): a job whose output could
//! not be written says so in its record, and `/health` reports the disk.
//! A real `baton serve` whose jobs directory is a 1 MiB tmpfs (the test
//! runs as root and fails, loudly, if it cannot mount one).

use crate::serve_common;

use std::time::{Duration, Instant};

use serde_json::json;
use serve_common::{sh_config, Mounted, Server};

#[test]
fn a_job_whose_output_did_not_fit_on_the_disk_says_so_and_health_reports_the_disk() {
    let s = Server::start(&sh_config(""), &[]);
    let jobs = s.dir.join("serve").join("jobs");
    let _small = Mounted::tmpfs(&jobs, "1m");
    let (code, h) = s.get("/health");
    assert_eq!(code, 200, "{h}");

    // 3 MiB of output (under max_log_bytes) onto a 1 MiB disk.
    let id = s.submit(json!({"prompt": "head -c 3145728 /dev/zero | tr '\\0' x; echo done >&2"}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{}", j["error"]);
    let written = std::fs::metadata(jobs.join(&id).join("stdout"))
        .map(|m| m.len())
        .unwrap_or(0);
    assert!(
        written < 3145728,
        "the disk did not fill up: {written} bytes written"
    );
    let error = j["error"].as_str().unwrap_or("");
    assert!(error.contains("output"), "{error}");
    assert!(error.contains("No space left on device"), "{error}");

    let start = Instant::now();
    let h = loop {
        let (code, h) = s.get("/health");
        if code == 503 {
            break h;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "health stays {code}: {h}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(h["status"], "degraded", "{h}");
    let why = h["error"].as_str().unwrap_or("");
    assert!(why.contains(&jobs.display().to_string()), "{h}");
}
