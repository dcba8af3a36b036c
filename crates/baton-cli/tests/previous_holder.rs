#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The next holder learns that the previous one died (issue 26, item 5):
//! `BATON_PREVIOUS_HOLDER_DIED=1` for `baton run --lock` and `--group`, and
//! `previous_holder_died` with the dead holder in `lock acquire --json` and
//! `lock status --json`; a clean release is not a death. Real binary, real
//! SIGKILL.

use crate::common;

use std::fs;
use std::process::Child;
use std::time::Duration;

use common::{code, first_json_of, shell, stderr, stdout, wait_until, Env};

const BATON: &str = env!("CARGO_BIN_EXE_baton");

fn sigkill(child: &mut Child) {
    // SAFETY: plain kill(2) on our own child's pid, which it still is (not reaped).
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(rc, 0);
    child.wait().unwrap();
}

/// Starts `baton ARGS -- sh -c '...'` whose command touches `ready` and then
/// sleeps; returns once it runs.
fn start_holding(env: &Env, args: &[&str], ready: &str) -> Child {
    let ready = env.path(ready);
    let script = format!("touch '{}'; exec sleep 600", ready.display());
    let mut all = args.to_vec();
    all.extend(["--", "sh", "-c", &script]);
    let child = env.spawn(&all);
    wait_until(Duration::from_secs(30), || ready.exists());
    child
}

/// `baton ARGS -- sh -c 'echo died=$BATON_PREVIOUS_HOLDER_DIED'`: what it printed.
fn told(env: &Env, args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--", "sh", "-c", "echo died=$BATON_PREVIOUS_HOLDER_DIED"]);
    let out = env.run(&all);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

#[test]
fn a_run_whose_supervisor_was_killed_tells_the_next_holder() {
    let env = Env::new();
    let mut first = start_holding(
        &env,
        &["run", "--lock", "repo", "--operation", "edit"],
        "ready",
    );
    let held = env.status("repo");
    assert_eq!(held["previous_holder_died"], false, "{held}");
    let dead = held["holder"].clone();
    sigkill(&mut first);
    env.wait_for_held("repo", false);

    let st = env.status("repo");
    assert_eq!(st["previous_holder_died"], true, "{st}");
    for field in ["pid", "run_id", "token", "owner", "operation"] {
        assert_eq!(st["previous_holder"][field], dead[field], "{field}: {st}");
    }
    assert_eq!(st["previous_holder"]["operation"], "edit");

    // The next holder is told, and `status` says so while it holds the lock.
    let release = env.path("release");
    let script = format!(
        "echo died=$BATON_PREVIOUS_HOLDER_DIED > '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        env.path("second").display(),
        release.display()
    );
    let second = env.spawn(&["run", "--lock", "repo", "--", "sh", "-c", &script]);
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(env.path("second")).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(
        fs::read_to_string(env.path("second")).unwrap().trim(),
        "died=1"
    );
    let st = env.status("repo");
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["previous_holder_died"], true, "{st}");
    assert_eq!(st["previous_holder"]["run_id"], dead["run_id"], "{st}");
    fs::write(&release, "").unwrap();
    let out = second.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // That one released cleanly: nobody after it is told anything.
    let st = env.status("repo");
    assert_eq!(st["previous_holder_died"], false, "{st}");
    assert_eq!(st["previous_holder"], serde_json::Value::Null, "{st}");
    assert_eq!(told(&env, &["run", "--lock", "repo"]), "died=");
}

/// The pull-modify-commit-push case: other agents already wait in line when
/// the holder is killed. The kernel frees the lock while the killed
/// supervisor is still exiting (not yet a zombie), so the first waiter meets
/// its record with its process still there: it must count as dead, not as
/// a holder in the middle of a clean release. Several rounds, because the
/// window is a race (before the fix about half the rounds were told nothing).
#[test]
fn a_waiter_in_line_when_the_holder_is_killed_is_told() {
    let env = Env::new();
    for round in 0..8 {
        let ready = format!("ready{round}");
        let mut first = start_holding(&env, &["run", "--lock", "line"], &ready);
        let waiter = env.spawn(&[
            "run",
            "--lock",
            "line",
            "--",
            "sh",
            "-c",
            "echo died=$BATON_PREVIOUS_HOLDER_DIED",
        ]);
        env.wait_for_waiters("line", 1);
        sigkill(&mut first);
        let out = waiter.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(stdout(&out).trim(), "died=1", "round {round}");
    }
}

#[test]
fn a_clean_release_is_not_a_death() {
    let env = Env::new();
    assert_eq!(told(&env, &["run", "--lock", "quiet"]), "died=");
    assert_eq!(told(&env, &["run", "--lock", "quiet"]), "died=");
    // A command that fails is not a holder that died.
    let out = env.run(&["run", "--lock", "quiet", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code(&out), 3);
    assert_eq!(told(&env, &["run", "--lock", "quiet"]), "died=");
}

#[test]
fn a_group_run_whose_supervisor_was_killed_tells_the_next_run() {
    let env = Env::new();
    let mut first = start_holding(&env, &["run", "--group", "deploy"], "ready");
    let group_status = || -> serde_json::Value {
        let out = env.run(&["group", "status", "deploy", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let running = group_status();
    assert_eq!(running["previous_holder_died"], false, "{running}");
    let run_id = running["running"][0]["run_id"].clone();
    sigkill(&mut first);
    let st = group_status();
    assert_eq!(st["previous_holder_died"], true, "{st}");
    assert_eq!(st["previous_holder"]["run_id"], run_id, "{st}");
    assert_eq!(told(&env, &["run", "--group", "deploy"]), "died=1");
    assert_eq!(told(&env, &["run", "--group", "deploy"]), "died=");
    assert_eq!(group_status()["previous_holder_died"], false);
}

/// A script that took the lock with `baton lock acquire` and was killed
/// before `baton lock release`: the next `lock acquire --json` names it.
#[test]
fn lock_acquire_after_a_script_was_killed_reports_the_dead_holder() {
    let env = Env::new();
    let dir = env.dir.to_str().unwrap();
    let first_json = env.path("first.json");
    let script = format!(
        "'{BATON}' --dir '{dir}' lock acquire memory --operation 'pull-modify-push' --json > '{}' || exit 1; while :; do sleep 0.05; done",
        first_json.display()
    );
    let mut script_proc = shell(env.tmp.path(), &script).spawn().unwrap();
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(&first_json).is_ok_and(|s| s.trim_end().ends_with('}'))
    });
    let first: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&first_json).unwrap()).unwrap();
    assert_eq!(first["previous_holder_died"], false, "{first}");
    sigkill(&mut script_proc);
    env.wait_for_held("memory", false);
    let st = env.status("memory");
    assert_eq!(st["previous_holder_died"], true, "{st}");

    let acquire = |name: &str| -> serde_json::Value {
        let script = format!(
            "'{BATON}' --dir '{dir}' lock acquire {name} --json && '{BATON}' --dir '{dir}' lock release {name}"
        );
        first_json_of(env.tmp.path(), &script)
    };
    let second = acquire("memory");
    assert_eq!(second["previous_holder_died"], true, "{second}");
    let prev = &second["previous_holder"];
    assert_eq!(prev["run_id"], first["run_id"], "{second}");
    assert_eq!(prev["token"], first["token"], "{second}");
    assert_eq!(prev["pid"], first["holder_pid"], "{second}");
    assert_eq!(prev["operation"], "pull-modify-push", "{second}");
    assert!(prev["owner"].as_str().is_some_and(|o| !o.is_empty()));
    // The second script released: the third is told nothing.
    let third = acquire("memory");
    assert_eq!(third["previous_holder_died"], false, "{third}");
    assert_eq!(third["previous_holder"], serde_json::Value::Null);
}
