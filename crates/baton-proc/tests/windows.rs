//! Windows: the supervisor with real child processes (run under wine on
//! Linux CI). The commands are this test binary itself, running the ignored
//! test `windows::helper` in the role that `BATON_PROC_TEST_ROLE` names.

// clippy.toml allows `unwrap` in `#[test]` functions only; the helpers here
// panic on failure too, which fails the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use windows_sys::Win32::System::Console::{AllocConsole, SetConsoleCtrlHandler, CTRL_BREAK_EVENT};

use baton_proc::{
    LeftoverPolicy, Outcome, ProcError, ProcessId, RunSpec, Streams, Supervisor, TerminateReport,
};

const ROLE: &str = "BATON_PROC_TEST_ROLE";
/// How long a test waits for what should take milliseconds (a process
/// start costs ~20 ms under wine, more on a loaded machine).
const PATIENCE: Duration = Duration::from_secs(30);

fn this_exe() -> PathBuf {
    std::env::current_exe().unwrap()
}

fn helper_args() -> [&'static str; 4] {
    ["--ignored", "--exact", "windows::helper", "--quiet"]
}

/// This binary in `role` (words separated by `|`), as a command to supervise.
fn role(role: &str) -> RunSpec {
    let mut spec = RunSpec::new(this_exe()).args(helper_args());
    spec.env.push((ROLE.into(), role.into()));
    spec.grace = Duration::from_secs(20);
    // Not the helper's test harness chatter in this run's output.
    spec.stdio.stdout = baton_proc::Stdio::Null;
    spec
}

/// This binary in `role`, started directly (not supervised).
fn start(role: &str) -> std::process::Child {
    Command::new(this_exe())
        .args(helper_args())
        .env(ROLE, role)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The pids written (space-separated, then a newline) to `path`, waited for.
fn pids_in(path: &Path) -> Vec<i32> {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some((line, _)) = text.split_once('\n') {
                return line.split(' ').map(|p| p.parse().unwrap()).collect();
            }
        }
        assert!(start.elapsed() < PATIENCE, "no pids in {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn identity(pid: i32) -> ProcessId {
    ProcessId::of(pid).unwrap_or_else(|| panic!("process {pid} is not running"))
}

/// Waits (bounded) until `id` no longer runs; false if it still does.
fn ends(id: ProcessId, limit: Duration) -> bool {
    let start = Instant::now();
    while id.is_running() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The roles, run by the tests in a child process; skipped in a test run.
#[test]
#[ignore = "a child process of the other tests (BATON_PROC_TEST_ROLE)"]
fn helper() {
    let which = std::env::var(ROLE).unwrap();
    let words: Vec<&str> = which.split('|').collect();
    let sleep = |secs: &str| std::thread::sleep(Duration::from_secs(secs.parse().unwrap()));
    match words[..] {
        ["exit", code] => std::process::exit(code.parse().unwrap()),
        ["sleep", secs] => sleep(secs),
        ["touch-then-sleep", path, secs] => {
            std::fs::write(path, "").unwrap();
            sleep(secs);
        }
        ["cat"] => {
            std::io::copy(&mut std::io::stdin(), &mut std::io::stdout()).unwrap();
        }
        // Starts a grandchild that sleeps, writes "self grandchild" pids,
        // then sleeps `secs` itself.
        ["grandchild", path, secs] => {
            // Left running on purpose: the tests stop it (and Windows has
            // no zombies to reap).
            #[allow(clippy::zombie_processes)]
            let grandchild = start("sleep|300");
            let line = format!("{} {}\n", std::process::id(), grandchild.id());
            std::fs::write(path, line).unwrap();
            sleep(secs);
        }
        // Writes `path` when a Ctrl-Break arrives, then exits; sleeps until then.
        ["on-break", path] => {
            BREAK_MARK.set(path.into()).unwrap();
            // SAFETY: a handler of the right signature; it writes a file and exits.
            let ok = unsafe { SetConsoleCtrlHandler(Some(on_break), 1) };
            assert_ne!(ok, 0, "SetConsoleCtrlHandler");
            sleep("300");
        }
        // With a console of its own (a test runner may have none), a
        // supervisor of `on-break|path` with a timeout of 1 s and a grace
        // of 20 s: exits 0 when the command was asked to stop in time.
        ["console-supervise", path] => {
            // SAFETY: no arguments; fails harmlessly if there is a console.
            unsafe { AllocConsole() };
            let mut spec = role(&format!("on-break|{path}"));
            spec.timeout = Some(Duration::from_secs(1));
            spec.grace = Duration::from_secs(20);
            let started = Instant::now();
            let outcome = Supervisor::new(spec).run().unwrap();
            assert_eq!(outcome, Outcome::TimedOut);
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the command was killed after the grace, not asked: {:?}",
                started.elapsed()
            );
        }
        // A supervisor of `grandchild|path|300`, to be killed by the test.
        ["supervise", path] => {
            let outcome = Supervisor::new(role(&format!("grandchild|{path}|300"))).run();
            panic!("the supervisor was not killed: {outcome:?}");
        }
        _ => panic!("unknown role {which}"),
    }
}

static BREAK_MARK: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

unsafe extern "system" fn on_break(kind: u32) -> i32 {
    if kind == CTRL_BREAK_EVENT {
        if let Some(path) = BREAK_MARK.get() {
            let _ = std::fs::write(path, "break");
        }
        std::process::exit(0);
    }
    0
}

#[test]
fn the_commands_exit_code_and_a_missing_program() {
    let outcome = Supervisor::new(role("exit|3")).run().unwrap();
    assert_eq!(outcome, Outcome::Exited(3));
    let missing = Supervisor::new(RunSpec::new("baton-no-such-program-3141")).run();
    match missing {
        Err(e @ ProcError::NotFound { .. }) => assert_eq!(e.exit_code(), 127),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let mut bad_cwd = role("exit|0");
    bad_cwd.cwd = Some(PathBuf::from(r"C:\baton-no-such-directory"));
    assert!(matches!(
        Supervisor::new(bad_cwd).run(),
        Err(ProcError::Cwd { .. })
    ));
}

#[test]
fn a_timeout_stops_the_commands_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let mut spec = role(&format!("grandchild|{}|300", pidfile.display()));
    spec.timeout = Some(Duration::from_secs(3));
    spec.grace = Duration::from_secs(2);
    let supervisor = std::thread::spawn(move || Supervisor::new(spec).run());
    let pids = pids_in(&pidfile);
    let (child, grandchild) = (identity(pids[0]), identity(pids[1]));
    let outcome = supervisor.join().unwrap().unwrap();
    assert_eq!(outcome, Outcome::TimedOut);
    assert_eq!(outcome.exit_code(), 124);
    // Gone when `run` returned (the job was terminated and waited for).
    assert!(!child.is_running(), "the command outlived its run");
    assert!(
        ends(grandchild, Duration::from_secs(5)),
        "the grandchild outlived the run"
    );
}

#[test]
fn a_cancel_stops_the_command() {
    let supervisor = Supervisor::new(role("sleep|300"));
    let canceller = supervisor.canceller();
    let started = Instant::now();
    let run = std::thread::spawn(move || supervisor.run());
    std::thread::sleep(Duration::from_millis(500));
    canceller.cancel();
    assert_eq!(run.join().unwrap().unwrap(), Outcome::Cancelled);
    assert!(started.elapsed() < PATIENCE, "{:?}", started.elapsed());
}

#[test]
fn nothing_of_the_command_runs_before_on_start_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let spec = role(&format!("touch-then-sleep|{}|0", mark.display()));
    let finished = Supervisor::new(spec)
        .run_with(|started| {
            assert!(started.pgid > 0);
            // Suspended: given time, it still has not run.
            std::thread::sleep(Duration::from_millis(500));
            assert!(!mark.exists(), "the command ran before on_start returned");
        })
        .unwrap();
    assert_eq!(finished.outcome, Outcome::Exited(0));
    assert!(mark.exists(), "the command never ran");
}

#[test]
fn what_the_command_leaves_running_is_terminated_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let spec = role(&format!("grandchild|{}|0", pidfile.display()));
    let finished = Supervisor::new(spec).run_with(|_| {}).unwrap();
    assert_eq!(finished.outcome, Outcome::Exited(0));
    let grandchild = pids_in(&pidfile)[1];
    assert!(
        finished.leftovers.iter().any(|l| l.pid == grandchild),
        "{:?}",
        finished.leftovers
    );
    assert!(
        ProcessId::of(grandchild).is_none(),
        "the leftover still runs"
    );
}

#[test]
fn leftovers_left_running_outlive_the_run_until_terminated() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let mut spec = role(&format!("grandchild|{}|0", pidfile.display()));
    spec.leftovers = LeftoverPolicy::Leave;
    let finished = Supervisor::new(spec).run_with(|_| {}).unwrap();
    assert!(finished.leftovers.is_empty());
    let grandchild = identity(pids_in(&pidfile)[1]);
    // Closing the job (when `run` returned) did not kill it.
    std::thread::sleep(Duration::from_millis(300));
    assert!(grandchild.is_running());
    let report = baton_proc::terminate_process(grandchild.pid, Duration::from_secs(1)).unwrap();
    assert_eq!(report, TerminateReport::Killed);
    assert!(!grandchild.is_running());
    assert_eq!(
        baton_proc::terminate_process(grandchild.pid, Duration::ZERO).unwrap(),
        TerminateReport::AlreadyGone
    );
}

#[test]
fn a_killed_supervisors_whole_tree_dies_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pids");
    let mut supervisor = start(&format!("supervise|{}", pidfile.display()));
    let pids = pids_in(&pidfile);
    let (child, grandchild) = (identity(pids[0]), identity(pids[1]));
    // TerminateProcess: the supervisor gets no chance to act; the kernel
    // closes its handle of the job, which kills the job's processes.
    supervisor.kill().unwrap();
    supervisor.wait().unwrap();
    assert!(ends(child, PATIENCE), "the command outlived its supervisor");
    assert!(
        ends(grandchild, PATIENCE),
        "the grandchild outlived the supervisor"
    );
}

#[test]
fn an_exited_process_is_not_taken_for_a_new_one() {
    let mut first = start("sleep|300");
    let old = identity(first.id() as i32);
    assert!(old.is_running());
    first.kill().unwrap();
    first.wait().unwrap();
    drop(first); // its handle closed: the pid may be reused now
    assert!(!old.is_running());
    // New processes until one gets a pid (Windows reuses them soon) or
    // enough were tried: none is taken for the old one.
    for _ in 0..20 {
        let mut next = start("sleep|300");
        let new = identity(next.id() as i32);
        assert_ne!(new, old);
        assert!(!old.is_running(), "{new:?} is taken for {old:?}");
        next.kill().unwrap();
        next.wait().unwrap();
        if new.pid == old.pid {
            break;
        }
    }
}

#[test]
fn streams_are_pumped_to_and_from_the_command() {
    let mut out = Vec::new();
    let streamed = Supervisor::new(role("cat"))
        .run_streaming(
            Streams::new()
                .stdin(&b"through the command\n"[..])
                .stdout(&mut out),
            |_| {},
        )
        .unwrap();
    assert_eq!(streamed.finished.outcome, Outcome::Exited(0));
    streamed.stdin.unwrap();
    streamed.stdout.unwrap();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("through the command"), "{out:?}");
}

/// Needs a console to send the event through. Under wine 8 without a
/// display there is none (`AllocConsole` fails with "access denied",
/// `GenerateConsoleCtrlEvent` with error 12), so the supervisor terminates
/// the job at once there, as it does for any process without a console.
#[test]
#[ignore = "needs a console (wine 8 headless has none): run with --ignored on Windows"]
fn a_timeout_asks_with_ctrl_break_before_it_kills() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("break");
    let status = Command::new(this_exe())
        .args(helper_args())
        .env(ROLE, format!("console-supervise|{}", mark.display()))
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "the supervisor failed: {status}");
    assert_eq!(
        std::fs::read_to_string(&mark).ok().as_deref(),
        Some("break"),
        "the command never got a Ctrl-Break"
    );
}
