#![cfg(unix)] // sh, signals and /proc: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton lock break` against a holder whose command ignores TERM: the
//! break kills the holder after its grace, and must not leave the command
//! that was the reason for the break running (until some next holder's
//! grant happens to stop it).

use crate::common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{code, stderr, Env};

fn running(pid: i32) -> bool {
    common::ns::running(pid)
}

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

fn kill(pid: i32) {
    // SAFETY: kill(2) with a pid this test started (and checked) and a valid signal.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

fn read_pid(path: &Path) -> i32 {
    fs::read_to_string(path).unwrap().trim().parse().unwrap()
}

#[test]
fn break_stops_the_command_of_a_run_it_had_to_kill() {
    for args in [
        // baton run: the command ignores the TERM its supervisor forwards,
        // and the supervisor's own grace is longer than the break's.
        vec![
            "run", "--lock", "stuck", "--grace", "120s", "--", "sh", "-c",
        ],
        // a state edit's filter, run under the file's lock.
        vec!["state", "edit", "f.json", "--", "sh", "-c"],
    ] {
        let env = Env::new();
        let pidfile = env.path("worker.pid");
        let script = format!(
            "trap '' TERM; sleep 300 & echo $! > {0}.tmp; mv {0}.tmp {0}; wait",
            pidfile.display()
        );
        let mut args = args.clone();
        args.push(&script);
        let mut holder = env.spawn(&args);
        common::wait_until(Duration::from_secs(60), || pidfile.exists());
        let worker = read_pid(&pidfile);
        let name = if args[0] == "run" {
            "stuck".to_string()
        } else {
            format!("state{}", env.path("f.json").display())
        };
        let out = env.run(&["lock", "break", &name, "--grace", "500ms", "--json"]);
        // The worker must be gone once break has answered (it says the
        // lock is free): polled briefly, only for the kernel to finish.
        let stopped = poll_until(Duration::from_secs(10), || !running(worker));
        kill(worker);
        let _ = common::ns::wait_exit(&mut holder);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["stopped"][0]["action"], "killed", "{report}");
        assert_eq!(report["free_now"], true, "{report}");
        assert!(
            stopped,
            "{args:?}: the holder was killed but its command's process {worker} still runs"
        );
    }
}
