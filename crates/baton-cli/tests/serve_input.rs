#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! What a request may ask of the job service, and what it may not (issue
//! 21): prompts that look like options or are too large, timeouts out of
//! range, error bodies that name the field, settings that would lose jobs
//! or overflow, mode conflicts ending in their mode's status, and `--backend`
//! where it does not apply — a real `baton serve` on 127.0.0.1 running real
//! commands.

use crate::serve_common;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use serve_common::{wait_for_file, Server};

/// Runs `cmd` (stdin null) and returns its exit code and stderr; one that
/// is still running after 30 s (a service that started instead of
/// refusing) is killed and the test fails.
fn exits_within(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (st.code(), err);
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not exit: it accepted what it must refuse");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `baton serve --config <config> ARGS` that must refuse to start: its
/// exit code and stderr.
fn refused_start(config: &str, args: &[&str]) -> (Option<i32>, String) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.arg("--dir")
        .arg(tmp.path().join("baton"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("BATON_SERVE_TOKEN")
        .env_remove("BATON_BACKEND");
    exits_within(cmd)
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_prompt_starting_with_a_dash_is_refused_where_it_would_be_an_option() {
    // `sort {prompt}`: a prompt `-o FILE` would make sort write FILE.
    let s = Server::start(
        r#"
default_template = "sort"
[templates.sort]
command = ["sort", "{prompt}"]
"#,
        &[],
    );
    let pwned = s.path("pwned");
    let prompt = format!("-o{}", pwned.display());
    let (code, v) = s.post("/v1/jobs", &json!({"prompt": prompt}));
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_request", "{v}");
    assert!(message(&v).contains("'prompt'"), "{v}");
    let (code, v) = s.post("/execute", &json!({"prompt": prompt}));
    assert_eq!(code, 400, "/execute: {v}");
    assert!(message(&v).contains("'prompt'"), "{v}");
    // The OpenAI route: one message's text is the prompt.
    let (code, v) = s.post(
        "/v1/chat/completions",
        &json!({"model": "sort", "messages": [{"role": "user", "content": prompt}]}),
    );
    assert_eq!(code, 400, "chat: {v}");
    assert_eq!(v["error"]["param"], "messages", "{v}");
    // Nothing ran: no job stored, no file written.
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "{list}");
    assert!(!pwned.exists(), "the prompt reached sort as an option");
}

#[test]
fn a_prompt_starting_with_a_dash_reaches_a_command_that_takes_it_as_data() {
    let s = Server::start(
        r#"
default_template = "after_dashes"
[templates.after_dashes]
command = ["sh", "-c", "printf '%s' \"$1\"", "--", "{prompt}"]
[templates.positional]
command = ["sh", "-c", "printf '%s' \"$1\"", "job", "{prompt}"]
prompt_may_start_with_dash = true
"#,
        &[],
    );
    for template in ["after_dashes", "positional"] {
        let id = s.submit(json!({"template": template, "prompt": "-o /tmp/x"}));
        let j = s.wait_final(&id);
        assert_eq!(j["status"], "succeeded", "{template}: {j}");
        assert_eq!(j["output"], "-o /tmp/x", "{template}: {j}");
    }
}

#[test]
fn a_prompt_over_max_prompt_bytes_is_refused_at_submit_with_400_naming_field_size_and_limit() {
    let s = Server::start(
        r#"
default_template = "count"
[templates.count]
command = ["sh", "-c", "printf '%s' \"$1\" | wc -c", "job", "{prompt}"]
"#,
        &[],
    );
    // Over 128 KiB: the kernel refuses such an argument (E2BIG).
    let big = "x".repeat(130 * 1024);
    let (code, v) = s.post("/v1/jobs", &json!({"prompt": big}));
    // 400, a field over its limit (issue 37, item 7): 413 is for a body
    // over max_body_bytes, which a strict validator tells apart.
    assert_eq!(code, 400, "{}", message(&v));
    assert_eq!(v["error"]["code"], "prompt_too_large");
    let m = message(&v);
    assert!(m.contains("133120") && m.contains("102400"), "{m}");
    assert!(m.contains("'prompt'"), "{m}");
    assert!(m.contains("max_prompt_bytes"), "{m}");
    let (code, v) = s.post(
        "/v1/chat/completions",
        &json!({"model": "count", "messages": [{"role": "user", "content": big}]}),
    );
    assert_eq!(code, 400, "chat: {}", message(&v));
    // At the limit it is delivered intact.
    let id = s.submit(json!({"prompt": "y".repeat(100 * 1024)}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert_eq!(j["output"].as_str().unwrap().trim(), "102400", "{j}");
}

#[test]
fn a_command_the_kernel_refuses_as_too_large_names_the_cause() {
    // A template variable of 128 KiB: exec fails with E2BIG.
    let config = format!(
        r#"
default_template = "big"
[templates.big]
command = ["true"]
env = {{ BIG = "{}" }}
"#,
        "z".repeat(128 * 1024)
    );
    let s = Server::start(&config, &[]);
    let id = s.submit(json!({"prompt": "p"}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "failed", "{j}");
    let e = j["error"].as_str().unwrap_or_default();
    assert!(e.contains("E2BIG") && e.contains("131072"), "{e}");
}

#[test]
fn max_prompt_bytes_is_validated_at_start() {
    for (config, needle) in [
        ("max_prompt_bytes = 0", "max_prompt_bytes"),
        ("max_prompt_bytes = 200000", "max_prompt_bytes"),
    ] {
        let (code, err) = refused_start(config, &[]);
        assert_eq!(code, Some(125), "{config}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{config}: {err}");
        assert!(err.contains(needle), "{config}: {err}");
    }
}

#[test]
fn out_of_range_timeouts_get_400_naming_timeout_and_never_become_no_timeout() {
    let s = Server::start(&serve_common::sh_config("max_timeout = \"1h\""), &[]);
    let cases: Vec<&[u8]> = vec![
        br#"{"prompt": "true", "timeout": 1e20}"#,
        br#"{"prompt": "true", "timeout": 1.7976931348623157e308}"#,
        br#"{"prompt": "true", "timeout": "999us"}"#,
        br#"{"prompt": "true", "timeout": 0.0005}"#,
        br#"{"prompt": "true", "timeout": "0s"}"#,
    ];
    for body in cases {
        let (code, v) = s.post_raw("/v1/jobs", body);
        let text = String::from_utf8_lossy(body);
        assert_eq!(code, 400, "{text}: {v}");
        assert!(message(&v).contains("'timeout'"), "{text}: {v}");
    }
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "{list}");
    assert_eq!(s.get("/health").0, 200);
    // The shortest accepted timeout is kept, not rounded to "none".
    let id = s.submit(json!({"prompt": "sleep 5", "timeout": "1ms"}));
    let j = s.wait_final(&id);
    assert_eq!(j["timeout_ms"], 1, "{j}");
    assert_eq!(j["status"], "timed_out", "{j}");
}

#[test]
fn durations_and_limits_that_would_lose_jobs_or_overflow_are_refused_at_start() {
    let cases = [
        ("job_ttl = \"0s\"", vec![], "job_ttl"),
        ("job_ttl = \"500ms\"", vec![], "job_ttl"),
        ("", vec!["--job-ttl", "0s"], "job_ttl"),
        ("default_timeout = \"0s\"", vec![], "default_timeout"),
        ("max_timeout = \"0s\"", vec![], "max_timeout"),
        ("max_timeout = \"999us\"", vec![], "max_timeout"),
        ("max_timeout = \"500000000y\"", vec![], "max_timeout"),
        ("grace = \"999us\"", vec![], "grace"),
        ("drain_timeout = \"100000y\"", vec![], "drain_timeout"),
        ("max_body_bytes = 0", vec![], "max_body_bytes"),
        (
            "[templates.a]\ncommand = [\"true\"]\ntimeout = \"0s\"",
            vec![],
            "templates.a.timeout",
        ),
    ];
    for (config, args, needle) in cases {
        let (code, err) = refused_start(config, &args);
        assert_eq!(code, Some(125), "{config} {args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{config}: {err}");
        assert!(err.contains(needle), "{config} {args:?}: {err}");
    }
}

#[test]
fn every_error_has_the_json_body_and_names_the_field() {
    let s = Server::start(&serve_common::sh_config(""), &[]);
    for (body, field) in [
        (&br#"{"prompt": 5}"#[..], "'prompt'"),
        (br#"{"group": 5}"#, "'group'"),
        (br#"{"workspace": {"branch": 7}}"#, "'workspace.branch'"),
    ] {
        let (code, v) = s.post_raw("/v1/jobs", body);
        assert_eq!(code, 400, "{v}");
        assert!(message(&v).contains(field), "{v}");
    }
    let (code, v) = s.post_raw("/execute", br#"{"prompt": true}"#);
    assert_eq!(code, 400, "{v}");
    assert!(message(&v).contains("'prompt'"), "{v}");
    // 405: a route that exists, a method it does not take.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent.put(&s.url("/v1/jobs")).send("").unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
    // 414: a request target longer than the service reads.
    let long = format!("/v1/jobs?group={}", "g".repeat(10_000));
    let mut r = agent.get(&s.url(&long)).call().unwrap();
    assert_eq!(r.status().as_u16(), 414);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "uri_too_long", "{v}");
    // 431: more header fields than the service reads (the HTTP layer's
    // own limit, 100, answered with an empty body, is raised above it).
    let mut req = agent.get(&s.url("/v1/jobs"));
    for i in 0..150 {
        req = req.header(format!("x-filler-{i}"), "1");
    }
    let mut r = req.call().unwrap();
    assert_eq!(r.status().as_u16(), 431);
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "too_many_headers", "{v}");
    assert!(message(&v).contains("limit is 100"), "{v}");
    // A path parameter that is not UTF-8.
    for path in [
        "/v1/jobs/%FF",
        "/v1/jobs/%FF/log",
        "/jobs/%FF",
        "/v1/models/%FF",
    ] {
        let (code, v) = s.get(path);
        assert_eq!(code, 400, "{path}: {v}");
        assert_eq!(v["error"]["code"], "invalid_request", "{path}: {v}");
    }
}

/// A base repository for workspaces: `{tmp}/base`, one commit on `main`.
fn base_repo(s: &Server) -> String {
    let base = s.path("base");
    std::fs::create_dir_all(&base).unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(&base)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(base.join("a.txt"), "a\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "one"]);
    base.display().to_string()
}

#[test]
fn a_setup_command_that_times_out_is_timed_out_not_failed() {
    let mut s = Server::start(&serve_common::sh_config(""), &[]);
    let base = base_repo(&s);
    std::fs::write(
        &s.config,
        format!(
            r#"
default_template = "ws"
grace = "1s"
[templates.ws]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "0s", setup = ["sh", "-c", "echo x > {t}/setup.started; sleep 30"] }}
"#,
            t = s.tmp()
        ),
    )
    .unwrap();
    s.kill9();
    s.spawn();
    let id = s.submit(json!({"prompt": "echo ran", "timeout": "2s"}));
    wait_for_file(&s.path("setup.started"));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "timed_out", "{j}");
    assert_eq!(j["exit_code"], 124, "{j}");
    assert!(j["error"].as_str().unwrap_or("").contains("setup"), "{j}");
}

/// A gated template: the job records its start (`{tmp}/start.<prompt>`)
/// and waits for `{tmp}/go.<prompt>`.
const GATED: &str = r#"
default_template = "gated"
max_concurrency = 3
[templates.gated]
command = ["sh", "-c", "echo x > {tmp}/start.$1; while [ ! -e {tmp}/go.$1 ]; do sleep 0.02; done", "job", "{prompt}"]
"#;

#[test]
fn a_skip_job_meeting_a_busy_group_of_another_mode_is_skipped_not_failed() {
    let s = Server::start(GATED, &[]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a", "group": "sync"}));
    wait_for_file(Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b", "group": "sync", "mode": "skip"}));
    let jb = s.wait_final(&b);
    assert_eq!(jb["status"], "skipped", "{jb}");
    assert_eq!(jb["exit_code"], 75, "{jb}");
    assert!(!Path::new(&format!("{t}/start.b")).exists());
    std::fs::write(format!("{t}/go.a"), "").unwrap();
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
}

#[test]
fn a_supersede_job_supersedes_a_running_job_of_another_mode() {
    let s = Server::start(GATED, &[]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a", "group": "g"}));
    wait_for_file(Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b", "group": "g", "mode": "supersede"}));
    let ja = s.wait_final(&a);
    assert_eq!(ja["status"], "superseded", "{ja}");
    assert_eq!(ja["superseded_by"], b.as_str(), "{ja}");
    wait_for_file(Path::new(&format!("{t}/start.b")));
    std::fs::write(format!("{t}/go.b"), "").unwrap();
    let jb = s.wait_final(&b);
    assert_eq!(jb["status"], "succeeded", "{jb}");
}

/// Trial (e): every slot is taken when the newer supersede job arrives, so
/// it waits in the queue; the older job of its group stops at once all the
/// same (the newest request wins), as `baton run --mode supersede` does.
/// Before, the older job ran on until a slot freed up for the newer one.
#[test]
fn a_supersede_job_waiting_for_a_slot_stops_the_older_job_at_once() {
    let s = Server::start(GATED, &[]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": "a", "group": "g", "mode": "supersede"}));
    let fillers: Vec<String> = ["f1", "f2"]
        .iter()
        .map(|p| s.submit(json!({ "prompt": p })))
        .collect();
    for p in ["a", "f1", "f2"] {
        wait_for_file(Path::new(&format!("{t}/start.{p}")));
    }
    let b = s.submit(json!({"prompt": "b", "group": "g", "mode": "supersede"}));
    // b waits for a slot (three run), yet a is superseded now; its slot
    // then goes to b.
    let ja = s.wait_final(&a);
    assert_eq!(ja["status"], "superseded", "{ja}");
    assert_eq!(ja["superseded_by"], b.as_str(), "{ja}");
    wait_for_file(Path::new(&format!("{t}/start.b")));
    for p in ["b", "f1", "f2"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
    for f in &fillers {
        assert_eq!(s.wait_final(f)["status"], "succeeded");
    }
}

#[test]
fn each_mode_conflict_ends_in_that_modes_status() {
    let s = Server::start(GATED, &[]);
    let t = s.tmp();
    // supersede: the running job is superseded by the newer one.
    let a = s.submit(json!({"prompt": "a", "group": "g1", "mode": "supersede"}));
    wait_for_file(Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b", "group": "g1", "mode": "supersede"}));
    let ja = s.wait_final(&a);
    assert_eq!(ja["status"], "superseded", "{ja}");
    assert_eq!(ja["superseded_by"], b.as_str(), "{ja}");
    wait_for_file(Path::new(&format!("{t}/start.b")));
    std::fs::write(format!("{t}/go.b"), "").unwrap();
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
    // coalesce: the waiting job is replaced (superseded), the running one goes on.
    let c1 = s.submit(json!({"prompt": "c1", "group": "g2", "mode": "coalesce"}));
    wait_for_file(Path::new(&format!("{t}/start.c1")));
    let c2 = s.submit(json!({"prompt": "c2", "group": "g2", "mode": "coalesce"}));
    let c3 = s.submit(json!({"prompt": "c3", "group": "g2", "mode": "coalesce"}));
    let j2 = s.wait_final(&c2);
    assert_eq!(j2["status"], "superseded", "{j2}");
    assert_eq!(j2["superseded_by"], c3.as_str(), "{j2}");
    for p in ["c1", "c3"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    assert_eq!(s.wait_final(&c1)["status"], "succeeded");
    assert_eq!(s.wait_final(&c3)["status"], "succeeded");
    // skip: refused while the group runs a skip job too.
    let d1 = s.submit(json!({"prompt": "d1", "group": "g3", "mode": "skip"}));
    wait_for_file(Path::new(&format!("{t}/start.d1")));
    let d2 = s.submit(json!({"prompt": "d2", "group": "g3", "mode": "skip"}));
    assert_eq!(s.wait_final(&d2)["status"], "skipped");
    std::fs::write(format!("{t}/go.d1"), "").unwrap();
    assert_eq!(s.wait_final(&d1)["status"], "succeeded");
}

#[test]
fn backend_is_refused_by_serve_and_job_and_absent_from_their_help() {
    let tmp = tempfile::tempdir().unwrap();
    let command = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
        c.env_remove("BATON_BACKEND")
            .env_remove("BATON_SERVE_TOKEN")
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args(args)
            .stdin(std::process::Stdio::null());
        c
    };
    let baton = |args: &[&str]| command(args).output().unwrap();
    for args in [
        &[
            "serve",
            "--backend",
            "postgres://u@h/db",
            "--listen",
            "127.0.0.1:0",
        ][..],
        &[
            "--backend",
            "postgres://u@h/db",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ],
        &["job", "list", "--backend", "postgres://u@h/db"],
    ] {
        let (code, err) = exits_within(command(args));
        assert_eq!(code, Some(125), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("--backend") && err.contains("--store"),
            "{args:?}: {err}"
        );
    }
    for cmd in [
        &["serve", "--help"][..],
        &["job", "--help"],
        &["job", "list", "--help"],
    ] {
        let out = baton(cmd);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cmd:?}");
        assert!(
            help.contains("--listen") || help.contains("Usage"),
            "{help}"
        );
        assert!(
            !help.contains("--backend"),
            "{cmd:?} shows --backend:\n{help}"
        );
    }
    // Where it applies, it is still there.
    let out = baton(&["run", "--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("--backend"));
}

/// A branch name git would refuse is refused at submission (400), never
/// queued as a job that fails later (found by a hostile review: `HEAD`,
/// `a/.b`, `a.lock/b` and `a/./b` were queued, and failed 125 when their
/// workspace was made); names git takes that look alike are taken.
#[test]
fn a_branch_name_git_refuses_is_refused_at_submission() {
    let config = r#"
[templates.ws]
command = ["true"]
[templates.ws.workspace]
repo = "{tmp}/repo"
"#;
    let s = Server::start(config, &[]);
    let git_takes = |name: &str| {
        Command::new("git")
            .args(["check-ref-format", "--branch", name])
            .output()
            .unwrap()
            .status
            .success()
    };
    for (name, taken) in [
        ("HEAD", false),
        ("a/.b", false),
        ("a.lock/b", false),
        ("a/./b", false),
        ("a/HEAD", true),
        ("HEAD/a", true),
        ("HEADS", true),
        ("a./b", true),
        ("x.lock.y", true),
    ] {
        assert_eq!(git_takes(name), taken, "git's verdict on {name:?}");
        let (code, v) = s.post(
            "/v1/jobs",
            &json!({"template": "ws", "workspace": {"branch": name}}),
        );
        match taken {
            true => assert_eq!(code, 202, "branch {name:?}: {v}"),
            false => {
                assert_eq!(code, 400, "branch {name:?}: {v}");
                assert!(message(&v).contains("'workspace.branch'"), "{v}");
            }
        }
    }
}
