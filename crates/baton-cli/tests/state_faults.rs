#![cfg(unix)] // sh, signals and /proc: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Hostile uses of `baton state`: baton itself stopped while an edit's
//! filter runs (SIGTERM, SIGKILL), a filter that leaves a process outside
//! its group holding its output open (the filter is supervised like a
//! `baton run` command, so nothing it started outlives the edit or works
//! beside the next one), and an append aimed at a `.json` document.

use crate::common;

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{code, stderr, Env};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn read_pid(path: &Path) -> i32 {
    fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

/// Gone or a zombie (a test harness that reaps late keeps zombies).
fn gone(pid: i32) -> bool {
    !common::ns::running(pid)
}

/// Polls `cond` until it holds (true) or `limit` passes (false), so that a
/// failing test can still kill what it started before it fails.
fn poll_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Kills `pid` (a process a failed test would leave behind).
fn kill(pid: i32) {
    // SAFETY: kill(2) with a pid this test started (and checked) and a valid signal.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// A filter that starts `sleep 300` in its group, writes its pid, and
/// waits for it.
fn sleeping_filter(pidfile: &Path) -> String {
    format!(
        "cat >/dev/null; sleep 300 & echo $! > {}.tmp; mv {0}.tmp {0}; wait",
        s(pidfile)
    )
}

#[test]
fn a_terminated_state_edit_stops_its_filters_whole_group() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let env = Env::new();
        let path = env.path("f.json");
        fs::write(&path, "{\"n\":1}").unwrap();
        let pidfile = env.path("grandchild.pid");
        let filter = sleeping_filter(&pidfile);
        let mut child = env.spawn(&["state", "edit", s(&path), "--", "sh", "-c", &filter]);
        common::wait_until(Duration::from_secs(60), || pidfile.exists());
        let grandchild = read_pid(&pidfile);
        // SAFETY: kill(2) on the baton this test spawned, with a valid signal.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = common::ns::wait_exit(&mut child);
        let survived = !poll_until(Duration::from_secs(30), || gone(grandchild));
        kill(grandchild);
        assert!(
            !survived,
            "signal {signal}: the filter's child {grandchild} outlived baton ({status:?})"
        );
        assert!(!status.success(), "signal {signal}: {status:?}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":1}");
    }
}

#[test]
fn the_next_edit_stops_what_a_sigkilled_edits_filter_left() {
    let env = Env::new();
    let path = env.path("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let pidfile = env.path("grandchild.pid");
    let filter = sleeping_filter(&pidfile);
    let mut child = env.spawn(&["state", "edit", s(&path), "--", "sh", "-c", &filter]);
    common::wait_until(Duration::from_secs(60), || pidfile.exists());
    let grandchild = read_pid(&pidfile);
    child.kill().unwrap(); // SIGKILL: baton cannot stop anything itself
    common::ns::wait_exit(&mut child);
    // The fault happened: the filter's child outlived its baton.
    assert!(!gone(grandchild), "the grandchild died with baton already");

    // The next edit's filter must not run beside it.
    let check = format!(
        "st=$(cut -d' ' -f3 /proc/{grandchild}/stat 2>/dev/null); \
         if [ -n \"$st\" ] && [ \"$st\" != Z ]; then echo 'still running' >&2; exit 9; fi; \
         sed s/1/2/"
    );
    let out = env.run(&["state", "edit", s(&path), "--", "sh", "-c", &check]);
    let survived = !gone(grandchild);
    kill(grandchild);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !survived,
        "the dead edit's filter child {grandchild} still runs"
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":2}");
}

#[test]
fn a_filter_that_leaves_its_output_open_in_another_session_does_not_hang_the_edit() {
    let env = Env::new();
    let path = env.path("f.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let pidfile = env.path("escaped.pid");
    // The escaped process has left the filter's process group (and session)
    // before the filter exits, and keeps the filter's stdout open.
    let filter = format!(
        "cat >/dev/null; echo '{{\"n\":2}}'; \
         setsid sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 300' & \
         while [ ! -s {0} ]; do :; done",
        s(&pidfile)
    );
    let mut child = env
        .baton(&[
            "state",
            "edit",
            s(&path),
            "--filter-timeout",
            "120s",
            "--",
            "sh",
            "-c",
            &filter,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(60), || pidfile.exists());
    let escaped = read_pid(&pidfile);
    let exited = poll_until(Duration::from_secs(60), || {
        child.try_wait().unwrap().is_some()
    });
    let survived = !gone(escaped);
    kill(escaped);
    let out = child.wait_with_output().unwrap();
    assert!(
        exited,
        "baton state edit waited on a process that left the filter's session: {}",
        stderr(&out)
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!survived, "the escaped process {escaped} outlived the edit");
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":2}\n");
}

#[test]
fn append_refuses_a_json_document_and_leaves_it_whole() {
    let env = Env::new();
    // A pretty-printed document without a final newline: its last line `}`
    // is not "torn", and a record after it would make it invalid JSON.
    let path = env.path("p.json");
    let doc = "{\n  \"a\": 1\n}";
    fs::write(&path, doc).unwrap();
    for args in [
        vec!["state", "append", s(&path), "{\"b\":2}"],
        vec!["state", "append", s(&path)],
    ] {
        let out = env.run(&args);
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(s(&path)) && err.contains("state edit"),
            "{err}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), doc, "{args:?}");
        assert!(!env.path("p.json.torn").exists(), "{args:?}");
    }
    // A .json file that does not exist yet is not created either.
    let new = env.path("new.json");
    let out = env.run(&["state", "append", s(&new), "{}"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(!new.exists());
    // The document still reads, and .jsonl and text files still append.
    let out = env.run(&["state", "get", s(&path), "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    for name in ["e.jsonl", "log.txt"] {
        let out = env.run(&["state", "append", s(&env.path(name)), "{\"b\":2}"]);
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
    }
}

#[test]
fn a_filter_may_use_its_edits_lock_for_other_files_but_not_its_own_file() {
    let env = Env::new();
    let path = env.path("tasks.json");
    fs::write(&path, "{\"n\":1}").unwrap();
    let log = env.path("events.jsonl");
    let baton = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.to_str().unwrap();
    // The filter appends to another file under the lock its edit holds
    // (it gets the lock's name in BATON_LOCK), as `baton run --lock` allows.
    // The inner wait is bounded so that a deadlock fails instead of hanging.
    let filter = format!(
        "{baton} --dir {dir} state append {log} --lock \"$BATON_LOCK\" --wait 20s '{{\"e\":1}}' >&2 || exit 7; sed s/1/2/",
        log = log.display()
    );
    let out = env.run(&["state", "edit", s(&path), "--", "sh", "-c", &filter]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":2}");
    assert_eq!(fs::read_to_string(&log).unwrap(), "{\"e\":1}\n");

    // Its own file, through its edit's hold: the change would be overwritten
    // by the filter's output, so it is refused at once (not a deadlock).
    for inner in [
        format!(
            "{baton} --dir {dir} state edit {} --wait 20s -- sed s/2/5/",
            s(&path)
        ),
        format!(
            "{baton} --dir {dir} state append {} --lock \"$BATON_LOCK\" --wait 20s 'x'",
            s(&path)
        ),
    ] {
        let filter = format!("{inner}; echo \"inner=$?\" >&2; cat");
        let out = env.run(&["state", "edit", s(&path), "--", "sh", "-c", &filter]);
        let err = stderr(&out);
        assert_eq!(code(&out), 0, "{inner}: {err}");
        assert!(err.contains("inner=125"), "{inner}: {err}");
        assert!(
            err.contains("the filter that is editing it"),
            "{inner}: {err}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"n\":2}");
    }
}
