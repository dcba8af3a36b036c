#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! baton-run as a library: many runs inside one process, stopped by values.

use std::ffi::OsString;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use baton_lock::{BatonDir, LockName, WaitPolicy};
use baton_proc::{LeftoverPolicy, Outcome};
use baton_run::{run, Backend, GroupMode, GroupRequest, RunControl, RunReport, RunRequest};
use baton_testkit::Rng;

fn request(group: Option<GroupRequest>, script: &str) -> RunRequest {
    RunRequest {
        locks: Vec::new(),
        backend: Default::default(),
        mode: baton_lock::Mode::Exclusive,
        wait: WaitPolicy::Forever,
        group,
        on_superseded: None,
        owner: None,
        operation: None,
        command: ["sh", "-c", script].iter().map(OsString::from).collect(),
        timeout: None,
        grace: Duration::from_secs(5),
        workspace: None,
        keep_workspace: false,
        workspace_dir: None,
        leftovers: LeftoverPolicy::Terminate,
        control: RunControl::new(),
        forward_signals: false,
        new_session: false,
        run_id: None,
        env: Vec::new(),
        clear_env: false,
        guard: None,
        cwd: None,
        stdio: Default::default(),
        setup: None,
        on_start: None,
    }
}

fn key(s: &str) -> LockName {
    s.parse().unwrap()
}

/// Each command holds directory `inside` (mkdir is atomic) while it runs: a
/// second command running at the same time fails with 99.
fn exclusive_work(inside: &std::path::Path) -> String {
    let d = inside.display();
    // The trap first: a TERM that arrives right after mkdir must still clean up.
    format!("trap 'rmdir {d}; exit 143' TERM; mkdir {d} || exit 99; sleep 0.05 & wait; rmdir {d}")
}

#[test]
fn threads_superseding_one_group_never_overlap_and_the_newest_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let rng = Arc::new(std::sync::Mutex::new(Rng::seeded()));
    let work = exclusive_work(&tmp.path().join("inside"));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (dir, rng, work) = (dir.clone(), rng.clone(), work.clone());
            thread::spawn(move || {
                let mut reports = Vec::new();
                for _ in 0..5 {
                    let pause = rng.lock().unwrap().unit() * 40.0;
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
    assert_eq!(reports.len(), 30);
    for r in &reports {
        assert!(
            matches!(r.outcome, Outcome::Exited(0) | Outcome::Cancelled),
            "run {} overlapped another or failed: {:?}",
            r.run_id,
            r.outcome
        );
    }
    // Arrival order, from the group's event log.
    let log = std::fs::read_to_string(baton_run::events::log_path(&dir)).unwrap();
    let queued: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["event"] == "queued")
        .map(|e| e["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(queued.len(), 30);
    let position = |id: &str| queued.iter().position(|q| q == id).unwrap();
    let newest = queued.last().unwrap();
    let last = reports.iter().find(|r| &r.run_id == newest).unwrap();
    assert_eq!(last.outcome, Outcome::Exited(0), "the newest run must win");
    let mut superseded = 0;
    for r in &reports {
        if let Some(by) = &r.superseded_by {
            superseded += 1;
            assert_eq!(r.outcome, Outcome::Cancelled);
            assert!(
                position(by) > position(&r.run_id),
                "superseded by an older run"
            );
        }
    }
    assert!(
        superseded > 0,
        "no run was ever superseded: the test did not test"
    );
    let st = Backend::Local(dir.clone())
        .group_status(Some(&key("agent")))
        .unwrap();
    assert!(
        st[0].running.is_empty() && st[0].waiting.is_empty(),
        "{:?}",
        st[0]
    );
}

#[test]
fn a_run_control_cancels_a_waiting_run_and_a_running_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let started = tmp.path().join("started");
    let holder_script = format!("touch {}; sleep 30", started.display());
    let mut holder = request(None, &holder_script);
    holder.locks = vec![key("busy")];
    let holder_control = holder.control.clone();
    let d = dir.clone();
    let running = thread::spawn(move || run(&d, &holder));
    baton_testkit_wait(|| started.exists());

    let mut waiter = request(None, "echo never");
    waiter.locks = vec![key("busy")];
    let waiter_control = waiter.control.clone();
    let d = dir.clone();
    let waiting = thread::spawn(move || run(&d, &waiter));
    baton_testkit_wait(|| baton_lock::status(&dir, &key("busy")).is_ok_and(|s| s.waiters == 1));
    waiter_control.cancel();
    let r = waiting.join().unwrap().unwrap();
    assert_eq!((r.outcome, r.ran), (Outcome::Cancelled, false));

    holder_control.cancel();
    let r = running.join().unwrap().unwrap();
    assert_eq!((r.outcome, r.ran), (Outcome::Cancelled, true));
    assert!(!baton_lock::status(&dir, &key("busy")).unwrap().held);
}

fn baton_testkit_wait(mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "condition not met in 20 s"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_setup_command_and_the_command_share_one_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let baton = baton_lock::BatonDir::open(dir.path().join("baton")).unwrap();
    let mut req = RunRequest::new(vec!["sleep".into(), "1".into()]);
    req.setup = Some(vec!["sleep".into(), "1".into()]);
    req.timeout = Some(std::time::Duration::from_millis(1500));
    let report = baton_run::run(&baton, &req).unwrap();
    assert_eq!(report.outcome, baton_proc::Outcome::TimedOut, "{report:?}");
    assert!(!report.setup_failed, "{report:?}");
}
