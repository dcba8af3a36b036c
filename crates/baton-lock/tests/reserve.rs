#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Path reservations (`baton_lock::reserve`) with real threads, real
//! processes and real SIGKILLs. Child processes are this test binary
//! re-executed with `BATON_TEST_ROLE` set (see `child_process_entry`).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use baton_lock::reserve::{
    break_reservation, check, reservations, reserve, Pattern, Reservation, ReservationHolder,
    ReserveError, ReserveRequest, Space,
};
use baton_lock::{BatonDir, CancelToken, Mode, WaitPolicy};
use baton_testkit::expect_line;

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: BatonDir,
    space: Space,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = BatonDir::open(tmp.path().join("baton")).unwrap();
    let root = tmp.path().join("repo");
    std::fs::create_dir_all(root.join("src")).unwrap();
    let space = Space::new(format!("test:{}", root.display()), &root);
    Fixture {
        _tmp: tmp,
        dir,
        space,
    }
}

impl Fixture {
    fn pats(&self, raw: &[&str]) -> Vec<Pattern> {
        raw.iter().map(|r| self.space.pattern(r).unwrap()).collect()
    }

    fn request(&self, raw: &[&str], mode: Mode, wait: WaitPolicy, session: &str) -> ReserveRequest {
        ReserveRequest {
            patterns: self.pats(raw),
            mode,
            wait,
            holder: ReservationHolder::current(format!("agent-{session}"), session),
            cancel: None,
        }
    }

    fn take(
        &self,
        raw: &[&str],
        mode: Mode,
        wait: WaitPolicy,
        session: &str,
    ) -> Result<Reservation, ReserveError> {
        reserve(
            &self.dir,
            &self.space,
            &self.request(raw, mode, wait, session),
        )
    }

    fn now(&self, raw: &[&str], session: &str) -> Result<Reservation, ReserveError> {
        self.take(raw, Mode::Exclusive, WaitPolicy::Immediately, session)
    }

    fn waiting(&self) -> usize {
        reservations(&self.dir, &self.space, None)
            .unwrap()
            .iter()
            .filter(|r| !r.granted)
            .count()
    }

    fn wait_for_waiters(&self, n: usize) {
        let start = Instant::now();
        while self.waiting() != n {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "waiters never reached {n}"
            );
            thread::sleep(Duration::from_millis(2));
        }
    }

    fn child(&self, role: &str, args: &[&str]) -> Child {
        let mut all = vec![self.space.key(), self.space.root().to_str().unwrap()];
        all.extend_from_slice(args);
        baton_testkit::child("reserve::child_process_entry", role, self.dir.path(), &all)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Entry point of child processes, not a test of its own. Args: space key,
/// root, session, then patterns.
#[test]
#[ignore = "entry point of child processes started by the other tests"]
fn child_process_entry() {
    let Some(role) = baton_testkit::child_role() else {
        return;
    };
    if !role.name.starts_with("reserve-") {
        return;
    }
    let dir = BatonDir::open(&role.dir).unwrap();
    let space = Space::new(role.args[0].clone(), Path::new(&role.args[1]));
    let session = role.args[2].clone();
    let patterns = role.args[3..]
        .iter()
        .map(|r| space.pattern(r).unwrap())
        .collect();
    let req = ReserveRequest {
        patterns,
        mode: Mode::Exclusive,
        wait: WaitPolicy::Forever,
        holder: ReservationHolder::current(format!("child-{session}"), session),
        cancel: None,
    };
    println!("waiting");
    std::io::stdout().flush().unwrap();
    let held = reserve(&dir, &space, &req).unwrap();
    let died = held
        .previous_holder_died()
        .map(|r| r.holder.pid)
        .unwrap_or(0);
    println!("granted {} died {died}", held.token());
    std::io::stdout().flush().unwrap();
    let mut s = String::new();
    let _ = std::io::stdin().read_line(&mut s);
    held.release().unwrap();
    std::process::exit(0);
}

#[test]
fn overlap_and_covers_follow_paths_and_globs() {
    let f = fixture();
    let p = |s: &str| f.space.pattern(s).unwrap();
    let cases: &[(&str, &str, bool)] = &[
        ("src/**/*.ts", "src/a/b.ts", true),
        ("src/**/*.ts", "src/b.ts", true),
        // A plain path covers what is below it, and src/a/b.js/c.ts would be.
        ("src/**/*.ts", "src/a/b.js", true),
        ("src/**/*.ts", "lib/a.ts", false),
        ("src/*.ts", "src/a/b.js", false),
        ("docs/*.md", "docs/x.txt", false),
        ("docs/*.md", "docs/x.md", true),
        ("docs/*.md", "docs", true),
        ("docs/*.md", "docs/sub/x.md", false),
        ("src", "src/**", true),
        ("src", "src/a/b.c", true),
        ("src", "srcx", false),
        ("src/a", "src/ab", false),
        ("src/a", "src", true),
        (".", "anything/at/all", true),
        ("*.md", "*.txt", false),
        ("a*", "*b", true),
        ("src/*/x", "src/y/*", true),
        ("src/*/x", "src/y/z", false),
        ("**/Cargo.toml", "crates/a/Cargo.toml", true),
        // Anything could have a Cargo.toml below it.
        ("**/Cargo.toml", "crates/a/lib.rs", true),
        ("docs/**/*.md", "src/**", false),
        ("**/Cargo.toml", "crates", true),
        ("src/[ab].rs", "src/c.rs", false),
        ("src/[ab].rs", "src/b.rs", true),
        ("src/{a,b}.rs", "src/a.rs", true),
    ];
    for (a, b, want) in cases {
        assert_eq!(p(a).overlaps(&p(b)), *want, "{a} vs {b}");
        assert_eq!(p(b).overlaps(&p(a)), *want, "{b} vs {a}");
    }
    let covers: &[(&str, &str, bool)] = &[
        ("src", "src/a/b.ts", true),
        ("src", "src", true),
        ("src", "srcx/a", false),
        ("src/**/*.ts", "src/a/b.ts", true),
        ("src/**/*.ts", "src/b.ts", true),
        ("src/**/*.ts", "src/a/b.js", false),
        ("docs/*.md", "docs/x.md", true),
        ("docs/*.md", "docs/x.txt", false),
        ("docs/*.md", "docs/x.md/inner", true),
        (".", "a/b", true),
        ("**/Cargo.toml", "Cargo.toml", true),
    ];
    for (pat, file, want) in covers {
        assert_eq!(p(pat).covers(file), *want, "{pat} covers {file}");
    }
    // Whatever covers a file overlaps every other pattern covering it.
    for (a, file, _) in covers.iter().filter(|c| c.2) {
        assert!(p(a).overlaps(&p(file)), "{a} vs {file}");
    }
}

#[test]
fn paths_leading_outside_the_repository_are_refused() {
    let f = fixture();
    let root = f.space.root().to_path_buf();
    let outside = root.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("src"), root.join("in")).unwrap();
    let refused = |raw: &str| match f.space.pattern(raw) {
        Err(ReserveError::BadPath { path, reason }) => {
            assert_eq!(path, raw);
            reason
        }
        other => panic!("{raw}: {other:?}"),
    };
    assert!(refused("../x").contains(".."), "..");
    assert!(refused("src/../../x").contains(".."));
    assert!(refused(outside.to_str().unwrap()).contains("outside"));
    assert!(refused("src/a**").contains("**"));
    assert!(refused("src/[a").contains("glob"));
    // Control characters: a path named so would break every one-line
    // message that names it.
    assert!(refused("src/a\nb").contains("control character"));
    assert!(refused("src/a\u{1b}[2J").contains("control character"));
    #[cfg(unix)]
    {
        assert!(refused("out/file").contains("outside"));
        assert!(refused("out").contains("outside"));
        assert_eq!(f.space.pattern("in/x").unwrap().as_str(), "in/x");
    }
    let inside = root.join("src").join("main.rs");
    assert_eq!(
        f.space.pattern(inside.to_str().unwrap()).unwrap().as_str(),
        "src/main.rs"
    );
    assert_eq!(f.space.pattern("./src//a/").unwrap().as_str(), "src/a");
    assert_eq!(f.space.pattern(".").unwrap().as_str(), "");
    assert_eq!(
        f.space.pattern(root.to_str().unwrap()).unwrap().as_str(),
        ""
    );
}

#[test]
fn overlapping_exclusive_reservations_exclude_each_other_and_disjoint_ones_do_not_wait() {
    let f = Arc::new(fixture());
    let log = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let (f, log) = (f.clone(), log.clone());
            thread::spawn(move || {
                for _ in 0..5 {
                    let pats: &[&str] = if i % 2 == 0 {
                        &["src"]
                    } else {
                        &["src/**/*.rs"]
                    };
                    let held = f
                        .take(pats, Mode::Exclusive, WaitPolicy::Forever, &format!("s{i}"))
                        .unwrap();
                    let start = Instant::now();
                    thread::sleep(Duration::from_millis(3));
                    log.lock().unwrap().push((start, Instant::now()));
                    held.release().unwrap();
                }
            })
        })
        .collect();
    // Meanwhile a disjoint path is granted without waiting, every time.
    for _ in 0..20 {
        let other = f.now(&["docs"], "docs").unwrap();
        drop(other);
    }
    for w in workers {
        w.join().unwrap();
    }
    let mut spans = log.lock().unwrap().clone();
    assert_eq!(spans.len(), 20);
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "overlapping holds {pair:?}");
    }
}

#[test]
fn shared_reservations_coexist_and_exclusive_waits_for_them() {
    let f = Arc::new(fixture());
    let a = f
        .take(&["src"], Mode::Shared, WaitPolicy::Immediately, "a")
        .unwrap();
    let b = f
        .take(&["src/x"], Mode::Shared, WaitPolicy::Immediately, "b")
        .unwrap();
    match f.now(&["src/x/y"], "c") {
        Err(ReserveError::Busy { conflicts }) => {
            assert_eq!(conflicts.len(), 2, "{conflicts:?}");
            assert!(conflicts
                .iter()
                .all(|c| c.granted && c.mode == Mode::Shared));
        }
        other => panic!("{other:?}"),
    }
    let writer = {
        let f = f.clone();
        thread::spawn(move || {
            f.take(&["src/x/y"], Mode::Exclusive, WaitPolicy::Forever, "c")
                .map(|r| r.token())
        })
    };
    f.wait_for_waiters(1);
    // A later shared request queues behind the waiting writer: no starvation.
    match f.take(&["src"], Mode::Shared, WaitPolicy::Immediately, "d") {
        Err(ReserveError::Busy { conflicts }) => {
            assert!(
                conflicts
                    .iter()
                    .any(|c| !c.granted && c.holder.session == "c"),
                "{conflicts:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    drop(a);
    thread::sleep(Duration::from_millis(50));
    assert!(
        !writer.is_finished(),
        "granted while a shared holder remains"
    );
    drop(b);
    assert!(writer.join().unwrap().is_ok());
}

#[test]
fn several_paths_in_opposite_orders_never_deadlock() {
    let f = Arc::new(fixture());
    let workers: Vec<_> = [["a", "b"], ["b", "a"], ["b/c", "a/d"]]
        .into_iter()
        .enumerate()
        .map(|(i, order)| {
            let f = f.clone();
            thread::spawn(move || {
                for _ in 0..30 {
                    let held = f
                        .take(
                            &order,
                            Mode::Exclusive,
                            WaitPolicy::AtMost(Duration::from_secs(60)),
                            &format!("s{i}"),
                        )
                        .unwrap();
                    held.release().unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert!(reservations(&f.dir, &f.space, None).unwrap().is_empty());
}

#[test]
fn a_wide_waiter_is_not_overtaken_by_a_later_narrow_overlapping_request() {
    let f = Arc::new(fixture());
    let first = f.now(&["src/a"], "first").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let wide = {
        let (f, order) = (f.clone(), order.clone());
        thread::spawn(move || {
            let held = f
                .take(&["src"], Mode::Exclusive, WaitPolicy::Forever, "wide")
                .unwrap();
            order.lock().unwrap().push("wide");
            thread::sleep(Duration::from_millis(20));
            drop(held);
        })
    };
    f.wait_for_waiters(1);
    // src/b is free, but the wide request waiting for src came first.
    match f.now(&["src/b"], "narrow") {
        Err(ReserveError::Busy { conflicts }) => {
            assert_eq!(conflicts.len(), 1);
            assert!(!conflicts[0].granted);
            assert_eq!(conflicts[0].holder.session, "wide");
            assert_eq!(conflicts[0].pattern.as_str(), "src");
        }
        other => panic!("{other:?}"),
    }
    let narrow = {
        let (f, order) = (f.clone(), order.clone());
        thread::spawn(move || {
            let held = f
                .take(&["src/b"], Mode::Exclusive, WaitPolicy::Forever, "narrow")
                .unwrap();
            order.lock().unwrap().push("narrow");
            drop(held);
        })
    };
    f.wait_for_waiters(2);
    // A disjoint request is not held up by the line.
    drop(f.now(&["docs"], "other").unwrap());
    drop(first);
    wide.join().unwrap();
    narrow.join().unwrap();
    assert_eq!(*order.lock().unwrap(), ["wide", "narrow"]);
}

#[test]
fn a_sigkilled_holder_frees_its_paths_at_once_and_the_next_holder_is_told() {
    let f = Arc::new(fixture());
    let mut holder = f.child("reserve-hold", &["victim", "src/lib.rs", "docs"]);
    let line = expect_line(&mut holder, "granted ");
    let t1: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
    let waiter = {
        let f = f.clone();
        thread::spawn(move || {
            let held = f
                .take(
                    &["src"],
                    Mode::Exclusive,
                    WaitPolicy::AtMost(Duration::from_secs(30)),
                    "next",
                )
                .unwrap();
            let died = held.previous_holder_died().cloned();
            (held.token(), died)
        })
    };
    f.wait_for_waiters(1);
    let pid = holder.id() as i32;
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let (t2, died) = waiter.join().unwrap();
    assert!(t2 > t1, "token {t2} after {t1}");
    let died = died.expect("previous_holder_died");
    assert_eq!(died.holder.pid, pid);
    assert_eq!(died.token, Some(t1));
    // Told once: the next grant over it is not.
    let again = f.now(&["src/lib.rs"], "later").unwrap();
    assert!(again.previous_holder_died().is_none());
}

#[test]
fn a_waiting_process_that_dies_leaves_the_line() {
    let f = fixture();
    let held = f.now(&["x"], "holder").unwrap();
    let mut doomed = f.child("reserve-wait", &["doomed", "x"]);
    expect_line(&mut doomed, "waiting");
    f.wait_for_waiters(1);
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    f.wait_for_waiters(0);
    drop(held);
    let next = f.now(&["x"], "next").unwrap();
    assert!(
        next.previous_holder_died().is_none(),
        "a waiter is not a holder"
    );
}

#[test]
fn tokens_strictly_increase_across_grants() {
    let f = fixture();
    let mut last = 0;
    for i in 0..20 {
        let path = if i % 2 == 0 { "a" } else { "b/c" };
        let held = f.now(&[path], &format!("s{i}")).unwrap();
        assert!(held.token() > last, "{} after {last}", held.token());
        last = held.token();
        if i % 3 == 0 {
            drop(held);
        } else {
            held.release().unwrap();
        }
    }
}

#[test]
fn one_session_never_conflicts_with_itself_even_behind_a_waiter() {
    let f = Arc::new(fixture());
    let mine = f.now(&["src"], "me").unwrap();
    let other = {
        let f = f.clone();
        thread::spawn(move || {
            f.take(&["src/a"], Mode::Exclusive, WaitPolicy::Forever, "them")
                .map(|r| r.token())
        })
    };
    f.wait_for_waiters(1);
    // Re-asking a path this session holds, with another session queued for
    // it, is granted at once (waiting would be waiting for itself).
    let again = f.now(&["src/a"], "me").unwrap();
    let wider = f.now(&["."], "me").unwrap();
    assert!(!other.is_finished());
    drop((mine, again, wider));
    assert!(other.join().unwrap().is_ok());
}

#[test]
fn a_broken_reservation_stops_blocking_and_its_holder_can_tell() {
    let f = Arc::new(fixture());
    let held = f.now(&["src"], "victim").unwrap();
    assert!(!held.is_broken().unwrap());
    let waiter = {
        let f = f.clone();
        thread::spawn(move || {
            f.take(
                &["src/x"],
                Mode::Exclusive,
                WaitPolicy::AtMost(Duration::from_secs(30)),
                "w",
            )
            .map(|r| r.token())
        })
    };
    f.wait_for_waiters(1);
    let broken = break_reservation(&f.dir, &f.space, held.token()).unwrap();
    assert_eq!(broken.holder.session, "victim");
    assert!(waiter.join().unwrap().is_ok());
    assert!(held.is_broken().unwrap());
    assert!(matches!(
        break_reservation(&f.dir, &f.space, held.token()),
        Err(ReserveError::NotFound { .. })
    ));
    held.release().unwrap();
    assert!(reservations(&f.dir, &f.space, None).unwrap().is_empty());
}

#[test]
fn a_cancelled_wait_ends_and_removes_its_row() {
    let f = Arc::new(fixture());
    let held = f.now(&["src"], "holder").unwrap();
    let cancel = CancelToken::new();
    let waiter = {
        let (f, cancel) = (f.clone(), cancel.clone());
        thread::spawn(move || {
            let mut req = f.request(&["src"], Mode::Exclusive, WaitPolicy::Forever, "w");
            req.cancel = Some(cancel);
            reserve(&f.dir, &f.space, &req).map(|r| r.token())
        })
    };
    f.wait_for_waiters(1);
    cancel.cancel();
    assert!(matches!(
        waiter.join().unwrap(),
        Err(ReserveError::Cancelled)
    ));
    assert_eq!(f.waiting(), 0);
    let rows = reservations(&f.dir, &f.space, None).unwrap();
    assert_eq!(rows.len(), 1);
    drop(held);
}

#[test]
fn a_wait_that_elapses_names_the_holder_and_leaves_no_row() {
    let f = fixture();
    let mut req = f.request(
        &["src/a.rs"],
        Mode::Exclusive,
        WaitPolicy::Immediately,
        "holder",
    );
    req.holder.reason = Some("refactoring".into());
    let _held = reserve(&f.dir, &f.space, &req).unwrap();
    let start = Instant::now();
    let err = f
        .take(
            &["src"],
            Mode::Exclusive,
            WaitPolicy::AtMost(Duration::from_millis(300)),
            "late",
        )
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(300));
    let text = err.to_string();
    assert!(
        text.contains("'src/a.rs'")
            && text.contains("agent-holder")
            && text.contains("refactoring"),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert_eq!(f.waiting(), 0);
}

#[test]
fn check_ignores_the_callers_own_rows_and_names_others() {
    let f = fixture();
    let mine = f.now(&["src/mine"], "me").unwrap();
    let mut theirs = f.child("reserve-hold", &["them", "src/theirs"]);
    expect_line(&mut theirs, "granted ");
    let pats = f.pats(&["src"]);
    // Rows whose principal is this process are its own.
    let conflicts = check(&f.dir, &f.space, &pats, Mode::Exclusive, None).unwrap();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(conflicts[0].pattern.as_str(), "src/theirs");
    assert_eq!(conflicts[0].holder.pid, theirs.id() as i32);
    // The session names its own rows too.
    assert!(
        check(&f.dir, &f.space, &pats, Mode::Exclusive, Some("them"))
            .unwrap()
            .is_empty()
    );
    assert!(
        check(&f.dir, &f.space, &f.pats(&["docs"]), Mode::Exclusive, None)
            .unwrap()
            .is_empty()
    );
    drop(theirs.stdin.take());
    assert!(theirs.wait().unwrap().success());
    assert!(check(&f.dir, &f.space, &pats, Mode::Exclusive, None)
        .unwrap()
        .is_empty());
    drop(mine);
}

#[test]
fn waiters_for_one_path_are_served_in_arrival_order() {
    let f = Arc::new(fixture());
    let first = f.now(&["src/x"], "first").unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let (fc, order) = (f.clone(), order.clone());
        // Alternate a path, its parent and a glob over it: all overlap.
        let pats: &'static [&'static str] = match i % 3 {
            0 => &["src/x"],
            1 => &["src"],
            _ => &["src/*"],
        };
        waiters.push(thread::spawn(move || {
            let held = fc
                .take(pats, Mode::Exclusive, WaitPolicy::Forever, &format!("w{i}"))
                .unwrap();
            order.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(5));
            drop(held);
        }));
        f.wait_for_waiters(i + 1);
    }
    drop(first);
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>());
}

/// The table deleted under a live holder never admits a second one: the
/// holder's liveness byte is still held, so until it lets go it stands for
/// an exclusive reservation of the whole repository (what it covered is
/// lost), named as a holder the table forgot; then all is as before.
/// Fails before: a disjoint and even an overlapping request were granted
/// beside it.
#[test]
fn a_table_deleted_under_a_holder_never_admits_a_second_one() {
    let f = fixture();
    let held = f.now(&["src"], "a").unwrap();
    let table = f
        .dir
        .path()
        .join("reservations")
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("table.json");
    std::fs::remove_file(&table).unwrap();
    for paths in [&["src/x.rs"][..], &["docs"][..]] {
        match f.now(paths, "b") {
            Err(ReserveError::Busy { conflicts }) => {
                assert_eq!(conflicts.len(), 1, "{conflicts:?}");
                assert!(
                    conflicts[0]
                        .holder
                        .agent
                        .contains("lost with the reservations table"),
                    "{conflicts:?}"
                );
            }
            other => panic!("{paths:?} granted beside a forgotten holder: {other:?}"),
        }
    }
    let listed = reservations(&f.dir, &f.space, None).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(!check(
        &f.dir,
        &f.space,
        &f.pats(&["docs"]),
        Mode::Exclusive,
        Some("b")
    )
    .unwrap()
    .is_empty());
    held.release().unwrap();
    f.now(&["docs"], "b").unwrap().release().unwrap();
    f.now(&["src/x.rs"], "b").unwrap().release().unwrap();
}
