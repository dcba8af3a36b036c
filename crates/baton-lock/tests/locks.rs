#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Library tests of the lock engine with real threads, real processes and
//! real SIGKILLs. Child processes are this test binary re-executed with
//! `BATON_TEST_ROLE` set (see `child_process_entry`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use baton_lock::{
    acquire, status, BatonDir, CancelToken, Content, LockError, LockGuard, LockName, LockRequest,
    Mode, WaitPolicy,
};
use baton_testkit::expect_line;

fn name(s: &str) -> LockName {
    s.parse().unwrap()
}

fn tempdir() -> (tempfile::TempDir, BatonDir) {
    let t = tempfile::tempdir().unwrap();
    let d = BatonDir::open(t.path().join("baton")).unwrap();
    (t, d)
}

/// Spawns this test binary as a child process playing `role`.
pub(crate) fn child(dir: &BatonDir, role: &str, args: &[&str]) -> Child {
    baton_testkit::child("locks::child_process_entry", role, dir.path(), args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_for_waiters(dir: &BatonDir, lock: &str, n: usize) {
    let start = Instant::now();
    while status(dir, &name(lock)).unwrap().waiters != n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "waiters never reached {n}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// Entry point of child processes (see `child`), not a test of its own.
#[test]
#[ignore = "entry point of child processes started by the other tests"]
fn child_process_entry() {
    let Some(role) = baton_testkit::child_role() else {
        return;
    };
    let dir = BatonDir::open(&role.dir).unwrap();
    let args = role.args;
    match role.name.as_str() {
        // Acquire args[0], announce it, hold until stdin closes (or forever).
        "hold" => {
            let g = acquire(
                &dir,
                &LockRequest::new(name(&args[0])).operation("test hold"),
            )
            .unwrap();
            println!("locked {}", g.token());
            std::io::stdout().flush().unwrap();
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            drop(g);
        }
        // Join the line for args[0]; announce when granted.
        "wait" => {
            println!("waiting");
            let g = acquire(&dir, &LockRequest::new(name(&args[0]))).unwrap();
            println!("locked {}", g.token());
            std::io::stdout().flush().unwrap();
            let mut s = String::new();
            let _ = std::io::stdin().read_line(&mut s);
            drop(g);
        }
        // Take args[0] as a hold for the parent process (as the background
        // holder of `baton lock acquire` does for its script), waiting as
        // args[1] says (`forever` or milliseconds); announce the outcome and
        // hold until stdin closes.
        "hold-for-parent" => {
            let parent = baton_lock::parent_of(std::process::id() as i32).unwrap();
            let wait = match args[1].as_str() {
                "forever" => WaitPolicy::Forever,
                ms => WaitPolicy::from(Duration::from_millis(ms.parse().unwrap())),
            };
            let mut req = LockRequest::new(name(&args[0]))
                .kind(baton_lock::HolderKind::Hold)
                .wait(wait);
            req.acquired_for = baton_lock::ProcessIdentity::of_pid(parent);
            match acquire(&dir, &req) {
                Ok(g) => {
                    println!("locked {}", g.token());
                    std::io::stdout().flush().unwrap();
                    let mut s = String::new();
                    let _ = std::io::stdin().read_line(&mut s);
                    drop(g);
                }
                Err(e) => println!("refused {e}"),
            }
        }
        // args: lock, counter file, iterations.
        "count" => {
            let iterations: usize = args[2].parse().unwrap();
            for _ in 0..iterations {
                let g = acquire(&dir, &LockRequest::new(name(&args[0]))).unwrap();
                increment(Path::new(&args[1]));
                g.release().unwrap();
            }
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

fn increment(counter: &Path) {
    let n: u64 = fs::read_to_string(counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    fs::write(counter, format!("{}\n", n + 1)).unwrap();
}

#[test]
fn threads_never_lose_an_update() {
    let (t, dir) = tempdir();
    let counter = t.path().join("counter");
    let base = first_token(&dir, "counter");
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let dir = dir.clone();
            let counter = counter.clone();
            thread::spawn(move || {
                for _ in 0..200 {
                    let g = acquire(&dir, &LockRequest::new(name("counter"))).unwrap();
                    increment(&counter);
                    g.release().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(fs::read_to_string(&counter).unwrap().trim(), "1600");
    let st = status(&dir, &name("counter")).unwrap();
    assert!(st.last_token >= base + 1600, "at least one more per grant");
    assert!(!st.held && st.waiters == 0 && !st.last_holder_died);
}

#[test]
fn processes_never_lose_an_update() {
    let (t, dir) = tempdir();
    let counter = t.path().join("counter");
    let c = counter.to_str().unwrap();
    let mut kids: Vec<Child> = (0..8)
        .map(|_| child(&dir, "count", &["c", c, "50"]))
        .collect();
    for k in &mut kids {
        assert!(k.wait().unwrap().success());
    }
    assert_eq!(fs::read_to_string(&counter).unwrap().trim(), "400");
}

#[test]
fn reentrant_acquire_in_one_thread_is_refused_not_deadlocked() {
    let (_t, dir) = tempdir();
    let g = acquire(&dir, &LockRequest::new(name("r"))).unwrap();
    let err = acquire(&dir, &LockRequest::new(name("r"))).unwrap_err();
    assert!(matches!(err, LockError::Reentrant { .. }), "{err}");
    assert!(err.to_string().contains("'r'"));
    drop(g);
    // Another thread waits instead of failing.
    let g = acquire(&dir, &LockRequest::new(name("r"))).unwrap();
    let d2 = dir.clone();
    let h = thread::spawn(move || {
        acquire(
            &d2,
            &LockRequest::new(name("r")).wait(Duration::from_millis(50)),
        )
    });
    assert!(matches!(h.join().unwrap(), Err(LockError::Busy { .. })));
    drop(g);
}

#[test]
fn a_threads_own_hold_makes_a_bounded_wait_busy_and_admits_its_sharers() {
    let (_t, dir) = tempdir();
    let g = acquire(&dir, &LockRequest::new(name("b"))).unwrap();
    // Only this thread could release it: busy at once, not refused.
    for wait in [
        WaitPolicy::Immediately,
        WaitPolicy::AtMost(Duration::from_secs(30)),
    ] {
        let start = Instant::now();
        let err = acquire(&dir, &LockRequest::new(name("b")).wait(wait)).unwrap_err();
        assert!(matches!(err, LockError::Busy { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }
    drop(g);
    // Two readers, or two slots of a semaphore, in one thread.
    let r1 = acquire(&dir, &LockRequest::new(name("s")).mode(Mode::Shared)).unwrap();
    let r2 = acquire(&dir, &LockRequest::new(name("s")).mode(Mode::Shared)).unwrap();
    let w = acquire(
        &dir,
        &LockRequest::new(name("s")).wait(WaitPolicy::Immediately),
    )
    .unwrap_err();
    assert!(matches!(w, LockError::Busy { .. }), "{w}");
    drop((r1, r2));
    let s1 = acquire(&dir, &LockRequest::new(name("m")).mode(Mode::Semaphore(2))).unwrap();
    let s2 = acquire(&dir, &LockRequest::new(name("m")).mode(Mode::Semaphore(2))).unwrap();
    assert_ne!(s1.slot(), s2.slot());
}

/// The first line of a `hold-for-parent` child that says what happened.
fn outcome(child: &mut Child) -> String {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(child.stdout.as_mut().unwrap());
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "child said nothing"
        );
        for word in ["locked", "refused"] {
            if let Some(at) = line.find(word) {
                return line[at..].trim().to_string();
            }
        }
    }
}

/// A hold taken for this process by one of its threads (through a child,
/// as `baton lock acquire` does) is released by that thread 0.8 s later: a
/// blocking request of the same kind from another thread waits for it
/// instead of being refused as a deadlock. From the same thread, where the
/// caller would wait for itself, it is refused at once, whatever the wait.
#[test]
#[cfg_attr(
    not(target_os = "linux"),
    ignore = "which thread of the caller started a process is known only on Linux (/proc/<pid>/task/*/children); elsewhere every hold for the caller counts as its own"
)]
fn a_hold_of_another_thread_of_the_caller_is_waited_for_not_called_a_deadlock() {
    let (_t, dir) = tempdir();
    let mut first = child(&dir, "hold-for-parent", &["th", "forever"]);
    expect_line(&mut first, "locked");
    let started = Instant::now();
    let d2 = dir.clone();
    let other = thread::spawn(move || {
        let mut second = child(&d2, "hold-for-parent", &["th", "forever"]);
        let line = outcome(&mut second);
        drop(second.stdin.take());
        second.wait().unwrap();
        line
    });
    thread::sleep(Duration::from_millis(800));
    drop(first.stdin.take()); // the first thread lets go
    first.wait().unwrap();
    let line = other.join().unwrap();
    assert!(line.starts_with("locked"), "{line}");
    assert!(started.elapsed() >= Duration::from_millis(800));
    // The same thread asking again would wait for itself: refused at once,
    // naming the deadlock, even with a bounded wait.
    let mut first = child(&dir, "hold-for-parent", &["th", "forever"]);
    expect_line(&mut first, "locked");
    let asked = Instant::now();
    let mut again = child(&dir, "hold-for-parent", &["th", "20000"]);
    let line = outcome(&mut again);
    assert!(
        line.starts_with("refused") && line.contains("deadlock"),
        "{line}"
    );
    assert!(asked.elapsed() < Duration::from_secs(15), "it waited");
    again.wait().unwrap();
    drop(first.stdin.take());
    first.wait().unwrap();
}

#[test]
fn wait_policies_give_up_with_a_descriptive_error() {
    let (_t, dir) = tempdir();
    let _g = acquire(&dir, &LockRequest::new(name("p")).operation("long job")).unwrap();
    let d2 = dir.clone();
    let err = thread::spawn(move || {
        acquire(
            &d2,
            &LockRequest::new(name("p")).wait(WaitPolicy::Immediately),
        )
    })
    .join()
    .unwrap()
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("'p' is busy") && msg.contains("long job") && msg.contains("no waiting"),
        "{msg}"
    );
    let d2 = dir.clone();
    let started = Instant::now();
    let err = thread::spawn(move || {
        acquire(
            &d2,
            &LockRequest::new(name("p")).wait(Duration::from_millis(150)),
        )
    })
    .join()
    .unwrap()
    .unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    match err {
        LockError::Busy { waited, holder, .. } => {
            assert!(waited >= Duration::from_millis(150));
            assert!(holder.unwrap().contains("long job"));
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        status(&dir, &name("p")).unwrap().waiters,
        0,
        "a waiter that gave up left the line"
    );
}

#[test]
fn waiters_are_served_in_arrival_order() {
    let (_t, dir) = tempdir();
    let g = acquire(&dir, &LockRequest::new(name("fifo"))).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..6 {
        let d = dir.clone();
        let order = order.clone();
        handles.push(thread::spawn(move || {
            let g = acquire(&d, &LockRequest::new(name("fifo"))).unwrap();
            order.lock().unwrap().push(i);
            drop(g);
        }));
        wait_for_waiters(&dir, "fifo", i + 1);
    }
    drop(g);
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn a_waiter_behind_a_timed_out_waiter_still_gets_the_lock() {
    let (_t, dir) = tempdir();
    // The quitter's deadline must expire while the patient waiter is in line
    // behind it. A deadline cannot be held back until then, so an attempt in
    // which the quitter gave up before both were seen waiting at once proves
    // nothing and is repeated with a longer deadline.
    for (attempt, ms) in [200, 1_000, 5_000, 30_000].into_iter().enumerate() {
        let lock = format!("q{attempt}");
        let g = acquire(&dir, &LockRequest::new(name(&lock))).unwrap();
        let (d1, l1) = (dir.clone(), lock.clone());
        let quitter = thread::spawn(move || {
            acquire(
                &d1,
                &LockRequest::new(name(&l1)).wait(Duration::from_millis(ms)),
            )
            .map(|_| ())
        });
        // Only the waiters of this test are in line: `n` waiting while the
        // quitter has not returned includes the quitter.
        let seen_waiting = |n: usize| {
            while !quitter.is_finished() {
                if status(&dir, &name(&lock)).unwrap().waiters == n {
                    return true;
                }
                thread::sleep(Duration::from_millis(1));
            }
            false
        };
        let quitter_waits = seen_waiting(1);
        let (d2, l2) = (dir.clone(), lock.clone());
        let patient =
            thread::spawn(move || acquire(&d2, &LockRequest::new(name(&l2))).map(|g| g.token()));
        let both_waited = quitter_waits && seen_waiting(2);
        let quit = quitter.join().unwrap();
        let first = g.token();
        if !both_waited {
            drop(g);
            patient.join().unwrap().unwrap();
            eprintln!("attempt {attempt}: the quitter gave up before the other joined; again");
            continue;
        }
        assert!(matches!(quit, Err(LockError::Busy { .. })), "{quit:?}");
        wait_for_waiters(&dir, &lock, 1);
        drop(g);
        assert!(patient.join().unwrap().unwrap() > first);
        return;
    }
    panic!("the quitter never waited long enough for another waiter to join");
}

#[test]
fn shared_holders_coexist_and_a_waiting_writer_is_not_starved() {
    let (_t, dir) = tempdir();
    let shared = || LockRequest::new(name("rw")).mode(Mode::Shared);
    let r1 = acquire(&dir, &shared()).unwrap();
    let d = dir.clone();
    let r2 = thread::spawn(move || {
        acquire(&d, &LockRequest::new(name("rw")).mode(Mode::Shared)).map(|g| g.token())
    });
    assert!(r2.join().unwrap().is_ok(), "two readers at once");
    let st = status(&dir, &name("rw")).unwrap();
    assert_eq!(st.mode.as_deref(), Some("shared"));
    let d = dir.clone();
    let writer = thread::spawn(move || {
        let g = acquire(&d, &LockRequest::new(name("rw"))).unwrap();
        Instant::now()
            .checked_sub(Duration::ZERO)
            .map(|t| (t, g.token()))
    });
    wait_for_waiters(&dir, "rw", 1);
    // A reader arriving after the writer queues behind it.
    let d = dir.clone();
    let late_reader = thread::spawn(move || {
        let g = acquire(&d, &LockRequest::new(name("rw")).mode(Mode::Shared)).unwrap();
        (Instant::now(), g.token())
    });
    wait_for_waiters(&dir, "rw", 2);
    drop(r1);
    let (w_at, w_token) = writer.join().unwrap().unwrap();
    let (r_at, r_token) = late_reader.join().unwrap();
    assert!(
        w_at <= r_at && w_token < r_token,
        "writer first, then the late reader"
    );
}

#[test]
fn semaphore_admits_n_and_rejects_disagreeing_users() {
    let (_t, dir) = tempdir();
    let sem = || LockRequest::new(name("sem")).mode(Mode::Semaphore(3));
    let held: Vec<_> = (0..3)
        .map(|_| {
            let d = dir.clone();
            thread::spawn(move || {
                let g =
                    acquire(&d, &LockRequest::new(name("sem")).mode(Mode::Semaphore(3))).unwrap();
                let slot = g.slot();
                std::mem::forget(g); // keep the open file (and so the slot) for this test's lifetime
                slot
            })
            .join()
            .unwrap()
        })
        .collect();
    let mut slots = held.clone();
    slots.sort();
    assert_eq!(slots, vec![0, 1, 2]);
    let st = status(&dir, &name("sem")).unwrap();
    assert_eq!(
        (st.mode.as_deref(), st.holders.len(), st.max),
        (Some("semaphore"), 3, 3)
    );
    let err = acquire(&dir, &sem().wait(WaitPolicy::Immediately)).unwrap_err();
    assert!(matches!(err, LockError::Busy { .. }), "{err}");
    let err = acquire(
        &dir,
        &LockRequest::new(name("sem")).mode(Mode::Semaphore(2)),
    )
    .unwrap_err();
    assert!(matches!(err, LockError::ModeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("--max 3"), "{err}");
    let err = acquire(&dir, &LockRequest::new(name("sem"))).unwrap_err();
    assert!(matches!(err, LockError::ModeMismatch { .. }), "{err}");
}

#[test]
fn semaphore_waiter_gets_whichever_slot_frees_first() {
    let (_t, dir) = tempdir();
    let take = |dir: &BatonDir| {
        let d = dir.clone();
        thread::spawn(move || {
            acquire(&d, &LockRequest::new(name("s2")).mode(Mode::Semaphore(2))).unwrap()
        })
        .join()
        .unwrap()
    };
    let first = take(&dir);
    let second = take(&dir);
    assert_eq!((first.slot(), second.slot()), (0, 1));
    let d = dir.clone();
    let third = thread::spawn(move || {
        acquire(&d, &LockRequest::new(name("s2")).mode(Mode::Semaphore(2))).map(|g| g.slot())
    });
    wait_for_waiters(&dir, "s2", 1);
    // Free slot 1 while slot 0 stays held: a waiter parked on slot 0 would hang.
    drop(second);
    assert_eq!(third.join().unwrap().unwrap(), 1);
    drop(first);
}

#[test]
fn sigkilled_holder_releases_at_once_and_tokens_keep_increasing() {
    let (_t, dir) = tempdir();
    let mut holder = child(&dir, "hold", &["k"]);
    let t1: u64 = expect_line(&mut holder, "locked ").parse().unwrap();
    let mut waiter = child(&dir, "wait", &["k"]);
    expect_line(&mut waiter, "waiting");
    wait_for_waiters(&dir, "k", 1);
    let killed_at = Instant::now();
    holder.kill().unwrap(); // SIGKILL
    let t2: u64 = expect_line(&mut waiter, "locked ").parse().unwrap();
    let handoff = killed_at.elapsed();
    assert!(t2 > t1, "token {t2} after {t1}");
    assert!(handoff < Duration::from_secs(2), "handoff took {handoff:?}");
    holder.wait().unwrap();
    let st = status(&dir, &name("k")).unwrap();
    assert!(st.held);
    assert_eq!(st.holder.as_ref().unwrap().token, t2);
    assert!(st.holder.as_ref().unwrap().alive);
    waiter.kill().unwrap();
    waiter.wait().unwrap();
    let st = status(&dir, &name("k")).unwrap();
    assert!(!st.held && st.last_holder_died, "{st:?}");
    assert_eq!(st.last_holder.unwrap().token, t2);
}

#[test]
fn a_waiter_that_dies_leaves_the_line_by_itself() {
    let (_t, dir) = tempdir();
    let g = acquire(&dir, &LockRequest::new(name("d"))).unwrap();
    let mut doomed = child(&dir, "wait", &["d"]);
    expect_line(&mut doomed, "waiting");
    wait_for_waiters(&dir, "d", 1);
    let mut next = child(&dir, "wait", &["d"]);
    expect_line(&mut next, "waiting");
    wait_for_waiters(&dir, "d", 2);
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    wait_for_waiters(&dir, "d", 1);
    let first = g.token();
    drop(g);
    let token: u64 = expect_line(&mut next, "locked ").parse().unwrap();
    assert!(token > first, "token {token} after {first}");
    drop(next.stdin.take());
    assert!(next.wait().unwrap().success());
}

#[test]
fn garbage_lock_file_is_reported_and_then_rewritten() {
    let (_t, dir) = tempdir();
    let path: PathBuf = dir.lock_path(&name("g"));
    for garbage in [
        &b"{\"format\": 1, \"tok"[..],
        &b"\xff\xfe\x00garbage"[..],
        &b"[1,2,3]"[..],
    ] {
        fs::write(&path, garbage).unwrap();
        let st = status(&dir, &name("g")).unwrap();
        assert_eq!(st.content, Content::Unreadable, "{garbage:?}");
        assert!(st.content_error.is_some() && !st.held);
        let g = acquire(&dir, &LockRequest::new(name("g"))).unwrap();
        let st = status(&dir, &name("g")).unwrap();
        assert_eq!(st.content, Content::Ok);
        assert_eq!(st.holder.unwrap().token, g.token());
        drop(g);
    }
}

#[test]
fn status_of_an_unknown_lock_creates_nothing() {
    let (_t, dir) = tempdir();
    let st = status(&dir, &name("never/used")).unwrap();
    assert_eq!(st.content, Content::Missing);
    assert!(!dir.lock_path(&name("never/used")).exists());
}

#[test]
fn several_locks_in_any_order_do_not_deadlock() {
    let (_t, dir) = tempdir();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let dir = dir.clone();
            thread::spawn(move || {
                let names = if i % 2 == 0 { ["a", "b"] } else { ["b", "a"] };
                for _ in 0..100 {
                    let reqs: Vec<_> = names.iter().map(|n| LockRequest::new(name(n))).collect();
                    let guards = baton_lock::acquire_all(&dir, &reqs).unwrap();
                    assert_eq!(guards[0].name().as_str(), "a");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_deadline_expires_while_waiting_behind_another_waiter() {
    let (_t, dir) = tempdir();
    let g = acquire(&dir, &LockRequest::new(name("line"))).unwrap();
    let d1 = dir.clone();
    let head =
        thread::spawn(move || acquire(&d1, &LockRequest::new(name("line"))).map(|g| g.token()));
    wait_for_waiters(&dir, "line", 1);
    let d2 = dir.clone();
    let started = Instant::now();
    let second = thread::spawn(move || {
        acquire(
            &d2,
            &LockRequest::new(name("line")).wait(Duration::from_millis(200)),
        )
        .map(|g| g.token())
    })
    .join()
    .unwrap();
    assert!(matches!(second, Err(LockError::Busy { .. })));
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(status(&dir, &name("line")).unwrap().waiters, 1);
    let first = g.token();
    drop(g);
    assert!(head.join().unwrap().unwrap() > first);
}

#[test]
fn a_torn_document_does_not_send_tokens_backwards() {
    let (_t, dir) = tempdir();
    let path = dir.lock_path(&name("torn"));
    fs::write(
        &path,
        b"{\"format\":1,\"name\":\"torn\",\"max\":1,\"token\":41,\"holders\":[{\"pid\"",
    )
    .unwrap();
    assert_eq!(
        status(&dir, &name("torn")).unwrap().content,
        Content::Unreadable
    );
    let g = acquire(&dir, &LockRequest::new(name("torn"))).unwrap();
    assert!(g.token() > 41, "token {} after a salvaged 41", g.token());
}

#[test]
fn readers_and_writers_never_overlap_under_contention() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let (_t, dir) = tempdir();
    let base = first_token(&dir, "rwx");
    let readers = Arc::new(AtomicI64::new(0));
    let writers = Arc::new(AtomicI64::new(0));
    let violations = Arc::new(AtomicI64::new(0));
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let (dir, readers, writers, violations) = (
                dir.clone(),
                readers.clone(),
                writers.clone(),
                violations.clone(),
            );
            thread::spawn(move || {
                for _ in 0..150 {
                    let write = i % 3 == 0;
                    let mode = if write { Mode::Exclusive } else { Mode::Shared };
                    let g = acquire(&dir, &LockRequest::new(name("rwx")).mode(mode)).unwrap();
                    if write {
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::yield_now();
                        writers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        readers.fetch_add(1, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::yield_now();
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    drop(g);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    let st = status(&dir, &name("rwx")).unwrap();
    assert!(st.last_token >= base + 900, "at least one more per grant");
    assert!(!st.held && st.waiters == 0);
}

#[test]
fn a_semaphore_never_admits_more_than_n() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let (_t, dir) = tempdir();
    let inside = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (dir, inside, peak) = (dir.clone(), inside.clone(), peak.clone());
            thread::spawn(move || {
                for _ in 0..100 {
                    let g = acquire(
                        &dir,
                        &LockRequest::new(name("sem3")).mode(Mode::Semaphore(3)),
                    )
                    .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=3).contains(&peak), "peak {peak}");
}

/// Takes and releases lock `n` once; its token is the base that later grants
/// count up from (a lock file new to a lock starts its tokens from the clock).
fn first_token(dir: &BatonDir, n: &str) -> u64 {
    acquire(dir, &LockRequest::new(name(n))).unwrap().token()
}

#[test]
fn a_cancelled_wait_gives_up_at_once_for_every_mode() {
    let (_t, dir) = tempdir();
    for (n, mode) in [
        ("cx", Mode::Exclusive),
        ("cs", Mode::Shared),
        ("cm", Mode::Semaphore(2)),
    ] {
        // Fill the lock so that the next request must wait.
        let holders: Vec<LockGuard> = (0..(if n == "cm" { 2 } else { 1 }))
            .map(|_| {
                let held_mode = if mode == Mode::Shared {
                    Mode::Exclusive
                } else {
                    mode
                };
                let d = dir.clone();
                thread::spawn(move || acquire(&d, &LockRequest::new(name(n)).mode(held_mode)))
                    .join()
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let token = CancelToken::new();
        let d = dir.clone();
        let t = token.clone();
        let waiter =
            thread::spawn(move || acquire(&d, &LockRequest::new(name(n)).mode(mode).cancel(t)));
        wait_for_waiters(&dir, n, 1);
        token.cancel();
        match waiter.join().unwrap() {
            Err(LockError::Cancelled { name }) => assert_eq!(name, n),
            other => panic!("{n}: expected a cancelled wait, got {other:?}"),
        }
        assert_eq!(
            status(&dir, &name(n)).unwrap().waiters,
            0,
            "{n}: left the line"
        );
        // A token cancelled before the request never waits.
        let r = acquire(&dir, &LockRequest::new(name(n)).mode(mode).cancel(token));
        assert!(matches!(r, Err(LockError::Cancelled { .. })), "{n}: {r:?}");
        drop(holders);
    }
}
