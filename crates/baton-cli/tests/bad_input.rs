#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Bad input: exit 125, one line naming the problem, nothing created.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::{code, stderr, Env};

fn assert_rejected(env: &Env, args: &[&str], needle: &str) {
    let out = env.run(args);
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line expected: {err}"
    );
    assert!(
        err.contains(needle),
        "{args:?}: {err:?} should mention {needle:?}"
    );
    assert!(!env.dir.exists(), "{args:?} created the baton dir");
}

#[test]
fn bad_lock_names_are_rejected_without_creating_anything() {
    let env = Env::new();
    for (name, why) in [
        ("../escape", "'..'"),
        ("/etc/passwd", "absolute"),
        ("a//b", "empty path component"),
        ("", "empty"),
        ("tab\there", "control character"),
        ("nl\nhere", "control character"),
    ] {
        assert_rejected(&env, &["run", "--lock", name, "--", "true"], why);
    }
    let long = "x".repeat(201);
    assert_rejected(
        &env,
        &["run", "--lock", &long, "--", "true"],
        "at most 200 bytes",
    );
    assert_rejected(&env, &["lock", "status", "a/./b"], "'.'");
    assert_rejected(&env, &["lock", "acquire", "../x"], "'..'");
    assert!(!env.tmp.path().join("escape.lock").exists());
}

#[test]
fn bad_flags_values_and_missing_command_are_rejected() {
    let env = Env::new();
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--bogus", "--", "true"],
        "--bogus",
    );
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--max", "0", "--", "true"],
        "--max",
    );
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--wait", "-5s", "--", "true"],
        "negative",
    );
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--wait", "soon", "--", "true"],
        "'soon'",
    );
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--timeout", "5", "--", "true"],
        "no unit",
    );
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--grace", "5q", "--", "true"],
        "unknown unit",
    );
    assert_rejected(&env, &["run", "--lock", "x"], "CMD");
    assert_rejected(&env, &["run", "--", "true"], "--lock");
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--shared", "--max", "2", "--", "true"],
        "--max",
    );
    assert_rejected(
        &env,
        &[
            "run",
            "--lock",
            "x",
            "--wait",
            "1s",
            "--no-wait",
            "--",
            "true",
        ],
        "--no-wait",
    );
    assert_rejected(&env, &["frobnicate"], "frobnicate");
    assert_rejected(
        &env,
        &["run", "--lock", "x", "--timeout", "0s", "--", "true"],
        "is zero",
    );
    assert_rejected(&env, &["lock", "acquire", "x", "--ttl", "0ms"], "is zero");
}

#[test]
fn unsafe_baton_dirs_are_refused() {
    let env = Env::new();
    let real = env.path("real");
    fs::create_dir(&real).unwrap();
    let link = env.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let out = env
        .baton(&["lock", "list"])
        .arg("--dir")
        .arg(&link)
        .output()
        .unwrap();
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));

    let open = env.path("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let out = env
        .baton(&["lock", "list"])
        .arg("--dir")
        .arg(&open)
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("writable by every user"),
        "{}",
        stderr(&out)
    );

    // A directory owned by another user: as root we can make one; otherwise
    // "/" is such a directory.
    let foreign = if rustix::process::geteuid().is_root() {
        let d = env.path("foreign");
        fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
        d
    } else {
        "/".into()
    };
    let out = env
        .baton(&["lock", "list"])
        .arg("--dir")
        .arg(&foreign)
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("owned by uid"), "{}", stderr(&out));
    assert!(!foreign.join("locks").exists());
}

#[test]
fn garbage_in_a_lock_file_is_reported_and_repaired_by_the_next_holder() {
    let env = Env::new();
    assert!(env
        .run(&["run", "--lock", "g", "--", "true"])
        .status
        .success());
    let file = env.dir.join("locks/g.lock");
    for garbage in [
        &b"{\"format\":1,\"token\":"[..],
        b"\xff\xfe not utf-8 \x00",
        b"just text",
    ] {
        fs::write(&file, garbage).unwrap();
        let st = env.status("g");
        assert_eq!(st["content"], "unreadable", "{st}");
        assert!(st["content_error"].is_string());
        let human = env.run(&["lock", "status", "g"]);
        assert!(human.status.success());
        assert!(common::stdout(&human).contains("unreadable"));
        let out = env.run(&[
            "run",
            "--lock",
            "g",
            "--",
            "sh",
            "-c",
            "test -n \"$BATON_FENCING_TOKEN\"",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let st = env.status("g");
        assert_eq!(st["content"], "ok");
        assert!(st["last_token"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn usage_errors_point_to_the_help_of_the_subcommand_at_fault() {
    let env = Env::new();
    for (args, help) in [
        (
            &["lock", "acquire", "x", "--bogus"][..],
            "(see 'baton lock acquire --help')",
        ),
        (
            &["run", "--lock", "x", "--bogus", "--", "true"],
            "(see 'baton run --help')",
        ),
        (
            &["run", "--lock", "x", "--wait", "soon", "--", "true"],
            "(see 'baton run --help')",
        ),
        (
            &["group", "status", "--bogus"],
            "(see 'baton group status --help')",
        ),
        (
            &["state", "edit", "--bogus"],
            "(see 'baton state edit --help')",
        ),
        (&["lock", "frob"], "(see 'baton lock --help')"),
        (&["frobnicate"], "(see 'baton --help')"),
    ] {
        assert_rejected(&env, args, help);
    }
    // An option's value that happens to be a command's name is not a command.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["--dir", "lock", "lock", "status", "--bogus"])
        .current_dir(env.tmp.path())
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).ends_with("(see 'baton lock status --help')\n"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_token_that_is_not_a_positive_integer_is_called_invalid() {
    let env = Env::new();
    for bad in ["-1", "abc", "0", "1.5", "", "18446744073709551616"] {
        let out = env.run(&["lock", "release", "x", "--token", bad]);
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "{bad:?}: {err}");
        assert_eq!(
            err,
            format!(
                "baton: invalid token '{bad}': a token is a positive integer printed by `baton lock acquire` (see 'baton lock release --help')\n"
            ),
            "{bad:?}"
        );
        assert!(!env.dir.exists(), "{bad:?} created the baton dir");
    }
}

#[test]
fn serve_and_job_without_baton_service_next_to_baton_say_what_to_install() {
    let env = Env::new();
    // A copy of `baton` alone: its `baton-service` is not beside it.
    let lonely = env.path("bin").join("baton");
    fs::create_dir_all(lonely.parent().unwrap()).unwrap();
    fs::copy(env!("CARGO_BIN_EXE_baton"), &lonely).unwrap();
    for args in [
        &["job", "list"][..],
        &["serve", "--listen", "127.0.0.1:0"][..],
        &["mcp"][..],
    ] {
        let out = std::process::Command::new(&lonely)
            .arg("--dir")
            .arg(&env.dir)
            .args(args)
            .env("BATON_SERVER", "http://127.0.0.1:9")
            .output()
            .unwrap();
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("baton-service") && err.contains("cargo install"),
            "{err}"
        );
    }
    // Beside its `baton-service`, the same `baton` reaches the service (here:
    // nobody listens, which the service's client reports).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["job", "list"])
        .env("BATON_SERVER", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot reach the job service"),
        "{}",
        stderr(&out)
    );
}

/// `baton ARGS` with stdout (or stderr) on /dev/full: every write fails (ENOSPC).
fn with_full(env: &Env, args: &[&str], stdout: bool) -> std::process::Output {
    let full = std::process::Stdio::from(
        fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    );
    let mut cmd = env.baton(args);
    cmd.stdin(std::process::Stdio::null());
    if stdout {
        cmd.stdout(full);
    } else {
        cmd.stderr(full);
    }
    cmd.output().unwrap()
}

/// A full or closed stdout or stderr (`/dev/full`) never turns baton's exit
/// code into a panic's 101: messages that cannot be written are dropped, and
/// output that could not be written fails an otherwise successful command.
#[test]
fn an_unwritable_stdout_or_stderr_keeps_the_exit_code() {
    let env = Env::new();
    let with_full_stderr = |args: &[&str]| with_full(&env, args, false);
    // Errors reported on stderr keep their codes.
    let out = with_full_stderr(&["run", "--lock", "x", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), 127);
    let out = with_full_stderr(&["--no-such-flag"]);
    assert_eq!(code(&out), 125);
    let out = with_full_stderr(&[
        "run",
        "--lock",
        "x",
        "--",
        "sh",
        "-c",
        "echo oops >&2; exit 7",
    ]);
    assert_eq!(code(&out), 7);
    // With diagnostics on (tracing writes to stderr too).
    let out = with_full_stderr(&["-vv", "run", "--lock", "x", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code(&out), 3);
    // Output that is lost is a failure, said on stderr.
    for args in [
        &["lock", "status", "x"][..],
        &["--help"][..],
        &["completions", "bash"][..],
    ] {
        let out = with_full(&env, args, true);
        assert_eq!(code(&out), 125, "{args:?}");
        assert!(
            stderr(&out).contains("cannot write the output to stdout"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

/// `lock acquire` whose token cannot be written gives the lock back (the
/// caller could neither use nor release it); a change that was made (a state
/// edit) keeps its success code, so that a caller does not make it twice.
#[test]
fn lost_output_of_acquire_releases_and_of_an_edit_keeps_success() {
    let env = Env::new();
    let out = with_full(&env, &["lock", "acquire", "a"], true);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("released again"), "{}", stderr(&out));
    assert_eq!(env.status("a")["held"], false);

    let file = env.path("n.json");
    let edit = [
        "state",
        "edit",
        file.to_str().unwrap(),
        "--json",
        "--",
        "sh",
        "-c",
        "echo 1",
    ];
    let out = with_full(&env, &edit, true);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the change was made"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read_to_string(&file).unwrap().trim(), "1");
}
