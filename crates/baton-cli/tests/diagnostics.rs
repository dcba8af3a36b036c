#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Diagnostics (`-v`, `-vv`, `BATON_LOG`, `--log-format json`): what a
//! waiter waits for is named, every line carries the run id, and without
//! them baton prints nothing it did not print before. Real binary, real
//! locks held by real processes.

use crate::common;

use std::io::Read;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use common::{code, stderr, stdout, Env};

/// `baton lock acquire NAME --operation OP`, held by its background holder;
/// returns the token and the holder's pid.
fn hold(env: &Env, name: &str, op: &str) -> (String, u64) {
    let out = env.run(&["lock", "acquire", name, "--operation", op, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let held: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        held["token"].to_string(),
        held["holder_pid"].as_u64().unwrap(),
    )
}

#[test]
fn without_v_successful_commands_print_nothing_on_stderr() {
    let env = Env::new();
    let cases: &[&[&str]] = &[
        &["run", "--lock", "x", "--", "true"],
        &["run", "--group", "g", "--", "true"],
        &["lock", "status", "x"],
        &["lock", "list"],
    ];
    for args in cases {
        let out = env.run(args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
    let held = env.run(&["lock", "acquire", "y"]);
    assert_eq!(code(&held), 0, "{}", stderr(&held));
    assert!(held.stderr.is_empty(), "{}", stderr(&held));
    let token = stdout(&held).trim().to_string();
    let rel = env.run(&["lock", "release", "y", "--token", &token]);
    assert_eq!(code(&rel), 0, "{}", stderr(&rel));
    assert!(rel.stderr.is_empty(), "{}", stderr(&rel));
    // Silent on success: its stdout would land in the calling tool's
    // output (issue 36, item 11).
    assert!(rel.stdout.is_empty(), "{}", stdout(&rel));
}

#[test]
fn vv_names_the_holder_a_waiter_waits_for_and_its_place_in_line() {
    let env = Env::new();
    let (token, holder_pid) = hold(&env, "deploy", "deploying-v42");
    // A waiter through `baton run`, and one through `lock acquire` (whose
    // background holder does the waiting): both give up after 300 ms.
    for args in [
        &[
            "-vv", "run", "--lock", "deploy", "--wait", "300ms", "--", "true",
        ][..],
        &["-vv", "lock", "acquire", "deploy", "--wait", "300ms"][..],
    ] {
        // From another thread than the one that took the hold: from the
        // same thread, the caller would wait for itself, which is refused
        // at once as a deadlock (review.rs).
        let out = std::thread::scope(|s| s.spawn(|| env.run(args)).join().unwrap());
        assert_eq!(code(&out), 75, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        let joined = err
            .lines()
            .find(|l| l.contains("joined the line"))
            .unwrap_or_else(|| panic!("{args:?}: no 'joined the line' in:\n{err}"));
        assert!(joined.contains("position=1"), "{joined}");
        assert!(joined.contains("lock=deploy"), "{joined}");
        assert!(joined.contains(&format!("pid {holder_pid} ")), "{joined}");
        assert!(joined.contains("deploying-v42"), "{joined}");
        assert!(err.contains("not acquired"), "{err}");
    }
    // -v alone shows the steps, not the line.
    let out = env.run(&["-v", "run", "--lock", "deploy", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75);
    let err = stderr(&out);
    assert!(err.contains("baton dir (given with --dir)"), "{err}");
    assert!(!err.contains("joined the line"), "{err}");
    let rel = env.run(&["lock", "release", "deploy", "--token", &token]);
    assert!(rel.status.success(), "{}", stderr(&rel));
}

#[test]
fn text_lines_carry_the_run_id_of_the_run() {
    let env = Env::new();
    let out = env.run(&[
        "-vv",
        "run",
        "--lock",
        "x",
        "--",
        "sh",
        "-c",
        "echo $BATON_RUN_ID",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_id = stdout(&out).trim().to_string();
    assert_eq!(run_id.len(), 16, "{run_id}");
    let err = stderr(&out);
    assert!(err.lines().count() >= 5, "{err}");
    for line in err.lines() {
        assert!(
            line.contains(&format!("baton{{run_id={run_id}}}")),
            "a line without the run id: {line}"
        );
    }
    assert!(err.contains("granted"), "{err}");
    assert!(err.contains("run ended"), "{err}");
}

#[test]
fn json_log_lines_parse_and_carry_the_run_id() {
    let env = Env::new();
    let out = env.run(&[
        "--log-format",
        "json",
        "-vv",
        "run",
        "--lock",
        "x",
        "--",
        "sh",
        "-c",
        "echo $BATON_RUN_ID",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let run_id = stdout(&out).trim().to_string();
    let lines: Vec<serde_json::Value> = stderr(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 5, "{lines:#?}");
    for l in &lines {
        assert_eq!(l["spans"][0]["run_id"], run_id.as_str(), "{l}");
        assert!(l["fields"]["message"].is_string(), "{l}");
    }
    assert!(lines
        .iter()
        .any(|l| l["fields"]["message"] == "granted" && l["fields"]["lock"] == "x"));

    // `lock acquire`: the background holder's lines carry the hold's run id.
    let held = env.run(&[
        "--log-format",
        "json",
        "-vv",
        "lock",
        "acquire",
        "y",
        "--json",
    ]);
    assert_eq!(code(&held), 0, "{}", stderr(&held));
    let report: serde_json::Value = serde_json::from_slice(&held.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stderr(&held)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines.iter().any(|l| l["fields"]["message"] == "granted"),
        "the holder's lines are missing: {lines:#?}"
    );
    for l in &lines {
        assert_eq!(l["spans"][0]["run_id"], report["run_id"], "{l}");
    }
    let token = report["token"].to_string();
    let rel = env.run(&["lock", "release", "y", "--token", &token]);
    assert!(rel.status.success(), "{}", stderr(&rel));
}

#[test]
fn a_verbose_lock_acquire_does_not_keep_stderr_open_while_it_holds() {
    let env = Env::new();
    let mut child = env
        .baton(&["-vv", "lock", "acquire", "z"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let status = child.wait().unwrap();
    assert!(status.success());
    // End of file on stderr although the holder still holds the lock: its
    // copy of our stderr was closed when it reported.
    let text = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("stderr stayed open: the background holder kept it");
    assert!(text.contains("granted"), "{text}");
    assert_eq!(env.status("z")["held"], true);
    let mut token = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut token)
        .unwrap();
    let rel = env.run(&["lock", "release", "z", "--token", token.trim()]);
    assert!(rel.status.success(), "{}", stderr(&rel));
}

#[test]
fn a_malformed_baton_log_is_a_one_line_error() {
    let env = Env::new();
    let out = env
        .baton(&["run", "--lock", "x", "--", "true"])
        .env("BATON_LOG", "baton_lock=[[")
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("baton: invalid BATON_LOG"), "{err}");
    // A valid filter turns diagnostics on without -v.
    let out = env
        .baton(&["run", "--lock", "x", "--", "true"])
        .env("BATON_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("granted"), "{}", stderr(&out));
}

/// `-q` silences warnings and nothing else: a run whose command leaves a
/// process behind warns without it and is silent with it (before or after
/// the command's name), with the same exit code and the same cleanup; an
/// error is still printed; `-q` with `-v` is refused.
#[test]
fn quiet_silences_warnings_but_not_errors() {
    let env = Env::new();
    let leave = ["sh", "-c", "sleep 30 & exit 3"];
    let mut loud = vec!["run", "--lock", "x", "--"];
    loud.extend(leave);
    let out = env.run(&loud);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("baton: warning: the command left 1 process(es) running"),
        "{}",
        stderr(&out)
    );
    for quiet in [
        ["-q", "run", "--lock", "x", "--"],
        ["run", "-q", "--lock", "x", "--"],
    ] {
        let mut args = quiet.to_vec();
        args.extend(leave);
        let out = env.run(&args);
        assert_eq!(code(&out), 3, "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
    }
    let out = env.run(&["-q", "lock", "release", "never-held", "--token", "1"]);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).starts_with("baton: "), "{}", stderr(&out));
    let out = env.run(&["-q", "-v", "lock", "list"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
}
