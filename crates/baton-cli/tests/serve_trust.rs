#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service as a trust boundary (docs/src/design/architecture.md, decision 16; issue 21):
//! a job's environment is clean, and what a web page can make a browser
//! send (form and `text/plain` POSTs, a rebound `Host`, a foreign `Origin`)
//! is refused — a real `baton serve` on 127.0.0.1, real HTTP, real jobs.

use crate::serve_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use serve_common::Server;

/// `baton serve` started with `env` (and PATH, HOME) as its whole
/// environment: the child, its address, the temp dir.
struct EnvServer {
    child: Child,
    addr: String,
    tmp: tempfile::TempDir,
}

impl Drop for EnvServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_with_env(config: &str, env: &[(&str, &str)]) -> EnvServer {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", tmp.path())
        .envs(env.iter().copied())
        .current_dir(tmp.path())
        .arg("--dir")
        .arg(tmp.path().join("baton"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = c.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("baton serve: listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    EnvServer { child, addr, tmp }
}

/// One HTTP/1.1 request with exactly these headers (and Content-Length
/// when there is a body); the status and the body as JSON (or a string).
fn raw(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    req.push_str(body);
    conn.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
    (status, v)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn job_env(s: &EnvServer, template: &str) -> String {
    let host = s.addr.clone();
    let ct = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
    ];
    let body = json!({"template": template, "prompt": "p"}).to_string();
    let (code, v) = raw(&s.addr, "POST", "/v1/jobs", &ct, &body);
    assert_eq!(code, 202, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let start = std::time::Instant::now();
    loop {
        let (code, j) = raw(&s.addr, "GET", &format!("/v1/jobs/{id}"), &ct[..1], "");
        assert_eq!(code, 200, "{j}");
        if !matches!(j["status"].as_str(), Some("queued" | "running")) {
            assert_eq!(j["status"], "succeeded", "{j}");
            return j["output"].as_str().unwrap().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "job never ended: {j}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_job_gets_a_clean_environment_without_the_token_or_other_templates_secrets() {
    let s = start_with_env(
        r#"
[templates.a]
command = ["env"]
env = { A_KEY = "${A_SECRET}" }
inherit_env = ["WANTED"]
[templates.b]
command = ["env"]
env = { B_KEY = "${B_SECRET}" }
"#,
        &[
            ("BATON_SERVE_TOKEN", ""),
            ("A_SECRET", "alpha"),
            ("B_SECRET", "bravo"),
            ("WANTED", "yes"),
            ("UNRELATED", "zzz"),
            ("LANG", "C.UTF-8"),
        ],
    );
    let _ = &s.tmp;
    let env = job_env(&s, "a");
    let vars: Vec<&str> = env.lines().collect();
    let has = |kv: &str| vars.contains(&kv);
    let named = |k: &str| vars.iter().any(|l| l.starts_with(&format!("{k}=")));
    assert!(has("A_KEY=alpha"), "{env}");
    assert!(has("WANTED=yes"), "{env}");
    assert!(has("LANG=C.UTF-8"), "{env}");
    assert!(named("PATH") && named("HOME"), "{env}");
    assert!(
        named("BATON_PROMPT") && named("BATON_JOB_ID") && named("BATON_RUN_ID"),
        "{env}"
    );
    for k in [
        "BATON_SERVE_TOKEN",
        "A_SECRET",
        "B_SECRET",
        "B_KEY",
        "UNRELATED",
    ] {
        assert!(!named(k), "{k} reached the job:\n{env}");
    }
    assert!(!env.contains("bravo"), "{env}");
    let env_b = job_env(&s, "b");
    assert!(env_b.lines().any(|l| l == "B_KEY=bravo"), "{env_b}");
    assert!(
        !env_b.contains("alpha") && !env_b.contains("WANTED"),
        "{env_b}"
    );
}

#[test]
fn the_token_never_reaches_a_job() {
    let s = start_with_env(
        "[templates.a]\ncommand = [\"env\"]\n",
        &[("BATON_SERVE_TOKEN", "t0ken-value")],
    );
    let host = s.addr.clone();
    let h = [
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer t0ken-value"),
    ];
    let (code, v) = raw(&s.addr, "POST", "/v1/jobs", &h, r#"{"prompt": "p"}"#);
    assert_eq!(code, 202, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let start = std::time::Instant::now();
    let j = loop {
        let (_, j) = raw(&s.addr, "GET", &format!("/v1/jobs/{id}"), &h, "");
        if j["status"] == "succeeded" || j["status"] == "failed" {
            break j;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{j}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(j["status"], "succeeded", "{j}");
    let out = j["output"].as_str().unwrap();
    assert!(
        !out.contains("t0ken-value") && !out.contains("BATON_SERVE_TOKEN"),
        "{out}"
    );
}

#[test]
fn inherit_env_is_validated_at_start() {
    let cases = [
        (
            "[templates.a]\ncommand = [\"env\"]\ninherit_env = [\"BATON_SERVE_TOKEN\"]\n",
            "templates.a.inherit_env",
        ),
        (
            "[templates.a]\ncommand = [\"env\"]\ninherit_env = [\"B_SECRET\"]\n\
             [templates.b]\ncommand = [\"env\"]\nenv = { K = \"${B_SECRET}\" }\n",
            "template 'b'",
        ),
    ];
    for (config, needle) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("c.toml");
        std::fs::write(&path, config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .env_remove("BATON_SERVE_TOKEN")
            .env("B_SECRET", "bravo")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{config}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{config}: {err}");
    }
}

/// A tokenless service whose default template would write `{tmp}/ran`.
fn writer() -> Server {
    Server::start(
        r#"
default_template = "w"
[templates.w]
command = ["sh", "-c", "echo ran > {tmp}/ran.$1", "job", "{prompt}"]
"#,
        &[],
    )
}

#[test]
fn post_bodies_that_are_not_declared_json_get_415_and_run_nothing() {
    let s = writer();
    let host = s.addr.clone();
    let bodies = [
        ("/v1/jobs", r#"{"prompt": "jobs"}"#),
        ("/execute", r#"{"prompt": "execute"}"#),
        (
            "/v1/chat/completions",
            r#"{"model": "w", "messages": [{"role": "user", "content": "chat"}]}"#,
        ),
    ];
    for (path, body) in bodies {
        for ct in [
            Some("text/plain"),
            Some("text/plain;charset=UTF-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            None,
        ] {
            let mut h = vec![("Host", host.as_str())];
            if let Some(ct) = ct {
                h.push(("Content-Type", ct));
            }
            let (code, v) = raw(&s.addr, "POST", path, &h, body);
            assert_eq!(code, 415, "{path} {ct:?}: {v}");
            assert_eq!(
                v["error"]["code"], "unsupported_media_type",
                "{path} {ct:?}: {v}"
            );
        }
    }
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "{list}");
    for p in ["jobs", "execute", "chat"] {
        assert!(!s.path(&format!("ran.{p}")).exists(), "{p} ran");
    }
    // Declared as JSON, it runs.
    let (code, v) = raw(
        &s.addr,
        "POST",
        "/v1/jobs",
        &[
            ("Host", host.as_str()),
            ("Content-Type", "Application/JSON; charset=utf-8"),
        ],
        r#"{"prompt": "ok"}"#,
    );
    assert_eq!(code, 202, "{v}");
    serve_common::wait_for_file(&s.path("ran.ok"));
}

#[test]
fn a_host_that_does_not_name_the_service_gets_403() {
    let s = writer();
    let port = s.addr.rsplit_once(':').unwrap().1.to_string();
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        "localhost".to_string(),
        "127.0.0.1:1".to_string(),
    ] {
        for (method, path) in [("GET", "/v1/jobs"), ("GET", "/health"), ("GET", "/")] {
            let (code, v) = raw(&s.addr, method, path, &[("Host", host.as_str())], "");
            assert_eq!(code, 403, "{host} {path}: {v}");
            assert_eq!(v["error"]["code"], "forbidden_host", "{host}: {v}");
        }
        let h = [
            ("Host", host.as_str()),
            ("Content-Type", "application/json"),
        ];
        let (code, _) = raw(&s.addr, "POST", "/v1/jobs", &h, r#"{"prompt": "rebound"}"#);
        assert_eq!(code, 403, "{host}");
    }
    assert!(!s.path("ran.rebound").exists());
    for host in [
        s.addr.clone(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
    ] {
        let (code, v) = raw(&s.addr, "GET", "/v1/jobs", &[("Host", host.as_str())], "");
        assert_eq!(code, 200, "{host}: {v}");
    }
}

#[test]
fn a_foreign_origin_gets_403_and_the_own_origin_passes() {
    let s = writer();
    let host = s.addr.clone();
    let own = format!("http://{host}");
    for origin in ["http://evil.example", "null", "http://localhost:1"] {
        let h = [
            ("Host", host.as_str()),
            ("Origin", origin),
            ("Content-Type", "application/json"),
        ];
        let (code, v) = raw(&s.addr, "POST", "/v1/jobs", &h, r#"{"prompt": "cross"}"#);
        assert_eq!(code, 403, "{origin}: {v}");
        assert_eq!(v["error"]["code"], "forbidden_origin", "{origin}: {v}");
        let (code, _) = raw(&s.addr, "GET", "/v1/jobs", &h[..2], "");
        assert_eq!(code, 403, "{origin}");
    }
    assert!(!s.path("ran.cross").exists());
    let h = [
        ("Host", host.as_str()),
        ("Origin", own.as_str()),
        ("Content-Type", "application/json"),
    ];
    let (code, v) = raw(&s.addr, "POST", "/v1/jobs", &h, r#"{"prompt": "own"}"#);
    assert_eq!(code, 202, "{v}");
    serve_common::wait_for_file(&s.path("ran.own"));
}

#[test]
fn allowed_hosts_and_allowed_origins_let_configured_names_in() {
    let s = Server::start(
        r#"
allowed_hosts = ["agents.internal"]
allowed_origins = ["https://tools.internal"]
[templates.w]
command = ["true"]
"#,
        &[],
    );
    let port = s.addr.rsplit_once(':').unwrap().1.to_string();
    let host = format!("agents.internal:{port}");
    let (code, v) = raw(&s.addr, "GET", "/v1/jobs", &[("Host", host.as_str())], "");
    assert_eq!(code, 200, "{v}");
    let h = [
        ("Host", s.addr.as_str()),
        ("Origin", "https://tools.internal"),
    ];
    let (code, v) = raw(&s.addr, "GET", "/v1/jobs", &h, "");
    assert_eq!(code, 200, "{v}");
    let h = [
        ("Host", s.addr.as_str()),
        ("Origin", "https://other.internal"),
    ];
    assert_eq!(raw(&s.addr, "GET", "/v1/jobs", &h, "").0, 403);
    // Entries are checked at start.
    for (config, key) in [
        ("allowed_hosts = [\"http://x\"]", "allowed_hosts"),
        ("allowed_origins = [\"tools.internal\"]", "allowed_origins"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("c.toml");
        std::fs::write(&path, config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args([
                "serve",
                "--config",
                path.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .env_remove("BATON_SERVE_TOKEN")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains(key) && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}
