#![cfg(unix)] // sh, signals, socket activation: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Restarts without refused connections (issue 36, item 10): `baton serve`
//! on a socket passed by a service manager (`LISTEN_FDS`), restarted with
//! SIGTERM while chat calls of the stock `openai` Python client (default
//! retries) are under way and arrive. `systemd-socket-activate` (Debian's
//! `systemd` package; the test fails if it is missing) binds the socket and
//! keeps it; the shell it runs stands for systemd's restart: it runs
//! `baton serve`, and once that has exited waits 3 s and runs it again.

use crate::serve_common::sh_config;
use crate::serve_python::{python, run_python};

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What stands for systemd: two runs of `baton serve` on the passed
/// socket, 3 s apart, each recorded in `$T/instances` (`start PID`, then
/// `exit CODE`). `LISTEN_PID` names the process that is `baton serve`.
const RESTARTS: &str = r#"
for run in 1 2; do
    sh -c 'echo "start $$" >> "$T/instances"; LISTEN_PID=$$ exec "$BATON" --dir "$T/baton" serve --config "$T/serve.toml" --max-concurrency 5'
    echo "exit $?" >> "$T/instances"
    if [ "$run" = 1 ]; then sleep 3; fi
done
"#;

/// 10 calls, SIGTERM to the first instance once 5 run and 5 wait in its
/// queue, then 10 more calls while it drains; prints each call's answer
/// and the HTTP statuses it saw (the client's retries included).
const CLIENT: &str = r#"
import json, os, signal, sys, threading, time, urllib.request
import openai

base, t = sys.argv[1], sys.argv[2]
local = threading.local()
statuses, answers = {}, {}

def on_response(response):
    statuses.setdefault(local.i, []).append(response.status_code)

client = openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=120,
                       http_client=openai.DefaultHttpxClient(event_hooks={"response": [on_response]}))

def call(i):
    local.i = i
    try:
        r = client.chat.completions.create(model="sh", messages=[
            {"role": "user", "content": f"echo {i} >> {t}/runs; sleep 2; echo answer-{i}"}])
        answers[i] = r.choices[0].message.content
    except Exception as e:
        answers[i] = f"{type(e).__name__}: {e}"

def health():
    with urllib.request.urlopen(base + "/health", timeout=60) as r:
        return json.load(r)

def until(what, cond, limit=60):
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > limit:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.02)

def batch(ids):
    threads = [threading.Thread(target=call, args=(i,)) for i in ids]
    for th in threads:
        th.start()
    return threads

health()  # the first connection: systemd-socket-activate starts the shell then
threads = batch(range(10))
until("5 running and 5 queued", lambda: (lambda h: h["active"] == 5 and h["queued"] == 5)(health()))
first = int(open(f"{t}/instances").read().split()[1])
os.kill(first, signal.SIGTERM)
until("the drain", lambda: "no longer accepting" in open(f"{t}/serve.log").read())
threads += batch(range(10, 20))
for th in threads:
    th.join(300)
print(json.dumps({"answers": answers, "statuses": statuses}))
"#;

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn instances(t: &Path) -> Vec<String> {
    std::fs::read_to_string(t.join("instances"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The holder and the instances it started, killed if the test ends early.
struct Holder {
    child: std::process::Child,
    t: std::path::PathBuf,
}

impl Drop for Holder {
    fn drop(&mut self) {
        for line in instances(&self.t) {
            if let Some(pid) = line.strip_prefix("start ").and_then(|p| p.parse().ok()) {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn twenty_openai_chat_calls_across_a_socket_activated_restart_all_succeed_and_run_once() {
    let python = python(&["openai"]);
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // `listen` is not the passed socket: a service that ignored the socket
    // would serve elsewhere, and the calls would never be answered.
    let config = sh_config("drain_timeout = \"60s\"\nlisten = \"127.0.0.1:0\"");
    std::fs::write(t.join("serve.toml"), config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(t.join("serve.log")).unwrap();
    let child = Command::new("systemd-socket-activate")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--fdname=http")
        // It passes only these (and PATH, TERM) to what it runs.
        .arg(format!("--setenv=HOME={}", t.display()))
        .arg(format!("--setenv=T={}", t.display()))
        .arg(format!("--setenv=BATON={}", env!("CARGO_BIN_EXE_baton")))
        .arg("--setenv=BATON_LOG=info")
        .args(["sh", "-c", RESTARTS])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("systemd-socket-activate (Debian package systemd) must be installed for this test");
    let mut holder = Holder {
        child,
        t: t.to_path_buf(),
    };

    let base = format!("http://127.0.0.1:{port}");
    let out = run_python(&python, CLIENT, &[&base, t.to_str().unwrap()]);
    let log = || std::fs::read_to_string(t.join("serve.log")).unwrap_or_default();

    // Every call got its answer...
    for i in 0..20 {
        assert_eq!(
            out["answers"][i.to_string()],
            format!("answer-{i}\n"),
            "call {i}: {out}\n{}",
            log()
        );
    }
    // ...and every prompt ran once.
    let runs = std::fs::read_to_string(t.join("runs")).unwrap();
    let mut ran: Vec<u32> = runs.lines().map(|l| l.parse().unwrap()).collect();
    ran.sort_unstable();
    assert_eq!(ran, (0..20).collect::<Vec<_>>(), "runs: {runs}");

    let statuses = |i: usize| -> Vec<u64> {
        out["statuses"][i.to_string()]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_u64().unwrap())
            .collect()
    };
    // Before SIGTERM: 5 ran and were answered by the draining instance;
    // the 5 it had queued were answered 503 `draining` (their jobs
    // cancelled unrun) and the client's retry was answered by the next one.
    let first: Vec<Vec<u64>> = (0..10).map(statuses).collect();
    let retried = first.iter().filter(|s| **s == [503, 200]).count();
    let direct = first.iter().filter(|s| **s == [200]).count();
    assert_eq!((direct, retried), (5, 5), "first ten: {first:?}");
    // During the drain: not accepted by the draining instance, they waited
    // in the socket for the next one, which answered them at once.
    for i in 10..20 {
        assert_eq!(statuses(i), [200], "call {i} during the drain: {out}");
    }

    // Two instances, one after the other: the first exited 0 (drained).
    let seen = instances(t);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen[0].starts_with("start ") && seen[2].starts_with("start "),
        "{seen:?}"
    );
    assert_eq!(seen[1], "exit 0", "{seen:?}\n{}", log());
    assert_ne!(seen[0], seen[2]);

    // Stop the second one; the holder then ends.
    let second: i32 = seen[2].split(' ').nth(1).unwrap().parse().unwrap();
    let pid = rustix::process::Pid::from_raw(second).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(st) = holder.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the holder did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}\n{}", log());
    assert_eq!(instances(t).last().map(String::as_str), Some("exit 0"));
}

/// A service that was passed something it cannot serve says so and exits
/// 125, whatever its `listen` address.
#[test]
fn a_passed_descriptor_that_is_not_a_listening_socket_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("serve.toml"), sh_config("")).unwrap();
    // Descriptor 3 is a plain file, named as if it were the socket.
    let script = format!(
        "exec 3<'{}'; LISTEN_FDS=1 LISTEN_PID=$$ exec '{}' --dir '{}' serve --config '{}' --listen 127.0.0.1:0",
        t.join("serve.toml").display(),
        env!("CARGO_BIN_EXE_baton"),
        t.join("baton").display(),
        t.join("serve.toml").display(),
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", t)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("the socket passed by the service manager (descriptor 3) is not a socket"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty(), "it listened: {:?}", out.stdout);
}
