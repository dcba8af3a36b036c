#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service's scheduling: concurrency, FIFO, timeouts, limits, cancel
//! — a real `baton serve` on 127.0.0.1 running real commands.

use crate::serve_common;

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
        json!({"status": "ok", "busy": true, "active": 2, "queued": 2, "capacity": 2,
               "node_capacity": 2, "node": "local"})
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

/// On SQLite (one node) `node_max_concurrency` is the cap: the smaller of
/// the two, in the scheduler and in `/health`.
#[test]
fn node_max_concurrency_caps_a_single_node() {
    let s = server(
        "",
        &["--max-concurrency", "3", "--node-max-concurrency", "1"],
    );
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a"}));
    let b = s.submit(json!({"prompt": "b"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.a")));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.job(&b)["status"], "queued");
    let (_, h) = s.get("/health");
    assert_eq!(
        h,
        json!({"status": "ok", "busy": true, "active": 1, "queued": 1, "capacity": 1,
               "node_capacity": 1, "node": "local"})
    );
    std::fs::write(format!("{t}/go.a"), "").unwrap();
    wait_for_file(std::path::Path::new(&format!("{t}/start.b")));
    std::fs::write(format!("{t}/go.b"), "").unwrap();
    for id in [&a, &b] {
        assert_eq!(s.wait_final(id)["status"], "succeeded");
    }
}

#[test]
fn bad_requests_get_a_4xx_naming_the_problem_and_store_nothing() {
    let s = server("max_body_bytes = 4096\nmax_timeout = \"1h\"", &[]);
    let cases: Vec<(&[u8], u16, &str)> = vec![
        (b"{not json", 400, "invalid JSON"),
        (br#"{"template": "nope"}"#, 400, "no template 'nope'"),
        (
            br#"{"prompt": "x", "surprise": 1}"#,
            400,
            "unknown field `surprise`",
        ),
        (br#"{"timeout": "soon"}"#, 400, "field 'timeout'"),
        (br#"{"timeout": -5}"#, 400, "field 'timeout'"),
        (br#"{"timeout": "2h"}"#, 400, "max_timeout"),
        (br#"{"group": "../etc"}"#, 400, "field 'group'"),
        (br#"{"group": ""}"#, 400, "field 'group'"),
        (br#"{"mode": "supersede"}"#, 400, "needs a 'group'"),
        (br#"{"group": "g", "mode": "yolo"}"#, 400, "field 'mode'"),
        (
            br#"{"command": ["rm", "-rf", "/"]}"#,
            403,
            "allow_raw_commands",
        ),
        (
            br#"{"workspace": {"branch": "x"}}"#,
            400,
            "has no workspace",
        ),
        (br#"[1, 2]"#, 400, "invalid JSON"),
    ];
    for (body, code, needle) in cases {
        let (got, v) = s.post_raw("/v1/jobs", body);
        let text = String::from_utf8_lossy(body);
        assert_eq!(got, code, "{text}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{text}: {v}");
        assert!(v["error"]["code"].is_string(), "{text}: {v}");
    }
    let big = format!(r#"{{"prompt": "{}"}}"#, "x".repeat(8192));
    let (got, v) = s.post_raw("/v1/jobs", big.as_bytes());
    assert_eq!(got, 413, "{v}");
    assert_eq!(v["error"]["code"], "body_too_large", "{v}");
    // Nothing was stored.
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "{list}");
    let (got, v) = s.get("/v1/jobs/0123456789abcdef");
    assert_eq!(got, 404, "{v}");
    let (got, v) = s.get("/v1/jobs?status=nope");
    assert_eq!(got, 400, "{v}");
}

#[test]
fn the_prompt_is_one_argument_an_env_var_and_stdin_never_a_shell() {
    let s = Server::start(
        r#"
default_template = "show"
[templates.show]
command = ["sh", "-c", "printf '%s|' \"$#\" \"$1\" \"$BATON_PROMPT\" \"$(cat)\"", "job", "{prompt}"]
"#,
        &[],
    );
    let prompt = format!("a b; $(touch {}/pwned) `id` \"q\" 'x'\nline2", s.tmp());
    let id = s.submit(json!({ "prompt": &prompt }));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert_eq!(j["output"], format!("1|{prompt}|{prompt}|{prompt}|"), "{j}");
    assert!(!s.path("pwned").exists());
}

#[test]
fn a_job_list_pages_newest_first_and_filters() {
    let s = server("", &["--max-concurrency", "1"]);
    let t = s.tmp();
    let ids: Vec<String> = (0..5)
        .map(|i| s.submit(json!({"prompt": format!("p{i}"), "group": if i % 2 == 0 { "even" } else { "odd" }})))
        .collect();
    let (_, page1) = s.get("/v1/jobs?limit=2");
    let got: Vec<&str> = page1["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[4].as_str(), ids[3].as_str()]);
    let cursor = page1["next_cursor"].as_str().unwrap().to_string();
    let (_, page2) = s.get(&format!("/v1/jobs?limit=2&cursor={cursor}"));
    let got: Vec<&str> = page2["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, vec![ids[2].as_str(), ids[1].as_str()]);
    let (_, even) = s.get("/v1/jobs?group=even");
    assert_eq!(even["jobs"].as_array().unwrap().len(), 3);
    wait_for_file(std::path::Path::new(&format!("{t}/start.p0")));
    let (_, queued) = s.get("/v1/jobs?status=queued");
    assert_eq!(queued["jobs"].as_array().unwrap().len(), 4, "{queued}");
    for i in 0..5 {
        std::fs::write(format!("{t}/go.p{i}"), "").unwrap();
    }
    for id in &ids {
        assert_eq!(s.wait_final(id)["status"], "succeeded");
    }
}

#[test]
fn a_service_refuses_to_start_on_bad_configuration_with_one_line_and_125() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |config: &str, args: &[&str]| {
        let path = tmp.path().join("c.toml");
        std::fs::write(&path, config).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .args(args)
            .env_remove("BATON_SERVE_TOKEN")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        ("", vec!["--listen", "0.0.0.0:0"], "without a token"),
        ("listen = \"nowhere\"", vec![], "invalid listen address"),
        ("max_concurrency = 0", vec![], "max_concurrency"),
        (
            "max_concurrency = 5\nmax_queue_depth = 2",
            vec![],
            "max_queue_depth",
        ),
        ("job_tll = \"1h\"", vec![], "job_tll"),
        (
            "node_max_concurrency = 0",
            vec![],
            "invalid node_max_concurrency 0",
        ),
        (
            "max_concurrency = 2\nnode_max_concurrency = 3",
            vec![],
            "invalid node_max_concurrency 3",
        ),
        (
            "",
            vec!["--max-concurrency", "2", "--node-max-concurrency", "5"],
            "at most max_concurrency (2)",
        ),
        (
            "[templates.a]\ncommand = [\"sh\", \"-c\", \"echo {prompt}\"]",
            vec![],
            "whole argument",
        ),
        ("[templates.a]\ncommand = []", vec![], "templates.a.command"),
        ("default_template = \"zz\"", vec![], "default_template"),
        (
            "[templates.a]\ncommand = [\"x\"]\nenv = { K = \"${BATON_TEST_UNSET_VAR_XYZ}\" }",
            vec![],
            "BATON_TEST_UNSET_VAR_XYZ",
        ),
        ("grace = \"forever\"", vec![], "invalid grace"),
        (
            "store = \"mysql://x\"",
            vec!["--listen", "127.0.0.1:0"],
            "unsupported store URL",
        ),
    ];
    for (config, args, needle) in cases {
        let (code, err) = run(config, &args);
        assert_eq!(code, Some(125), "{config}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{config}: {err}");
        assert!(err.contains(needle), "{config}: {err}");
    }
}

#[test]
fn one_service_per_baton_dir() {
    let s = server("", &[]);
    let out = s
        .baton(&[
            "serve",
            "--config",
            s.config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another `baton serve` is running"), "{err}");
    let (code, _) = s.get("/health");
    assert_eq!(code, 200);
}

#[test]
fn a_token_guards_everything_but_health() {
    let mut s = Server::start(&gated("token = \"s3cret\""), &["--listen", "127.0.0.1:0"]);
    let (code, v) = s.get("/v1/jobs");
    assert_eq!(code, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthorized");
    let (code, _) = s.post("/v1/jobs", &json!({"prompt": "x"}));
    assert_eq!(code, 401);
    assert_eq!(s.get("/health").0, 200);
    s.token = Some("wrong".into());
    assert_eq!(s.get("/v1/jobs").0, 401);
    s.token = Some("s3cret".into());
    assert_eq!(s.get("/v1/jobs").0, 200);
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]));
}

#[test]
fn a_job_whose_group_is_busy_never_holds_a_slot_others_could_use() {
    // One slot... two: a job of group g runs; the next job of g must not
    // take the second slot to wait in, so an ungrouped job behind it runs.
    let s = server("", &["--max-concurrency", "2"]);
    let t = s.tmp();
    let g1 = s.submit(json!({"prompt": "g1", "group": "g"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.g1")));
    let g2 = s.submit(json!({"prompt": "g2", "group": "g"}));
    let free = s.submit(json!({"prompt": "free"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.free")));
    assert_eq!(s.job(&g2)["status"], "queued");
    std::fs::write(format!("{t}/go.g1"), "").unwrap();
    wait_for_file(std::path::Path::new(&format!("{t}/start.g2")));
    for p in ["g2", "free"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    for id in [&g1, &g2, &free] {
        assert_eq!(s.wait_final(id)["status"], "succeeded");
    }
}

#[test]
fn supersede_through_the_api_stops_the_running_job_and_drops_queued_ones() {
    let s = server("grace = \"2s\"", &["--max-concurrency", "2"]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a", "group": "issue/42", "mode": "supersede"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b", "group": "issue/42", "mode": "supersede"}));
    let ja = s.wait_final(&a);
    assert_eq!(ja["status"], "superseded", "{ja}");
    assert_eq!(ja["superseded_by"], b.as_str(), "{ja}");
    wait_for_file(std::path::Path::new(&format!("{t}/start.b")));
    // A queued job of the group is superseded at once by a newer one.
    let blocker = s.submit(json!({"prompt": "blocker"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.blocker")));
    let c = s.submit(json!({"prompt": "c", "group": "other", "mode": "supersede"}));
    let d = s.submit(json!({"prompt": "d", "group": "other", "mode": "supersede"}));
    let jc = s.job(&c);
    assert_eq!(jc["status"], "superseded", "{jc}");
    assert_eq!(jc["superseded_by"], d.as_str());
    assert!(jc["started_at"].is_null(), "{jc}");
    for p in ["b", "blocker", "d"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    for id in [&b, &blocker, &d] {
        assert_eq!(s.wait_final(id)["status"], "succeeded");
    }
    assert!(!std::path::Path::new(&format!("{t}/start.c")).exists());
}

#[test]
fn skip_and_coalesce_through_the_api() {
    let s = server("", &["--max-concurrency", "3"]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a", "group": "sync", "mode": "skip"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b", "group": "sync", "mode": "skip"}));
    let jb = s.wait_final(&b);
    assert_eq!(jb["status"], "skipped", "{jb}");
    assert_eq!(jb["exit_code"], 75, "{jb}");
    // Coalesce: the running job goes on, the waiting one is replaced.
    let c1 = s.submit(json!({"prompt": "c1", "group": "idx", "mode": "coalesce"}));
    wait_for_file(std::path::Path::new(&format!("{t}/start.c1")));
    let c2 = s.submit(json!({"prompt": "c2", "group": "idx", "mode": "coalesce"}));
    let c3 = s.submit(json!({"prompt": "c3", "group": "idx", "mode": "coalesce"}));
    assert_eq!(s.job(&c2)["status"], "superseded");
    assert_eq!(s.job(&c2)["superseded_by"], c3.as_str());
    assert_eq!(s.job(&c1)["status"], "running");
    for p in ["a", "c1", "c3"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    for id in [&a, &c1, &c3] {
        assert_eq!(s.wait_final(id)["status"], "succeeded");
    }
}

#[test]
fn metrics_count_jobs_by_status_with_histograms() {
    let s = Server::start(
        r#"
default_template = "t"
[templates.t]
command = ["sh", "-c", "exit $1", "job", "{prompt}"]
"#,
        &[],
    );
    let ok = s.submit(json!({"prompt": "0"}));
    let bad = s.submit(json!({"prompt": "3"}));
    assert_eq!(s.wait_final(&ok)["status"], "succeeded");
    let jb = s.wait_final(&bad);
    assert_eq!(jb["status"], "failed");
    assert_eq!(jb["exit_code"], 3);
    let (code, text) = s.get_text("/metrics");
    assert_eq!(code, 200);
    for line in [
        "baton_jobs{status=\"succeeded\"} 1",
        "baton_jobs{status=\"failed\"} 1",
        "baton_jobs_ended_total{status=\"failed\"} 1",
        "baton_jobs_active 0",
        "baton_jobs_queued 0",
        "baton_job_queue_wait_seconds_count 2",
        "baton_job_run_seconds_count 2",
        "baton_job_run_seconds_bucket{le=\"+Inf\"} 2",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
}

#[test]
fn a_restart_stops_every_command_the_previous_instance_started_even_one_no_longer_marked_running() {
    // On PostgreSQL another node marks a dead node's jobs interrupted; the
    // node's processes must still be stopped when it starts again. Here the
    // store is edited by hand (SQLite) to the state another node leaves.
    let mut s = Server::start(
        r#"
default_template = "bg"
[templates.bg]
command = ["sh", "-c", "sleep 300 & echo $! > {tmp}/bg.pid; wait"]
"#,
        &[],
    );
    let id = s.submit(json!({}));
    let pid: i32 = wait_for_file(&s.path("bg.pid")).trim().parse().unwrap();
    s.wait_job(&id, Duration::from_secs(30), |j| j["status"] == "running");
    s.kill9();
    assert!(
        serve_common::alive(pid),
        "the background child died with the service"
    );
    let db = s.dir.join("serve.db");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1]); \
             c.execute(\"UPDATE jobs SET status='interrupted', finished_at=? WHERE id=?\", (int(time.time()*1000), sys.argv[2])); c.commit()",
            db.to_str().unwrap(),
            &id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.spawn();
    serve_common::wait_until_gone(pid);
    assert_eq!(s.job(&id)["status"], "interrupted");
}

#[test]
fn baton_job_list_pages_with_the_printed_cursor() {
    let s = Server::start(
        "default_template = \"t\"\n[templates.t]\ncommand = [\"true\"]\n",
        &[],
    );
    let ids: Vec<String> = (0..3).map(|_| s.submit(json!({}))).collect();
    for id in &ids {
        s.wait_final(id);
    }
    let server = format!("http://{}", s.addr);
    let list = |extra: &[&str]| {
        let mut args = vec!["job", "list", "--server", server.as_str(), "--limit", "2"];
        args.extend_from_slice(extra);
        let out = s.baton(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = list(&[]);
    assert!(
        first.contains(&ids[2]) && first.contains(&ids[1]) && !first.contains(&ids[0]),
        "{first}"
    );
    let cursor = first
        .lines()
        .find_map(|l| l.strip_prefix("(more: --cursor "))
        .and_then(|l| l.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no cursor in:\n{first}"))
        .to_string();
    let second = list(&["--cursor", &cursor]);
    assert!(
        second.contains(&ids[0]) && !second.contains(&ids[1]),
        "{second}"
    );
    assert!(!second.contains("--cursor"), "{second}");
}
