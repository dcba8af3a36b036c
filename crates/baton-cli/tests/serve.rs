#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service's scheduling: concurrency, FIFO, timeouts, limits, cancel
//! — a real `baton serve` on 127.0.0.1 running real commands.

mod serve_common;

use std::time::Duration;

use serde_json::json;
use serve_common::{wait_for_file, Server};

/// A template whose job records its start (`{tmp}/start.<prompt>`) and
/// waits for `{tmp}/go.<prompt>`.
fn gated(extra: &str) -> String {
    format!(
        r#"
default_template = "gated"
{extra}
[templates.gated]
command = ["sh", "-c", "echo $$ > {{tmp}}/start.$1; while [ ! -e {{tmp}}/go.$1 ]; do sleep 0.02; done; echo done $1", "job", "{{prompt}}"]
"#
    )
}

fn server(extra_config: &str, args: &[&str]) -> Server {
    Server::start(&gated(extra_config), args)
}

#[test]
fn two_concurrent_jobs_both_run_and_a_third_waits_in_fifo_order() {
    let s = server("", &["--max-concurrency", "2"]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a"}));
    let b = s.submit(json!({"prompt": "b"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.a")));
    wait_for_file(std::path::Path::new(&format!("{t}/start.b")));
    let c = s.submit(json!({"prompt": "c"}));
    let d = s.submit(json!({"prompt": "d"}));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.job(&c)["status"], "queued");
    assert_eq!(s.job(&d)["status"], "queued");
    let (_, h) = s.get("/health");
    assert_eq!(
        h,
        json!({"status": "ok", "busy": true, "active": 2, "queued": 2, "capacity": 2})
    );
    // b ends first: c (the older) takes its slot, not d.
    std::fs::write(format!("{t}/go.b"), "").unwrap();
    wait_for_file(std::path::Path::new(&format!("{t}/start.c")));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(s.job(&d)["status"], "queued");
    for p in ["a", "c", "d"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    for id in [&a, &b, &c, &d] {
        let j = s.wait_final(id);
        assert_eq!(j["status"], "succeeded", "{j}");
        assert_eq!(j["exit_code"], 0);
        assert!(j["output"].as_str().unwrap().starts_with("done "), "{j}");
    }
    let (_, h) = s.get("/health");
    assert_eq!(h["active"], 0);
    assert_eq!(h["busy"], false);
}
