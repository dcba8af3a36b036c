#![cfg(target_os = "linux")] // the inherited mark is Linux's (see the docs); other systems keep following the tree
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `lock acquire` contains a script that forks and exits at once (issue 36,
//! item 5): `T=$(baton lock acquire L)`, a background child, `exit 0` —
//! the child is stopped before the next holder gets the lock, 10 of 10, for
//! the four forms the issue measured (`cmd &`, `( cmd & )`, `nohup cmd &`,
//! Python `Popen` + `os._exit`) and for a child that calls `setsid`. The
//! script runs in the test's process group (not its own), so only the
//! hold's inherited mark can find the child once it is re-parented. Real
//! `baton` binary, real shells, real Python.

use crate::common;

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use common::{shell, stderr, wait_until, Env};

const BATON: &str = env!("CARGO_BIN_EXE_baton");
const RUNS: usize = 10;

/// Whether process `pid` still runs (exists, not a zombie).
fn running(pid: i32) -> bool {
    baton_proc::procfs::stat(pid).is_some_and(|st| !st.exited)
}

/// Kills the children still running when the test ends (a failed test).
struct KillChildren(Vec<i32>);

impl Drop for KillChildren {
    fn drop(&mut self) {
        for pid in &self.0 {
            let is_sleep = fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("sleep"));
            if let Some(pid) = rustix::process::Pid::from_raw(*pid).filter(|_| is_sleep) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Runs `script` (which takes lock `L` with `$ACQUIRE`, starts a child
/// that writes its pid to `$PIDFILE`, and exits at once) `RUNS` times;
/// after each, a `baton run --lock L` must find the child gone. Returns how
/// many runs found it still running.
fn escaped(script: &str) -> usize {
    let env = Env::new();
    let mut left = KillChildren(Vec::new());
    let mut alive = 0;
    for i in 0..RUNS {
        let pidfile = env.path(&format!("child-{i}.pid"));
        // (Temp paths have no spaces: the variable is split, unquoted.)
        let acquire = format!("{BATON} --dir {} lock acquire L", env.dir.display());
        // Output to files: a child left running would keep a pipe open.
        let err = env.path(&format!("stderr-{i}"));
        let status = shell(env.tmp.path(), script)
            .env("ACQUIRE", &acquire)
            .env("PIDFILE", &pidfile)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).unwrap())
            .status()
            .unwrap();
        let err = fs::read_to_string(&err).unwrap_or_default();
        assert!(status.success(), "{script}: {err}");
        wait_until(Duration::from_secs(10), || {
            fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty())
        });
        let child: i32 = fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        left.0.push(child);
        // The next holder: is the child still running when it holds L?
        let seen = env.path(&format!("seen-{i}"));
        let check = format!(
            "if [ -d /proc/{child} ] && ! grep -q '^[^)]*) Z' /proc/{child}/stat; then echo alive; else echo gone; fi > '{}'; echo \"$BATON_PREVIOUS_OUTCOME\" >> '{}'",
            seen.display(),
            seen.display()
        );
        let out = env.run(&["run", "--lock", "L", "--", "sh", "-c", &check]);
        assert!(out.status.success(), "{}", stderr(&out));
        let seen = fs::read_to_string(&seen).unwrap();
        let mut seen = seen.lines();
        if seen.next() == Some("alive") {
            alive += 1;
        }
        assert_eq!(
            seen.next(),
            Some("died"),
            "the script exited without releasing"
        );
    }
    drop(left);
    alive
}

#[test]
fn a_background_child_of_a_script_that_exits_at_once_is_stopped() {
    let n = escaped("T=$($ACQUIRE) || exit 1; sleep 30 & echo $! > \"$PIDFILE\"; exit 0");
    assert_eq!(n, 0, "{n} of {RUNS} children outlived the hold");
}

#[test]
fn a_double_forked_child_of_a_script_that_exits_at_once_is_stopped() {
    let n = escaped("T=$($ACQUIRE) || exit 1; ( sleep 30 & echo $! > \"$PIDFILE\" ); exit 0");
    assert_eq!(n, 0, "{n} of {RUNS} children outlived the hold");
}

#[test]
fn a_nohup_child_of_a_script_that_exits_at_once_is_stopped() {
    let n = escaped(
        "T=$($ACQUIRE) || exit 1; nohup sleep 30 > /dev/null 2>&1 & echo $! > \"$PIDFILE\"; exit 0",
    );
    assert_eq!(n, 0, "{n} of {RUNS} children outlived the hold");
}

#[test]
fn a_setsid_child_of_a_script_that_exits_at_once_is_stopped() {
    let n = escaped(
        // (A background job of a shell without job control leads no group:
        // `setsid` calls setsid(2) and executes `sleep` in the same process.)
        "T=$($ACQUIRE) || exit 1; setsid sleep 30 & echo $! > \"$PIDFILE\"; exit 0",
    );
    assert_eq!(n, 0, "{n} of {RUNS} children outlived the hold");
}

#[test]
fn a_python_popen_child_of_a_script_that_exits_at_once_is_stopped() {
    let python = r#"
import os, shlex, subprocess
t = subprocess.run(shlex.split(os.environ["ACQUIRE"]), capture_output=True, check=True)
p = subprocess.Popen(["sleep", "30"])
with open(os.environ["PIDFILE"], "w") as f:
    f.write(str(p.pid))
os._exit(0)
"#;
    let n = escaped(&format!("exec python3 -c '{python}'"));
    assert_eq!(n, 0, "{n} of {RUNS} children outlived the hold");
}

/// The control: a child that the script starts *after* `lock release`
/// belongs to nobody's hold and runs on.
#[test]
fn a_child_started_after_release_is_left_running() {
    let env = Env::new();
    let pidfile = env.path("child.pid");
    let script =
        "T=$($ACQUIRE) || exit 1; $ACQUIRE_RELEASE; sleep 30 & echo $! > \"$PIDFILE\"; exit 0";
    let status = shell(env.tmp.path(), script)
        .env(
            "ACQUIRE",
            format!("{BATON} --dir {} lock acquire L", env.dir.display()),
        )
        .env(
            "ACQUIRE_RELEASE",
            format!("{BATON} --dir {} lock release L", env.dir.display()),
        )
        .env("PIDFILE", &pidfile)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let child: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _left = KillChildren(vec![child]);
    let out = env.run(&["run", "--lock", "L", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(running(child), "a child started after release was stopped");
}
