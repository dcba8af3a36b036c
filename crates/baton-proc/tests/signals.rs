//! Signal forwarding, tested on a separate supervising process.
//!
//! Sending SIGTERM to the test harness would kill it, so each test re-executes this test
//! binary to run only the `helper` test with `BATON_PROC_HELPER` set: that process supervises
//! a `sh -c` child and exits with the outcome's exit code, like `baton run`. The tests signal
//! that process and check what the child saw.

// clippy.toml allows `expect` in `#[test]` functions only; the helpers here panic on failure
// just the same, with a message, which is what a failed test should do.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_proc::RunSpec;
use common::{pidfd, pidfd_exits_within, wait_for_line, PATIENCE};
use rustix::process::{kill_process, Pid, Signal};

const HELPER_ENV: &str = "BATON_PROC_HELPER";
/// The name of the test [`helper`] in this binary (tests/main.rs).
const HELPER_TEST: &str = "signals::helper";

/// Not a test of its own: the body of the helper process, run only by the tests.
#[test]
#[ignore = "body of the helper process started by the other tests"]
fn helper() {
    let Ok(script) = std::env::var(HELPER_ENV) else {
        return;
    };
    let mut spec = RunSpec::new("sh").arg("-c").arg(script);
    let grace_ms = std::env::var("BATON_PROC_HELPER_GRACE_MS").unwrap_or_default();
    spec.grace = Duration::from_millis(grace_ms.parse().unwrap_or(20_000));
    spec.forward_signals = true;
    let code = match baton_proc::run(&spec) {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            eprintln!("helper: {err}");
            err.exit_code()
        }
    };
    if std::env::var_os("BATON_PROC_HELPER_RAISE_TERM").is_some() {
        // The handlers are gone: this must kill us as if none had ever been installed.
        let _ = kill_process(rustix::process::getpid(), Signal::TERM);
        std::thread::sleep(Duration::from_secs(5));
        std::process::exit(0);
    }
    std::process::exit(code);
}

/// Start the helper process supervising `sh -c script` in `dir` (exported as `$DIR`).
fn spawn_helper(dir: &Path, script: &str, grace: Duration) -> Child {
    Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--exact",
            HELPER_TEST,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, script)
        .env("BATON_PROC_HELPER_GRACE_MS", grace.as_millis().to_string())
        .env("DIR", dir)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn helper")
}

fn signal(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(child.id() as i32).expect("pid");
    kill_process(pid, signal).expect("signal helper");
}

#[test]
fn forwards_each_termination_signal_to_the_child() {
    for (sig, name, code) in [
        (Signal::TERM, "TERM", 7),
        (Signal::INT, "INT", 8),
        (Signal::HUP, "HUP", 9),
        (Signal::QUIT, "QUIT", 10),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = format!(
            r#"trap 'echo got-{name} > "$DIR/marker"; exit {code}' {name}
               echo ready > "$DIR/ready"; sleep 30 & wait"#
        );
        let mut helper = spawn_helper(dir.path(), &script, Duration::from_secs(20));
        wait_for_line(&dir.path().join("ready"));
        let start = Instant::now();
        signal(&helper, sig);
        let status = helper.wait().expect("wait helper");
        assert_eq!(status.code(), Some(code), "SIG{name}: {status:?}");
        assert!(start.elapsed() < PATIENCE);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("marker")).expect("marker"),
            format!("got-{name}\n")
        );
    }
}

#[test]
fn child_killed_by_forwarded_signal_reports_128_plus_n() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"echo ready > "$DIR/ready"; sleep 30"#;
    let mut helper = spawn_helper(dir.path(), script, Duration::from_secs(20));
    wait_for_line(&dir.path().join("ready"));
    signal(&helper, Signal::TERM);
    let status = helper.wait().expect("wait helper");
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
}

#[test]
fn group_is_killed_when_grace_expires_after_a_forwarded_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"trap '' TERM; echo ready > "$DIR/ready"; sleep 30"#;
    let mut helper = spawn_helper(dir.path(), script, Duration::from_millis(300));
    wait_for_line(&dir.path().join("ready"));
    let start = Instant::now();
    signal(&helper, Signal::TERM);
    let status = helper.wait().expect("wait helper");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Some(128 + 9), "{status:?}");
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < PATIENCE, "{elapsed:?}");
}

#[test]
fn second_signal_kills_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Survives TERM (after noting it) for as long as it is not killed.
    let script = r#"trap 'echo got-TERM >> "$DIR/marker"' TERM
                    echo ready > "$DIR/ready"
                    while :; do sleep 30 & wait; done"#;
    let mut helper = spawn_helper(dir.path(), script, Duration::from_secs(30));
    wait_for_line(&dir.path().join("ready"));
    let start = Instant::now();
    signal(&helper, Signal::TERM);
    wait_for_line(&dir.path().join("marker"));
    signal(&helper, Signal::INT);
    let status = helper.wait().expect("wait helper");
    let elapsed = start.elapsed();
    assert_eq!(status.code(), Some(128 + 9), "{status:?}");
    assert!(
        elapsed < PATIENCE,
        "killed only after the grace period: {elapsed:?}"
    );
}

#[test]
fn default_signal_behaviour_returns_after_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut helper = Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--exact",
            HELPER_TEST,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, "exit 0")
        .env("BATON_PROC_HELPER_RAISE_TERM", "1")
        .env("DIR", dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn helper");
    let status = helper.wait().expect("wait helper");
    assert_eq!(status.signal(), Some(15), "{status:?}");
}

#[test]
fn child_dies_when_its_supervisor_is_killed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"echo $$ > "$DIR/pid"; exec sleep 30"#;
    let mut helper = spawn_helper(dir.path(), script, Duration::from_secs(20));
    let child: i32 = wait_for_line(&dir.path().join("pid")).parse().expect("pid");
    let child = pidfd(child).expect("child alive");
    signal(&helper, Signal::KILL);
    assert_eq!(helper.wait().expect("wait helper").signal(), Some(9));
    assert!(
        pidfd_exits_within(&child, Duration::from_secs(5)),
        "the child outlived its SIGKILLed supervisor"
    );
}
