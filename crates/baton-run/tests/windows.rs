//! Windows: runs with real child processes (under wine on Linux CI). The
//! commands are this test binary itself, running the ignored test
//! `windows::helper` in the role `BATON_RUN_TEST_ROLE` names; `runs.rs`
//! has the same tests with `sh` on unix.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use baton_lock::{BatonDir, LockName, WaitPolicy};
use baton_proc::Outcome;
use baton_run::{run, GroupMode, GroupRequest, RunReport, RunRequest};
use baton_testkit::Rng;

const ROLE: &str = "BATON_RUN_TEST_ROLE";

/// A run of this binary in `role` (words separated by `|`).
fn request(group: Option<GroupRequest>, role: &str) -> RunRequest {
    let exe = std::env::current_exe().unwrap();
    let mut req = RunRequest::new(helper_command(&exe));
    req.group = group;
    req.grace = Duration::from_secs(5);
    req.env.push((ROLE.into(), role.into()));
    // Not the helper's test harness chatter in this run's output.
    req.stdio.stdout = baton_proc::Stdio::Null;
    req
}

fn helper_command(exe: &Path) -> Vec<OsString> {
    let mut command = vec![exe.as_os_str().to_owned()];
    command.extend(["--ignored", "--exact", "windows::helper", "--quiet"].map(OsString::from));
    command
}

/// The roles: `exclusive|PATH` holds PATH's lock while it works (exit 99
/// if another process holds it), `touch|PATH|MS` creates PATH and sleeps,
/// `sleep|MS` sleeps.
#[test]
#[ignore = "a helper: run as a command by the tests of this file"]
fn helper() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let words: Vec<&str> = role.split('|').collect();
    let ms = |w: &str| Duration::from_millis(w.parse().unwrap());
    match words[..] {
        ["exclusive", path] => {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .unwrap();
            if !baton_fs::shared_log::try_lock_exclusive(&file).unwrap() {
                std::process::exit(99);
            }
            thread::sleep(Duration::from_millis(50));
        }
        ["touch", path, pause] => {
            std::fs::write(path, b"").unwrap();
            thread::sleep(ms(pause));
        }
        ["sleep", pause] => thread::sleep(ms(pause)),
        _ => panic!("unknown role {role}"),
    }
}

fn key(s: &str) -> LockName {
    s.parse().unwrap()
}

fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met in 30 s");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Supersede between threads of one process: each newer run rings the
/// older one's doorbell (a named event); the commands, which exclude each
/// other through a kernel lock on one file (released when a command is
/// terminated), never overlap.
#[test]
fn threads_superseding_one_group_never_overlap_and_the_newest_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let rng = Arc::new(std::sync::Mutex::new(Rng::seeded()));
    let work = format!("exclusive|{}", tmp.path().join("inside").display());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (dir, rng, work) = (dir.clone(), rng.clone(), work.clone());
            thread::spawn(move || {
                let mut reports = Vec::new();
                for _ in 0..4 {
                    let pause = rng.lock().unwrap().unit() * 200.0;
                    thread::sleep(Duration::from_secs_f64(pause / 1000.0));
                    let g = GroupRequest {
                        key: key("agent"),
                        mode: GroupMode::Supersede,
                        max: 1,
                        max_pending: None,
                        wait: WaitPolicy::Forever,
                        order: None,
                    };
                    reports.push(run(&dir, &request(Some(g), &work)).unwrap());
                }
                reports
            })
        })
        .collect();
    let reports: Vec<RunReport> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    assert_eq!(reports.len(), 16);
    for r in &reports {
        assert!(
            matches!(r.outcome, Outcome::Exited(0) | Outcome::Cancelled),
            "run {} overlapped another or failed: {:?}",
            r.run_id,
            r.outcome
        );
    }
    let superseded = reports.iter().filter(|r| r.superseded_by.is_some()).count();
    assert!(
        superseded > 0,
        "no run was ever superseded: the test did not test"
    );
    let log = std::fs::read_to_string(baton_run::events::log_path(&dir)).unwrap();
    let newest = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "queued")
        .last()
        .unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let last = reports.iter().find(|r| r.run_id == newest).unwrap();
    assert_eq!(last.outcome, Outcome::Exited(0), "the newest run must win");
}

#[test]
fn a_run_control_cancels_a_waiting_run_and_a_running_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let started = tmp.path().join("started");
    let mut holder = request(None, &format!("touch|{}|30000", started.display()));
    holder.locks = vec![key("busy")];
    let holder_control = holder.control.clone();
    let d = dir.clone();
    let running = thread::spawn(move || run(&d, &holder));
    wait_for(|| started.exists());

    let mut waiter = request(None, "sleep|0");
    waiter.locks = vec![key("busy")];
    let waiter_control = waiter.control.clone();
    let d = dir.clone();
    let waiting = thread::spawn(move || run(&d, &waiter));
    wait_for(|| baton_lock::status(&dir, &key("busy")).is_ok_and(|s| s.waiters == 1));
    waiter_control.cancel();
    let r = waiting.join().unwrap().unwrap();
    assert_eq!((r.outcome, r.ran), (Outcome::Cancelled, false));

    let cancelled = Instant::now();
    holder_control.cancel();
    let r = running.join().unwrap().unwrap();
    assert_eq!((r.outcome, r.ran), (Outcome::Cancelled, true));
    assert!(
        cancelled.elapsed() < Duration::from_secs(20),
        "the command ran on"
    );
    assert!(!baton_lock::status(&dir, &key("busy")).unwrap().held);
}

#[test]
fn the_setup_command_and_the_command_share_one_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let mut req = request(None, "sleep|1500");
    req.setup = Some(helper_command(&std::env::current_exe().unwrap()));
    // The setup sleeps as long as the command (same environment): 2 x 1.5 s.
    req.timeout = Some(Duration::from_millis(2500));
    let report = run(&dir, &req).unwrap();
    assert_eq!(report.outcome, Outcome::TimedOut, "{report:?}");
    assert!(!report.setup_failed, "{report:?}");
}

/// What a run records of its command (for whoever takes its locks after it
/// died) is the command's own process: its pid and its creation time, no
/// session (Windows has none).
#[test]
fn the_command_group_recorded_is_the_commands_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(None));
    let started = tmp.path().join("started");
    let mut req = request(None, &format!("touch|{}|30000", started.display()));
    req.locks = vec![key("recorded")];
    let record = Arc::clone(&seen);
    req.on_start = Some(baton_run::OnStart(Arc::new(move |g| {
        *record.lock().unwrap() = Some(g);
    })));
    let control = req.control.clone();
    let d = dir.clone();
    let running = thread::spawn(move || run(&d, &req));
    wait_for(|| started.exists());
    let group = seen.lock().unwrap().expect("on_start was not called");
    assert!(group.pgid > 0);
    assert_eq!(group.session, 0);
    assert_ne!(group.leader_start_time, 0);
    assert_eq!(
        baton_lock::start_time(group.pgid),
        Some(group.leader_start_time)
    );
    assert!(baton_lock::status(&dir, &key("recorded")).unwrap().held);
    control.cancel();
    let r = running.join().unwrap().unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(
        baton_lock::start_time(group.pgid),
        None,
        "the command outlived its run"
    );
}
