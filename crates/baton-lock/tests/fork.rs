#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! A process forked while other threads acquire and release never hangs in
//! baton's bookkeeping (the re-entrancy table, the cached identity): before
//! they were fork-safe, a child forked while another thread was inside one
//! inherited it locked and hung at its first lock (issue 37, item 1).

#![cfg(unix)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_lock::{acquire, BatonDir, LockGuard, LockName, LockRequest, WaitPolicy};

fn req(name: &str) -> LockRequest {
    LockRequest::new(name.parse::<LockName>().unwrap())
}

/// Forks `forks` children while three threads loop acquire/release (with
/// `held` more locks held meanwhile); each child takes and releases a lock
/// of its own and exits. Returns how many children hung (killed after 10 s).
fn forks_that_hang(forks: usize, held: usize) -> usize {
    let t = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(t.path().join("baton")).unwrap();
    let _held: Vec<LockGuard> = (0..held)
        .map(|i| acquire(&dir, &req(&format!("held-{i}"))).unwrap())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let loops: Vec<_> = (0..3)
        .map(|i| {
            let (dir, stop) = (dir.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    acquire(&dir, &req(&format!("loop-{i}")))
                        .unwrap()
                        .release()
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut hung = 0;
    for i in 0..forks {
        // SAFETY (test): the child only takes and releases a lock, then
        // leaves with _exit; what it needs must not be held by a thread
        // that did not come along, which is what this test checks.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = match acquire(
                &dir,
                &req(&format!("child-{i}")).wait(WaitPolicy::Immediately),
            ) {
                Ok(g) => i32::from(g.release().is_err()),
                Err(_) => 2,
            };
            // SAFETY: ends the child at once, running no destructors.
            unsafe { libc::_exit(code) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child without blocking.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "child {i} failed: status {status:#x}"
                );
                break;
            }
            if Instant::now() > deadline {
                hung += 1;
                // SAFETY: kills and reaps our own hung child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let cycles: u64 = loops.into_iter().map(|l| l.join().unwrap()).sum();
    assert!(
        cycles > 0,
        "the threads never acquired: the forks raced nothing"
    );
    hung
}

#[test]
fn children_forked_while_threads_acquire_and_release_never_hang() {
    assert_eq!(forks_that_hang(600, 0), 0);
}

#[test]
fn children_forked_while_50_locks_are_held_never_hang() {
    assert_eq!(forks_that_hang(300, 50), 0);
}
