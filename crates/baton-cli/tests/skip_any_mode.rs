#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! A run in mode skip that finds its group busy is skipped (75), whatever
//! mode the group's running run uses: it never joins the group, so the rule
//! that all runs of a key agree on the mode does not apply to it (issue 21,
//! item 17: the job service reported such jobs failed, 125). On the baton
//! dir and on PostgreSQL.

use crate::common;
use crate::pg_common;

use std::time::Duration;

use common::{code, stderr, wait_until, Env};
use pg_common::TestDb;

fn skip_meets_a_queue_run(backend: &[&str]) {
    let env = Env::new();
    let marker = env.path("started");
    let script = format!("touch {}; sleep 30", marker.display());
    let mut args: Vec<&str> = backend.to_vec();
    args.extend(["run", "--group", "k", "--", "sh", "-c", script.as_str()]);
    let mut busy = env.spawn(&args);
    wait_until(Duration::from_secs(20), || marker.exists());
    let mut args: Vec<&str> = backend.to_vec();
    args.extend([
        "run", "--group", "k", "--mode", "skip", "--", "echo", "never",
    ]);
    let out = env.run(&args);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("mode skip"), "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
    busy.kill().unwrap();
    busy.wait().unwrap();
}

#[test]
fn skip_meeting_a_queue_run_is_skipped_on_the_baton_dir() {
    skip_meets_a_queue_run(&[]);
}

#[test]
fn skip_meeting_a_queue_run_is_skipped_on_postgres() {
    let db = TestDb::new();
    let url = db.url();
    skip_meets_a_queue_run(&["--backend", url.as_str()]);
}
