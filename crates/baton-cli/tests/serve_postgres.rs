#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service on PostgreSQL: real `baton serve` nodes on the machine's
//! PostgreSQL (127.0.0.1:5432, user postgres), each test in a fresh database
//! it creates and drops. PostgreSQL being unreachable fails the tests.

use crate::pg_common;
use crate::serve_common;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use pg_common::{admin, lines, TestDb};
use serde_json::{json, Value};
use serve_common::{node_id, Server};

/// A template that runs its prompt as a shell script.
const EVAL: &str = "eval \\\"$1\\\"";

fn config(template: &str) -> String {
    format!(
        r#"
default_template = "sh"
grace = "1s"
[templates.sh]
command = ["sh", "-c", "{template}", "job", "{{prompt}}"]
"#
    )
}

fn status(j: &Value) -> &str {
    j["status"].as_str().unwrap_or("")
}

#[test]
fn one_node_runs_cancels_and_keeps_queued_jobs_over_a_restart() {
    let db = TestDb::new();
    let url = db.url();
    let mut s = Server::start(&config(EVAL), &["--store", &url, "--max-concurrency", "1"]);
    let t = s.tmp();
    let id = s.submit(json!({"prompt": "echo hello"}));
    let j = s.wait_final(&id);
    assert_eq!(status(&j), "succeeded", "{j}");
    assert_eq!(j["node"].as_str(), Some(node_id(&s).as_str()), "{j}");
    let (code, log) = s.get_text(&format!("/v1/jobs/{id}/log"));
    assert_eq!((code, log.as_str()), (200, "hello\n"));
    let (code, h) = s.get("/health");
    assert_eq!(code, 200, "{h}");
    assert_eq!(h["status"], "ok", "{h}");

    // Cancel of a running job.
    let long = s.submit(json!({"prompt": "sleep 30"}));
    s.wait_job(&long, Duration::from_secs(30), |j| status(j) == "running");
    let (code, j) = s.cancel(&long);
    assert_eq!(code, 200, "{j}");
    assert_eq!(status(&j), "cancelled", "{j}");

    // kill -9 with one job running and two queued: after the restart the
    // running one is interrupted and the queued ones run.
    let blocker = s.submit(json!({"prompt": format!("echo up > {t}/b.started; sleep 30")}));
    s.wait_job(&blocker, Duration::from_secs(30), |j| {
        status(j) == "running"
    });
    serve_common::wait_for_file(&s.path("b.started"));
    let queued: Vec<String> = (0..2)
        .map(|i| s.submit(json!({"prompt": format!("echo {i} >> {t}/queued.ran")})))
        .collect();
    for q in &queued {
        assert_eq!(status(&s.job(q)), "queued");
    }
    s.kill9();
    s.spawn();
    let j = s.wait_final(&blocker);
    assert_eq!(status(&j), "interrupted", "{j}");
    for q in &queued {
        let j = s.wait_final(q);
        assert_eq!(status(&j), "succeeded", "{j}");
    }
    assert_eq!(lines(&s.path("queued.ran")), ["0", "1"]);
}

/// Three nodes on one database, `max_concurrency` 4, 300 jobs submitted
/// round robin: each job runs once, never more than 4 at once (as the jobs
/// themselves see it), and they start in submission (FIFO) order give or
/// take one place.
#[test]
fn three_nodes_share_one_queue_and_one_cap() {
    const JOBS: usize = 300;
    let db = TestDb::new();
    let url = db.url();
    let shared = tempfile::tempdir().unwrap();
    let d = shared.path().display().to_string();
    std::fs::create_dir(shared.path().join("running")).unwrap();
    let script = format!(
        "echo $1 >> {d}/started; touch {d}/running/$1; ls {d}/running | wc -l >> {d}/conc; \
         sleep 0.05; rm {d}/running/$1; echo $1 >> {d}/done"
    );
    let args = [
        "--store",
        url.as_str(),
        "--max-concurrency",
        "4",
        "--max-queue-depth",
        "1000",
    ];
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(&config(&script), &args))
        .collect();
    let ids: Vec<String> = (0..JOBS)
        .map(|i| nodes[i % 3].submit(json!({"prompt": i.to_string()})))
        .collect();
    let mut ran_on = HashSet::new();
    let mut claimed_at = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let j = nodes[(i + 1) % 3].wait_final(id);
        assert_eq!(status(&j), "succeeded", "{j}");
        assert_eq!(j["attempts"].as_u64(), Some(1), "{j}");
        ran_on.insert(j["node"].as_str().unwrap().to_string());
        claimed_at.push(j["started_at"].as_str().unwrap().to_string());
    }
    // FIFO across the nodes: claims (under the queue's lock, stamped with
    // the database's clock) follow the submission order.
    for (i, w) in claimed_at.windows(2).enumerate() {
        assert!(
            w[0] <= w[1],
            "job {} claimed after job {}: {claimed_at:?}",
            i,
            i + 1
        );
    }
    let done = lines(&shared.path().join("done"));
    let mut sorted: Vec<usize> = done.iter().map(|l| l.parse().unwrap()).collect();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..JOBS).collect::<Vec<_>>(),
        "each job exactly once"
    );
    let conc: Vec<usize> = lines(&shared.path().join("conc"))
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(conc.len(), JOBS);
    let max = conc.iter().copied().max().unwrap();
    assert!(max <= 4, "{max} jobs ran at once");
    let started: Vec<usize> = lines(&shared.path().join("started"))
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    // As the commands saw it: a command claimed earlier may print later
    // than one claimed after it on another node, by at most the jobs that
    // run beside it (cap 4).
    for (pos, job) in started.iter().enumerate() {
        assert!(
            pos.abs_diff(*job) <= 3,
            "job {job} started at position {pos}: {started:?}"
        );
    }
    assert!(ran_on.len() >= 2, "jobs ran on {ran_on:?} only");
}

/// A running job is cancelled through a node that does not run it.
#[test]
fn cancel_reaches_the_node_that_runs_the_job() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "2"];
    let nodes: Vec<Server> = (0..2)
        .map(|_| Server::start(&config(EVAL), &args))
        .collect();
    let names: Vec<String> = nodes.iter().map(node_id).collect();
    let id = nodes[0].submit(json!({"prompt": "sleep 60"}));
    let j = nodes[0].wait_job(&id, Duration::from_secs(30), |j| status(j) == "running");
    let runner = names
        .iter()
        .position(|n| Some(n.as_str()) == j["node"].as_str())
        .unwrap();
    let other = &nodes[1 - runner];
    let started = Instant::now();
    let (code, j) = other.cancel(&id);
    assert_eq!(code, 200, "{j}");
    assert_eq!(status(&j), "cancelled", "{j}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// kill -9 of one node mid-run: its jobs end interrupted (on another
/// node's initiative), the other nodes go on with the queue.
#[test]
fn a_killed_nodes_jobs_are_interrupted_and_the_others_go_on() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "4"];
    let mut nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(&config(EVAL), &args))
        .collect();
    let names: Vec<String> = nodes.iter().map(node_id).collect();
    let ids: Vec<String> = (0..10)
        .map(|i| nodes[i % 3].submit(json!({"prompt": "sleep 4"})))
        .collect();
    // Wait for 4 running, then kill a node that runs at least one.
    let deadline = Instant::now() + Duration::from_secs(30);
    let running: HashMap<String, String> = loop {
        let r: HashMap<String, String> = ids
            .iter()
            .filter_map(|id| {
                let j = nodes[0].job(id);
                (status(&j) == "running").then(|| (id.clone(), j["node"].as_str().unwrap().into()))
            })
            .collect();
        if r.len() == 4 {
            break r;
        }
        assert!(Instant::now() < deadline, "4 jobs never ran at once");
        std::thread::sleep(Duration::from_millis(50));
    };
    let victim_name = running.values().next().unwrap().clone();
    let victim = names.iter().position(|n| *n == victim_name).unwrap();
    nodes[victim].kill9();
    let survivor = &nodes[(victim + 1) % 3];
    for id in &ids {
        let j = survivor.wait_final(id);
        if running.get(id) == Some(&victim_name) {
            assert_eq!(status(&j), "interrupted", "{j}");
            assert!(j["error"].as_str().unwrap_or("").contains("died"), "{j}");
        } else {
            assert_eq!(status(&j), "succeeded", "{j}");
            assert_ne!(j["node"].as_str(), Some(victim_name.as_str()), "{j}");
        }
    }
}

/// A store that cannot be opened: exit 125 and one line naming the problem.
#[test]
fn a_bad_or_unreachable_database_fails_the_start_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("postgres://postgres@127.0.0.1:notaport/x", "invalid URL"),
        (
            "postgres://postgres@127.0.0.1:1/x",
            "cannot open the job store",
        ),
        (
            "postgres://postgres@127.0.0.1:5432/baton_no_such_database",
            "does not exist",
        ),
        ("postgres://postgres:secret@127.0.0.1:1/x", "postgres:***@"),
    ];
    for (url, expected) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", tmp.path())
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store", url])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{url}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{url}: {err}");
        assert!(err.contains(expected), "{url}: {err}");
        assert!(!err.contains("secret"), "{url}: {err}");
    }
}

/// Every session of the database ended under the nodes (as a restart of
/// PostgreSQL does): they resume by themselves, no acknowledged job is
/// lost, and the jobs that were waiting run.
#[test]
fn nodes_resume_after_their_sessions_are_terminated() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "2"];
    let nodes: Vec<Server> = (0..2)
        .map(|_| Server::start(&config(EVAL), &args))
        .collect();
    let ids: Vec<String> = (0..20)
        .map(|i| nodes[i % 2].submit(json!({"prompt": "sleep 0.3"})))
        .collect();
    nodes[0].wait_job(&ids[1], Duration::from_secs(30), |j| status(j) != "queued");
    admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{}' AND pid <> pg_backend_pid()",
        db.name
    ));
    // Submissions work again once the nodes have reconnected.
    let deadline = Instant::now() + Duration::from_secs(30);
    let late = loop {
        let (code, v) = nodes[1].post("/v1/jobs", &json!({"prompt": "true"}));
        if code == 202 {
            break v["id"].as_str().unwrap().to_string();
        }
        assert_eq!(code, 503, "{v}");
        assert!(Instant::now() < deadline, "never accepted again: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    for (i, id) in ids.iter().enumerate() {
        let j = nodes[i % 2].wait_final(id);
        let st = status(&j);
        if i >= 10 {
            assert_eq!(st, "succeeded", "{j}");
        } else {
            assert!(
                ["succeeded", "cancelled", "interrupted"].contains(&st),
                "{j}"
            );
        }
    }
    assert_eq!(status(&nodes[0].wait_final(&late)), "succeeded");
    for n in &nodes {
        let (code, h) = n.get("/health");
        assert_eq!((code, h["status"].as_str()), (200, Some("ok")), "{h}");
    }
}

/// A newer supersede job stops the running job of its group on another node.
#[test]
fn supersede_reaches_a_running_job_on_another_node() {
    let db = TestDb::new();
    let url = db.url();
    // Node 1 runs one job at a time, so the newer job can only run on node 2.
    let one = Server::start(
        &config(EVAL),
        &["--store", url.as_str(), "--max-concurrency", "1"],
    );
    let log = std::path::PathBuf::from(one.tmp()).join("overlap.log");
    let l = log.display();
    // The older command takes a moment to stop; the newer one must not
    // start before it has (the group's slot is in the database).
    let older = format!(
        "trap 'sleep 0.5; echo \"A-end $(date +%s%N)\" >> {l}; exit 0' TERM; echo A-start >> {l}; sleep 120 & wait"
    );
    let a = one.submit(json!({"prompt": older, "group": "issue/7", "mode": "supersede"}));
    let ja = one.wait_job(&a, Duration::from_secs(30), |j| status(j) == "running");
    // Running as a job is not yet running its command (it joins the group first).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !lines(&log).contains(&"A-start".to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the older command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let two = Server::start(
        &config(EVAL),
        &["--store", url.as_str(), "--max-concurrency", "4"],
    );
    let newer = format!("echo \"B-start $(date +%s%N)\" >> {l}");
    let b = two.submit(json!({"prompt": newer, "group": "issue/7", "mode": "supersede"}));
    let ja2 = two.wait_final(&a);
    assert_eq!(status(&ja2), "superseded", "{ja2}");
    assert_eq!(ja2["superseded_by"], b.as_str(), "{ja2}");
    assert_eq!(ja2["node"], ja["node"], "{ja2}");
    let jb = two.wait_final(&b);
    assert_eq!(status(&jb), "succeeded", "{jb}");
    assert_eq!(jb["node"].as_str(), Some(node_id(&two).as_str()), "{jb}");
    let log = lines(&log);
    let at = |tag: &str| -> u128 {
        log.iter()
            .find_map(|l| l.strip_prefix(tag))
            .unwrap_or_else(|| panic!("no {tag} in {log:?}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        at("A-end ") < at("B-start "),
        "the newer job started before the older one's command ended: {log:?}"
    );
}

/// With a PostgreSQL store the jobs' groups are in the database: the
/// overview shows them from there (not from the node's baton dir).
#[test]
fn the_overview_shows_the_groups_in_the_database() {
    let db = TestDb::new();
    let url = db.url();
    let node = Server::start(&config(EVAL), &["--store", url.as_str()]);
    let release = std::path::PathBuf::from(node.tmp()).join("release");
    let script = format!("while [ ! -e {} ]; do sleep 0.05; done", release.display());
    let id = node.submit(json!({"prompt": script, "group": "deploy", "mode": "queue"}));
    let deadline = Instant::now() + Duration::from_secs(30);
    let overview = loop {
        let (code, o) = node.get("/v1/overview");
        assert_eq!(code, 200, "{o}");
        let shown = o["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["key"] == "deploy"));
        if shown {
            break o;
        }
        if Instant::now() >= deadline {
            std::fs::write(&release, "").unwrap();
            panic!("the group never appeared in the overview: {o}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(overview["errors"].get("groups").is_none(), "{overview}");
    std::fs::write(&release, "").unwrap();
    assert_eq!(status(&node.wait_final(&id)), "succeeded");
}
