#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! What a shutdown does to requests that wait for a job (issue 21): every
//! one gets an answer, and a chat prompt runs at most once across the
//! drain, the restart and the client's retry. A real `baton serve` on
//! 127.0.0.1, real SIGTERM, real sockets.

use crate::serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{sh_config, wait_for_file, Server};

/// Sends `POST path body` on a fresh connection.
fn send_post(addr: &str, path: &str, body: &Value) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).unwrap();
    c
}

/// Everything the service sent on `c` until it closed it (at most 60 s).
fn read_all(mut c: TcpStream) -> String {
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    String::from_utf8_lossy(&got).to_string()
}

/// Polls `/health` until `cond` holds (at most 30 s).
fn wait_health(s: &Server, cond: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (_, h) = s.get("/health");
        if cond(&h) {
            return h;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "health: {h}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends SIGTERM to the service without waiting.
fn sigterm(s: &Server) {
    let pid = rustix::process::Pid::from_raw(s.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
}

fn chat(prompt: &str) -> Value {
    json!({"model": "sh", "messages": [{"role": "user", "content": prompt}]})
}

/// A job that holds the one slot until `{t}/go` exists.
fn blocker(s: &Server, t: &str) -> String {
    let id = s.submit(json!({
        "prompt": format!("echo x > {t}/b.started; while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    wait_for_file(Path::new(&format!("{t}/b.started")));
    id
}

fn lines(path: &str) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_chat_waiting_in_the_queue_at_shutdown_gets_503_and_its_prompt_runs_at_most_once() {
    let config = sh_config("drain_timeout = \"10s\"");
    let mut s = Server::start(&config, &["--max-concurrency", "1"]);
    let t = s.tmp();
    blocker(&s, &t);
    let prompt = format!("echo run >> {t}/chat.runs; echo answer");
    let waiting = send_post(&s.addr, "/v1/chat/completions", &chat(&prompt));
    wait_health(&s, |h| h["queued"] == 1);

    sigterm(&s);
    let answer = read_all(waiting);
    assert!(answer.starts_with("HTTP/1.1 503"), "answer: {answer:?}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("\r\nretry-after: "), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "draining", "{body}");
    let job = body["error"]["job_id"].as_str().unwrap().to_string();

    std::fs::write(format!("{t}/go"), "").unwrap();
    let st = s.term(Duration::from_secs(60));
    assert_eq!(st.code(), Some(0));

    // After the restart the abandoned prompt does not run...
    s.spawn();
    let j = s.wait_final(&job);
    assert_eq!(j["status"], "cancelled", "{j}");
    wait_health(&s, |h| h["queued"] == 0 && h["active"] == 0);
    // ...and the client's retry runs it once.
    let (code, v) = s.post("/v1/chat/completions", &chat(&prompt));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "answer\n", "{v}");
    assert_eq!(lines(&format!("{t}/chat.runs")), 1);
}

#[test]
fn a_chat_whose_client_went_away_before_shutdown_does_not_run_after_the_restart() {
    let config = sh_config("drain_timeout = \"10s\"");
    let mut s = Server::start(&config, &["--max-concurrency", "1"]);
    let t = s.tmp();
    blocker(&s, &t);
    let prompt = format!("echo run >> {t}/chat.runs");
    let gone = send_post(&s.addr, "/v1/chat/completions", &chat(&prompt));
    wait_health(&s, |h| h["queued"] == 1);
    drop(gone);
    sigterm(&s);
    std::fs::write(format!("{t}/go"), "").unwrap();
    let st = s.term(Duration::from_secs(60));
    assert_eq!(st.code(), Some(0));

    s.spawn();
    wait_health(&s, |h| h["queued"] == 0 && h["active"] == 0);
    let (_, list) = s.get("/v1/jobs?status=cancelled");
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(lines(&format!("{t}/chat.runs")), 0, "the prompt ran");
}

/// kill -9 of the service drops a waiting chat caller's connection (its
/// client retries): the queued chat job must not run after the restart.
#[test]
fn a_chat_waiting_in_the_queue_at_kill_9_does_not_run_after_the_restart() {
    let mut s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    blocker(&s, &t);
    let prompt = format!("echo run >> {t}/chat.runs; echo answer");
    let waiting = send_post(&s.addr, "/v1/chat/completions", &chat(&prompt));
    let h = wait_health(&s, |h| h["queued"] == 1);
    assert_eq!(h["active"], 1, "{h}");
    let (_, list) = s.get("/v1/jobs?status=queued");
    let job = list["jobs"][0]["id"].as_str().unwrap().to_string();

    s.kill9();
    let answer = read_all(waiting);
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    std::fs::write(format!("{t}/go"), "").unwrap();
    s.spawn();
    let j = s.wait_final(&job);
    assert_eq!(j["status"], "cancelled", "{j}");
    wait_health(&s, |h| h["queued"] == 0 && h["active"] == 0);
    assert_eq!(lines(&format!("{t}/chat.runs")), 0, "the prompt ran");
    // The client's retry runs it once.
    let (code, v) = s.post("/v1/chat/completions", &chat(&prompt));
    assert_eq!(code, 200, "{v}");
    assert_eq!(lines(&format!("{t}/chat.runs")), 1);
}

#[test]
fn a_log_follower_of_a_queued_job_gets_a_complete_answer_at_shutdown() {
    let config = sh_config("drain_timeout = \"10s\"");
    let mut s = Server::start(&config, &["--max-concurrency", "1"]);
    let t = s.tmp();
    blocker(&s, &t);
    let queued = s.submit(json!({"prompt": "echo later"}));
    let mut c = TcpStream::connect(&s.addr).unwrap();
    let req = format!(
        "GET /v1/jobs/{queued}/log?follow=true HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        s.addr
    );
    c.write_all(req.as_bytes()).unwrap();
    // The answer has begun (headers sent) before the shutdown.
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(c.read(&mut byte).unwrap(), 1, "the answer ended early");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));

    sigterm(&s);
    std::fs::write(format!("{t}/go"), "").unwrap();
    let rest = read_all(c);
    assert_eq!(s.term(Duration::from_secs(60)).code(), Some(0));
    // A chunked body that ends with its last chunk: complete, not cut off.
    assert!(
        rest.ends_with("0\r\n\r\n"),
        "the answer was cut off: {rest:?}"
    );
}
