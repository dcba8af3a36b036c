#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Regressions found by a hostile review of containment and the lock changes:
//! each test reproduces one way to get two holders, a lost update or a hang.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{code, stderr, stdout, wait_for_file, wait_for_line, wait_until, Env};

const BIN: &str = env!("CARGO_BIN_EXE_baton");

#[test]
fn a_baton_dir_spelled_differently_still_sees_a_holder_through_a_deleted_file() {
    let env = Env::new();
    let d = env.dir.display().to_string();
    let ready = env.path("ready");
    let go = env.path("go");
    let hold = format!(
        "touch {r}; while [ ! -e {g} ]; do sleep 0.01; done",
        r = ready.display(),
        g = go.display()
    );
    let mut first = env.spawn(&["run", "--lock", "x", "--", "sh", "-c", &hold]);
    wait_for_file(&ready);
    fs::remove_file(env.dir.join("locks/x.lock")).unwrap();
    let link = env.path("link");
    std::os::unix::fs::symlink(env.tmp.path(), &link).unwrap();
    for spelling in [
        format!("{d}/"),
        format!("{d}/."),
        format!("{}//baton", env.tmp.path().display()),
        format!("{}/baton", link.display()),
    ] {
        let out = Command::new(BIN)
            .args([
                "--dir",
                &spelling,
                "run",
                "--lock",
                "x",
                "--no-wait",
                "--",
                "echo",
                "ran",
            ])
            .output()
            .unwrap();
        assert_eq!(code(&out), 75, "{spelling}: {}", stdout(&out));
    }
    fs::write(&go, "").unwrap();
    assert!(first.wait().unwrap().success());
}

#[test]
fn a_script_whose_output_is_captured_is_its_own_caller() {
    // As an agent runs a tool: subprocess with stdout captured by the parent.
    let env = Env::new();
    let script = format!(
        "echo $$; {BIN} --dir {d} lock acquire x >/dev/null; {BIN} --dir {d} lock status x --json",
        d = env.dir.display()
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let (pid, json) = text.split_once('\n').unwrap();
    let st: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(
        st["holders"][0]["acquired_for"]["pid"].to_string(),
        pid.trim(),
        "the hold belongs to the script, not to the process capturing its output"
    );
    // The script has exited: its hold ends with it.
    env.wait_for_held("x", false);
}

#[test]
fn ttl_stops_the_scripts_children_before_the_lock_is_free() {
    let env = Env::new();
    let pidfile = env.path("pid");
    let script = format!(
        "{BIN} --dir {d} lock acquire x --ttl 500ms >/dev/null || exit 1; sleep 30 & echo $! > {p}; wait",
        d = env.dir.display(),
        p = pidfile.display()
    );
    let mut sh = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
    let child: i32 = wait_for_line(&pidfile).trim().parse().unwrap();
    // The next holder runs only once the script's child is gone.
    let check = format!(
        "if [ -e /proc/{child} ] && ! grep -q ') [ZX]' /proc/{child}/stat; then echo alive; fi"
    );
    let out = env.run(&["run", "--lock", "x", "--", "sh", "-c", &check]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "",
        "the script's child ran beside the next holder"
    );
    sh.wait().unwrap();
}

#[test]
fn a_release_waits_for_a_borrowed_edit_still_running() {
    let env = Env::new();
    let file = env.path("f.json");
    fs::write(&file, "{\"n\":0}\n").unwrap();
    let bump = |by: u32| {
        format!(
            "python3 -c 'import json,sys; v=json.load(sys.stdin); v[\"n\"]+={by}; print(json.dumps(v))'"
        )
    };
    // The script leaves a slow edit under its hold running and releases the
    // hold. (Had it exited without releasing, the edit would be stopped
    // before the lock is handed over, as everything the script started:
    // `acquire_containment.rs`.)
    let script = format!(
        "{BIN} --dir {d} lock acquire m >/dev/null || exit 1; {BIN} --dir {d} state edit {f} --lock m -- sh -c 'sleep 1; {b}' & sleep 0.3; {BIN} --dir {d} lock release m; exit 0",
        d = env.dir.display(),
        f = file.display(),
        b = bump(1).replace('\'', "'\\''")
    );
    assert!(Command::new("sh")
        .arg("-c")
        .arg(&script)
        .status()
        .unwrap()
        .success());
    let out = env.run(&[
        "state",
        "edit",
        file.to_str().unwrap(),
        "--lock",
        "m",
        "--",
        "sh",
        "-c",
        &bump(100),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    wait_until(Duration::from_secs(20), || {
        fs::read_to_string(&file).is_ok_and(|t| t.contains("101"))
    });
}

#[test]
fn a_lock_file_deleted_twice_never_leaves_its_waiters_waiting_for_each_other() {
    let env = Env::new();
    let go = env.path("go");
    let lock = env.dir.join("locks/x.lock");
    let hold = format!("while [ ! -e {} ]; do sleep 0.01; done", go.display());
    let mut first = env.spawn(&["run", "--lock", "x", "--", "sh", "-c", &hold]);
    env.wait_for_held("x", true);
    fs::remove_file(&lock).unwrap();
    let second = env.spawn(&["run", "--lock", "x", "--", "true"]);
    wait_until(Duration::from_secs(20), || {
        lock.exists() && env.status("x")["held"] == true
    });
    fs::remove_file(&lock).unwrap();
    let third = env.spawn(&["run", "--lock", "x", "--", "true"]);
    wait_until(Duration::from_secs(20), || lock.exists());
    fs::write(&go, "").unwrap();
    assert!(first.wait().unwrap().success());
    // Both finish (before the fix they waited for each other's markers forever).
    let done = |c: std::process::Child| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(c.wait_with_output());
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("a waiter is stuck")
            .unwrap()
    };
    assert!(done(second).status.success());
    assert!(done(third).status.success());
}

/// Runs `script` with `sh -c`, capturing stdout and stderr.
fn sh(script: &str) -> std::process::Output {
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_script_asking_again_for_a_lock_it_holds_is_refused_not_deadlocked() {
    let env = Env::new();
    let script = format!(
        "T=$({BIN} --dir {d} lock acquire x) || exit 1; timeout 20 {BIN} --dir {d} run --lock x -- true; echo rc=$?; {BIN} --dir {d} lock release x --token $T",
        d = env.dir.display()
    );
    let out = sh(&script);
    assert!(
        stdout(&out).contains("rc=125"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stderr(&out).contains("ancestor"), "{}", stderr(&out));
}

/// A script asking again with a bounded wait for a lock it holds gets the
/// deadlock named at once (exit 125), not a wait and "busy" (exit 75).
#[test]
fn a_script_asking_again_with_a_bounded_wait_is_told_of_the_deadlock_at_once() {
    let env = Env::new();
    let script = format!(
        "T=$({BIN} --dir {d} lock acquire x) || exit 1; {BIN} --dir {d} lock acquire x --wait 60s; echo rc=$?; {BIN} --dir {d} lock release x --token $T",
        d = env.dir.display()
    );
    let started = std::time::Instant::now();
    let out = sh(&script);
    let said = format!("{} {}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("rc=125"), "{said}");
    assert!(stderr(&out).contains("would deadlock"), "{said}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "it waited for itself: {said}"
    );
}

/// A release without a token from a background subshell is the script's
/// own (issue 26, item 8): whether the subshell forked a process for it (it
/// is not the subshell's last command) or ran it in its own process (it is:
/// the hold taken inside the subshell was taken for that very process).
#[test]
fn a_release_from_a_background_subshell_is_the_scripts_own() {
    let env = Env::new();
    let script = format!(
        "T=$({BIN} --dir {d} lock acquire x) || exit 1
( sleep 0.1; {BIN} --dir {d} lock release x; echo rc-forked=$? ) &
wait
( T=$({BIN} --dir {d} lock acquire y) || exit 1; {BIN} --dir {d} lock release y ) &
wait $!; echo rc-last=$?",
        d = env.dir.display()
    );
    let out = sh(&script);
    let said = format!("{} {}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("rc-forked=0"), "{said}");
    assert!(stdout(&out).contains("rc-last=0"), "{said}");
    assert!(!said.contains("not for this script"), "{said}");
}

#[test]
fn group_bookkeeping_behind_a_stuck_process_is_bounded() {
    let env = Env::new();
    assert!(env
        .run(&["run", "--group", "g", "--", "true"])
        .status
        .success());
    // Something holds the group's bookkeeping lock and does not let go
    // (a run SIGSTOPped inside its bookkeeping).
    let groups = env.dir.join("groups");
    let ready = env.path("ready");
    let go = env.path("go");
    let hold = format!(
        "touch {r}; while [ ! -e {g} ]; do sleep 0.01; done",
        r = ready.display(),
        g = go.display()
    );
    let mut stuck = Command::new(BIN)
        .args([
            "--dir",
            groups.to_str().unwrap(),
            "run",
            "--lock",
            "g",
            "--",
            "sh",
            "-c",
            &hold,
        ])
        .spawn()
        .unwrap();
    wait_for_file(&ready);
    let out = Command::new("timeout")
        .args([
            "30",
            BIN,
            "--dir",
            env.dir.to_str().unwrap(),
            "run",
            "--group",
            "g",
            "--mode",
            "skip",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_ne!(code(&out), 124, "the run hung behind the stuck bookkeeping");
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    fs::write(&go, "").unwrap();
    assert!(stuck.wait().unwrap().success());
}

#[test]
fn a_lock_file_restored_from_a_backup_does_not_send_tokens_backwards() {
    let env = Env::new();
    let token = || -> u64 {
        let out = env.run(&[
            "run",
            "--lock",
            "x",
            "--",
            "sh",
            "-c",
            "echo $BATON_FENCING_TOKEN",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    };
    let first = token();
    let lock = env.dir.join("locks/x.lock");
    let backup = fs::read(&lock).unwrap();
    let later: Vec<u64> = (0..3).map(|_| token()).collect();
    // Written back into the same file (same inode), as `cp save x.lock` does.
    fs::write(&lock, &backup).unwrap();
    let after = token();
    assert!(
        later.iter().chain([&first]).all(|t| after > *t),
        "token {after} after {first} {later:?}"
    );
}
