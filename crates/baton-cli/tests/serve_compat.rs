#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service's compatibility routes: `/execute`, `/jobs/{id}`, the
//! OpenAI-shaped chat completions and models (with the official `openai`
//! Python package), and the OpenAPI document — a real `baton serve` on
//! 127.0.0.1 running real commands.

use crate::serve_common;
use crate::serve_python;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{alive, wait_for_file, Server};
use serve_python::{python, run_python};

/// Templates: `gated` records its start (`{tmp}/start.<prompt>`, its pid)
/// and waits for `{tmp}/go.<prompt>`; `echo` prints the prompt; `fail`
/// exits 3; `slow` outlives its 1 s timeout; `stream` prints a part, waits
/// for `{tmp}/go.stream`, prints another.
const CONFIG: &str = r#"
default_template = "gated"
grace = "2s"
{extra}
[templates.gated]
command = ["sh", "-c", "echo $$ > {tmp}/start.$1; while [ ! -e {tmp}/go.$1 ]; do sleep 0.02; done; echo done $1", "job", "{prompt}"]
[templates.echo]
command = ["sh", "-c", "printf '%s' \"$1\"", "job", "{prompt}"]
[templates.fail]
command = ["sh", "-c", "echo partial; exit 3"]
[templates.slow]
command = ["sleep", "60"]
timeout = "1s"
[templates.stream]
command = ["sh", "-c", "printf 'first part, '; while [ ! -e {tmp}/go.stream ]; do sleep 0.02; done; printf 'second part: h\\303\\251llo'"]
"#;

fn server(extra: &str, args: &[&str]) -> Server {
    Server::start(&CONFIG.replace("{extra}", extra), args)
}

fn go(s: &Server, name: &str) {
    std::fs::write(s.path(&format!("go.{name}")), "").unwrap();
}

fn started(s: &Server, name: &str) -> i32 {
    wait_for_file(&s.path(&format!("start.{name}")))
        .trim()
        .parse()
        .unwrap()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

/// POST with the headers of the answer.
fn post_with_headers(s: &Server, path: &str, body: &Value) -> (u16, Value, ureq::http::HeaderMap) {
    let mut r = agent().post(&s.url(path));
    if let Some(t) = &s.token {
        r = r.header("Authorization", &format!("Bearer {t}"));
    }
    let mut resp = r.send_json(body).unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        headers,
    )
}

fn chat(model: &str, prompt: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": prompt}]})
}

/// Sends `method path` with a JSON `body` over a plain socket and hands
/// the chunked answer's text to `on_text` chunk by chunk, as it comes (no
/// client library buffers it), while it says to go on. Returns the
/// answer's header lines (lowercase).
fn stream_http(
    s: &Server,
    method: &str,
    path: &str,
    body: &str,
    mut on_text: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let conn = std::net::TcpStream::connect(&s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut w = conn.try_clone().unwrap();
    write!(
        w,
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        s.addr,
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(conn);
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        head.push(line.trim_end().to_ascii_lowercase());
    }
    assert!(head[0].starts_with("http/1.1 200"), "{head:?}");
    assert!(
        head.iter().any(|h| h == "transfer-encoding: chunked"),
        "{head:?}"
    );
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16)
            .unwrap_or_else(|_| panic!("chunk size {size:?}"));
        if n == 0 {
            return head;
        }
        let mut chunk = vec![0u8; n + 2];
        r.read_exact(&mut chunk).unwrap();
        if !on_text(std::str::from_utf8(&chunk[..n]).unwrap()) {
            return head;
        }
    }
}

/// The data lines of a streamed chat completion, read as they come;
/// `on_data` sees each and says whether to go on.
fn read_sse(s: &Server, body: &Value, mut on_data: impl FnMut(&str) -> bool) {
    let mut text = String::new();
    let head = stream_http(
        s,
        "POST",
        "/v1/chat/completions",
        &body.to_string(),
        |chunk| {
            text.push_str(chunk);
            // Events are separated by blank lines.
            while let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        if !on_data(data) {
                            return false;
                        }
                    }
                }
            }
            true
        },
    );
    assert!(
        head.iter()
            .any(|h| h.starts_with("content-type: text/event-stream")),
        "{head:?}"
    );
}

#[test]
fn two_concurrent_execute_jobs_both_run() {
    let s = server("", &["--max-concurrency", "2"]);
    let mut ids = Vec::new();
    for p in ["a", "b"] {
        let (code, v) = s.post("/execute", &json!({"prompt": p}));
        assert_eq!(code, 202, "{v}");
        assert_eq!(v["status"], "queued", "{v}");
        ids.push(v["job_id"].as_str().unwrap().to_string());
    }
    // Both started before either may end.
    started(&s, "a");
    started(&s, "b");
    for id in &ids {
        let (code, v) = s.get(&format!("/jobs/{id}"));
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["job_id"], id.as_str());
        assert_eq!(v["id"], id.as_str());
        assert_eq!(v["status"], "running", "{v}");
    }
    go(&s, "a");
    go(&s, "b");
    for (id, p) in ids.iter().zip(["a", "b"]) {
        s.wait_final(id);
        let (_, v) = s.get(&format!("/jobs/{id}"));
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["baton_status"], "succeeded", "{v}");
        assert_eq!(v["output"], format!("done {p}\n"));
    }
    let (code, v) = s.get("/jobs/nosuchjob");
    assert_eq!(code, 404, "{v}");
    assert_eq!(v["error"]["code"], "not_found");
}

/// A poller written against the older service: it submits with
/// `/execute` and polls `/jobs/{id}` until one of that service's end
/// states (`completed`, `failed`, `timeout`, `error`).
const OLDER_POLLER: &str = r#"
import json, sys, time, urllib.request
base, template, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(base + "/execute", method="POST",
    data=json.dumps({"prompt": prompt, "template": template}).encode(),
    headers={"Content-Type": "application/json"})
job = json.load(urllib.request.urlopen(req))
assert job["status"] == "queued", job
seen = []
deadline = time.time() + 60
while time.time() < deadline:
    j = json.load(urllib.request.urlopen(base + "/jobs/" + job["job_id"]))
    if not seen or seen[-1] != j["status"]:
        seen.append(j["status"])
    if j["status"] in ("completed", "failed", "timeout", "error"):
        print(json.dumps({"seen": seen, "baton_status": j["baton_status"], "id": job["job_id"]}))
        sys.exit(0)
    time.sleep(0.05)
sys.exit("the job never reached an end state the older service knows: %s" % seen)
"#;

#[test]
fn the_older_routes_speak_the_older_services_vocabulary() {
    let s = server("", &[]);
    let py = python(&[]);
    let base = s.url("");
    let base = base.trim_end_matches('/');
    for (template, end, precise) in [
        ("echo", "completed", "succeeded"),
        ("fail", "failed", "failed"),
        ("slow", "timeout", "timed_out"),
    ] {
        let v = run_python(&py, OLDER_POLLER, &[base, template, "p"]);
        let seen = v["seen"].as_array().unwrap();
        assert_eq!(seen.last().unwrap(), end, "{template}: {v}");
        assert!(
            seen.iter()
                .all(|x| ["queued", "running", end].contains(&x.as_str().unwrap())),
            "{template}: {v}"
        );
        assert_eq!(v["baton_status"], precise, "{template}: {v}");
    }
    // Every other end (here: cancelled) is `error`, the precise state beside it.
    let (code, v) = s.post("/execute", &json!({"prompt": "c"}));
    assert_eq!(code, 202, "{v}");
    let id = v["job_id"].as_str().unwrap().to_string();
    started(&s, "c");
    let (code, _) = s.cancel(&id);
    assert_eq!(code, 200);
    let (_, v) = s.get(&format!("/jobs/{id}"));
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["baton_status"], "cancelled", "{v}");
    // The new routes keep the new names.
    let (_, v) = s.get(&format!("/v1/jobs/{id}"));
    assert_eq!(v["status"], "cancelled", "{v}");
    // The older route cancels too, and answers in its vocabulary.
    let (code, v) = s.post("/execute", &json!({"prompt": "d"}));
    assert_eq!(code, 202, "{v}");
    let id = v["job_id"].as_str().unwrap().to_string();
    let pid = started(&s, "d");
    let (code, v) = s.delete(&format!("/jobs/{id}"));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["job_id"], id.as_str(), "{v}");
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["baton_status"], "cancelled", "{v}");
    assert!(!alive(pid), "the cancelled job's command still runs");
    let (code, v) = s.delete(&format!("/jobs/{id}"));
    assert_eq!(code, 409, "a second cancel: {v}");
    let (code, v) = s.delete("/jobs/no-such-job");
    assert_eq!(code, 404, "{v}");
}

/// Fields the older service ignored (`timeout`, `temperature`) are ignored,
/// as its clients send them; they were refused as unknown (issue 36, item
/// 10).
#[test]
fn execute_ignores_fields_the_older_service_ignored() {
    let s = server("", &[]);
    let (code, v) = s.post(
        "/execute",
        &json!({"prompt": "q", "timeout": 60, "temperature": 1}),
    );
    assert_eq!(code, 202, "{v}");
    let id = v["job_id"].as_str().unwrap();
    let (code, j) = s.get(&format!("/jobs/{id}"));
    assert_eq!(code, 200, "{j}");
}

#[test]
fn execute_refuses_bad_input_and_a_full_queue() {
    let s = server("max_concurrency = 1\nmax_queue_depth = 1", &[]);
    for (body, needle) in [
        (&b"{not json"[..], "invalid JSON"),
        (br#"{"template": "echo"}"#, "prompt"),
        (br#"{"prompt": "x", "template": "nope"}"#, "nope"),
    ] {
        let (code, v) = s.post_raw("/execute", body);
        assert_eq!(code, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(needle),
            "{v}"
        );
    }
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "nothing stored on a bad request");
    let (code, first) = s.post("/execute", &json!({"prompt": "q"}));
    assert_eq!(code, 202, "{first}");
    started(&s, "q");
    let (code, v, headers) = post_with_headers(&s, "/execute", &json!({"prompt": "r"}));
    assert_eq!(code, 429, "{v}");
    assert_eq!(v["error"]["code"], "queue_full");
    assert!(headers.contains_key("retry-after"));
    // The chat route answers a full queue with 503, and clients may retry.
    let (code, v, headers) = post_with_headers(&s, "/v1/chat/completions", &chat("echo", "x"));
    assert_eq!(code, 503, "{v}");
    assert_eq!(v["error"]["code"], "queue_full");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(headers["x-should-retry"], "true");
    go(&s, "q");
    assert_eq!(
        s.wait_final(first["job_id"].as_str().unwrap())["status"],
        "succeeded"
    );
}

#[test]
fn concurrent_chat_completions_both_run() {
    let s = server("", &["--max-concurrency", "2"]);
    std::thread::scope(|scope| {
        let calls: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|p| {
                let s = &s;
                scope.spawn(move || s.post("/v1/chat/completions", &chat("gated", p)))
            })
            .collect();
        // Both started before either may end.
        started(&s, "a");
        started(&s, "b");
        go(&s, "a");
        go(&s, "b");
        for (call, p) in calls.into_iter().zip(["a", "b"]) {
            let (code, v) = call.join().unwrap();
            assert_eq!(code, 200, "{v}");
            assert_eq!(
                v["choices"][0]["message"]["content"],
                format!("done {p}\n"),
                "{v}"
            );
        }
    });
}

#[test]
fn chat_completion_content_is_the_commands_stdout() {
    let s = server("", &[]);
    let prompt = "héllo\nworld \"quoted\" $HOME `x`";
    let mut body = chat("echo", prompt);
    // Fields OpenAI clients send are accepted and ignored.
    for (k, v) in [
        ("temperature", json!(0.2)),
        ("max_tokens", json!(100)),
        ("n", json!(1)),
        ("user", json!("someone")),
        ("top_p", json!(1)),
        ("tools", json!([])),
    ] {
        body[k] = v;
    }
    let (code, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(code, 200, "{v}");
    let job_id = v["job_id"].as_str().unwrap();
    assert_eq!(v["id"], format!("chatcmpl-{job_id}"));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "echo");
    assert!(v["created"].as_i64().unwrap() > 1_600_000_000, "{v}");
    assert_eq!(v["choices"][0]["index"], 0);
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], prompt);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
    );
    let (_, job) = s.get(&format!("/v1/jobs/{job_id}"));
    assert_eq!(job["status"], "succeeded");
    assert_eq!(job["template"], "echo");

    // Several messages: role-prefixed blocks separated by a blank line; text parts joined.
    let body = json!({"model": "echo", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]},
    ]});
    let (code, v) = s.post("/v1/chat/completions", &body);
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "system: be brief\n\nuser: one two"
    );
}

#[test]
fn chat_refuses_malformed_bodies_and_unknown_models() {
    let s = server("", &[]);
    let (code, v) = s.post("/v1/chat/completions", &chat("nope", "x"));
    assert_eq!(code, 404, "{v}");
    let e = &v["error"];
    assert_eq!(e["code"], "model_not_found", "{v}");
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["param"], "model");
    let m = e["message"].as_str().unwrap();
    assert!(m.contains("'nope'") && m.contains("echo"), "{m}");
    for body in [
        &b"{"[..],
        br#"[1, 2]"#,
        br#"{"messages": [{"role": "user", "content": "x"}]}"#,
        br#"{"model": "echo"}"#,
        br#"{"model": "echo", "messages": []}"#,
        br#"{"model": "echo", "messages": [{"role": "user", "content": 5}]}"#,
        br#"{"model": "echo", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}"#,
    ] {
        let (code, v) = s.post_raw("/v1/chat/completions", body);
        assert_eq!(code, 400, "{}: {v}", String::from_utf8_lossy(body));
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "nothing stored on a bad request");
}

#[test]
fn chat_answers_503_naming_the_job_when_it_fails_or_times_out() {
    let s = server("", &[]);
    for (model, status, code) in [
        ("fail", "failed", "job_failed"),
        ("slow", "timed_out", "job_timed_out"),
    ] {
        let (http, v, headers) = post_with_headers(&s, "/v1/chat/completions", &chat(model, "x"));
        assert_eq!(http, 503, "{v}");
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(
            headers["x-should-retry"], "false",
            "the job ran: clients must not run it again"
        );
        let id = v["error"]["job_id"].as_str().unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains(id), "{v}");
        let (_, job) = s.get(&format!("/v1/jobs/{id}"));
        assert_eq!(job["status"], status, "{job}");
    }
}

#[test]
fn streaming_sends_the_output_as_it_is_produced_then_done() {
    let s = server("", &[]);
    let body = json!({"model": "stream", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "x"}]});
    let mut events: Vec<Value> = Vec::new();
    let mut done = false;
    let mut released = false;
    read_sse(&s, &body, |data| {
        if data == "[DONE]" {
            done = true;
            return false;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        let content: String = events
            .iter()
            .chain(std::iter::once(&v))
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .collect();
        events.push(v);
        // The first part arrives while the command still runs (it waits for go.stream).
        if content == "first part, " && !released {
            assert!(!s.path("go.stream").exists());
            released = true;
            go(&s, "stream");
        }
        true
    });
    assert!(done, "no [DONE]: {events:?}");
    assert!(released, "the first part never came on its own: {events:?}");
    let id = events[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for e in &events {
        assert_eq!(e["object"], "chat.completion.chunk", "{e}");
        assert_eq!(e["id"], id);
        assert_eq!(e["model"], "stream");
    }
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "first part, second part: héllo");
    let n = events.len();
    assert_eq!(
        events[n - 2]["choices"][0]["finish_reason"],
        "stop",
        "{events:?}"
    );
    assert_eq!(events[n - 1]["choices"], json!([]));
    assert_eq!(events[n - 1]["usage"]["total_tokens"], 0);
    for e in &events[..n - 2] {
        assert_eq!(e["choices"][0]["finish_reason"], Value::Null, "{e}");
    }
}

/// Regression: `follow` cloned the job's output channel on every read, so
/// each past write looked new, its loop never waited, and nothing it sent
/// reached the client before the job ended.
#[test]
fn a_followed_log_delivers_output_while_the_job_runs() {
    let s = server("", &[]);
    let id = s.submit(json!({"template": "stream"}));
    let mut text = String::new();
    stream_http(
        &s,
        "GET",
        &format!("/v1/jobs/{id}/log?follow=true"),
        "",
        |chunk| {
            text.push_str(chunk);
            if text == "first part, " {
                assert!(!s.path("go.stream").exists());
                go(&s, "stream");
            }
            true
        },
    );
    assert_eq!(text, "first part, second part: héllo");
    assert_eq!(s.job(&id)["status"], "succeeded");
}

#[test]
fn a_stream_whose_job_fails_ends_with_an_error_event() {
    let s = server("", &[]);
    let body =
        json!({"model": "fail", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let mut datas = Vec::new();
    read_sse(&s, &body, |d| {
        datas.push(d.to_string());
        true
    });
    let last: Value = serde_json::from_str(datas.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "job_failed", "{datas:?}");
    assert!(!datas.iter().any(|d| d == "[DONE]"), "{datas:?}");
    let content: String = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(content, "partial\n");
}

#[test]
fn a_chat_client_that_disconnects_cancels_its_job() {
    let s = server("", &[]);
    let body = chat("gated", "gone").to_string();
    let mut conn = std::net::TcpStream::connect(&s.addr).unwrap();
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        s.addr,
        body.len()
    )
    .unwrap();
    let pid = started(&s, "gone");
    let (_, list) = s.get("/v1/jobs?status=running");
    let id = list["jobs"][0]["id"].as_str().unwrap().to_string();
    drop(conn);
    let job = s.wait_final(&id);
    assert_eq!(job["status"], "cancelled", "{job}");
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the job's command {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!s.path("go.gone").exists());
}

#[test]
fn models_list_the_templates() {
    let s = server("", &[]);
    let (code, v) = s.get("/v1/models");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["echo", "fail", "gated", "slow", "stream"]);
    for m in v["data"].as_array().unwrap() {
        assert_eq!(m["object"], "model");
        assert_eq!(m["owned_by"], "baton");
        assert!(m["created"].as_i64().unwrap() > 1_600_000_000, "{m}");
    }
    let (code, v) = s.get("/v1/models/echo");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["id"], "echo");
    let (code, v) = s.get("/v1/models/nope");
    assert_eq!(code, 404, "{v}");
    assert_eq!(v["error"]["code"], "model_not_found");
}

const OPENAI_CLIENT: &str = r#"
import json, sys
import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
out = {"models": [m.id for m in client.models.list()]}

r = client.chat.completions.create(
    model="echo",
    messages=[{"role": "user", "content": "hello from python"}],
    temperature=0.2, max_tokens=64, user="tests",
)
out["plain"] = {"id": r.id, "object": r.object, "content": r.choices[0].message.content,
                "role": r.choices[0].message.role, "finish": r.choices[0].finish_reason,
                "total_tokens": r.usage.total_tokens}

parts, finish, roles = [], None, []
for chunk in client.chat.completions.create(
    model="echo", stream=True, messages=[{"role": "user", "content": "streamed hello"}],
):
    if not chunk.choices:
        continue
    d = chunk.choices[0].delta
    if d.role:
        roles.append(d.role)
    if d.content:
        parts.append(d.content)
    if chunk.choices[0].finish_reason:
        finish = chunk.choices[0].finish_reason
out["stream"] = {"content": "".join(parts), "finish": finish, "roles": roles}

try:
    client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    out["unknown_model"] = "no error"
except openai.NotFoundError as e:
    out["unknown_model"] = e.code

try:
    client.chat.completions.create(model="fail", messages=[{"role": "user", "content": "x"}])
    out["failed"] = "no error"
except openai.APIStatusError as e:
    out["failed"] = {"status": e.status_code, "code": e.code}

try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
    out["wrong_key"] = "no error"
except openai.AuthenticationError as e:
    out["wrong_key"] = e.status_code
print(json.dumps(out))
"#;

#[test]
fn the_official_openai_python_client_talks_to_the_chat_endpoint() {
    let python = python(&["openai"]);
    let mut s = server(r#"token = "sekrit""#, &[]);
    s.token = Some("sekrit".into());
    let out = run_python(&python, OPENAI_CLIENT, &[&s.url("/v1"), "sekrit"]);
    assert_eq!(
        out["models"],
        json!(["echo", "fail", "gated", "slow", "stream"]),
        "{out}"
    );
    let plain = &out["plain"];
    assert_eq!(plain["content"], "hello from python", "{out}");
    assert_eq!(plain["object"], "chat.completion");
    assert_eq!(plain["role"], "assistant");
    assert_eq!(plain["finish"], "stop");
    assert_eq!(plain["total_tokens"], 0);
    assert!(plain["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(
        out["stream"],
        json!({"content": "streamed hello", "finish": "stop", "roles": ["assistant"]})
    );
    assert_eq!(out["unknown_model"], "model_not_found");
    assert_eq!(out["failed"], json!({"status": 503, "code": "job_failed"}));
    assert_eq!(out["wrong_key"], 401);
    // Exactly the jobs asked for ran: the failed one was not retried.
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"].as_array().unwrap().len(), 3, "{list}");
}
