#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Several `baton serve` nodes on one PostgreSQL database as one cluster:
//! a node's own cap (`node_max_concurrency`) under the cluster's
//! `max_concurrency`, and the cluster view in `/health`. Real nodes on the
//! machine's PostgreSQL (127.0.0.1:5432, user postgres), each test in a
//! fresh database.

use crate::pg_common;
use crate::serve_common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pg_common::TestDb;
use serde_json::{json, Value};
use serve_common::{node_id, Server};

/// A template that runs `script` with `$NODE` set to `node`.
fn config(script: &str, node: &str) -> String {
    format!(
        r#"
default_template = "sh"
grace = "1s"
[templates.sh]
command = ["sh", "-c", "{script}", "job", "{{prompt}}"]
env = {{ NODE = "{node}" }}
"#
    )
}

fn numbers(path: &Path) -> Vec<usize> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// The entry of node `id` in a `/health` body.
fn entry<'a>(health: &'a Value, id: &str) -> Option<&'a Value> {
    health["nodes"]
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["id"].as_str() == Some(id)))
}

/// Polls `s`'s `/health` until `cond` holds (at most `limit`).
fn wait_health(s: &Server, limit: Duration, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (code, h) = s.get("/health");
        if code == 200 && cond(&h) {
            return h;
        }
        assert!(Instant::now() < deadline, "/health never got there: {h}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Node A with `node_max_concurrency` 1, node B without, `max_concurrency`
/// 4: A never runs more than 1 job at once, the two never more than 4 (as
/// the jobs themselves see it), and every job runs once.
#[test]
fn a_nodes_own_cap_holds_under_the_cluster_cap() {
    const JOBS: usize = 40;
    let db = TestDb::new();
    let url = db.url();
    let shared = tempfile::tempdir().unwrap();
    let d = shared.path().display().to_string();
    for sub in ["running", "on-a", "on-b"] {
        std::fs::create_dir(shared.path().join(sub)).unwrap();
    }
    let script = format!(
        "touch {d}/running/$1 {d}/on-$NODE/$1; ls {d}/running | wc -l >> {d}/conc; \
         ls {d}/on-$NODE | wc -l >> {d}/conc-$NODE; sleep 0.2; \
         rm {d}/on-$NODE/$1 {d}/running/$1; echo $1 >> {d}/done"
    );
    let common = [
        "--store",
        url.as_str(),
        "--max-concurrency",
        "4",
        "--max-queue-depth",
        "100",
    ];
    let mut a_args = common.to_vec();
    a_args.extend(["--node-max-concurrency", "1"]);
    let a = Server::start(&config(&script, "a"), &a_args);
    let b = Server::start(&config(&script, "b"), &common);
    let (_, h) = a.get("/health");
    assert_eq!(
        (h["capacity"].as_u64(), h["node_capacity"].as_u64()),
        (Some(4), Some(1)),
        "{h}"
    );
    let (_, h) = b.get("/health");
    assert_eq!(
        (h["capacity"].as_u64(), h["node_capacity"].as_u64()),
        (Some(4), Some(4)),
        "{h}"
    );
    let nodes = [&a, &b];
    let ids: Vec<String> = (0..JOBS)
        .map(|i| nodes[i % 2].submit(json!({"prompt": i.to_string()})))
        .collect();
    let mut on_a = 0;
    for id in &ids {
        let j = b.wait_final(id);
        assert_eq!(j["status"], "succeeded", "{j}");
        if j["node"].as_str() == Some(node_id(&a).as_str()) {
            on_a += 1;
        }
    }
    let mut done = numbers(&shared.path().join("done"));
    done.sort_unstable();
    assert_eq!(done, (0..JOBS).collect::<Vec<_>>(), "each job exactly once");
    let conc_a = numbers(&shared.path().join("conc-a"));
    let conc_b = numbers(&shared.path().join("conc-b"));
    let conc = numbers(&shared.path().join("conc"));
    assert_eq!(conc_a.len(), on_a, "{conc_a:?}");
    assert_eq!(conc_a.len() + conc_b.len(), JOBS);
    assert!(on_a >= 1, "node A ran no job");
    assert!(
        conc_a.iter().all(|&n| n <= 1),
        "node A ran {conc_a:?} at once"
    );
    assert!(
        conc.iter().all(|&n| n <= 4),
        "the cluster ran {conc:?} at once"
    );
}

/// A node cap of 0 or above `max_concurrency` is refused at start: one
/// line, exit 125.
#[test]
fn a_bad_node_cap_is_refused_with_one_line() {
    let db = TestDb::new();
    let url = db.url();
    let tmp = tempfile::tempdir().unwrap();
    for (cap, expected) in [
        ("0", "invalid node_max_concurrency 0"),
        ("5", "invalid node_max_concurrency 5"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", tmp.path())
            .arg("--dir")
            .arg(tmp.path().join("baton"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store", &url])
            .args(["--max-concurrency", "4", "--node-max-concurrency", cap])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{cap}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{cap}: {err}");
        assert!(err.contains(expected), "{cap}: {err}");
        assert!(err.contains("max_concurrency (4)"), "{cap}: {err}");
    }
}

/// `/health` lists every node of the cluster with its liveness and running
/// jobs; after a kill -9 of one, the other shows it not live.
#[test]
fn health_lists_the_nodes_and_sees_a_killed_one_go() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "2"];
    let mut nodes: Vec<Server> = (0..2)
        .map(|_| Server::start(&config("eval \\\"$1\\\"", "x"), &args))
        .collect();
    let names: Vec<String> = nodes.iter().map(node_id).collect();
    let h = wait_health(&nodes[0], Duration::from_secs(30), |h| {
        names
            .iter()
            .all(|n| entry(h, n).is_some_and(|e| e["live"] == true))
    });
    assert_eq!(h["node"].as_str(), Some(names[0].as_str()), "{h}");
    for (s, name) in nodes.iter().zip(&names) {
        let e = entry(&h, name).unwrap();
        assert_eq!(e["pid"].as_i64(), Some(i64::from(s.pid())), "{h}");
        assert!(!e["host"].as_str().unwrap_or("").is_empty(), "{h}");
        assert!(
            e["started_at"].is_string() && e["heartbeat_at"].is_string(),
            "{h}"
        );
    }
    // The other node's view is the same cluster.
    let (_, h1) = nodes[1].get("/health");
    assert_eq!(h1["node"].as_str(), Some(names[1].as_str()), "{h1}");
    assert!(names.iter().all(|n| entry(&h1, n).is_some()), "{h1}");

    // A running job shows on its node.
    let id = nodes[0].submit(json!({"prompt": "sleep 30"}));
    let j = nodes[0].wait_job(&id, Duration::from_secs(30), |j| j["status"] == "running");
    let runner = names
        .iter()
        .position(|n| Some(n.as_str()) == j["node"].as_str())
        .unwrap();
    let other = 1 - runner;
    let victim = names[runner].clone();
    wait_health(&nodes[other], Duration::from_secs(30), |h| {
        entry(h, &victim).is_some_and(|e| e["running"] == 1)
    });

    nodes[runner].kill9();
    let h = wait_health(&nodes[other], Duration::from_secs(20), |h| {
        entry(h, &victim).is_some_and(|e| e["live"] == false)
    });
    assert_eq!(entry(&h, &names[other]).unwrap()["live"], true, "{h}");
    // Its job is taken over: interrupted, and its node runs nothing.
    let j = nodes[other].wait_final(&id);
    assert_eq!(j["status"], "interrupted", "{j}");
    wait_health(&nodes[other], Duration::from_secs(30), |h| {
        entry(h, &victim).is_some_and(|e| e["running"] == 0)
    });
}

/// The dashboard's overview carries the same node list.
#[test]
fn the_overview_lists_the_nodes() {
    let db = TestDb::new();
    let url = db.url();
    let s = Server::start(&config("true", "x"), &["--store", url.as_str()]);
    let (code, o) = s.get("/v1/overview");
    assert_eq!(code, 200, "{o}");
    assert_eq!(
        o["health"]["node"].as_str(),
        Some(node_id(&s).as_str()),
        "{o}"
    );
    let nodes = o["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{o}");
    assert_eq!(nodes[0]["id"].as_str(), Some(node_id(&s).as_str()), "{o}");
    assert_eq!(nodes[0]["live"], true, "{o}");
}

/// A supersede job taken by node B stops the older job of its group that
/// node A runs in another mode (queue): the older one ends superseded,
/// the newer one runs once it has ended — not `failed` with the group
/// library's mode mismatch.
#[test]
fn a_supersede_job_on_one_node_supersedes_an_other_mode_job_on_another() {
    let db = TestDb::new();
    let url = db.url();
    // The old job ignores SIGTERM: it ends only at the grace's end (KILL).
    let script = "case $1 in long) trap '' TERM; sleep 30;; *) echo ran $1;; esac";
    // Each node runs one job at most: the node that runs the old job is
    // full, so the other takes the new one.
    let args = [
        "--store",
        url.as_str(),
        "--max-concurrency",
        "4",
        "--node-max-concurrency",
        "1",
    ];
    let a = Server::start(&config(script, "a"), &args);
    let b = Server::start(&config(script, "b"), &args);
    let old = a.submit(json!({"prompt": "long", "group": "g", "mode": "queue"}));
    let running = a.wait_job(&old, Duration::from_secs(20), |j| j["status"] == "running");
    let old_node = running["node"].as_str().unwrap().to_string();
    let new = b.submit(json!({"prompt": "short", "group": "g", "mode": "supersede"}));
    let newer = b.wait_final(&new);
    assert_eq!(newer["status"], "succeeded", "{newer}");
    assert_ne!(newer["node"].as_str(), Some(old_node.as_str()), "{newer}");
    let older = a.wait_final(&old);
    assert_eq!(older["status"], "superseded", "{older}");
    assert_eq!(
        older["superseded_by"].as_str(),
        Some(new.as_str()),
        "{older}"
    );
}

/// Node A dies for good (kill -9, never restarted) while its chat caller's
/// job waits in the cluster's queue: its connection is gone and its client
/// retries elsewhere, so the job must not run. Node B's rescuer, once A is
/// found dead, cancels it, although B could run it.
#[test]
fn a_chat_queued_by_a_node_that_died_for_good_is_cancelled_not_run() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "1"];
    let config = serve_common::sh_config("");
    // B first, with the one slot of the cluster taken by a job that waits.
    let b = Server::start(&config, &args);
    let t = b.tmp();
    b.submit(json!({
        "prompt": format!("echo x > {t}/b.started; while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    serve_common::wait_for_file(Path::new(&format!("{t}/b.started")));
    let mut a = Server::start(&config, &args);
    let prompt = format!("echo run >> {t}/chat.runs; echo answer");
    let body =
        json!({"model": "sh", "messages": [{"role": "user", "content": prompt}]}).to_string();
    let mut waiting = std::net::TcpStream::connect(&a.addr).unwrap();
    std::io::Write::write_all(
        &mut waiting,
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            a.addr,
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let (_, list) = b.get("/v1/jobs?status=queued");
        if let Some(id) = list["jobs"][0]["id"].as_str() {
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "the chat job was never queued");
        std::thread::sleep(Duration::from_millis(50));
    };

    a.kill9();
    drop(waiting);
    // B finds A dead (its heartbeat older than the fence) and cancels the job.
    let j = b.wait_job(&job, Duration::from_secs(90), |j| j["status"] != "queued");
    assert_eq!(j["status"], "cancelled", "{j}");
    std::fs::write(format!("{t}/go"), "").unwrap();
    wait_health(&b, Duration::from_secs(30), |h| {
        h["queued"] == 0 && h["active"] == 0
    });
    assert!(
        !Path::new(&format!("{t}/chat.runs")).exists(),
        "the prompt of a caller that is gone ran"
    );
}

/// Sends `signal` to the service process of `s`.
fn signal(s: &Server, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(s.pid()).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

/// Issue 37, item 3: node A, stopped by SIGSTOP while it runs the cluster's
/// two slots' jobs, keeps its database session (the kernel answers the
/// keepalives) and so its liveness lock; its guardians kill its jobs at the
/// fence, but the store showed them running for as long as A was frozen, so
/// the cluster ran nothing. Now, once A's heartbeat is older than the
/// fence, grace and 1 s, B ends A's session and takes its jobs over: a job
/// submitted to B runs, `/health` shows A not live. Thawed (SIGCONT), A
/// finds its session ended and serves again, and no job ran twice.
#[test]
fn a_frozen_node_is_fenced_and_its_slots_return_to_the_cluster() {
    let db = TestDb::new();
    let url = db.url();
    let args = ["--store", url.as_str(), "--max-concurrency", "2"];
    let shared = tempfile::tempdir().unwrap();
    let d = shared.path().display().to_string();
    // A prompt is "TAG SECONDS": the job records its tag, then sleeps.
    let script = format!("echo $$ >> {d}/pids; echo ${{1% *}} >> {d}/starts; sleep ${{1#* }}");
    // A grace far past the wait below: a stopped node is taken over at the
    // fence + 1 s, its grace is not waited for (it stops nothing itself
    // while stopped; its guardians killed its commands at the fence).
    let config = |node: &str| config(&script, node).replace("grace = \"1s\"", "grace = \"60s\"");
    let mut a = Server::start(&config("a"), &args);
    let long: Vec<String> = ["long1 600", "long2 600"]
        .iter()
        .map(|p| a.submit(json!({ "prompt": p })))
        .collect();
    for id in &long {
        a.wait_job(id, Duration::from_secs(30), |j| j["status"] == "running");
    }
    let b = Server::start(&config("b"), &args);
    let (name_a, name_b) = (node_id(&a), node_id(&b));
    wait_health(&b, Duration::from_secs(30), |h| {
        entry(h, &name_a).is_some_and(|e| e["live"] == true && e["running"] == 2)
    });

    let app = format!("baton serve {}", &name_a[name_a.len().saturating_sub(48)..]);
    let named = db.scalar(&format!(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}'"
    ));
    assert_ne!(named.as_deref(), Some("0"), "A's connections are not named");
    signal(&a, rustix::process::Signal::STOP);
    let frozen = Instant::now();
    let quick = b.submit(json!({"prompt": "quick 0.1"}));
    let j = b.wait_job(&quick, Duration::from_secs(40), |j| j["status"] != "queued");
    eprintln!(
        "node A frozen -> a job submitted to B starts: {:.1} s",
        frozen.elapsed().as_secs_f64()
    );
    assert_eq!(j["node"].as_str(), Some(name_b.as_str()), "{j}");
    // Taken over only once its guardians had killed its jobs' commands.
    let pids = std::fs::read_to_string(shared.path().join("pids")).unwrap();
    for pid in pids.lines().take(2) {
        let pid: i32 = pid.trim().parse().unwrap();
        assert!(!serve_common::alive(pid), "A's job (pid {pid}) still runs");
    }
    assert_eq!(b.wait_final(&quick)["status"], "succeeded");
    let h = wait_health(&b, Duration::from_secs(10), |h| {
        entry(h, &name_a).is_some_and(|e| e["live"] == false)
    });
    assert_eq!(entry(&h, &name_a).unwrap()["running"], 0, "{h}");
    // All of A's connections were ended, not only the one holding its
    // liveness lock: one frozen in a transaction would hold its locks.
    let sessions_of_a = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' \
         AND application_name = '{app}'",
        db.name
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.scalar(&sessions_of_a).as_deref() != Some("0") {
        assert!(
            Instant::now() < deadline,
            "frozen node A still has {:?} sessions",
            db.scalar(&sessions_of_a)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for id in &long {
        let j = b.job(id);
        assert_eq!(j["status"], "interrupted", "{j}");
    }

    // Thawed: A finds its session ended, and serves again.
    signal(&a, rustix::process::Signal::CONT);
    wait_health(&b, Duration::from_secs(60), |h| {
        entry(h, &name_a).is_some_and(|e| e["live"] == true)
    });
    let after = a.submit(json!({"prompt": "after 0.1"}));
    assert_eq!(a.wait_final(&after)["status"], "succeeded");
    for id in &long {
        assert_eq!(a.job(id)["status"], "interrupted");
    }
    let mut starts: Vec<String> = std::fs::read_to_string(shared.path().join("starts"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    starts.sort();
    assert_eq!(
        starts,
        ["after", "long1", "long2", "quick"],
        "each job once"
    );
    assert!(a.child.as_mut().unwrap().try_wait().unwrap().is_none());
}
