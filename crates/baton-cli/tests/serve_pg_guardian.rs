#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton serve` nodes on one PostgreSQL database: a job's processes die
//! with the node that runs them, and another node re-runs a dead node's job
//! only after they are gone; a job stopped because its node lost its
//! database session is `interrupted` (retried when its template says so),
//! not `cancelled`. Real nodes, real PostgreSQL (127.0.0.1:5432), each test
//! in a fresh database.

use crate::pg_common;
use crate::serve_common;

use std::path::Path;
use std::time::{Duration, Instant};

use pg_common::{running, TestDb};
use serde_json::json;
use serve_common::{node_id, sh_config, Server};

/// A job prompt whose work is a child ticker writing `TAG NS` to `log`
/// every 100 ms (TAG: the command's pid), its pid into `DIR/ticker.TAG`.
fn ticking(log: &Path) -> String {
    let dir = log.parent().unwrap().display();
    format!(
        "/usr/bin/python3 -c 'import os, time\nf = open(\"{log}\", \"a\", buffering=1)\nwhile True:\n    f.write(\"%d %d\\n\" % (os.getppid(), time.monotonic_ns()))\n    time.sleep(0.1)' & echo $! > {dir}/ticker.$$; wait",
        log = log.display(),
    )
}

/// (tag, ticks) of each run in `log`, in order of their first tick.
fn runs(log: &Path) -> Vec<(String, Vec<u64>)> {
    let mut out: Vec<(String, Vec<u64>)> = Vec::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let Some((tag, ns)) = line.split_once(' ') else {
            continue;
        };
        let Ok(ns) = ns.trim().parse::<u64>() else {
            continue;
        };
        match out.iter_mut().find(|(t, _)| t == tag) {
            Some((_, v)) => v.push(ns),
            None => out.push((tag.to_string(), vec![ns])),
        }
    }
    out.sort_by_key(|(_, v)| v.iter().min().copied());
    out
}

fn wait(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fault 5 of the PostgreSQL review (21.5 of the service review): kill -9
/// of the node running a job. Its command's child used to run on while the
/// other node re-ran the job at once (two runs of one job); now the job's
/// guardian kills the whole command with the node, and the other node
/// re-runs it (the template retries interrupted jobs) only after the
/// settle wait: the second run's first tick comes after the first's last.
#[test]
fn a_killed_nodes_job_dies_with_it_and_runs_again_after() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "1"];
    let config = sh_config("").replace(
        "[templates.sh]",
        "[templates.sh]\nretry_on_interrupt = true",
    );
    let mut nodes: Vec<Server> = (0..2).map(|_| Server::start(&config, &args)).collect();
    let log = nodes[0].path("log");
    let id = nodes[0].submit(json!({"prompt": ticking(&log)}));
    let j = nodes[0].wait_job(&id, Duration::from_secs(30), |j| j["status"] == "running");
    wait(Duration::from_secs(30), "the first run ticks", || {
        runs(&log).first().is_some_and(|(_, t)| t.len() >= 3)
    });
    let first = runs(&log)[0].0.clone();
    let ticker: i32 = std::fs::read_to_string(nodes[0].path(&format!("ticker.{first}")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let names: Vec<String> = nodes.iter().map(node_id).collect();
    let runner = names
        .iter()
        .position(|n| Some(n.as_str()) == j["node"].as_str())
        .unwrap();
    let killed = Instant::now();
    nodes[runner].kill9();
    wait(
        Duration::from_secs(10),
        "the killed node's job child is gone",
        || !running(ticker),
    );
    eprintln!(
        "kill -9 of the node -> its job's child gone: {:?}",
        killed.elapsed()
    );

    let other = &nodes[1 - runner];
    let j = other.wait_job(&id, Duration::from_secs(60), |j| {
        j["status"] == "running" && j["node"].as_str() == Some(names[1 - runner].as_str())
    });
    wait(Duration::from_secs(30), "the second run ticks", || {
        runs(&log).len() >= 2
    });
    eprintln!(
        "kill -9 -> the job runs again: {:?} ({j})",
        killed.elapsed()
    );
    let all = runs(&log);
    let last_first = *all[0].1.iter().max().unwrap();
    let first_second = *all[1].1.iter().min().unwrap();
    eprintln!(
        "first run's last tick -> second run's first: {:.2} s",
        (first_second as f64 - last_first as f64) / 1e9
    );
    assert!(
        last_first < first_second,
        "two runs of one job at once: {all:?}"
    );
    let (code, _) = other.cancel(&id);
    assert_eq!(code, 200);
}

/// Fault 6: a job stopped because its node lost its database session (all
/// the database's sessions terminated, as in a restart) ends `interrupted`
/// with exit 76, not `cancelled` with 79: nobody cancelled it.
#[test]
fn a_job_stopped_by_a_lost_session_is_interrupted() {
    let db = TestDb::new();
    let url = db.url();
    let node = Server::start(&sh_config(""), &["--store", url.as_str()]);
    let id = node.submit(json!({"prompt": "sleep 60"}));
    node.wait_job(&id, Duration::from_secs(30), |j| j["status"] == "running");
    let ended = db.query(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{}' AND pid <> pg_backend_pid()",
        db.name
    ));
    assert!(!ended.is_empty(), "no session of the node was terminated");
    // A read may meet a pooled connection the server just ended: 503
    // (Retry-After 1) for that request, as during a restart.
    let mut j = serde_json::Value::Null;
    wait(Duration::from_secs(60), "the job ended", || {
        let (code, v) = node.get(&format!("/v1/jobs/{id}"));
        assert!(code == 200 || code == 503, "{code} {v}");
        j = v;
        code == 200 && !matches!(j["status"].as_str(), Some("queued" | "running"))
    });
    assert_eq!(j["status"], "interrupted", "{j}");
    assert_eq!(j["exit_code"], 76, "{j}");
}

/// `start TAG NS` / `end TAG NS` lines around `body`, for `sh -c`.
fn logged(tag: &str, log: &Path, body: &str) -> String {
    let now = "$(/usr/bin/python3 -c 'import time; print(time.monotonic_ns())')";
    let log = log.display();
    format!("echo \"start {tag} {now}\" >> {log}; {body}; echo \"end {tag} {now}\" >> {log}")
}

/// (tag, start, end) of each run in `log`, by start.
fn intervals(log: &Path) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut out: Vec<(String, u64, u64)> = Vec::new();
    for line in text.lines() {
        let p: Vec<&str> = line.split_whitespace().collect();
        let ns: u64 = p[2].parse().unwrap();
        match p[0] {
            "start" => out.push((p[1].to_string(), ns, 0)),
            _ => out.iter_mut().find(|i| i.0 == p[1]).unwrap().2 = ns,
        }
    }
    out.sort_by_key(|i| i.1);
    assert!(out.iter().all(|i| i.2 > 0), "a run never ended: {text}");
    out
}

/// Fault 3 of the service review: with a service on a PostgreSQL store, a
/// `baton run --group K` from a script (its own baton dir, `--backend` the
/// store's URL) and the service's jobs of group K are one group: they never
/// run side by side, whichever comes first.
#[test]
fn a_script_and_the_services_jobs_share_a_group_on_postgres() {
    let db = TestDb::new();
    let url = db.url();
    let node = Server::start(&sh_config(""), &["--store", url.as_str()]);
    let log = node.path("log");
    let script_dir = node.path("script-baton");
    let script_dir = script_dir.to_str().unwrap();
    let script = |tag: &str, body: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args([
                "--dir",
                script_dir,
                "--backend",
                url.as_str(),
                "run",
                "--group",
                "k",
            ])
            .args(["--", "sh", "-c", &logged(tag, &log, body)])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };

    // The job first, then the script.
    let job = node.submit(json!({"prompt": logged("job1", &log, "sleep 2"), "group": "k"}));
    node.wait_job(&job, Duration::from_secs(30), |j| j["status"] == "running");
    let run = script("run1", "sleep 0.2").wait_with_output().unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(node.wait_final(&job)["status"], "succeeded");

    // The script first, then the job.
    let started = node.path("run2-started");
    let run = script("run2", &format!("touch {}; sleep 2", started.display()));
    wait(Duration::from_secs(30), "the script's run started", || {
        started.exists()
    });
    let job = node.submit(json!({"prompt": logged("job2", &log, "true"), "group": "k"}));
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(node.wait_final(&job)["status"], "succeeded");

    let all = intervals(&log);
    eprintln!("{all:?}");
    assert_eq!(all.len(), 4, "{all:?}");
    for w in all.windows(2) {
        assert!(
            w[0].2 <= w[1].1,
            "{} ran beside {}: {all:?}",
            w[0].0,
            w[1].0
        );
    }
}
