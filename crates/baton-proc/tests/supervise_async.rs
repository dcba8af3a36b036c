//! `Supervisor::run_async` (feature `tokio`): real children supervised on a
//! tokio runtime: exit codes and the start hook, timeout, cancel,
//! leftovers, and a command that outlives the thread that awaited its start.

// clippy.toml allows `expect` in `#[test]` functions only; the helpers here panic on failure
// just the same, with a message, which is what a failed test should do.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_proc::{Outcome, ProcError, RunSpec, Stdio, Supervisor};

use crate::common::{sh, wait_for_line, PATIENCE};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn exit_codes_pass_through_and_the_group_is_reported_before_the_exec() {
    let rt = runtime();
    rt.block_on(async {
        for code in [0, 3] {
            let (tx, rx) = std::sync::mpsc::channel();
            let finished = Supervisor::new(sh(&format!("exit {code}")))
                .run_async(move |started| tx.send(started.pgid).expect("send"))
                .await
                .expect("run");
            assert_eq!(finished.outcome, Outcome::Exited(code));
            assert!(finished.leftovers.is_empty());
            assert!(rx.try_recv().is_ok_and(|pgid| pgid > 0));
        }
        let err = Supervisor::new(RunSpec::new("baton-proc-test-no-such-command"))
            .run_async(|_| {})
            .await
            .expect_err("spawn must fail");
        assert!(matches!(err, ProcError::NotFound { .. }), "{err:?}");
    });
}

#[test]
fn a_timeout_terminates_the_command() {
    let rt = runtime();
    let mut spec = sh("sleep 60");
    spec.timeout = Some(Duration::from_millis(100));
    spec.grace = Duration::from_secs(5);
    let finished = rt
        .block_on(Supervisor::new(spec).run_async(|_| {}))
        .expect("run");
    assert_eq!(finished.outcome, Outcome::TimedOut);
}

#[test]
fn a_command_that_ignores_term_is_killed_after_the_grace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready");
    let rt = runtime();
    let mut spec = sh(&format!(
        "trap '' TERM; echo ready > {}; while :; do sleep 1; done",
        ready.display()
    ));
    spec.grace = Duration::from_millis(100);
    let supervisor = Supervisor::new(spec);
    let canceller = supervisor.canceller();
    let run = rt.spawn(supervisor.run_async(|_| {}));
    wait_for_line(&ready);
    canceller.cancel();
    let finished = rt.block_on(run).expect("join").expect("run");
    assert_eq!(finished.outcome, Outcome::Cancelled);
}

#[test]
fn a_cancel_before_the_start_starts_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let rt = runtime();
    let supervisor = Supervisor::new(sh(&format!("touch {}", marker.display())));
    supervisor.canceller().cancel();
    let finished = rt.block_on(supervisor.run_async(|_| {})).expect("run");
    assert_eq!(finished.outcome, Outcome::Cancelled);
    assert!(!marker.exists());
}

#[test]
fn what_the_command_leaves_in_its_group_is_terminated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("pid");
    let rt = runtime();
    let mut spec = sh(&format!("sleep 60 & echo $! > {}", pid_file.display()));
    spec.grace = Duration::from_secs(5);
    let finished = rt
        .block_on(Supervisor::new(spec).run_async(|_| {}))
        .expect("run");
    assert_eq!(finished.outcome, Outcome::Exited(0));
    let pid: i32 = wait_for_line(&pid_file).parse().expect("a pid");
    assert!(
        finished.leftovers.iter().any(|l| l.pid == pid),
        "{:?}",
        finished.leftovers
    );
    // Reaped by init by now or soon: gone from /proc (bounded wait).
    let start = Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(start.elapsed() < PATIENCE, "the leftover {pid} still runs");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The parent-death signal follows the thread that cloned the command: a
/// command must not die when the thread that first polled its run exits
/// (a blocking-pool thread retires when idle, a worker can too).
#[test]
fn the_command_outlives_the_thread_that_awaited_its_start() {
    let rt = runtime();
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe");
    let mut spec = sh("read line; exit 7");
    spec.stdio.stdin = Stdio::Fd(Arc::new(read));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut run = Box::pin(
        Supervisor::new(spec).run_async(move |started| tx.send(started.pgid).expect("send")),
    );
    let handle = rt.handle().clone();
    let (run, tid) = std::thread::spawn(move || {
        handle.block_on(async {
            tokio::select! {
                done = &mut run => panic!("the command ended before its input: {done:?}"),
                pgid = rx => assert!(pgid.expect("started") > 0),
            }
        });
        (run, rustix::thread::gettid().as_raw_nonzero().get())
    })
    .join()
    .expect("the first thread");
    // That thread has exited for good (its task is gone, after the kernel
    // sent any parent-death signal it was due to send).
    let start = Instant::now();
    while std::path::Path::new(&format!("/proc/self/task/{tid}")).exists() {
        assert!(start.elapsed() < PATIENCE, "thread {tid} does not end");
        std::thread::sleep(Duration::from_millis(1));
    }
    rustix::io::write(&write, b"go\n").expect("write");
    let finished = rt.block_on(run).expect("run");
    assert_eq!(finished.outcome, Outcome::Exited(7));
}
