#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! Path reservations on PostgreSQL (`--backend URL`) through the real
//! `baton` binary, between two "machines": processes with baton dirs of
//! their own, in two clones of one origin, sharing only the database (the
//! machine's server, 127.0.0.1:5432, a fresh database per test). The same
//! rules as in the baton dir: overlap excludes, disjoint does not wait, a
//! holder killed with SIGKILL frees at once and the next is told, first
//! come first served, all or none without deadlock.
//!
//! No timed assertions: delays are measured and printed; only liveness is
//! bounded, generously.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{code, git, stderr, wait_for_file, wait_until};
use crate::pg_common::TestDb;

/// Two machines: `m1` works in clone `a` with baton dir `m1`, `m2` in clone
/// `b` with baton dir `m2`; both clones of `origin`.
struct Machines {
    db: TestDb,
    tmp: tempfile::TempDir,
}

impl Machines {
    fn new() -> Machines {
        let tmp = tempfile::tempdir().unwrap();
        let origin = tmp.path().join("origin");
        std::fs::create_dir_all(origin.join("src")).unwrap();
        std::fs::write(origin.join("src/lib.rs"), "// lib\n").unwrap();
        std::fs::create_dir_all(origin.join("docs")).unwrap();
        std::fs::write(origin.join("docs/a.md"), "# a\n").unwrap();
        git(&origin, &["init", "-q", "-b", "main"]);
        git(&origin, &["add", "."]);
        git(&origin, &["commit", "-q", "-m", "seed"]);
        git(tmp.path(), &["clone", "-q", "origin", "a"]);
        git(tmp.path(), &["clone", "-q", "origin", "b"]);
        Machines {
            db: TestDb::new(),
            tmp,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `baton --dir m<N> --backend URL ARGS` in machine N's clone, with a
    /// cleared environment.
    fn baton(&self, machine: u8, args: &[&str]) -> Command {
        let clone = if machine == 1 { "a" } else { "b" };
        let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path())
            .env("OUT", self.tmp.path())
            .current_dir(self.path(clone))
            .arg("--dir")
            .arg(self.path(&format!("m{machine}")))
            .arg("--backend")
            .arg(self.db.url())
            .args(args);
        c
    }

    fn run(&self, machine: u8, args: &[&str]) -> Output {
        self.baton(machine, args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn spawn(&self, machine: u8, args: &[&str]) -> Child {
        self.baton(machine, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `baton reservations --json` as machine N sees it.
    fn rows(&self, machine: u8) -> Vec<Value> {
        let out = self.run(machine, &["reservations", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn waiting(&self, machine: u8) -> usize {
        self.rows(machine)
            .iter()
            .filter(|r| r["granted"] == false)
            .count()
    }
}

/// A shell command that marks `started`, waits until `go` exists, then exits.
fn until_go(started: &Path, go: &Path) -> String {
    format!(
        "touch '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
        started.display(),
        go.display()
    )
}

/// A shell command that appends `NAME start` and `NAME end` to `log`
/// around a short pause.
fn interval(log: &Path, name: &str) -> String {
    format!(
        "echo '{name} start' >> '{0}'; sleep 0.05; echo '{name} end' >> '{0}'",
        log.display()
    )
}

/// Asserts that `log` holds whole intervals one after the other (never two
/// open at once); returns the names in order.
fn serial(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len() % 2, 0, "{text}");
    let mut order = Vec::new();
    for pair in lines.chunks(2) {
        let (a, b) = (pair[0], pair[1]);
        let name = a.strip_suffix(" start").expect(&text);
        assert_eq!(b, format!("{name} end"), "intervals overlap: {text}");
        order.push(name.to_string());
    }
    order
}

fn finish(child: Child) -> Output {
    child.wait_with_output().unwrap()
}

#[test]
fn overlapping_reservations_on_two_machines_exclude_each_other_and_disjoint_ones_do_not_wait() {
    let m = Machines::new();
    let (started, go) = (m.path("started"), m.path("go"));
    let holder = m.spawn(
        1,
        &[
            "reserve",
            "src",
            "--reason",
            "refactor",
            "--agent",
            "alice",
            "--",
            "sh",
            "-c",
            &until_go(&started, &go),
        ],
    );
    wait_for_file(&started);

    // Machine 2 (another baton dir, another clone) meets it.
    let busy = m.run(2, &["reserve", "src/lib.rs", "--no-wait", "--", "true"]);
    assert_eq!(code(&busy), 75, "{}", stderr(&busy));
    let err = stderr(&busy);
    assert!(
        err.contains("'src' is reserved exclusive by alice") && err.contains("refactor"),
        "{err}"
    );
    let check = m.run(2, &["reserve", "--check", "src/**/*.rs"]);
    assert_eq!(code(&check), 75, "{}", stderr(&check));
    // Disjoint: granted at once.
    let docs = m.run(2, &["reserve", "docs", "--no-wait", "--", "true"]);
    assert_eq!(code(&docs), 0, "{}", stderr(&docs));
    let rows = m.rows(2);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["patterns"], serde_json::json!(["src"]));
    assert_eq!(rows[0]["granted"], true);
    assert_eq!(rows[0]["holder"]["agent"], "alice");
    assert!(rows[0]["token"].as_u64().is_some_and(|t| t > 0), "{rows:?}");
    // The baton dirs themselves hold nothing: the database does.
    let local = Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(m.path("b"))
        .args(["--dir", m.path("m2").to_str().unwrap()])
        .args(["reservations", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&local), 0, "{}", stderr(&local));
    assert_eq!(String::from_utf8_lossy(&local.stdout).trim(), "[]");

    // A waiter on machine 2 starts only after machine 1's command ended.
    let log = m.path("log");
    let waiter = m.spawn(
        2,
        &[
            "reserve",
            "src/lib.rs",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!("echo m2 >> '{}'", log.display()),
        ],
    );
    wait_until(Duration::from_secs(20), || m.waiting(2) == 1);
    std::fs::write(&log, "m1 done\n").unwrap();
    std::fs::write(&go, "").unwrap();
    let out = finish(holder);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = finish(waiter);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "m1 done\nm2\n");
    assert!(m.rows(1).is_empty());
}

#[test]
fn kill_9_of_a_holder_frees_its_paths_at_once_and_the_next_holder_is_told_it_died() {
    let m = Machines::new();
    let started = m.path("started");
    let mut holder = m.spawn(
        1,
        &[
            "reserve",
            "src",
            "--",
            "sh",
            "-c",
            &format!("touch '{}'; sleep 600", started.display()),
        ],
    );
    wait_for_file(&started);
    let died = m.path("died");
    let waiter = m.spawn(
        2,
        &[
            "reserve",
            "src/lib.rs",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!(
                "echo \"$BATON_PREVIOUS_HOLDER_DIED\" > '{}'",
                died.display()
            ),
        ],
    );
    wait_until(Duration::from_secs(20), || m.waiting(2) == 1);
    let killed = Instant::now();
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let out = finish(waiter);
    let handoff = killed.elapsed();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&died).unwrap().trim(), "1");
    assert!(stderr(&out).contains("died holding it"), "{}", stderr(&out));
    println!("SIGKILL of the holder -> the waiter's command done: {handoff:?}");
    assert!(m.rows(2).is_empty());
}

#[test]
fn a_wide_request_is_not_overtaken_by_later_narrow_ones() {
    let m = Machines::new();
    let (started, go) = (m.path("started"), m.path("go"));
    let log = m.path("log");
    let holder = m.spawn(
        1,
        &[
            "reserve",
            "src/lib.rs",
            "--",
            "sh",
            "-c",
            &until_go(&started, &go),
        ],
    );
    wait_for_file(&started);
    let wide = m.spawn(
        2,
        &[
            "reserve",
            "src",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &interval(&log, "wide"),
        ],
    );
    wait_until(Duration::from_secs(20), || m.waiting(1) == 1);
    // `src/other.rs` is free, but overlaps the wide request waiting before it.
    let narrow = m.run(1, &["reserve", "src/other.rs", "--no-wait", "--", "true"]);
    assert_eq!(code(&narrow), 75, "{}", stderr(&narrow));
    assert!(
        stderr(&narrow).contains("waited for (earlier in line)"),
        "{}",
        stderr(&narrow)
    );
    // Disjoint from both: not held up.
    let docs = m.run(1, &["reserve", "docs", "--no-wait", "--", "true"]);
    assert_eq!(code(&docs), 0, "{}", stderr(&docs));
    // Narrow ones queued behind it are served after it.
    let narrow: Vec<Child> = ["src/other.rs", "src/x/y.rs"]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            m.spawn(
                1,
                &[
                    "reserve",
                    p,
                    "--wait",
                    "60s",
                    "--",
                    "sh",
                    "-c",
                    &interval(&log, &format!("narrow{i}")),
                ],
            )
        })
        .collect();
    wait_until(Duration::from_secs(20), || m.waiting(1) == 3);
    std::fs::write(&go, "").unwrap();
    for c in std::iter::once(holder)
        .chain(std::iter::once(wide))
        .chain(narrow)
    {
        let out = finish(c);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    // The narrow ones are disjoint from each other (they may run together),
    // but both start after the wide one ended.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert_eq!(&lines[..2], ["wide start", "wide end"], "{text}");
}

#[test]
fn several_paths_are_taken_all_or_none_and_opposite_orders_never_deadlock() {
    let m = Machines::new();
    let (started, go) = (m.path("started"), m.path("go"));
    // All or none: with `docs` held, asking `src docs` takes neither.
    let holder = m.spawn(
        1,
        &[
            "reserve",
            "docs",
            "--",
            "sh",
            "-c",
            &until_go(&started, &go),
        ],
    );
    wait_for_file(&started);
    let out = m.run(2, &["reserve", "src", "docs", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let rows = m.rows(2);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let out = m.run(1, &["reserve", "src", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::fs::write(&go, "").unwrap();
    assert_eq!(code(&finish(holder)), 0);

    // Opposite orders, many times, from both machines at once.
    let log = m.path("log");
    let mut children = Vec::new();
    for i in 0..6 {
        children.push(m.spawn(
            1,
            &[
                "reserve",
                "src",
                "docs",
                "--wait",
                "120s",
                "--",
                "sh",
                "-c",
                &interval(&log, &format!("m1-{i}")),
            ],
        ));
        children.push(m.spawn(
            2,
            &[
                "reserve",
                "docs/a.md",
                "src/lib.rs",
                "--wait",
                "120s",
                "--",
                "sh",
                "-c",
                &interval(&log, &format!("m2-{i}")),
            ],
        ));
    }
    for c in children {
        let out = finish(c);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    assert_eq!(serial(&log).len(), 12);
}

#[test]
fn an_operator_breaks_a_reservation_by_token_on_the_database() {
    let m = Machines::new();
    let (started, go) = (m.path("started"), m.path("go"));
    let holder = m.spawn(
        1,
        &["reserve", "src", "--", "sh", "-c", &until_go(&started, &go)],
    );
    wait_for_file(&started);
    let token = m.rows(2)[0]["token"].as_u64().unwrap();
    let out = m.run(2, &["reservations", "break", &token.to_string()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = m.run(2, &["reserve", "src", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = m.run(2, &["reservations", "break", &token.to_string()]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("no live reservation has token {token}")),
        "{}",
        stderr(&out)
    );
    std::fs::write(&go, "").unwrap();
    assert_eq!(code(&finish(holder)), 0);
}

#[test]
fn a_holder_whose_database_session_ends_stops_its_command_and_exits_76() {
    let m = Machines::new();
    let (started, ended) = (m.path("started"), m.path("ended"));
    let holder = m.spawn(
        1,
        &[
            "reserve",
            "src",
            "--",
            "sh",
            "-c",
            &format!(
                "trap 'touch {}; exit 0' TERM; touch '{}'; while :; do sleep 0.05; done",
                ended.display(),
                started.display()
            ),
        ],
    );
    wait_for_file(&started);
    let killed =
        m.db.query("SELECT pg_terminate_backend(session_pid) FROM baton_reservations");
    assert_eq!(killed.len(), 1, "{killed:?}");
    let out = finish(holder);
    assert_eq!(code(&out), 76, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lost the reservation of src"),
        "{}",
        stderr(&out)
    );
    assert!(ended.exists(), "the command was not stopped");
    let out = m.run(2, &["reserve", "src", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn the_pre_commit_guard_checks_the_database_it_was_installed_with() {
    let m = Machines::new();
    let b = m.path("b");
    let out = m.run(2, &["git", "guard", "install"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (started, go) = (m.path("started"), m.path("go"));
    let holder = m.spawn(
        1,
        &[
            "reserve",
            "src",
            "--agent",
            "alice",
            "--",
            "sh",
            "-c",
            &until_go(&started, &go),
        ],
    );
    wait_for_file(&started);
    let commit = |file: &str| {
        std::fs::write(b.join(file), "changed\n").unwrap();
        let add = Command::new("git")
            .current_dir(&b)
            .args(["add", file])
            .output()
            .unwrap();
        assert!(add.status.success());
        Command::new("git")
            .current_dir(&b)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", m.path(""))
            .args(["-c", "user.email=t@t", "-c", "user.name=t"])
            .args(["commit", "-q", "-m", file])
            .output()
            .unwrap()
    };
    let refused = commit("src/lib.rs");
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("commit refused: 'src/lib.rs'")
            && stderr(&refused).contains("alice"),
        "{}",
        stderr(&refused)
    );
    git(&b, &["reset", "-q"]);
    let passed = commit("docs/a.md");
    assert!(passed.status.success(), "{}", stderr(&passed));
    std::fs::write(&go, "").unwrap();
    assert_eq!(code(&finish(holder)), 0);
    let now_free = commit("src/lib.rs");
    assert!(now_free.status.success(), "{}", stderr(&now_free));
}

#[test]
fn a_database_of_schema_4_is_upgraded_by_a_reservation_and_a_newer_one_is_refused() {
    let m = Machines::new();
    let out = m.run(1, &["db", "migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The database as version 4 (before reservations) left it.
    m.db.query(
        "DROP TABLE baton_reservations; DROP TABLE baton_reservation_spaces; \
         DROP SEQUENCE baton_reservation_tickets; \
         DROP FUNCTION baton_reservation_live(integer, bigint); \
         UPDATE baton_lock_schema SET version = 4",
    );
    let out = m.run(1, &["reserve", "src", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        m.db.scalar("SELECT version FROM baton_lock_schema"),
        Some("5".into())
    );
    // A newer baton's tables: what a row means may have changed.
    m.db.query("UPDATE baton_lock_schema SET version = 6");
    for args in [
        &["reserve", "src", "--no-wait", "--", "true"][..],
        &["reserve", "--check", "src"][..],
        &["reservations"][..],
    ] {
        let out = m.run(2, args);
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("schema version 6, newer than this baton's 5"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
