#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Windows only: a lock file is open without `FILE_SHARE_DELETE` while held,
//! so it cannot be deleted or renamed under its holder (the "deleted under a
//! holder" case of `LOCKING.md` cannot happen), and a deadline wait (an
//! overlapped `LockFileEx`, or polling under wine) gives up in time. Killed
//! holders (`TerminateProcess`) and exclusion between processes are tested
//! by `locks.rs`, which runs here too.

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
    fn a_deadline_wait_returns_busy_in_time() {
        let (_t, dir, name) = setup();
        let held = acquire(&dir, &LockRequest::new(name.clone())).unwrap();
        let wait = Duration::from_millis(400);
        let waiter = std::thread::spawn({
            let dir = dir.clone();
            move || {
                let start = Instant::now();
                let r = acquire(&dir, &LockRequest::new(name).wait(wait));
                (r.map(|g| g.token()), start.elapsed())
            }
        });
        let (result, took) = waiter.join().unwrap();
        eprintln!("deadline {wait:?}: gave up after {took:?}");
        assert!(matches!(result, Err(LockError::Busy { .. })), "{result:?}");
        assert!(took >= wait, "gave up early: {took:?}");
        assert!(
            took < wait + Duration::from_millis(400),
            "gave up late: {took:?}"
        );
        drop(held);
    }
}
