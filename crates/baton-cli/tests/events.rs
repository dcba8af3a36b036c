#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! The event log under load: rotation at `BATON_EVENTS_MAX_BYTES` with many
//! `baton run --group` processes appending at once, and `baton events
//! [--follow]` reading across rotations.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use crate::common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{stderr, stdout, Env};

const MAX_BYTES_ENV: &str = "BATON_EVENTS_MAX_BYTES";

/// `baton run --group KEY -- sh -c 'echo $BATON_RUN_ID'` with the log bounded
/// at `max` bytes; returns the run id.
fn run_in_group(env: &Env, key: &str, max: u64) -> String {
    let out = env
        .baton(&[
            "run",
            "--group",
            key,
            "--",
            "sh",
            "-c",
            "echo $BATON_RUN_ID",
        ])
        .env(MAX_BYTES_ENV, max.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "run failed: {}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    assert!(!id.is_empty(), "no run id printed");
    id
}

/// The lines of one log file (none if it does not exist); asserts it ends
/// with a whole line.
fn file_lines(path: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        r => r.unwrap(),
    };
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} ends in a partial line",
        path.display()
    );
    text.lines().map(String::from).collect()
}

/// `events.jsonl.1` then `events.jsonl`: every line the log still holds,
/// oldest first.
fn log_lines(env: &Env) -> Vec<String> {
    let mut lines = file_lines(&env.dir.join("events.jsonl.1"));
    lines.extend(file_lines(&env.dir.join("events.jsonl")));
    lines
}

fn parse(line: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("torn line {line:?}: {e}"));
    for field in ["ts", "group", "run_id", "event", "pid"] {
        assert!(v.get(field).is_some(), "line without {field}: {line}");
    }
    v
}

fn assert_no_duplicates(lines: &[String]) {
    let mut seen = HashSet::new();
    for l in lines {
        assert!(seen.insert(l), "duplicated line: {l}");
    }
}

#[test]
fn rotation_with_concurrent_appenders_keeps_lines_whole_unique_recent_and_bounded() {
    const WORKERS: usize = 8;
    const RUNS: usize = 50;
    const MAX: u64 = 2048;
    let env = Env::new();
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                for _ in 0..RUNS {
                    let out = env
                        .baton(&["run", "--group", "g", "--", "true"])
                        .env(MAX_BYTES_ENV, MAX.to_string())
                        .stdin(Stdio::null())
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "run failed: {}", stderr(&out));
                }
            });
        }
    });
    // The newest events: a last run, after all the others.
    let last = run_in_group(&env, "g", MAX);

    // Each file holds less than MAX + one line.
    for name in ["events.jsonl", "events.jsonl.1"] {
        let path = env.dir.join(name);
        let longest = file_lines(&path).iter().map(|l| l.len() as u64 + 1).max();
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(
            size < MAX + longest.unwrap_or(0),
            "{name} is {size} bytes, over {MAX} + one line"
        );
    }
    // A file is renamed only once it reached the bound, by the appender that
    // crossed it (a second, late rotation would rename a young, small file).
    let old = std::fs::metadata(env.dir.join("events.jsonl.1"));
    let old_size = old.map(|m| m.len()).expect("the log was never rotated");
    assert!(
        old_size >= MAX,
        "events.jsonl.1 is {old_size} bytes: rotated early"
    );
    let lines = log_lines(&env);
    let written = WORKERS * RUNS * 3 + 3;
    // Keeping under a tenth of what was written, with both files bounded,
    // means the log was rotated many times.
    assert!(
        lines.len() * 10 < written,
        "{} of {written} lines kept: not rotated",
        lines.len()
    );

    // Whole, unique, and a suffix of what was appended: a run's later events
    // follow its earlier ones, so any event of a run that is kept is followed
    // by all its later events (a line lost in a rotation breaks this).
    assert_no_duplicates(&lines);
    let mut by_run: HashMap<String, Vec<String>> = HashMap::new();
    for l in &lines {
        let v = parse(l);
        assert_eq!(v["group"], "g");
        by_run
            .entry(v["run_id"].as_str().unwrap().to_string())
            .or_default()
            .push(v["event"].as_str().unwrap().to_string());
    }
    let lifecycle = ["queued", "started", "finished"];
    for (run, events) in &by_run {
        let from = 3 - events.len();
        assert_eq!(
            events[..],
            lifecycle[from..],
            "run {run}: kept events are not its last ones in order"
        );
    }
    let tail: Vec<serde_json::Value> = lines[lines.len() - 3..].iter().map(|l| parse(l)).collect();
    for (v, event) in tail.iter().zip(lifecycle) {
        assert_eq!(v["run_id"], last.as_str(), "newest events missing");
        assert_eq!(v["event"], event);
    }

    // `baton events` prints the rotated file, then the log.
    let out = env.run(&["events"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Vec<String> = stdout(&out).lines().map(String::from).collect();
    assert_eq!(printed, lines);
}

#[test]
fn follow_sees_every_event_of_a_burst_once_across_rotations() {
    const WRITERS: usize = 4;
    const RUNS: usize = 50;
    const MAX: u64 = 16 * 1024;
    let env = Env::new();
    let seed = run_in_group(&env, "f", MAX);

    let mut follower = env
        .baton(&["events", "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let pipe = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: Vec<String> = Vec::new();
    // Reads lines from the follower until `done` holds for the last one.
    let read_until = |seen: &mut Vec<String>, done: &dyn Fn(&serde_json::Value) -> bool| loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("follower stalled ({e}) after {} lines", seen.len()));
        let v = parse(&line);
        seen.push(line);
        if done(&v) {
            return;
        }
    };
    let finished = |id: String| {
        move |v: &serde_json::Value| v["run_id"] == id.as_str() && v["event"] == "finished"
    };
    // The seed's events come first, read from the file: the follower is
    // watching from now on.
    read_until(&mut seen, &finished(seed.clone()));

    let burst: Vec<String> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                s.spawn(|| {
                    (0..RUNS)
                        .map(|_| run_in_group(&env, "f", MAX))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let sentinel = run_in_group(&env, "f", MAX);
    read_until(&mut seen, &finished(sentinel));
    follower.kill().unwrap();
    follower.wait().unwrap();
    reader.join().unwrap();

    assert_no_duplicates(&seen);
    let mut by_run: HashMap<String, Vec<String>> = HashMap::new();
    for l in &seen {
        let v = parse(l);
        by_run
            .entry(v["run_id"].as_str().unwrap().to_string())
            .or_default()
            .push(v["event"].as_str().unwrap().to_string());
    }
    for id in &burst {
        assert_eq!(
            by_run.get(id).map(|e| &e[..]).unwrap_or_default(),
            ["queued", "started", "finished"],
            "run {id}: events seen by the follower"
        );
    }

    // The burst forced rotations: some of its events are in no file any
    // more, yet the follower printed them.
    assert!(env.dir.join("events.jsonl.1").exists(), "never rotated");
    let kept: HashSet<String> = log_lines(&env)
        .iter()
        .map(|l| parse(l)["run_id"].as_str().unwrap().to_string())
        .collect();
    let dropped = burst.iter().filter(|id| !kept.contains(*id)).count();
    assert!(
        dropped > 0,
        "every burst run is still in the log: no rotation dropped a file"
    );
}
