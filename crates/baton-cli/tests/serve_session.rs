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

/// An orphan without a mark (`env -i` then `setsid`) that two jobs could
/// own (both ran when it started) is stopped by the end of the second,
/// even while the first is still ending: a run whose command has ended
/// runs no process any more (found by a hostile review: A's end left it to
/// B, still registered while its end waited out a TERM-ignoring orphan's
/// grace, whose sort had left it to A: it ran on with both jobs ended).
#[test]
fn an_unmarked_orphan_two_ending_jobs_could_own_is_stopped() {
    let s = Server::start(
        &sh_config("").replace("grace = \"1s\"", "grace = \"3s\""),
        &[],
    );
    let t = s.tmp();
    // B: a marked orphan that ignores TERM, so that B's end waits out its
    // grace.
    let b = s.submit(json!({"prompt": format!(
        "echo $$ > {t}/b.lead; setsid sh -c 'trap \"\" TERM; echo $$ > {t}/b.tmp; \
         mv {t}/b.tmp {t}/b.pid; exec sleep 300' </dev/null >/dev/null 2>&1 & \
         while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    let b_orphan = pid_in(&format!("{t}/b.pid"));
    let b_lead = pid_in(&format!("{t}/b.lead"));
    // A: an orphan without a mark, started while both run.
    let a = s.submit(json!({"prompt": format!(
        "env -i setsid sh -c 'echo $$ > {t}/a.tmp; mv {t}/a.tmp {t}/a.pid; exec sleep 300' \
         </dev/null >/dev/null 2>&1 & while [ ! -e {t}/a.go ]; do sleep 0.02; done"
    )}));
    let a_orphan = pid_in(&format!("{t}/a.pid"));
    // B ends first (its end now waits out its orphan's grace), then A.
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    let start = Instant::now();
    while alive(b_lead) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(format!("{t}/a.go"), "").unwrap();
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
    gone_or_fail(b_orphan, "B's own orphan");
    // No job runs: nothing else would ever stop it.
    gone_or_fail(
        a_orphan,
        "the unmarked orphan, both jobs that could own it ended",
    );
}

/// An orphan that starts another one while its job's end stops it (a
/// TERM trap that forks a new session) has that one stopped by the same
/// end, not left for a later job's end (found by a hostile review: in an
/// idle service it ran on).
#[test]
fn an_orphan_forked_while_its_jobs_end_stops_the_orphans_is_stopped_too() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let id = s.submit(json!({"prompt": format!(
        "setsid sh -c 'trap \"setsid sh -c \\\"echo \\\\$\\\\$ > {t}/n.tmp; mv {t}/n.tmp {t}/n.pid; \
         exec sleep 300\\\" </dev/null >/dev/null 2>&1 &\" TERM; \
         echo $$ > {t}/o.pid; while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 & \
         while [ ! -s {t}/o.pid ]; do sleep 0.01; done"
    )}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{j}");
    gone_or_fail(pid_in(&format!("{t}/o.pid")), "the job's orphan");
    // Forked at its TERM: no job runs, nothing else would stop it.
    let late = pid_in(&format!("{t}/n.pid"));
    gone_or_fail(
        late,
        "the orphan forked while the job's end stopped the first",
    );
}
