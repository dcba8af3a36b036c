#![cfg(target_os = "linux")] // sessions, /proc
//! A service job runs in a session of its own: what the job started stays
//! in that session unless it makes a new one (`setsid`), even in another
//! process group (`timeout`, a shell with job control, `setpgid`). Such a
//! process ends with its job whatever ends it, a crash of the service
//! included (found by a hostile review: after a SIGKILL of the service,
//! the restarted service's recovery stopped only the job's process group,
//! and `timeout 600 sleep 300` in the job ran on).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::serve_common::{alive, sh_config, wait_for_file, Server};

/// (process group, session) of `pid`, from `/proc/<pid>/stat`.
fn group_and_session(pid: i32) -> (i32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

fn pid_in(path: &str) -> i32 {
    wait_for_file(std::path::Path::new(path))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (60 s) until `pid` is gone; if it is not, kills it and fails.
fn gone_or_fail(pid: i32, what: &str) {
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(pid) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
        panic!("{what}: pid {pid} still runs after 60 s");
    }
}

/// A job whose command's child `timeout` (its own process group, in the
/// job's session) runs `sleep 300`, recording the sleep's pid in
/// `{t}/NAME.pid` and the job shell's in `{t}/NAME.lead`.
fn in_another_group(t: &str, name: &str) -> Value {
    json!({"prompt": format!(
        "echo $$ > {t}/{name}.lead; timeout 600 sh -c 'echo $$ > {t}/{name}.tmp; \
         mv {t}/{name}.tmp {t}/{name}.pid; exec sleep 300' & wait"
    )})
}

#[test]
fn a_process_in_another_group_of_a_jobs_session_is_stopped_after_a_crash() {
    let mut s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let id = s.submit(in_another_group(&t, "x"));
    let sleep = pid_in(&format!("{t}/x.pid"));
    let lead = pid_in(&format!("{t}/x.lead"));
    let (group, session) = group_and_session(sleep);
    assert_eq!(session, lead, "the sleep is not in the job's session");
    assert_ne!(group, lead, "timeout did not make a group of its own");
    s.kill9();
    s.spawn();
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "interrupted", "{j}");
    gone_or_fail(
        sleep,
        "the crashed job's process in another group of its session",
    );
}
