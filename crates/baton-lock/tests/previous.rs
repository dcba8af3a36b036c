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
