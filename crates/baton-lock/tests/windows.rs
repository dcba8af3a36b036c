#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Windows only: a lock file is open without `FILE_SHARE_DELETE` while held,
//! so it cannot be deleted or renamed under its holder (the "deleted under a
//! holder" case of `docs/src/design/locking.md` cannot happen); a wait with a deadline on a
//! holder in another process (an overlapped `LockFileEx`, or polling under
//! wine) gives up in time, and the lock is free once that holder is killed
//! (`TerminateProcess`). `locks.rs` runs here too (exclusion between
//! processes, killed holders and waiters, FIFO, shared, semaphores).

#[cfg(windows)]
mod on_windows {
    use std::time::{Duration, Instant};

    use baton_lock::{acquire, status, BatonDir, LockError, LockName, LockRequest, WaitPolicy};

    fn setup() -> (tempfile::TempDir, BatonDir, LockName) {
        let t = tempfile::tempdir().unwrap();
        let dir = BatonDir::open(t.path().join("baton")).unwrap();
        (t, dir, "held".parse().unwrap())
    }

    #[test]
    fn a_held_lock_file_cannot_be_deleted_or_renamed_and_no_second_holder_appears() {
        let (_t, dir, name) = setup();
        let held = acquire(&dir, &LockRequest::new(name.clone())).unwrap();
        let path = held.path().to_path_buf();
        assert!(
            std::fs::remove_file(&path).is_err(),
            "deleted under its holder"
        );
        let moved = path.with_extension("moved");
        assert!(
            std::fs::rename(&path, &moved).is_err(),
            "renamed under its holder"
        );
        assert!(path.exists() && !moved.exists());
        // Another thread (the same one would be refused as re-entrant).
        let second = std::thread::spawn({
            let (dir, name) = (dir.clone(), name.clone());
            move || {
                acquire(&dir, &LockRequest::new(name).wait(WaitPolicy::Immediately))
                    .map(|g| g.token())
            }
        })
        .join()
        .unwrap();
        assert!(matches!(second, Err(LockError::Busy { .. })), "{second:?}");
        let st = status(&dir, &name).unwrap();
        assert!(st.held && st.held_through_replaced_file.is_empty() && !st.replaced_file_unknown);
        held.release().unwrap();
        // Free, it can be deleted, and the next grant makes a new file.
        std::fs::remove_file(&path).unwrap();
        let again = acquire(&dir, &LockRequest::new(name).wait(WaitPolicy::Immediately)).unwrap();
        assert!(again.path().exists());
    }

    #[test]
    fn a_deadline_wait_returns_busy_in_time_and_a_killed_holder_frees_the_lock() {
        let (_t, dir, name) = setup();
        // The holder is another process; then a holder killed with
        // TerminateProcess frees the lock for a waiter at once.
        let mut holder = crate::locks::child(&dir, "hold", &[name.as_str()]);
        baton_testkit::expect_line(&mut holder, "locked");
        let wait = Duration::from_millis(400);
        let start = Instant::now();
        let result = acquire(&dir, &LockRequest::new(name.clone()).wait(wait));
        let took = start.elapsed();
        eprintln!("deadline {wait:?}: gave up after {took:?}");
        assert!(matches!(result, Err(LockError::Busy { .. })), "{result:?}");
        assert!(took >= wait, "gave up early: {took:?}");
        assert!(
            took < wait + Duration::from_millis(400),
            "gave up late: {took:?}"
        );
        holder.kill().unwrap(); // TerminateProcess
        let killed = Instant::now();
        let got = acquire(&dir, &LockRequest::new(name).wait(Duration::from_secs(10)));
        eprintln!("granted {:?} after the holder was killed", killed.elapsed());
        assert!(got.is_ok(), "{:?}", got.map(|g| g.token()));
        holder.wait().unwrap();
    }
}
