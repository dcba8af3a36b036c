#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Ordering keys of jobs (`order` of `POST /v1/jobs`, issue 36 item 1): in
//! modes supersede and coalesce the newest event wins whatever order the
//! jobs arrive in, on the SQLite store and on PostgreSQL.

use crate::pg_common;
use crate::serve_common;

use std::path::Path;

use pg_common::TestDb;
use serde_json::json;
use serve_common::{wait_for_file, Server};

/// A template whose job records its start (`{tmp}/start.<prompt>`) and
/// waits for `{tmp}/go.<prompt>`.
const GATED: &str = r#"
default_template = "gated"
grace = "2s"
[templates.gated]
command = ["sh", "-c", "echo $$ > {tmp}/start.$1; while [ ! -e {tmp}/go.$1 ]; do sleep 0.02; done; echo done $1", "job", "{prompt}"]
"#;

/// The newer key arrives first and runs; an older key arriving later is
/// superseded without starting (and does not stop the newer one), also
/// after the newer job ended; bad keys are refused (400 naming them).
fn the_newest_key_wins(s: &Server) {
    let t = s.tmp();
    let started = |p: &str| Path::new(&format!("{t}/start.{p}")).exists();
    let a = s.submit(json!({"prompt": "a", "group": "issue/9", "mode": "supersede", "order": 2}));
    wait_for_file(Path::new(&format!("{t}/start.a")));
    let b = s.submit(json!({"prompt": "b", "group": "issue/9", "mode": "supersede", "order": "1"}));
    let jb = s.wait_final(&b);
    assert_eq!(jb["status"], "superseded", "{jb}");
    assert_eq!(jb["order"], "1", "{jb}");
    assert_eq!(jb["superseded_by"], a.as_str(), "{jb}");
    assert!(!started("b"), "the older job's command never ran");
    assert_eq!(
        s.job(&a)["status"],
        "running",
        "the newer job was not stopped"
    );
    std::fs::write(format!("{t}/go.a"), "").unwrap();
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
    // A late older event, after the newer job ended.
    let c = s.submit(json!({"prompt": "c", "group": "issue/9", "mode": "supersede", "order": 1}));
    let jc = s.wait_final(&c);
    assert_eq!(jc["status"], "superseded", "{jc}");
    assert!(!started("c"));
    // A newer key runs, and stops the running job with an older one.
    let d = s.submit(json!({"prompt": "d", "group": "issue/9", "mode": "supersede", "order": 3}));
    wait_for_file(Path::new(&format!("{t}/start.d")));
    let e = s.submit(json!({"prompt": "e", "group": "issue/9", "mode": "supersede", "order": 4}));
    let jd = s.wait_final(&d);
    assert_eq!(jd["status"], "superseded", "{jd}");
    assert_eq!(jd["superseded_by"], e.as_str(), "{jd}");
    wait_for_file(Path::new(&format!("{t}/start.e")));
    std::fs::write(format!("{t}/go.e"), "").unwrap();
    assert_eq!(s.wait_final(&e)["status"], "succeeded");

    for (body, needle) in [
        (
            json!({"prompt": "x", "group": "g", "mode": "supersede", "order": "soon"}),
            "'soon'",
        ),
        (
            json!({"prompt": "x", "group": "g", "mode": "supersede", "order": 1.5}),
            "'1.5'",
        ),
        (
            json!({"prompt": "x", "group": "g", "mode": "queue", "order": 1}),
            "supersede and coalesce",
        ),
    ] {
        let (code, v) = s.post("/v1/jobs", &body);
        assert_eq!(code, 400, "{body}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("order") && msg.contains(needle), "{body}: {v}");
    }
}

#[test]
fn order_the_newest_key_wins_among_jobs() {
    let s = Server::start(GATED, &["--max-concurrency", "2"]);
    the_newest_key_wins(&s);
}

#[test]
fn pg_order_the_newest_key_wins_among_jobs() {
    let db = TestDb::new();
    let url = db.url();
    let s = Server::start(GATED, &["--store", &url, "--max-concurrency", "2"]);
    the_newest_key_wins(&s);
}

/// A queued job with a newer key is not dropped by a later job with an
/// older one: the older one is superseded instead when its turn comes.
#[test]
fn a_queued_newer_key_is_not_superseded_by_an_older_arrival() {
    let s = Server::start(GATED, &["--max-concurrency", "1"]);
    let t = s.tmp();
    let blocker = s.submit(json!({"prompt": "blocker"}));
    wait_for_file(Path::new(&format!("{t}/start.blocker")));
    let newer = s.submit(json!({"prompt": "n", "group": "q", "mode": "coalesce", "order": "2026-11-28T15:00:00+01:00"}));
    let older = s.submit(
        json!({"prompt": "o", "group": "q", "mode": "coalesce", "order": "2026-11-28T13:00:00Z"}),
    );
    assert_eq!(s.job(&newer)["status"], "queued");
    std::fs::write(format!("{t}/go.blocker"), "").unwrap();
    wait_for_file(Path::new(&format!("{t}/start.n")));
    std::fs::write(format!("{t}/go.n"), "").unwrap();
    assert_eq!(s.wait_final(&newer)["status"], "succeeded");
    assert_eq!(s.wait_final(&blocker)["status"], "succeeded");
    let jo = s.wait_final(&older);
    assert_eq!(jo["status"], "superseded", "{jo}");
    assert!(!Path::new(&format!("{t}/start.o")).exists());
}

/// `baton job submit --order` (and `BATON_ORDER`, in modes supersede and
/// coalesce only) sends the key: an older one ends superseded (exit 79
/// with `--wait`), a bad one is refused before anything is sent (125).
#[test]
fn job_submit_sends_the_order() {
    let s = Server::start(GATED, &["--max-concurrency", "2"]);
    let t = s.tmp();
    let url = s.url("");
    let submit = |args: &[&str], order_env: Option<&str>| {
        let mut c = s.baton(&["job", "--server", &url, "submit"]);
        c.args(args);
        if let Some(o) = order_env {
            c.env("BATON_ORDER", o);
        }
        c.stdin(std::process::Stdio::null()).output().unwrap()
    };
    let out = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).to_string();
    let newer = submit(
        &[
            "--group",
            "cli",
            "--mode",
            "supersede",
            "--order",
            "10",
            "a",
        ],
        None,
    );
    assert!(newer.status.success(), "{}", err(&newer));
    let a = out(&newer);
    wait_for_file(Path::new(&format!("{t}/start.a")));
    assert_eq!(s.job(&a)["order"], "10");
    // From BATON_ORDER, with --wait: superseded, 79.
    let older = submit(
        &["--group", "cli", "--mode", "supersede", "--wait", "b"],
        Some("9"),
    );
    assert_eq!(older.status.code(), Some(79), "{}", err(&older));
    assert!(!Path::new(&format!("{t}/start.b")).exists());
    // BATON_ORDER is ignored in mode queue; --order is refused there (400).
    let queued = submit(&["--group", "other", "c"], Some("1"));
    assert!(queued.status.success(), "{}", err(&queued));
    assert_eq!(s.job(&out(&queued))["order"], serde_json::Value::Null);
    let refused = submit(&["--group", "other", "--order", "1", "d"], None);
    assert_eq!(refused.status.code(), Some(125), "{}", err(&refused));
    assert!(err(&refused).contains("order"), "{}", err(&refused));
    let bad = submit(
        &[
            "--group",
            "cli",
            "--mode",
            "supersede",
            "--order",
            "x1",
            "e",
        ],
        None,
    );
    assert_eq!(bad.status.code(), Some(125), "{}", err(&bad));
    assert!(err(&bad).contains("'x1'"), "{}", err(&bad));
    for p in ["a", "c"] {
        std::fs::write(format!("{t}/go.{p}"), "").unwrap();
    }
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
}
