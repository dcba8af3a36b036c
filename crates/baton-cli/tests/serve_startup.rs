#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! How `baton serve` starts, as a hostile operator sees it (issue 21): one
//! SQLite store is owned by one service; a start that fails changes
//! nothing in the store; a restart after `kill -9` listens at once and
//! stops the old jobs' leftovers in the background, keeping their slots.
//! A real `baton serve` on 127.0.0.1, real processes, real signals.

use crate::serve_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{alive, lingering, pids, sh_config, wait_until_gone, Server};

fn status(j: &Value) -> &str {
    j["status"].as_str().unwrap_or("")
}

/// `baton --dir DIR ARGS` in `tmp` with a cleared environment.
fn baton_in(tmp: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", tmp)
        .current_dir(tmp)
        .arg("--dir")
        .arg(dir)
        .args(args);
    c
}

/// Runs a `baton serve` that is expected to refuse to start: it must exit
/// within 60 s (it is killed, and the test fails, if it listens instead).
fn failed_start(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the second `baton serve` did not refuse to start: stdout {:?}, stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every job of the SQLite store at `db` as (id, status), read with the
/// `sqlite3` shell (which must be installed: the test fails otherwise).
fn stored(db: &Path) -> Vec<(String, String)> {
    let out = Command::new("sqlite3")
        .arg(db)
        .arg("SELECT id || ' ' || status FROM jobs ORDER BY seq")
        .output()
        .expect("the sqlite3 shell is needed to read the store");
    assert!(
        out.status.success(),
        "sqlite3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_second_service_on_the_same_sqlite_store_refuses_to_start_and_touches_nothing() {
    let store = "store = \"sqlite://{tmp}/shared.db\"";
    let s = Server::start(&sh_config(store), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let running = s.submit(json!({"prompt": lingering(&t, "a", false)}));
    let old = pids(&t, "a");
    let queued = s.submit(json!({"prompt": format!("echo ran > {t}/q.ran")}));

    // Another baton dir, the same store file.
    let other = s.path("other");
    let config = s.config.display().to_string();
    let out = failed_start(baton_in(
        s.tmp.path(),
        &other,
        &["serve", "--config", &config, "--listen", "127.0.0.1:0"],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    assert!(err.contains(&format!("{t}/shared.db")), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // The first service's jobs are as they were, and it goes on.
    assert_eq!(status(&s.job(&running)), "running");
    assert_eq!(status(&s.job(&queued)), "queued");
    for p in &old {
        assert!(alive(*p), "process {p} of the running job was stopped");
    }
    assert!(!Path::new(&format!("{t}/q.ran")).exists());
    let (_, h) = s.get("/health");
    assert_eq!(h["active"], 1, "{h}");
    assert_eq!(h["queued"], 1, "{h}");
    assert_eq!(s.cancel(&running).0, 200);
    assert_eq!(status(&s.wait_final(&queued)), "succeeded");
}

#[test]
fn a_start_that_cannot_bind_its_port_leaves_every_job_as_it_was() {
    let mut s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let running = s.submit(json!({"prompt": lingering(&t, "a", false)}));
    let old = pids(&t, "a");
    let queued = s.submit(json!({"prompt": format!("echo ran >> {t}/q.ran")}));
    s.kill9();
    let db = s.dir.join("serve.db");
    let before = stored(&db);
    // (The run library may end them with the service: compare, do not assume.)
    let alive_before: Vec<bool> = old.iter().map(|p| alive(*p)).collect();
    assert_eq!(
        before,
        vec![
            (running.clone(), "running".to_string()),
            (queued.clone(), "queued".to_string())
        ]
    );

    // The port is taken: the start fails.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let config = s.config.display().to_string();
    let out = failed_start(s.baton(&["serve", "--config", &config, "--listen", &addr]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(err.contains(&addr), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");

    assert_eq!(stored(&db), before, "the failed start changed the store");
    assert!(
        !Path::new(&format!("{t}/q.ran")).exists(),
        "the failed start ran a queued job"
    );
    let alive_after: Vec<bool> = old.iter().map(|p| alive(*p)).collect();
    assert_eq!(
        alive_after, alive_before,
        "the failed start stopped {old:?}"
    );

    // A start that works recovers as usual.
    drop(taken);
    s.spawn();
    let j = s.wait_final(&running);
    assert_eq!(status(&j), "interrupted", "{j}");
    assert_eq!(status(&s.wait_final(&queued)), "succeeded");
    assert_eq!(
        std::fs::read_to_string(format!("{t}/q.ran")).unwrap(),
        "ran\n"
    );
    for p in &old {
        wait_until_gone(*p);
    }
}

#[test]
fn a_restart_after_kill9_listens_at_once_and_keeps_the_old_jobs_slots_until_their_leftovers_are_gone(
) {
    // Four commands that ignore SIGTERM: each takes the whole grace to
    // stop. One after another before listening, that is 4 x 15 s; in the
    // background, all at once, the service listens at once and the old jobs
    // keep their slots for 15 s.
    let config = sh_config("").replace("grace = \"1s\"", "grace = \"15s\"");
    let mut s = Server::start(&config, &["--max-concurrency", "4"]);
    let t = s.tmp();
    let names = ["a", "b", "c", "d"];
    let old_jobs: Vec<String> = names
        .iter()
        .map(|n| s.submit(json!({"prompt": lingering(&t, n, true)})))
        .collect();
    let old_by_job: Vec<Vec<i32>> = names.iter().map(|n| pids(&t, n)).collect();
    let old: Vec<i32> = old_by_job.iter().flatten().copied().collect();
    s.kill9();

    let start = Instant::now();
    s.spawn();
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the restart took {took:?} to listen"
    );
    let (code, h) = s.get("/health");
    assert_eq!(code, 200, "{h}");

    // Each old job keeps its slot until its own leftovers are gone; the
    // four are stopped at once but not in the same microsecond, so the new
    // job (all four slots taken) may start as soon as the first old job is
    // wholly gone, beside the last moments of the others. It records the
    // state of each old process when it starts ("pid state", `gone` when
    // the process no longer exists).
    let list = old
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let check = PathBuf::from(format!("{t}/new.check"));
    let new = s.submit(json!({"prompt": format!(
        "for p in {list}; do st=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -c1); \
         echo \"$p ${{st:-gone}}\"; done > {t}/new.tmp; mv {t}/new.tmp {}",
        check.display()
    )}));
    // Right after the restart the old jobs still hold their slots.
    let some_alive = old.iter().any(|p| alive(*p));
    assert!(some_alive, "the leftovers were stopped before listening");
    assert_eq!(status(&s.job(&new)), "queued", "{}", s.job(&new));

    let j = s.wait_final(&new);
    assert_eq!(status(&j), "succeeded", "{j}");
    let seen = std::fs::read_to_string(&check).unwrap();
    let state: std::collections::HashMap<i32, String> = seen
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(p, st)| (p.parse().unwrap(), st.to_string()))
        .collect();
    assert_eq!(state.len(), old.len(), "{seen}");
    let ended = |p: &i32| matches!(state[p].as_str(), "Z" | "X" | "gone");
    assert!(
        old_by_job.iter().any(|job| job.iter().all(ended)),
        "the new job started while every old job still had a process running: {seen}"
    );
    for id in &old_jobs {
        let j = s.wait_final(id);
        assert_eq!(status(&j), "interrupted", "{j}");
    }
    // All at once: about one grace, where one after another takes four.
    let recovered = start.elapsed();
    assert!(
        recovered < Duration::from_secs(45),
        "stopping the leftovers took {recovered:?}"
    );
    for p in &old {
        wait_until_gone(*p);
    }
}
