#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Concurrency groups on PostgreSQL (`--backend`): runs from two baton dirs
//! (two "machines": nothing local is shared) coordinate through one fresh
//! database on the machine's PostgreSQL, created and dropped per test.

use crate::common;
use crate::pg_common;

use std::time::{Duration, Instant};

use common::{code, stderr, stdout, wait_until, Env};
use pg_common::{lines, TestDb};

/// Two machines: separate baton dirs, the same database.
fn machines(db: &TestDb) -> (Env, Env, String) {
    (Env::new(), Env::new(), db.url())
}

fn run_args<'a>(url: &'a str, group: &'a str, mode: &'a str, script: &'a str) -> Vec<&'a str> {
    vec![
        "--backend",
        url,
        "run",
        "--group",
        group,
        "--mode",
        mode,
        "--grace",
        "5s",
        "--",
        "sh",
        "-c",
        script,
    ]
}

/// Nanoseconds of the wall clock at `tag` in the log, first occurrence.
fn at(log: &[String], tag: &str) -> u128 {
    log.iter()
        .find_map(|l| l.strip_prefix(&format!("{tag} ")))
        .unwrap_or_else(|| panic!("no '{tag}' in {log:?}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_newer_supersede_run_on_another_machine_stops_the_older_and_never_overlaps_it() {
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let log = a.path("log");
    let l = log.display();
    // A traps TERM, takes a moment to stop (as real work does), and logs its end.
    let older = format!(
        "echo \"A-start $(date +%s%N)\" >> {l}; trap 'echo \"A-term $(date +%s%N)\" >> {l}; sleep 0.3; echo \"A-end $(date +%s%N)\" >> {l}; exit 0' TERM; sleep 60 & wait"
    );
    let mut first = a.spawn(&run_args(&url, "issue/7", "supersede", &older));
    wait_until(Duration::from_secs(20), || {
        lines(&log).iter().any(|l| l.starts_with("A-start"))
    });
    let newer = format!("echo \"B-start $(date +%s%N)\" >> {l}");
    let launched = Instant::now();
    let launched_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let out = b.run(&run_args(&url, "issue/7", "supersede", &newer));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = first.wait().unwrap();
    assert_eq!(status.code(), Some(79), "older run: superseded");
    let log = lines(&log);
    let (a_end, b_start) = (at(&log, "A-end"), at(&log, "B-start"));
    assert!(
        a_end < b_start,
        "the newer command started before the older one ended: {log:?}"
    );
    let term_ms = (at(&log, "A-term").saturating_sub(launched_ns)) as f64 / 1e6;
    eprintln!(
        "supersede across machines: newer run launched -> older command got TERM after {term_ms:.1} ms; newer finished after {:?} (older has a 0.3 s TERM handler)",
        launched.elapsed()
    );
}

#[test]
fn coalesce_replaces_the_waiting_run_and_lets_the_running_one_finish() {
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let log = a.path("log");
    let l = log.display();
    let mut running = a.spawn(&run_args(
        &url,
        "build",
        "coalesce",
        &format!("echo A >> {l}; sleep 2; echo A-done >> {l}"),
    ));
    wait_until(Duration::from_secs(20), || {
        lines(&log).contains(&"A".into())
    });
    let mut waiting = b.spawn(&run_args(
        &url,
        "build",
        "coalesce",
        &format!("echo B >> {l}"),
    ));
    // B is registered and waits for the slot.
    wait_until(Duration::from_secs(20), || {
        let out = a.run(&["--backend", &url, "group", "status", "build", "--json"]);
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        st["waiting"].as_array().is_some_and(|w| w.len() == 1)
    });
    let out = a.run(&run_args(
        &url,
        "build",
        "coalesce",
        &format!("echo C >> {l}"),
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        waiting.wait().unwrap().code(),
        Some(79),
        "the waiting run is replaced"
    );
    assert_eq!(
        running.wait().unwrap().code(),
        Some(0),
        "the running run finishes"
    );
    assert_eq!(lines(&log), ["A", "A-done", "C"]);
}

#[test]
fn skip_refuses_while_busy_and_mismatched_modes_are_refused() {
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let marker = a.path("started");
    let mut busy = a.spawn(&run_args(
        &url,
        "nightly",
        "skip",
        &format!("touch {}; sleep 3", marker.display()),
    ));
    wait_until(Duration::from_secs(20), || marker.exists());
    let out = b.run(&run_args(&url, "nightly", "skip", "echo never"));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("busy"), "{}", stderr(&out));
    let out = b.run(&run_args(&url, "nightly", "queue", "echo never"));
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("mode skip") && stderr(&out).lines().count() == 1,
        "{}",
        stderr(&out)
    );
    assert_eq!(busy.wait().unwrap().code(), Some(0));
    // Idle again: any mode may use the key.
    let out = b.run(&run_args(&url, "nightly", "queue", "true"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn queue_with_max_two_runs_everything_never_more_than_two_at_once() {
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let log = a.path("log");
    let l = log.display();
    let script =
        format!("echo \"in $(date +%s%N)\" >> {l}; sleep 0.2; echo \"out $(date +%s%N)\" >> {l}");
    let mut children = Vec::new();
    for i in 0..6 {
        let env = if i % 2 == 0 { &a } else { &b };
        let mut args = run_args(&url, "gpu", "queue", &script);
        args.splice(5..5, ["--max", "2"]);
        children.push(env.spawn(&args));
    }
    for c in &mut children {
        assert_eq!(c.wait().unwrap().code(), Some(0));
    }
    let mut events: Vec<(u128, i32)> = lines(&log)
        .iter()
        .map(|l| {
            let (what, t) = l.split_once(' ').unwrap();
            (t.parse().unwrap(), if what == "in" { 1 } else { -1 })
        })
        .collect();
    assert_eq!(events.len(), 12, "every run ran once: {events:?}");
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    assert!(most <= 2, "{most} ran at once");
}

#[test]
fn a_superseded_waiting_run_leaves_at_once_and_status_shows_the_group() {
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let log = a.path("log");
    let l = log.display();
    // A stops slowly (2 s TERM handler), so that B, which superseded it,
    // is still waiting when C supersedes both.
    let mut first = a.spawn(&run_args(
        &url,
        "deploy",
        "supersede",
        &format!("echo A >> {l}; trap 'sleep 2; echo A-end >> {l}; exit 0' TERM; sleep 60 & wait"),
    ));
    wait_until(Duration::from_secs(20), || {
        lines(&log).contains(&"A".into())
    });
    let out = a.run(&["--backend", &url, "group", "status", "deploy", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["mode"], "supersede", "{st}");
    assert_eq!(st["running"].as_array().map(Vec::len), Some(1), "{st}");
    let mut second = b.spawn(&run_args(
        &url,
        "deploy",
        "supersede",
        &format!("echo B >> {l}"),
    ));
    wait_until(Duration::from_secs(20), || {
        let out = a.run(&["--backend", &url, "group", "status", "deploy", "--json"]);
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        st["waiting"].as_array().is_some_and(|w| w.len() == 1)
    });
    let out = b.run(&run_args(
        &url,
        "deploy",
        "supersede",
        &format!("echo C >> {l}"),
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(second.wait().unwrap().code(), Some(79), "B never ran");
    assert_eq!(first.wait().unwrap().code(), Some(79));
    assert_eq!(lines(&log), ["A", "A-end", "C"]);
    let out = a.run(&["--backend", &url, "group", "status", "deploy", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(st["mode"].is_null(), "idle afterwards: {st}");
    // Finished runs are not counted on PostgreSQL: the counters say so
    // (null), rather than read 0 after three runs.
    for counter in ["completed", "superseded", "skipped"] {
        assert!(st[counter].is_null(), "{counter}: {st}");
    }
    let out = a.run(&["--backend", &url, "group", "status", "deploy"]);
    assert!(!stdout(&out).contains("completed"), "{}", stdout(&out));
}

/// Start/end intervals of the runs in `log` ("ID start NS" / "ID end NS"):
/// panics if two overlap.
fn assert_no_overlap(log: &[String]) {
    let mut events: Vec<(u128, i32)> = log
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_, what, t) = (w.next()?, w.next()?, w.next()?);
            Some((t.parse().ok()?, if what == "start" { 1 } else { -1 }))
        })
        .collect();
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    assert!(most <= 1, "{most} ran at once: {log:?}");
}

#[test]
fn supersede_arrivals_at_once_end_superseded_never_in_error_and_never_overlap() {
    // A newer run's pg_cancel_backend may land on any statement of the
    // run it marked (recording its grant, telling the runs it marked),
    // not only on its wait: that run must still end superseded (79).
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    for round in 0..3 {
        let log = a.path(&format!("log{round}"));
        let l = log.display();
        let script = format!(
            "echo \"$BATON_RUN_ID start $(date +%s%N)\" >> {l}; trap 'echo \"$BATON_RUN_ID end $(date +%s%N)\" >> {l}; exit 0' TERM; sleep 0.5 & wait; echo \"$BATON_RUN_ID end $(date +%s%N)\" >> {l}"
        );
        let long = format!(
            "echo \"$BATON_RUN_ID start $(date +%s%N)\" >> {l}; trap 'echo \"$BATON_RUN_ID end $(date +%s%N)\" >> {l}; exit 0' TERM; sleep 60 & wait"
        );
        let mut first = a.spawn(&run_args(&url, "burst", "supersede", &long));
        wait_until(Duration::from_secs(20), || !lines(&log).is_empty());
        let started = Instant::now();
        let mut children: Vec<_> = (0..8)
            .map(|i| {
                let env = if i % 2 == 0 { &a } else { &b };
                env.spawn(&run_args(&url, "burst", "supersede", &script))
            })
            .collect();
        let mut winners = 0;
        for c in children.drain(..) {
            let out = c.wait_with_output().unwrap();
            match code(&out) {
                0 => winners += 1,
                79 => {}
                other => panic!("round {round}: exit {other}: {}", stderr(&out)),
            }
        }
        assert_eq!(first.wait().unwrap().code(), Some(79), "round {round}");
        assert!(winners >= 1, "round {round}: nobody ran");
        assert_no_overlap(&lines(&log));
        eprintln!(
            "round {round}: 8 supersede arrivals at once: {winners} ran, the rest superseded, all done after {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_group_key_that_is_also_a_lock_name_leaves_lock_status_list_and_break_alone() {
    // A group's slot is a lock of kind `group`; `lock status`, `lock list`
    // and `lock break` are about locks of kind `lock` of the same name.
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let (marker, release) = (a.path("started"), a.path("release"));
    let mut group_run = a.spawn(&run_args(
        &url,
        "shared",
        "queue",
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            marker.display(),
            release.display()
        ),
    ));
    wait_until(Duration::from_secs(20), || marker.exists());
    // The lock of that name is free while the group runs.
    let out = b.run(&[
        "--backend",
        &url,
        "run",
        "--lock",
        "shared",
        "--wait",
        "0",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = b.run(&["--backend", &url, "lock", "status", "shared", "--json"]);
    assert_eq!(code(&out), 0, "lock status: {}", stderr(&out));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["held"], false, "{st}");
    let out = b.run(&["--backend", &url, "lock", "list", "--json"]);
    assert_eq!(code(&out), 0, "lock list: {}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("\"shared\"").count(),
        1,
        "one lock named shared (the group is not a lock): {text}"
    );
    let out = b.run(&["--backend", &url, "lock", "break", "shared"]);
    eprintln!("lock break: exit {:?} {}", out.status.code(), stderr(&out));
    let out = a.run(&["--backend", &url, "group", "status", "shared", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["running"].as_array().map(Vec::len), Some(1), "{st}");
    std::fs::write(&release, "").unwrap();
    assert_eq!(
        group_run.wait().unwrap().code(),
        Some(0),
        "the group's run is not the lock's holder"
    );
}

#[test]
fn max_pending_does_not_count_a_run_about_to_take_a_free_slot() {
    // Two arrivals at once on an idle group with --max-pending 1: one runs,
    // one waits; neither is refused, whichever registers first.
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    for round in 0..4 {
        let mut args = run_args(&url, "pending", "queue", "sleep 0.3");
        args.splice(5..5, ["--max-pending", "1"]);
        let mut first = a.spawn(&args);
        let mut second = b.spawn(&args);
        let (x, y) = (first.wait().unwrap().code(), second.wait().unwrap().code());
        eprintln!("round {round}: exits {x:?} {y:?}");
        assert_eq!((x, y), (Some(0), Some(0)), "round {round}");
    }
}

#[test]
fn a_waiting_run_marked_while_a_dead_holder_stops_leaves_at_once() {
    // A's session is terminated; A's supervisor stops its command (a slow
    // TERM handler), and B, granted the server's lock, waits for that.
    // C then supersedes B (coalesce): B must leave now, not once A's
    // command has ended (the cancel used to land between B's polls).
    let db = TestDb::new();
    let (a, b, url) = machines(&db);
    let log = a.path("log");
    let l = log.display();
    let script = format!(
        "echo A >> {l}; trap 'echo A-term >> {l}; sleep 5; echo A-end >> {l}; exit 0' TERM; sleep 60 & wait"
    );
    let mut args = run_args(&url, "build", "coalesce", &script);
    args[8] = "8s"; // --grace: longer than the TERM handler
    let mut first = a.spawn(&args);
    wait_until(Duration::from_secs(20), || {
        lines(&log).contains(&"A".into())
    });
    let mut second = b.spawn(&run_args(&url, "build", "coalesce", "echo B >> /dev/null"));
    wait_until(Duration::from_secs(20), || {
        db.scalar("SELECT count(*) FROM baton_group_runs WHERE state = 'waiting'")
            .as_deref()
            == Some("1")
    });
    db.query(
        "SELECT pg_terminate_backend(session_pid) FROM baton_group_runs WHERE state = 'running'",
    );
    wait_until(Duration::from_secs(20), || {
        lines(&log).contains(&"A-term".into())
    });
    std::thread::sleep(Duration::from_millis(300)); // B reaches the settling wait
    let launched = Instant::now();
    let mut third = a.spawn(&run_args(&url, "build", "coalesce", "true"));
    assert_eq!(second.wait().unwrap().code(), Some(79), "B superseded");
    let left = launched.elapsed();
    assert!(
        !lines(&log).contains(&"A-end".into()),
        "B left only after A's command ended ({left:?} after C arrived)"
    );
    eprintln!(
        "a waiting run marked while a dead holder stops left {left:?} after the newer run arrived"
    );
    assert_eq!(first.wait().unwrap().code(), Some(76));
    assert_eq!(third.wait().unwrap().code(), Some(0));
}
