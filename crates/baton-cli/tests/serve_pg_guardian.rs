#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton serve` nodes on one PostgreSQL database: a job's processes die
//! with the node that runs them, and another node re-runs a dead node's job
//! only after they are gone; a job stopped because its node lost its
//! database session is `interrupted` (retried when its template says so),
//! not `cancelled`. Real nodes, real PostgreSQL (127.0.0.1:5432), each test
//! in a fresh database.

mod pg_common;
mod serve_common;

use std::path::Path;
use std::time::{Duration, Instant};

use pg_common::TestDb;
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

fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
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
    let (code, _) = other.delete(&format!("/v1/jobs/{id}"));
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
    let j = node.wait_job(&id, Duration::from_secs(60), |j| {
        !matches!(j["status"].as_str(), Some("queued" | "running"))
    });
    assert_eq!(j["status"], "interrupted", "{j}");
    assert_eq!(j["exit_code"], 76, "{j}");
}
