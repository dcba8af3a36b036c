#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Concurrency groups (`baton run --group`): the scenarios with the
//! real binary, real children and real signals.

use crate::common;

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{code, stderr, stdout, wait_for_file, wait_until, Env};

fn group_json(env: &Env, key: &str) -> serde_json::Value {
    let out = env.run(&["group", "status", key, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for_group(env: &Env, key: &str, running: usize, waiting: usize) {
    wait_until(Duration::from_secs(20), || {
        let g = group_json(env, key);
        g["running"].as_array().map_or(0, Vec::len) == running
            && g["waiting"].as_array().map_or(0, Vec::len) == waiting
    });
}

#[test]
fn supersede_five_runs_only_the_newest_completes_and_the_others_got_term() {
    let env = Env::new();
    let out = env.path("out");
    let terms = env.path("terms");
    let mut kids = Vec::new();
    for n in 1..=5 {
        let cmd = format!(
            "trap 'echo {n} >> {t}; exit 1' TERM; sleep 3 & wait; echo {n} >> {o}",
            t = terms.display(),
            o = out.display()
        );
        kids.push(env.spawn(&[
            "run",
            "--group",
            "issue/42",
            "--mode",
            "supersede",
            "--",
            "sh",
            "-c",
            &cmd,
        ]));
        // Arrival order is the order of joining the group: each supersede
        // arrival bumps the generation; wait for this one's before the next.
        wait_until(Duration::from_secs(20), || {
            group_json(&env, "issue/42")["generation"] == n
        });
    }
    let codes: Vec<i32> = kids
        .into_iter()
        .map(|k| code(&k.wait_with_output().unwrap()))
        .collect();
    assert_eq!(codes, vec![79, 79, 79, 79, 0]);
    assert_eq!(
        fs::read_to_string(&out).unwrap(),
        "5\n",
        "only the fifth wrote"
    );
    let mut got: Vec<String> = fs::read_to_string(&terms)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    got.sort();
    // Runs superseded while still waiting never started; those that ran got TERM.
    assert!(
        !got.is_empty()
            && got
                .iter()
                .all(|n| ["1", "2", "3", "4"].contains(&n.as_str())),
        "{got:?}"
    );
    let g = group_json(&env, "issue/42");
    assert_eq!(g["superseded"], 4);
    assert_eq!(g["completed"], 1);
    let events: Vec<serde_json::Value> = stdout(&env.run(&["events", "--group", "issue/42"]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let superseded: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "superseded")
        .map(|e| e["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(superseded.len(), 4);
    // Only runs that took the slot can have had their command TERMed; one
    // superseded right after taking it may be stopped before its command
    // ran its first line (it is cancelled before exec), so not all of them.
    let started_then_superseded = superseded
        .iter()
        .filter(|id| {
            events
                .iter()
                .any(|e| e["event"] == "started" && e["run_id"] == **id)
        })
        .count();
    assert!(
        got.len() <= started_then_superseded,
        "{got:?} vs {events:?}"
    );
}

#[test]
fn different_keys_run_in_parallel() {
    let env = Env::new();
    // Each command marks that it runs and waits (30 s or more) until
    // the other's mark exists: both succeed only if they ran at the same time.
    let (mark_a, mark_b) = (env.path("a-runs"), env.path("b-runs"));
    let meet = |mine: &std::path::Path, other: &std::path::Path| {
        format!(
            "touch {m}; i=0; while [ ! -e {o} ]; do i=$((i+1)); [ $i -le 1500 ] || exit 1; sleep 0.02; done",
            m = mine.display(),
            o = other.display()
        )
    };
    let a = env.spawn(&[
        "run",
        "--group",
        "a",
        "--",
        "sh",
        "-c",
        &meet(&mark_a, &mark_b),
    ]);
    let b = env.spawn(&[
        "run",
        "--group",
        "b",
        "--",
        "sh",
        "-c",
        &meet(&mark_b, &mark_a),
    ]);
    let a = a.wait_with_output().unwrap();
    let b = b.wait_with_output().unwrap();
    assert!(
        a.status.success() && b.status.success(),
        "keys serialised: {} / {}",
        stderr(&a),
        stderr(&b)
    );
}

#[test]
fn queue_runs_one_at_a_time_in_arrival_order() {
    let env = Env::new();
    let order = env.path("order");
    let running = env.path("running");
    fs::create_dir(&running).unwrap();
    let mut kids = Vec::new();
    for i in 0..5 {
        let cmd = format!(
            "test -z \"$(ls {r})\" || echo OVERLAP >> {o}; touch {r}/$$; echo {i} >> {o}; sleep 0.1; rm {r}/$$",
            r = running.display(),
            o = order.display()
        );
        kids.push(env.spawn(&["run", "--group", "q", "--", "sh", "-c", &cmd]));
        // Arrival order is the order of joining the group: wait until this
        // run has joined (its "queued" event) before starting the next.
        wait_until(Duration::from_secs(20), || {
            let events = stdout(&env.run(&["events", "--group", "q"]));
            events.lines().filter(|l| l.contains("\"queued\"")).count() > i
        });
    }
    for k in kids {
        assert!(k.wait_with_output().unwrap().status.success());
    }
    assert_eq!(fs::read_to_string(&order).unwrap(), "0\n1\n2\n3\n4\n");
    assert_eq!(group_json(&env, "q")["completed"], 5);
}

#[test]
fn coalesce_runs_the_current_one_then_only_the_latest_arrival() {
    let env = Env::new();
    let out = env.path("out");
    let release = env.path("release");
    let first_cmd = format!(
        "while ! test -e {r}; do sleep 0.02; done; echo 1 >> {o}",
        r = release.display(),
        o = out.display()
    );
    let first = env.spawn(&[
        "run", "--group", "c", "--mode", "coalesce", "--", "sh", "-c", &first_cmd,
    ]);
    wait_for_group(&env, "c", 1, 0);
    let mut later = Vec::new();
    for n in 2..=4 {
        let cmd = format!("echo {n} >> {}", out.display());
        later.push(env.spawn(&[
            "run", "--group", "c", "--mode", "coalesce", "--", "sh", "-c", &cmd,
        ]));
        wait_until(Duration::from_secs(20), || {
            group_json(&env, "c")["waiting"]
                .as_array()
                .map_or(0, Vec::len)
                == 1
                && group_json(&env, "c")["waiting"][0]["command"]
                    .as_str()
                    .unwrap_or("")
                    .contains(&format!("echo {n}"))
        });
    }
    fs::write(&release, "").unwrap();
    assert!(first.wait_with_output().unwrap().status.success());
    let codes: Vec<i32> = later
        .into_iter()
        .map(|k| code(&k.wait_with_output().unwrap()))
        .collect();
    assert_eq!(codes, vec![79, 79, 0]);
    assert_eq!(fs::read_to_string(&out).unwrap(), "1\n4\n");
}

#[test]
fn skip_exits_75_at_once_while_the_group_runs() {
    let env = Env::new();
    let mut first = env.spawn(&[
        "run", "--group", "s", "--mode", "skip", "--", "sleep", "300",
    ]);
    wait_for_group(&env, "s", 1, 0);
    let out = env.run(&["run", "--group", "s", "--mode", "skip", "--", "echo", "ran"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    // "At once": it did not wait for the running one to end.
    assert!(first.try_wait().unwrap().is_none(), "the first run ended");
    assert!(stderr(&out).contains("mode skip"), "{}", stderr(&out));
    assert_eq!(group_json(&env, "s")["skipped"], 1);
    first.kill().unwrap();
    first.wait().unwrap();
}

#[test]
fn a_child_ignoring_term_is_killed_after_grace_and_the_newer_run_starts_at_once() {
    let env = Env::new();
    let started = env.path("started");
    let ignoring = env.path("ignoring");
    let mut old = env.spawn(&[
        "run",
        "--group",
        "t",
        "--mode",
        "supersede",
        "--grace",
        "500ms",
        "--",
        "sh",
        "-c",
        &format!("trap '' TERM; touch {}; sleep 30", ignoring.display()),
    ]);
    // Supersede only once TERM is ignored, or the TERM alone would stop it.
    wait_for_file(&ignoring);
    let t0 = Instant::now();
    let newer = env.spawn(&[
        "run",
        "--group",
        "t",
        "--mode",
        "supersede",
        "--",
        "sh",
        "-c",
        &format!("touch {}", started.display()),
    ]);
    assert_eq!(old.wait().unwrap().code(), Some(79));
    wait_for_file(&started);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(450),
        "grace respected: {took:?}"
    );
    // Killed after the grace, not ended by its `sleep 30`: a bound far from
    // both, which a loaded machine does not reach.
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(newer.wait_with_output().unwrap().status.success());
}

#[test]
fn killing_the_supervisor_frees_the_key_and_takes_the_child_down() {
    let env = Env::new();
    let pidfile = env.path("child.pid");
    let started = env.path("started");
    let mut sup = env.spawn(&[
        "run",
        "--group",
        "k",
        "--",
        "sh",
        "-c",
        &format!("echo $$ > {}; sleep 30", pidfile.display()),
    ]);
    // Wait for the whole line: an empty file would name no process at all.
    let mut child_pid = String::new();
    wait_until(Duration::from_secs(20), || {
        child_pid = fs::read_to_string(&pidfile).unwrap_or_default();
        child_pid.ends_with('\n')
    });
    let child_pid: i32 = child_pid.trim().parse().unwrap();
    // Its start time tells it apart from a process that reuses its pid later.
    let start_of = |pid: i32| baton_proc::procfs::stat(pid).map(|st| (st.state, st.start_time));
    let (_, child_start) = start_of(child_pid).expect("the command runs");
    let next = env.spawn(&[
        "run",
        "--group",
        "k",
        "--",
        "sh",
        "-c",
        &format!("touch {}", started.display()),
    ]);
    wait_for_group(&env, "k", 1, 1);
    sup.kill().unwrap(); // SIGKILL the baton supervisor
    sup.wait().unwrap();
    // The next run starts well before the command's `sleep 30` could have
    // ended by itself: the key was freed by the supervisor's death.
    wait_until(Duration::from_secs(20), || started.exists());
    assert!(next.wait_with_output().unwrap().status.success());
    // The orphaned command did not keep running unsupervised.
    wait_until(Duration::from_secs(5), || match start_of(child_pid) {
        None => true,
        Some((state, start)) => start != child_start || state == 'Z',
    });
}

#[test]
fn on_superseded_hook_runs_once_with_the_newer_run_id_and_whether_it_started() {
    let env = Env::new();
    let hook_out = env.path("hook");
    let go = env.path("go");
    let hook = format!(
        "echo \"$BATON_RUN_ID $BATON_SUPERSEDED_BY $BATON_RUN_STARTED\" >> {}",
        hook_out.display()
    );
    // The oldest runs, and on TERM lingers until told to go: the run after
    // it waits meanwhile and is superseded while waiting.
    let linger = format!(
        "trap 'while [ ! -e {go} ]; do sleep 0.02; done; exit 1' TERM; echo $BATON_RUN_ID; while :; do sleep 0.05; done",
        go = go.display()
    );
    let run = |cmd: &str| {
        env.spawn(&[
            "run",
            "--group",
            "h",
            "--mode",
            "supersede",
            "--grace",
            "60s",
            "--on-superseded",
            &hook,
            "--",
            "sh",
            "-c",
            cmd,
        ])
    };
    let old = run(&linger);
    wait_for_group(&env, "h", 1, 0);
    let waiter = run("echo $BATON_RUN_ID");
    wait_for_group(&env, "h", 1, 1);
    let newer = env.spawn(&[
        "run",
        "--group",
        "h",
        "--mode",
        "supersede",
        "--",
        "sh",
        "-c",
        "echo $BATON_RUN_ID",
    ]);
    let waiter_out = waiter.wait_with_output().unwrap();
    assert_eq!(code(&waiter_out), 79, "{}", stderr(&waiter_out));
    fs::write(&go, "").unwrap();
    let newer_out = newer.wait_with_output().unwrap();
    assert!(newer_out.status.success(), "{}", stderr(&newer_out));
    let old_out = old.wait_with_output().unwrap();
    assert_eq!(code(&old_out), 79, "{}", stderr(&old_out));
    let old_id = stdout(&old_out).trim().to_string();
    let newer_id = stdout(&newer_out).trim().to_string();
    let hooks = fs::read_to_string(&hook_out).unwrap();
    let mut lines: Vec<&str> = hooks.lines().collect();
    lines.sort_unstable();
    let waiter_line = lines
        .iter()
        .find(|l| !l.starts_with(&old_id))
        .copied()
        .unwrap_or_default();
    assert_eq!(lines.len(), 2, "one hook per superseded run: {hooks}");
    let waiter_id = waiter_line.split(' ').next().unwrap_or_default();
    let old_line = format!("{old_id} {waiter_id} 1");
    assert!(
        lines.contains(&old_line.as_str()),
        "the running one was superseded by the waiter, and had started: {hooks}"
    );
    assert!(
        waiter_line.ends_with(&format!(" {newer_id} 0")),
        "the waiting one was superseded by the newest, before it started: {hooks}"
    );
}

#[test]
fn modes_must_agree_and_max_pending_bounds_the_queue() {
    let env = Env::new();
    let mut first = env.spawn(&["run", "--group", "m", "--", "sleep", "30"]);
    wait_for_group(&env, "m", 1, 0);
    let out = env.run(&["run", "--group", "m", "--mode", "supersede", "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("in use with mode queue"),
        "{}",
        stderr(&out)
    );
    let waiter = env.spawn(&["run", "--group", "m", "--max-pending", "1", "--", "true"]);
    wait_for_group(&env, "m", 1, 1);
    let out = env.run(&["run", "--group", "m", "--max-pending", "1", "--", "true"]);
    assert_eq!(code(&out), 75);
    assert!(stderr(&out).contains("--max-pending 1"), "{}", stderr(&out));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(waiter.wait_with_output().unwrap().status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["run", "--mode", "skip", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 125, "--mode needs --group");
    let out = env.run(&[
        "run",
        "--group",
        "m2",
        "--mode",
        "supersede",
        "--max",
        "2",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("mode queue only"), "{}", stderr(&out));
}

#[test]
fn sigterm_to_baton_is_forwarded_and_the_group_is_left_clean() {
    let env = Env::new();
    let ready = env.path("ready");
    let cmd = format!(
        "trap 'exit 7' TERM; touch {}; while :; do sleep 0.05; done",
        ready.display()
    );
    let run = env.spawn(&["run", "--group", "clean", "--", "sh", "-c", &cmd]);
    wait_for_file(&ready);
    assert!(Command::new("kill")
        .args(["-TERM", &run.id().to_string()])
        .status()
        .unwrap()
        .success());
    assert_eq!(code(&run.wait_with_output().unwrap()), 7);
    let g = group_json(&env, "clean");
    assert_eq!(g["running"].as_array().unwrap().len(), 0, "{g}");
    assert_eq!(g["completed"], 1);
    // A waiter killed while waiting is pruned from the group.
    let mut holder = env.spawn(&["run", "--group", "clean", "--", "sleep", "30"]);
    wait_for_group(&env, "clean", 1, 0);
    let mut waiter = env.spawn(&["run", "--group", "clean", "--", "true"]);
    wait_for_group(&env, "clean", 1, 1);
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    wait_for_group(&env, "clean", 1, 0);
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn events_follow_streams_new_events() {
    use std::io::{BufRead, BufReader};
    let env = Env::new();
    assert!(env
        .run(&["run", "--group", "f", "--", "true"])
        .status
        .success());
    let mut follower = env
        .baton(&["events", "--group", "f", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap()).lines();
    // Existing events first...
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["event"], "queued");
    for _ in 0..2 {
        lines.next().unwrap().unwrap();
    }
    // ...then new ones as they happen.
    assert!(
        env.run(&["run", "--group", "f", "--", "sh", "-c", "exit 3"])
            .status
            .code()
            == Some(3)
    );
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let e: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(e["group"], "f");
        seen.push(e);
    }
    assert_eq!(seen[2]["event"], "finished");
    assert_eq!(seen[2]["code"], 3);
    follower.kill().unwrap();
    follower.wait().unwrap();
}
