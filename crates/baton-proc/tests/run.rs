//! Running real children: exit codes, spawn errors, timeouts, process groups, cancellation,
//! and terminating a process that is not a supervised child.

// clippy.toml allows `expect` in `#[test]` functions only; the helpers here panic on failure
// just the same, with a message, which is what a failed test should do.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use baton_proc::{
    run, terminate_process, Outcome, ProcError, RunSpec, Streams, Supervisor, TerminateReport,
};
use common::{
    first_line, pidfd, pidfd_exits_within, sh, wait_for_line, GROWING_TIMEOUTS, PATIENCE,
};

#[test]
fn exit_code_is_passed_through() {
    for code in [0, 3] {
        let outcome = run(&sh(&format!("exit {code}"))).expect("run");
        assert_eq!(outcome, Outcome::Exited(code));
        assert_eq!(outcome.exit_code(), code);
    }
}

#[test]
fn killed_by_signal_maps_to_128_plus_n() {
    let outcome = run(&sh("kill -KILL $$")).expect("run");
    assert_eq!(outcome, Outcome::Signaled(9));
    assert_eq!(outcome.exit_code(), 137);

    let outcome = run(&sh("kill -USR1 $$")).expect("run");
    assert_eq!(outcome, Outcome::Signaled(10));
    assert_eq!(outcome.exit_code(), 138);
}

#[test]
fn outcome_exit_codes_match_the_design_table() {
    assert_eq!(Outcome::Exited(42).exit_code(), 42);
    assert_eq!(Outcome::Signaled(15).exit_code(), 143);
    assert_eq!(Outcome::TimedOut.exit_code(), 124);
    assert_eq!(Outcome::Cancelled.exit_code(), 79);
}

#[test]
fn missing_command_is_not_found() {
    // An empty name too, as execvp has it (not "permission denied").
    for program in [
        "baton-proc-test-no-such-command",
        "/nonexistent/dir/program",
        "",
    ] {
        let err = run(&RunSpec::new(program)).expect_err("spawn must fail");
        assert!(
            matches!(&err, ProcError::NotFound { program: p } if p == program),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), 127);
        assert_eq!(err.to_string(), format!("command not found: {program}"));
    }
}

#[test]
fn non_executable_file_is_not_executable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("script.sh");
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    for program in [file.as_path(), dir.path()] {
        let err = run(&RunSpec::new(program)).expect_err("spawn must fail");
        assert!(matches!(err, ProcError::NotExecutable { .. }), "{err:?}");
        assert_eq!(err.exit_code(), 126);
    }
}

#[test]
fn missing_working_directory_is_not_blamed_on_the_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spec = sh("exit 0");
    spec.cwd = Some(dir.path().join("missing"));
    let err = run(&spec).expect_err("spawn must fail");
    assert!(matches!(err, ProcError::Cwd { .. }), "{err:?}");
    assert_eq!(err.exit_code(), 125);
}

#[test]
fn env_and_cwd_are_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut spec = sh(r#"printf '%s %s\n' "$BATON_TEST_VALUE" "$(pwd)" > out"#);
    spec.env.push(("BATON_TEST_VALUE".into(), "hello".into()));
    spec.cwd = Some(dir.path().to_owned());
    assert_eq!(run(&spec).expect("run"), Outcome::Exited(0));
    let out = std::fs::read_to_string(dir.path().join("out")).expect("read out");
    let cwd = dir.path().canonicalize().expect("canonicalize");
    assert_eq!(out, format!("hello {}\n", cwd.display()));
}

#[test]
fn child_inherits_no_descriptor_of_ours() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("fds");
    let mut spec = sh(r#"ls -l /proc/$$/fd > "$OUT""#);
    spec.env.push(("OUT".into(), out.clone().into()));
    assert_eq!(run(&spec).expect("run"), Outcome::Exited(0));
    let listing = std::fs::read_to_string(&out).expect("read listing");
    // What we open: the cancel eventfd, the child's pidfd, the signal socket pair. (Pipes may
    // legitimately be inherited from whatever started the test run.)
    for leaked in ["eventfd", "pidfd", "socket:"] {
        assert!(
            !listing.contains(leaked),
            "child inherited {leaked}:\n{listing}"
        );
    }
}

#[test]
fn timeout_kills_a_child_that_ignores_term_after_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    // "ready" is written once TERM is ignored: without it the TERM came first.
    for timeout in GROWING_TIMEOUTS {
        let _ = std::fs::remove_file(&ready);
        let mut spec = sh(r#"trap '' TERM; echo ready > "$READY"; sleep 30"#);
        spec.env.push(("READY".into(), ready.clone().into()));
        spec.timeout = Some(timeout);
        spec.grace = Duration::from_millis(300);
        let start = Instant::now();
        let outcome = run(&spec).expect("run");
        let elapsed = start.elapsed();
        assert_eq!(outcome, Outcome::TimedOut);
        assert_eq!(outcome.exit_code(), 124);
        if !ready.exists() {
            eprintln!("not ready within {timeout:?}; again");
            continue;
        }
        assert!(elapsed >= timeout + spec.grace, "{elapsed:?}");
        assert!(elapsed < timeout + PATIENCE, "{elapsed:?}");
        return;
    }
    panic!("the child never set its trap before the timeout");
}

#[test]
fn timeout_sends_term_before_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("marker");
    let ready = dir.path().join("ready");
    // "ready" is written once the trap is set: without it the TERM came first.
    for timeout in GROWING_TIMEOUTS {
        let _ = std::fs::remove_file(&ready);
        let _ = std::fs::remove_file(&marker);
        let mut spec = sh(
            r#"trap 'echo got-term > "$MARKER"; exit 0' TERM; echo ready > "$READY"; sleep 30 & wait"#,
        );
        spec.env.push(("MARKER".into(), marker.clone().into()));
        spec.env.push(("READY".into(), ready.clone().into()));
        spec.timeout = Some(timeout);
        let start = Instant::now();
        let outcome = run(&spec).expect("run");
        let elapsed = start.elapsed();
        assert_eq!(outcome, Outcome::TimedOut);
        if !ready.exists() {
            eprintln!("not ready within {timeout:?}; again");
            continue;
        }
        // It ended long before the 20 s grace, so it was the TERM that stopped it.
        assert!(elapsed < timeout + spec.grace / 2, "{elapsed:?}");
        let content = std::fs::read_to_string(&marker).expect("TERM trap wrote the marker");
        assert_eq!(content, "got-term\n");
        return;
    }
    panic!("the child never set its trap before the timeout");
}

#[test]
fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pidfile = dir.path().join("grandchild");
    // The grandchild ignores TERM and outlives the leader, which dies of the
    // TERM. It writes its pid once it ignores TERM; an attempt in which the
    // timeout came first, or the test could not open a pidfd for it while the
    // run went on, proves nothing and is repeated with a longer timeout.
    for timeout in GROWING_TIMEOUTS {
        let _ = std::fs::remove_file(&pidfile);
        let mut spec = sh(r#"sh -c 'trap "" TERM; echo $$ > "$PIDFILE"; exec sleep 30' & wait"#);
        spec.env.push(("PIDFILE".into(), pidfile.clone().into()));
        spec.timeout = Some(timeout);
        let supervisor = std::thread::spawn(move || {
            let start = Instant::now();
            (run(&spec), start.elapsed())
        });
        let grandchild = loop {
            if let Some(pid) = first_line(&pidfile) {
                break pidfd(pid.parse().expect("pid")).filter(|_| !supervisor.is_finished());
            }
            if supervisor.is_finished() {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let (outcome, elapsed) = supervisor.join().expect("join");
        assert_eq!(outcome.expect("run"), Outcome::TimedOut);
        let Some(grandchild) = grandchild else {
            eprintln!("not ready within {timeout:?}; again");
            continue;
        };
        assert!(elapsed < timeout + PATIENCE, "{elapsed:?}");
        assert!(
            pidfd_exits_within(&grandchild, Duration::from_secs(5)),
            "the grandchild survived the timeout"
        );
        return;
    }
    panic!("the grandchild never set its trap before the timeout");
}

#[test]
fn cancel_from_another_thread_terminates_the_child() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("marker");
    let ready = dir.path().join("ready");
    let mut spec = sh(
        r#"trap 'echo got-term > "$MARKER"; exit 0' TERM; echo ready > "$READY"; sleep 30 & wait"#,
    );
    spec.env.push(("MARKER".into(), marker.clone().into()));
    spec.env.push(("READY".into(), ready.clone().into()));

    let supervisor = Supervisor::new(spec);
    let canceller = supervisor.canceller();
    let watcher = std::thread::spawn(move || {
        wait_for_line(&ready);
        let clone = canceller.clone();
        clone.cancel();
        assert!(canceller.is_cancelled());
        Instant::now()
    });
    let outcome = supervisor.run().expect("run");
    let ended = Instant::now();
    let cancelled_at = watcher.join().expect("join");
    assert_eq!(outcome, Outcome::Cancelled);
    assert_eq!(outcome.exit_code(), 79);
    assert!(ended - cancelled_at < Duration::from_secs(5));
    assert_eq!(
        std::fs::read_to_string(&marker).expect("TERM trap wrote the marker"),
        "got-term\n"
    );
}

#[test]
fn cancel_before_run_never_spawns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("marker");
    let mut spec = sh(r#"echo ran > "$MARKER""#);
    spec.env.push(("MARKER".into(), marker.clone().into()));
    let supervisor = Supervisor::new(spec);
    supervisor.canceller().cancel();
    assert_eq!(supervisor.run().expect("run"), Outcome::Cancelled);
    assert!(!marker.exists());
}

#[test]
fn cancel_after_run_is_harmless() {
    let supervisor = Supervisor::new(sh("exit 5"));
    let canceller = supervisor.canceller();
    assert_eq!(supervisor.run().expect("run"), Outcome::Exited(5));
    canceller.cancel();
}

fn pid_of(child: &std::process::Child) -> i32 {
    i32::try_from(child.id()).expect("pid fits i32")
}

#[test]
fn terminate_process_stops_a_process_with_term() {
    let mut child = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("spawn sleep");
    let report = terminate_process(pid_of(&child), Duration::from_secs(20)).expect("terminate");
    assert_eq!(report, TerminateReport::ExitedAfterTerm);
    assert_eq!(child.wait().expect("wait").signal(), Some(15));
}

#[test]
fn terminate_process_kills_a_process_that_ignores_term() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"trap '' TERM; echo ready > "$READY"; exec sleep 30"#)
        .env("READY", &ready)
        .spawn()
        .expect("spawn sh");
    wait_for_line(&ready);
    let start = Instant::now();
    let report = terminate_process(pid_of(&child), Duration::from_millis(300)).expect("terminate");
    assert_eq!(report, TerminateReport::Killed);
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(child.wait().expect("wait").signal(), Some(9));
}

#[test]
fn terminate_process_reports_a_process_already_gone() {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = pid_of(&child);
    child.wait().expect("wait");
    let report = terminate_process(pid, Duration::from_secs(1)).expect("terminate");
    assert_eq!(report, TerminateReport::AlreadyGone);
}

#[test]
fn terminate_process_reports_an_unreaped_zombie_as_gone() {
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pidfd = pidfd(pid_of(&child)).expect("pidfd");
    assert!(pidfd_exits_within(&pidfd, PATIENCE), "`true` did not exit");
    // Exited but not reaped yet: a zombie.
    let report = terminate_process(pid_of(&child), Duration::from_secs(1)).expect("terminate");
    assert_eq!(report, TerminateReport::AlreadyGone);
    assert!(child.wait().expect("wait").success());
}

#[test]
fn handles_are_thread_safe() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<baton_proc::Canceller>();
    assert_send_sync::<Supervisor>();
    assert_send_sync::<ProcError>();
}

#[test]
fn terminate_process_refuses_pids_that_are_not_one_other_process() {
    for pid in [0, -1, std::process::id() as i32] {
        let err = terminate_process(pid, Duration::from_secs(1)).expect_err("must refuse");
        assert!(matches!(err, ProcError::InvalidPid { .. }), "{err:?}");
    }
}

/// Streams: a command that echoes a megabyte back neither deadlocks (it
/// writes before it has read everything) nor loses a byte; its stderr is
/// the caller's too.
#[test]
fn streams_feed_stdin_and_drain_stdout_and_stderr_at_once() {
    let input: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let streamed = Supervisor::new(sh("cat; echo done >&2"))
        .run_streaming(
            Streams::new()
                .stdin(&input[..])
                .stdout(&mut out)
                .stderr(&mut err),
            |_| {},
        )
        .expect("run");
    assert_eq!(streamed.finished.outcome, Outcome::Exited(0));
    assert!(streamed.stdin.is_ok() && streamed.stdout.is_ok() && streamed.stderr.is_ok());
    assert!(out == input, "{} bytes back of {}", out.len(), input.len());
    assert_eq!(err, b"done\n");
}

/// A command may ignore its input: the closed pipe is not an error.
#[test]
fn streams_accept_a_command_that_ignores_its_input() {
    let input = vec![b'x'; 1024 * 1024];
    let mut out = Vec::new();
    let streamed = Supervisor::new(sh("echo '{}'"))
        .run_streaming(Streams::new().stdin(&input[..]).stdout(&mut out), |_| {})
        .expect("run");
    assert_eq!(streamed.finished.outcome, Outcome::Exited(0));
    assert!(streamed.stdin.is_ok(), "{:?}", streamed.stdin);
    assert_eq!(out, b"{}\n");
}

/// A streamed command is contained like any other: at its timeout its
/// group dies, including a background child that holds its output pipe
/// (which would otherwise keep the drain, and the caller, waiting).
#[test]
fn a_streamed_command_that_times_out_leaves_nothing_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("bg.pid");
    for timeout in GROWING_TIMEOUTS {
        let _ = std::fs::remove_file(&pid_file);
        let mut spec = sh(r#"sleep 600 & echo $! > "$PIDFILE"; exec sleep 600"#);
        spec.env.push(("PIDFILE".into(), pid_file.clone().into()));
        spec.timeout = Some(timeout);
        spec.grace = Duration::from_millis(300);
        let mut out = Vec::new();
        let start = Instant::now();
        let streamed = Supervisor::new(spec)
            .run_streaming(Streams::new().stdin(&b""[..]).stdout(&mut out), |_| {})
            .expect("run");
        assert_eq!(streamed.finished.outcome, Outcome::TimedOut);
        assert!(
            start.elapsed() < timeout + PATIENCE,
            "{:?}",
            start.elapsed()
        );
        let Some(bg) = first_line(&pid_file) else {
            eprintln!("no background child within {timeout:?}; again");
            continue;
        };
        let bg: i32 = bg.parse().expect("pid");
        let gone = baton_proc::procfs::stat(bg).is_none_or(|st| st.exited);
        assert!(gone, "the background child {bg} outlived the timeout");
        return;
    }
    panic!("the command never started its background child");
}
