#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The service's resources under hostile clients (issue 21): connections
//! that send headers and never their body are timed out, and their number
//! is capped below the descriptors the service has, so `/health` and the
//! API keep answering. A real `baton serve` on 127.0.0.1 and real sockets.

use crate::serve_common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use serde_json::json;
use serve_common::{sh_config, Server};

/// Starts a service whose soft descriptor limit is `soft` at its start
/// (inherited from this process, whose own limit is restored afterwards).
fn start_with_nofile(config: &str, soft: u64) -> Server {
    let orig = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: orig.maximum,
        },
    )
    .unwrap();
    let s = Server::start(config, &[]);
    setrlimit(Resource::Nofile, orig).unwrap();
    s
}

/// A connection to `addr`, or a panic if the service has not taken it
/// within 10 s (its listen queue is full: it stopped accepting).
fn connect(addr: &str) -> TcpStream {
    let sock = addr.parse().unwrap();
    TcpStream::connect_timeout(&sock, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("cannot connect to the service: {e}"))
}

/// A connection that sends a request's headers, announcing a body, and
/// never the body.
fn slow_client(addr: &str) -> TcpStream {
    let mut c = connect(addr);
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{"
    );
    c.write_all(head.as_bytes()).unwrap();
    c
}

/// `GET /health` on a fresh connection: the status line and the body, or
/// a panic unless it comes within `limit`.
fn health(addr: &str, limit: Duration) -> String {
    let start = Instant::now();
    let mut c = connect(addr);
    c.set_read_timeout(Some(limit)).unwrap();
    c.write_all(
        format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut got = Vec::new();
    let r = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(
        r.is_ok() || !text.is_empty(),
        "/health did not answer within {:?} ({r:?})",
        start.elapsed()
    );
    text
}

/// Reads until the service closes `c` (EOF or reset); panics if it is
/// still open at `deadline`. Returns what it sent.
fn wait_closed(c: &mut TcpStream, deadline: Instant) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "a slow connection is still open: {:?}",
            String::from_utf8_lossy(&got)
        );
        c.set_read_timeout(Some(left)).unwrap();
        match c.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&got).to_string(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return String::from_utf8_lossy(&got).to_string(),
        }
    }
}

#[test]
fn slow_clients_that_never_send_their_body_neither_exhaust_the_service_nor_stay_open() {
    // 64 descriptors at start: without raising its limit the service
    // runs out after about 50 connections.
    let s = start_with_nofile(&sh_config("request_body_timeout = \"3s\""), 64);
    let mut slow: Vec<TcpStream> = (0..200).map(|_| slow_client(&s.addr)).collect();

    let answer = health(&s.addr, Duration::from_secs(15));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"status\":\"ok\""), "{answer}");

    let deadline = Instant::now() + Duration::from_secs(60);
    for c in &mut slow {
        let sent = wait_closed(c, deadline);
        assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
        assert!(sent.contains("request_body_timeout"), "{sent}");
    }
    let answer = health(&s.addr, Duration::from_secs(15));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// `GET {path}` on a fresh connection, as [`health`] does.
fn get(addr: &str, path: &str) -> String {
    let mut c = connect(addr);
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    c.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    String::from_utf8_lossy(&got).to_string()
}

#[test]
fn connections_beyond_max_connections_get_503_and_their_slots_come_back() {
    let config = sh_config("request_body_timeout = \"3s\"\nmax_connections = 10");
    let s = Server::start(&config, &[]);
    let mut slow: Vec<TcpStream> = (0..10).map(|_| slow_client(&s.addr)).collect();
    // The eleventh is answered at once, and closed.
    let start = Instant::now();
    let refused = loop {
        let answer = get(&s.addr, "/v1/jobs");
        if answer.starts_with("HTTP/1.1 503") {
            break answer;
        }
        // The service may not have accepted all ten yet.
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "never refused: {answer}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused.contains("too_many_connections"), "{refused}");
    assert!(refused.contains("max_connections"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    // A monitor still sees the service: /health is answered from the
    // reserve, with the real health document.
    for _ in 0..5 {
        let answer = health(&s.addr, Duration::from_secs(15));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"status\":\"ok\""), "{answer}");
    }
    // ... and the API is still refused: the reserve serves only /health.
    let answer = get(&s.addr, "/v1/jobs");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");

    let deadline = Instant::now() + Duration::from_secs(60);
    for c in &mut slow {
        wait_closed(c, deadline);
    }
    let start = Instant::now();
    loop {
        let answer = get(&s.addr, "/v1/jobs");
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the slots never came back: {answer}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The service's resident memory, in bytes.
fn rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn readers_of_a_large_log_that_read_slowly_do_not_load_it_into_memory() {
    let s = Server::start(&sh_config(""), &[]);
    let size = 16_000_000u64;
    let id = s.submit(json!({"prompt": format!("head -c {size} /dev/zero | tr '\\0' x")}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{}", j["error"]);
    let log = s.dir.join("serve").join("jobs").join(&id).join("stdout");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), size);
    let before = rss(s.pid());

    // Readers that take the answer's head and then read nothing more.
    let readers: Vec<TcpStream> = (0..30)
        .map(|_| {
            let mut c = connect(&s.addr);
            let req = format!("GET /v1/jobs/{id}/log HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr);
            c.write_all(req.as_bytes()).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                assert_eq!(
                    c.read(&mut byte).unwrap(),
                    1,
                    "the log's answer ended early"
                );
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_string();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            c
        })
        .collect();
    let after = rss(s.pid());
    let grown = after.saturating_sub(before);
    assert!(
        grown < 150 * 1024 * 1024,
        "{} readers of a {size}-byte log took the service from {before} to {after} bytes",
        readers.len()
    );
}

#[test]
fn invalid_connection_settings_fail_the_start_naming_the_key() {
    for (setting, key) in [
        ("request_body_timeout = \"0s\"", "request_body_timeout"),
        ("header_read_timeout = \"soon\"", "header_read_timeout"),
        ("max_connections = 0", "max_connections"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let config = tmp.path().join("serve.toml");
        std::fs::write(&config, sh_config(setting)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .env_clear()
            .env("HOME", tmp.path())
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{setting}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{setting}: {err}");
        assert!(err.contains(key), "{setting}: {err}");
    }
}

/// A client that sends its whole body before it reads (Python's urllib,
/// as requests and httpx do) gets the 413 of a body past the limit, not a
/// reset connection: the service reads and drops what is sent (bounded)
/// before it closes. Fails before: "Broken pipe" / "Connection reset" for
/// anything past ~2 MiB (issue 36, item 10).
#[test]
fn a_python_client_sending_a_large_body_reads_its_413() {
    let s = Server::start(&sh_config("max_body_bytes = 2048"), &[]);
    let code = r#"
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1] + "/v1/jobs", method="POST",
    data=b'{"prompt": "' + b"x" * (8 * 1024 * 1024) + b'"}',
    headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=60)
    print("accepted")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print("failed:", type(e).__name__, e)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", code, &format!("http://{}", s.addr)])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with("413"),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("body_too_large"), "{said}");
    let answer = health(&s.addr, Duration::from_secs(15));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// A body whose `Content-Length` is past `max_body_bytes` is refused with
/// 413 at once, from its headers: its client is not held until
/// `request_body_timeout` (here far beyond the wait) for a body that would
/// be refused anyway, nor answered 408.
#[test]
fn a_body_declared_past_the_limit_is_refused_413_at_once() {
    let s = Server::start(
        &sh_config("request_body_timeout = \"600s\"\nmax_body_bytes = 2048"),
        &[],
    );
    let mut c = connect(&s.addr);
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100000000\r\n\r\n{{",
        s.addr
    );
    c.write_all(head.as_bytes()).unwrap();
    let sent = wait_closed(&mut c, Instant::now() + Duration::from_secs(60));
    assert!(sent.starts_with("HTTP/1.1 413"), "{sent}");
    assert!(sent.contains("body_too_large"), "{sent}");
    assert!(sent.contains("max_body_bytes"), "{sent}");
    // The service goes on.
    let answer = health(&s.addr, Duration::from_secs(15));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
