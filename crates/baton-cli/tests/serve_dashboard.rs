#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The dashboard of `baton serve`: its JSON (`/v1/overview`) against a real
//! service, and the page itself in a real headless Chromium driven by
//! Selenium (`dashboard_test.py`).
//!
//! The browser test installs what it needs: Debian's `chromium` and
//! `chromium-driver` (apt, once, serialised by flock on a file under the
//! target dir) and the Python `selenium` package (`scripts/test-venv`). If
//! that fails, the test fails and says why; it never skips.

use crate::serve_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use serve_common::{alive, wait_for_file, Server};

const TOKEN: &str = "dash-token-7f3a";

/// A token and a template whose job prints a line of HTML, records its pid
/// in `{tmp}/start.<prompt>` and waits for `{tmp}/go.<prompt>`.
fn config(token: bool) -> String {
    let token = if token {
        format!("token = \"{TOKEN}\"")
    } else {
        String::new()
    };
    format!(
        r#"
{token}
default_template = "gated"
[templates.gated]
command = ["sh", "-c", "echo started $1; echo '<img id=\"injected\" src=\"x\">'; echo $$ > {{tmp}}/start.$1; while [ ! -e {{tmp}}/go.$1 ]; do sleep 0.05; done; echo done $1", "job", "{{prompt}}"]
[templates.ws]
command = ["sh", "-c", "echo $$ > {{tmp}}/start.$1; while [ ! -e {{tmp}}/go.$1 ]; do sleep 0.05; done", "job", "{{prompt}}"]
workspace = {{ repo = "{{tmp}}/base", strategy = "worktree", fetch_debounce = "0s" }}
"#
    )
}

/// A git repository with one commit at `<tmp>/base`, without an origin
/// (template `ws` says `fetch_debounce = "0s"`: never fetch).
fn base_repo(s: &Server) {
    let base = s.path("base");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("README"), "base\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "README"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(&base)
            .env("HOME", s.tmp.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|j| j["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn overview_shows_capacity_jobs_in_fifo_order_groups_and_locks() {
    let s = Server::start(&config(false), &["--max-concurrency", "1"]);
    let t = s.tmp();
    base_repo(&s);
    let a = s.submit(json!({"prompt": "a", "group": "dash-a"}));
    wait_for_file(Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b"}));
    let c = s.submit(json!({"prompt": "c"}));

    let (code, o) = s.get("/v1/overview");
    assert_eq!(code, 200, "{o}");
    assert_eq!(o["health"]["active"], 1, "{o}");
    assert_eq!(o["health"]["queued"], 2, "{o}");
    assert_eq!(o["health"]["capacity"], 1, "{o}");
    assert_eq!(ids(&o["running"]), vec![a.clone()]);
    // Next in line first.
    assert_eq!(ids(&o["queued"]), vec![b.clone(), c.clone()]);
    assert!(o["running"][0]["run_ms"].is_u64(), "{o}");
    assert!(o["queued"][0]["queue_wait_ms"].is_u64(), "{o}");
    assert_eq!(o["recent"], json!([]));
    assert_eq!(o["errors"], json!({}));
    // The baton dir as `baton group status --json` and `baton lock status --json` see it.
    let group = o["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["key"] == "dash-a")
        .unwrap_or_else(|| panic!("no group dash-a in {o}"));
    assert_eq!(group["running"][0]["run_id"], a.as_str(), "{group}");
    let cli = s
        .baton(&["group", "status", "dash-a", "--json"])
        .output()
        .unwrap();
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(cli["running"][0]["run_id"], group["running"][0]["run_id"]);
    let instance = o["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .find(|l| l["name"] == "serve/instance")
        .unwrap_or_else(|| panic!("no serve/instance lock in {o}"));
    assert_eq!(instance["held"], true, "{instance}");
    assert_eq!(instance["holder"]["pid"], s.pid(), "{instance}");
    assert!(o["workspaces"].is_array(), "{o}");

    for p in ["a", "b", "c"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    for id in [&a, &b, &c] {
        assert_eq!(s.wait_final(id)["status"], "succeeded");
    }
    let (_, o) = s.get("/v1/overview");
    assert_eq!(o["running"], json!([]));
    assert_eq!(o["queued"], json!([]));
    // Newest end first.
    assert_eq!(ids(&o["recent"]), vec![c, b, a]);
    assert_eq!(o["recent"][0]["status"], "succeeded");

    // A job's workspace, as `baton workspace list --json` shows it.
    let w = s.submit(json!({"template": "ws", "prompt": "w"}));
    let j = s.wait_job(&w, std::time::Duration::from_secs(60), |v| {
        v["status"] != "queued" && (v["status"] != "running" || s.path("start.w").exists())
    });
    assert_eq!(j["status"], "running", "{j}");
    let (_, o) = s.get("/v1/overview");
    let ws = o["workspaces"]
        .as_array()
        .expect("workspaces")
        .iter()
        .find(|x| x["id"] == w.as_str())
        .unwrap_or_else(|| panic!("no workspace {w} in {o}"));
    assert_eq!(ws["exists"], true, "{ws}");
    assert_eq!(ws["owner_alive"], "alive", "{ws}");
    let cli = s.baton(&["workspace", "list", "--json"]).output().unwrap();
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert!(
        cli.as_array()
            .unwrap()
            .iter()
            .any(|x| x["id"] == w.as_str() && x["path"] == ws["path"]),
        "{cli}"
    );
    std::fs::write(format!("{t}/go.w"), "").unwrap();
    assert_eq!(s.wait_final(&w)["status"], "succeeded");
}

#[test]
fn the_page_is_served_without_the_token_and_its_data_is_not() {
    let mut s = Server::start(&config(true), &[]);
    let (code, page) = s.get_text("/");
    assert_eq!(code, 200);
    assert!(page.contains("<title>baton serve</title>"), "{page}");
    let (code, v) = s.get("/v1/overview");
    assert_eq!(code, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthorized");
    s.token = Some(TOKEN.to_string());
    let (code, v) = s.get("/v1/overview");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["health"]["status"], "ok");
}

/// Regression: following a running job's log spun in the stream (a fresh
/// watch receiver is always "changed") and sent nothing, not even headers.
#[test]
fn log_follow_sends_output_while_the_job_runs_and_ends_with_it() {
    use std::io::Read;
    let s = Server::start(&config(false), &[]);
    let t = s.tmp();
    let id = s.submit(json!({"prompt": "f"}));
    wait_for_file(Path::new(&format!("{t}/start.f")));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into();
    let resp = agent
        .get(&s.url(&format!("/v1/jobs/{id}/log?follow=true")))
        .call()
        .expect("follow the log");
    let mut body = resp.into_body().into_reader();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("started f") {
        let n = body.read(&mut buf).expect("read the followed log");
        assert!(
            n > 0,
            "the log ended early: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        s.job(&id)["status"],
        "running",
        "the output came before the job ended"
    );
    std::fs::write(format!("{t}/go.f"), "").unwrap();
    body.read_to_end(&mut seen)
        .expect("read the followed log to its end");
    let text = String::from_utf8_lossy(&seen);
    assert!(text.ends_with("done f\n"), "{text}");
    assert_eq!(s.wait_final(&id)["status"], "succeeded");
}

/// Runs `cmd`, failing the test with its output when it fails.
fn must(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot {what}: cannot start {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "cannot {what} ({cmd:?} exited with {}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Debian's chromium and chromium-driver, installed once (concurrent tests
/// wait on the lock file and then find them).
fn ensure_chromium() {
    let target = target_dir();
    std::fs::create_dir_all(&target).expect("create the target dir");
    let lock = target.join("chromium-install.lock");
    let script = "if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then exit 0; fi; \
                  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver";
    let mut cmd = Command::new("flock");
    cmd.arg(&lock).args(["sh", "-c", script]);
    must(
        cmd,
        "install chromium and chromium-driver with apt-get (the browser test needs them)",
    );
    for bin in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
        assert!(
            Path::new(bin).exists(),
            "{bin} is missing after installing chromium and chromium-driver"
        );
    }
}

/// The Python of the tests' venv, with selenium.
fn selenium_python() -> String {
    let mut cmd = Command::new(workspace_root().join("scripts/test-venv"));
    cmd.arg("selenium");
    let out = must(
        cmd,
        "install the Python package selenium (scripts/test-venv selenium)",
    );
    out.lines().last().unwrap_or_default().trim().to_string()
}

#[test]
fn dashboard_in_chromium_asks_for_the_token_follows_a_job_and_cancels_it() {
    ensure_chromium();
    let python = selenium_python();
    let artifacts = target_dir().join("test-artifacts");
    std::fs::create_dir_all(&artifacts).expect("create target/test-artifacts");
    // A failure screenshot of an earlier run would mislead.
    let _ = std::fs::remove_file(artifacts.join("dashboard-failure.png"));
    let mut s = Server::start(&config(true), &["--max-concurrency", "2"]);
    let profile = s.path("chromium-profile");
    std::fs::create_dir_all(&profile).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dashboard_test.py");
    let mut cmd = Command::new(&python);
    cmd.arg(&script)
        .arg(format!("http://{}", s.addr))
        .arg(TOKEN)
        .arg(&artifacts)
        .arg(&profile)
        .env("HOME", s.tmp.path())
        .env("SE_OFFLINE", "true")
        .env("SE_AVOID_STATS", "true");
    let out = must(cmd, "drive the dashboard in Chromium (dashboard_test.py)");
    let result: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("dashboard_test.py printed no result ({e}):\n{out}"));
    let job = result["job"].as_str().expect("job id");

    // The API agrees with the page, and the job's process is gone.
    s.token = Some(TOKEN.to_string());
    let j = s.job(job);
    assert_eq!(j["status"], "cancelled", "{j}");
    let pid: i32 = wait_for_file(&s.path("start.p1")).trim().parse().unwrap();
    assert!(!alive(pid), "the cancelled job's shell {pid} still runs");

    let shot = artifacts.join("dashboard.png");
    let png =
        std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot {}: {e}", shot.display()));
    assert!(
        png.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        shot.display()
    );
    for p in result["screenshots"].as_array().expect("screenshots") {
        println!("screenshot: {}", p.as_str().unwrap_or_default());
    }
}
