#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The grant after a holder that ended without releasing names it
//! (`LockGuard::previous_holder_died`); after a clean release it names
//! nobody. A holder that abandons its lock (its principal ended) counts as
//! one that died, although its process still runs.

use baton_lock::{acquire, status, BatonDir, LockName, LockRequest, Mode};

fn req(name: &str) -> LockRequest {
    LockRequest::new(name.parse::<LockName>().unwrap())
}

#[test]
fn an_abandoned_hold_is_reported_to_the_next_holder_and_a_release_is_not() {
    let t = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(t.path().join("baton")).unwrap();

    let first = acquire(&dir, &req("l").operation("edit")).unwrap();
    assert!(first.previous_holder_died().is_none());
    let (token, run_id) = (first.token(), first.run_id().to_string());
    first.abandon().unwrap();

    let st = status(&dir, &"l".parse().unwrap()).unwrap();
    assert!(
        !st.held && st.last_holder_died && st.previous_holder_died,
        "{st:?}"
    );

    let second = acquire(&dir, &req("l")).unwrap();
    let prev = second.previous_holder_died().expect("told").clone();
    assert_eq!((prev.token, prev.run_id.as_str()), (token, run_id.as_str()));
    assert_eq!(prev.operation.as_deref(), Some("edit"));
    let st = status(&dir, &"l".parse().unwrap()).unwrap();
    assert!(st.held && st.previous_holder_died, "{st:?}");
    assert_eq!(st.previous_holder.unwrap().token, token);
    second.release().unwrap();

    let third = acquire(&dir, &req("l")).unwrap();
    assert!(third.previous_holder_died().is_none());
    drop(third);
    let st = status(&dir, &"l".parse().unwrap()).unwrap();
    assert!(
        !st.previous_holder_died && st.previous_holder.is_none(),
        "{st:?}"
    );
}

#[test]
fn a_semaphore_slot_reports_only_its_own_previous_holder() {
    let t = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(t.path().join("baton")).unwrap();
    let sem = || req("s").mode(Mode::Semaphore(2));
    // b holds the other slot, in a thread of its own (a thread holds one).
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let b_dir = dir.clone();
    let b = std::thread::spawn(move || {
        let b = acquire(&b_dir, &sem()).unwrap();
        held_tx.send(b.slot()).unwrap();
        go_rx.recv().unwrap();
        b.release().unwrap();
    });
    let b_slot = held_rx.recv().unwrap();
    let a = acquire(&dir, &sem()).unwrap();
    assert_ne!(a.slot(), b_slot);
    let a_slot = a.slot();
    a.abandon().unwrap();
    // b still holds its slot: the next grant takes a's and is told.
    let c = acquire(&dir, &sem()).unwrap();
    assert_eq!(c.slot(), a_slot);
    assert!(c.previous_holder_died().is_some());
    c.release().unwrap();
    go_tx.send(()).unwrap();
    b.join().unwrap();
    // Both released cleanly: whichever slot is taken next, nobody is named.
    let d = acquire(&dir, &sem()).unwrap();
    assert!(d.previous_holder_died().is_none());
}

/// What a forked child does with its copy of a held guard (the Python
/// package's fork hook): closing it releases nothing of the acquirer's own
/// open file; here, in the acquiring process, it frees the lock as an exit
/// does, and the thread may take the lock again (the re-entrancy record is
/// gone: in a child, the forking thread is the same thread).
#[test]
fn a_guard_closed_as_inherited_keeps_no_claim_on_the_thread() {
    let t = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(t.path().join("baton")).unwrap();
    let name: LockName = "c".parse().unwrap();
    let first = acquire(&dir, &req("c")).unwrap();
    let token = first.token();
    first.close_inherited();
    let st = status(&dir, &name).unwrap();
    assert!(!st.held, "{st:?}");
    let again = acquire(&dir, &req("c").wait(baton_lock::WaitPolicy::Immediately)).unwrap();
    assert!(again.token() > token);
    again.release().unwrap();
}

/// Each outcome a holder leaves reaches the next holder and `status`:
/// none for a lock never granted, `released` after a plain release (and a
/// drop), what `release_with` left (failed, killed), `died` after a holder
/// ended without releasing, and a release after that is `released` again.
#[test]
fn the_next_holder_learns_how_the_previous_one_ended() {
    use baton_lock::HolderOutcome;
    let t = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(t.path().join("baton")).unwrap();
    let name: LockName = "o".parse().unwrap();
    let st_outcome = || {
        status(&dir, &name)
            .unwrap()
            .previous_outcome
            .map(|o| o.to_string())
    };
    let seen = |left: Option<HolderOutcome>| {
        let g = acquire(&dir, &req("o")).unwrap();
        let got = g.previous_outcome().map(ToString::to_string);
        assert_eq!(st_outcome(), got, "status while held agrees");
        match left {
            Some(o) => g.release_with(o).unwrap(),
            None => g.release().unwrap(),
        }
        got
    };
    assert_eq!(st_outcome(), None, "a lock never granted");
    assert_eq!(seen(Some(HolderOutcome::Failed(3))), None);
    assert_eq!(st_outcome().as_deref(), Some("failed:3"));
    assert_eq!(
        seen(Some(HolderOutcome::of_signal(9))).as_deref(),
        Some("failed:3")
    );
    // Named where signals have names; Windows has only the number.
    let killed = if cfg!(unix) {
        "killed:SIGKILL"
    } else {
        "killed:9"
    };
    assert_eq!(seen(None).as_deref(), Some(killed));
    assert_eq!(seen(Some(HolderOutcome::Died)).as_deref(), Some("released"));
    assert_eq!(st_outcome().as_deref(), Some("died"), "free, holder died");
    assert_eq!(seen(None).as_deref(), Some("died"));
    drop(acquire(&dir, &req("o")).unwrap());
    assert_eq!(seen(None).as_deref(), Some("released"), "a drop releases");
}

/// A shared holder's clean release does not hide the failure of a shared
/// holder granted after it while both held the lock.
#[test]
fn a_shared_failure_is_not_hidden_by_an_earlier_holders_release() {
    use baton_lock::HolderOutcome;
    let t = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(t.path().join("baton")).unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let a_dir = dir.clone();
    let a = std::thread::spawn(move || {
        let a = acquire(&a_dir, &req("sh").mode(Mode::Shared)).unwrap();
        held_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        a.release().unwrap();
    });
    held_rx.recv().unwrap();
    let b = acquire(&dir, &req("sh").mode(Mode::Shared)).unwrap();
    b.release_with(HolderOutcome::Failed(2)).unwrap();
    go_tx.send(()).unwrap();
    a.join().unwrap();
    let next = acquire(&dir, &req("sh")).unwrap();
    assert_eq!(next.previous_outcome(), Some(&HolderOutcome::Failed(2)));
}
