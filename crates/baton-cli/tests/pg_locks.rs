#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Locks on PostgreSQL through the real `baton` binary (`--backend URL` or
//! `BATON_BACKEND`), on the machine's server (127.0.0.1:5432, user
//! postgres), each test in a fresh database it creates and drops.
//! PostgreSQL being unreachable fails the tests.
//!
//! No timed assertions: delays are measured and printed; only liveness is
//! bounded, generously (10 s and more).

use crate::common;
use crate::pg_common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{code, stderr, stdout, wait_until, Env};
use pg_common::{query_in, TestDb};
use serde_json::Value;

/// Shell functions: `now` prints CLOCK_MONOTONIC in nanoseconds (the
/// clock the test reads with [`mono_ns`]); `group_alive PGID` succeeds
/// while a process of that group exists and is not a zombie (orphans are
/// not always reaped here, so `kill -0` is not enough).
const SH_LIB: &str = "now() { /usr/bin/python3 -c 'import time; print(time.monotonic_ns())'; }; \
    group_alive() { for f in /proc/[0-9]*/stat; do \
    read -r _p _c st _pp pg _rest 2>/dev/null < $f || continue; \
    [ \"$pg\" = \"$1\" ] && [ \"$st\" != Z ] && return 0; done; return 1; }; ";

/// CLOCK_MONOTONIC in nanoseconds, the clock of [`NOW`].
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap()
}

/// `run --lock LOCK -- sh -c SCRIPT`.
fn sh_under<'a>(lock: &'a str, script: &'a str) -> [&'a str; 7] {
    ["run", "--lock", lock, "--", "sh", "-c", script]
}

/// A fresh database and a temp dir (baton dir and scratch files).
struct Pg {
    db: TestDb,
    env: Env,
}

impl Pg {
    fn new() -> Pg {
        Pg {
            db: TestDb::new(),
            env: Env::new(),
        }
    }

    fn url(&self) -> String {
        self.db.url()
    }

    /// `baton --dir D --backend URL ARGS`.
    fn baton(&self, args: &[&str]) -> Command {
        let url = self.url();
        let mut all = vec!["--backend", url.as_str()];
        all.extend_from_slice(args);
        self.env.baton(&all)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.baton(args)
            .stdin(Stdio::null())
            .output()
            .expect("run baton")
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.baton(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baton")
    }

    /// Spawned with no pipes: for a holder to be SIGKILLed, whose orphaned
    /// command would keep pipes open.
    fn spawn_quiet(&self, args: &[&str]) -> Child {
        self.baton(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn baton")
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.env.path(rel)
    }

    fn status(&self, name: &str) -> Value {
        let out = self.run(&["lock", "status", name, "--json"]);
        assert!(out.status.success(), "status failed: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// Sessions of this database waiting for an advisory lock.
    fn waiting_sessions(&self) -> usize {
        self.db
            .scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .unwrap()
            .parse()
            .unwrap()
    }

    /// The database sessions holding an advisory lock (the holders).
    fn holder_sessions(&self) -> Vec<i32> {
        self.db
            .query(
                "SELECT DISTINCT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .into_iter()
            .map(|r| r[0].as_ref().unwrap().parse().unwrap())
            .collect()
    }

    fn terminate(&self, pid: i32) {
        let r = self
            .db
            .scalar(&format!("SELECT pg_terminate_backend({pid})"))
            .unwrap();
        assert_eq!(r, "t", "pg_terminate_backend({pid})");
    }
}

/// Waits for `child` to exit (at most `limit`); its output.
fn finish(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("wait for baton"),
        Err(_) => {
            kill(pid as i32, libc::SIGKILL);
            panic!("baton (pid {pid}) did not exit within {limit:?}");
        }
    }
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid we started (or its group).
    unsafe { libc::kill(pid, sig) };
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Waits until `path` exists; its content.
fn wait_file(path: &Path, limit: Duration) -> String {
    wait_until(limit, || path.exists());
    // The writer may not have finished its line: wait for the newline.
    wait_until(limit, || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(path).unwrap()
}

fn one_line_stderr(out: &Output) -> String {
    let err = stderr(out);
    assert_eq!(
        err.lines().count(),
        1,
        "exactly one line on stderr, got: {err:?}"
    );
    err
}

/// A command for `sh -c` that logs "start TOKEN NS" and "end TOKEN NS" to
/// `log` around `body` (also when TERMinated: it then sleeps `stopping` s
/// before logging its end, a command slow to stop).
fn logged(log: &Path, body: &str, stopping: &str) -> String {
    let log = log.display();
    format!(
        "{SH_LIB}exec 2>/dev/null; echo \"start $BATON_FENCING_TOKEN $(now)\" >> {log}; \
         trap 'sleep {stopping}; echo \"end $BATON_FENCING_TOKEN $(now)\" >> {log}; exit 143' TERM; \
         {body} & wait $!; echo \"end $BATON_FENCING_TOKEN $(now)\" >> {log}"
    )
}

/// (token, start, end) of each command in `log`; panics on a start
/// without an end.
fn intervals(log: &Path) -> Vec<(u64, u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts.len(), 3, "bad log line {line:?} in {text}");
        let token: u64 = parts[1].parse().unwrap();
        let ns: u64 = parts[2].parse().unwrap();
        match parts[0] {
            "start" => {
                assert!(
                    starts.insert(token, ns).is_none(),
                    "token {token} twice: {text}"
                );
            }
            "end" => {
                let start = starts.remove(&token).expect("end without start");
                out.push((token, start, ns));
            }
            _ => panic!("bad log line {line:?}"),
        }
    }
    assert!(
        starts.is_empty(),
        "commands that never ended: {starts:?}\n{text}"
    );
    out.sort_by_key(|i| i.1);
    out
}

/// No two intervals overlap, and tokens increase with start time.
fn assert_exclusive(iv: &[(u64, u64, u64)]) {
    for w in iv.windows(2) {
        assert!(
            w[0].2 <= w[1].1,
            "command of token {} ran until {} but token {} started at {}: overlap",
            w[0].0,
            w[0].2,
            w[1].0,
            w[1].1
        );
        assert!(w[0].0 < w[1].0, "tokens must increase: {iv:?}");
    }
}

// ---------------------------------------------------------------------------
// Mutual exclusion under load.

/// 8 processes x 50 read-increment-write cycles of one file under one
/// lock: none is lost.
#[test]
fn eight_processes_increment_a_counter_exactly() {
    const PROCS: usize = 8;
    const EACH: usize = 50;
    let pg = Pg::new();
    let counter = pg.path("counter");
    std::fs::write(&counter, "0\n").unwrap();
    let script = format!(
        "n=$(cat {c}); echo $((n + 1)) > {c}.tmp && mv {c}.tmp {c}",
        c = counter.display()
    );
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..PROCS {
            s.spawn(|| {
                for _ in 0..EACH {
                    let out = pg.run(&["run", "--lock", "c", "--", "sh", "-c", &script]);
                    assert_eq!(code(&out), 0, "{}", stderr(&out));
                }
            });
        }
    });
    let n: usize = std::fs::read_to_string(&counter)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eprintln!(
        "{} runs in {:?} ({:?} per run)",
        PROCS * EACH,
        started.elapsed(),
        started.elapsed() / (PROCS * EACH) as u32
    );
    assert_eq!(n, PROCS * EACH);
    let st = pg.status("c");
    assert_eq!(st["last_token"], (PROCS * EACH) as u64);
    assert_eq!(st["held"], false);
}

/// The first use of a lock name by many processes in the same instant:
/// every one gets it, one at a time, with distinct tokens.
#[test]
fn first_use_of_a_name_by_many_at_once() {
    let pg = Pg::new();
    pg.run(&["db", "migrate"]);
    let log = pg.path("log");
    let cmd = logged(&log, "sleep 0.05", "0");
    let children: Vec<Child> = (0..8)
        .map(|_| pg.spawn(&["run", "--lock", "fresh-name", "--", "sh", "-c", &cmd]))
        .collect();
    for c in children {
        let out = finish(c, Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let iv = intervals(&log);
    assert_eq!(iv.len(), 8);
    assert_exclusive(&iv);
    let tokens: BTreeSet<u64> = iv.iter().map(|i| i.0).collect();
    assert_eq!(tokens, (1..=8).collect());
    assert_eq!(
        pg.db.scalar("SELECT count(*) FROM baton_locks").unwrap(),
        "1"
    );
}

// ---------------------------------------------------------------------------
// Holders that die or lose their session.

/// `baton run` SIGKILLed while holding: the next waiter runs (its session
/// ended with the process), after what was left of the dead holder's
/// command was stopped.
#[test]
fn sigkill_of_a_holder_lets_the_next_waiter_run() {
    let pg = Pg::new();
    let pidfile = pg.path("holder.pid");
    let holder = pg.spawn_quiet(&sh_under(
        "k",
        &format!("echo $$ > {}; sleep 60", pidfile.display()),
    ));
    let cmd_pid: i32 = wait_file(&pidfile, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let ran = pg.path("ran");
    let waiter = pg.spawn(&sh_under(
        "k",
        &format!(
            "{SH_LIB}if group_alive {cmd_pid}; then echo overlap; else echo alone; fi > {}",
            ran.display()
        ),
    ));
    wait_until(Duration::from_secs(20), || pg.waiting_sessions() == 1);
    let killed = Instant::now();
    kill(holder.id() as i32, libc::SIGKILL);
    let what = wait_file(&ran, Duration::from_secs(10));
    let delay = killed.elapsed();
    eprintln!("SIGKILL of the holder -> next waiter's command ran: {delay:?}");
    assert_eq!(what.trim(), "alone", "the dead holder's command still ran");
    let out = finish(waiter, Duration::from_secs(20));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut holder = holder;
    let _ = holder.wait();
    kill(-cmd_pid, libc::SIGKILL);
}

/// The holder's session terminated on the server: its command is stopped
/// (and records its end), `baton run` exits 76 with one line, the next
/// holder gets a higher token and never runs beside it.
#[test]
fn terminated_session_stops_the_command_and_exits_76() {
    let pg = Pg::new();
    let log = pg.path("log");
    let first = pg.spawn(&[
        "run",
        "--lock",
        "k",
        "--grace",
        "5s",
        "--",
        "sh",
        "-c",
        &logged(&log, "sleep 60", "0"),
    ]);
    wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains("start"))
    });
    let second = pg.spawn(&sh_under("k", &logged(&log, "sleep 0.2", "0")));
    wait_until(Duration::from_secs(20), || pg.waiting_sessions() == 1);
    let sessions = pg.holder_sessions();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let t0 = mono_ns();
    pg.terminate(sessions[0]);
    let out = finish(first, Duration::from_secs(20));
    let exited = mono_ns();
    assert_eq!(code(&out), 76, "{}", stderr(&out));
    let err = one_line_stderr(&out);
    assert!(err.contains("lost the lock 'k'"), "{err}");
    let out2 = finish(second, Duration::from_secs(20));
    assert_eq!(code(&out2), 0, "{}", stderr(&out2));
    let iv = intervals(&log);
    assert_eq!(iv.len(), 2, "{iv:?}");
    assert_exclusive(&iv);
    eprintln!(
        "terminate -> command ended: {:?}; -> baton run exited: {:?}; -> next command started: {:?}",
        Duration::from_nanos(iv[0].2.saturating_sub(t0)),
        Duration::from_nanos(exited.saturating_sub(t0)),
        Duration::from_nanos(iv[1].1.saturating_sub(t0)),
    );
    assert!(iv[1].0 > iv[0].0);
}

/// A command slow to stop (it traps TERM and takes 1 s): after its
/// session was terminated, the next holder on this machine does not start
/// before the previous command's process group is gone.
#[test]
fn next_holder_waits_for_a_command_still_stopping() {
    let pg = Pg::new();
    let log = pg.path("log");
    let pidfile = pg.path("first.pid");
    let body = format!("echo $$ > {}; sleep 60", pidfile.display());
    let first = pg.spawn(&sh_under("k", &logged(&log, &body, "1")));
    let first_pid: i32 = wait_file(&pidfile, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let second = pg.spawn(&[
        "run",
        "--lock",
        "k",
        "--",
        "sh",
        "-c",
        &logged(
            &log,
            &format!(
                "{SH_LIB}if group_alive {first_pid}; then echo overlap; else echo alone; fi > {}",
                pg.path("second").display()
            ),
            "0",
        ),
    ]);
    wait_until(Duration::from_secs(20), || pg.waiting_sessions() == 1);
    let sessions = pg.holder_sessions();
    assert_eq!(sessions.len(), 1);
    let t0 = mono_ns();
    pg.terminate(sessions[0]);
    let out2 = finish(second, Duration::from_secs(30));
    assert_eq!(code(&out2), 0, "{}", stderr(&out2));
    let out = finish(first, Duration::from_secs(30));
    assert_eq!(code(&out), 76, "{}", stderr(&out));
    let iv = intervals(&log);
    assert_eq!(iv.len(), 2, "{iv:?}");
    assert_exclusive(&iv);
    assert_eq!(
        std::fs::read_to_string(pg.path("second")).unwrap().trim(),
        "alone"
    );
    eprintln!(
        "terminate -> slow command ended: {:?}; -> next started: {:?}",
        Duration::from_nanos(iv[0].2.saturating_sub(t0)),
        Duration::from_nanos(iv[1].1.saturating_sub(t0))
    );
}

/// Every baton session of the database terminated at once (what a server
/// restart does to them): every running command is stopped and exits 76,
/// and the lock can be taken again.
#[test]
fn all_sessions_terminated_at_once() {
    let pg = Pg::new();
    let log = pg.path("log");
    let holders: Vec<Child> = ["a", "b", "c"]
        .iter()
        .map(|l| {
            pg.spawn(&[
                "run",
                "--lock",
                l,
                "--",
                "sh",
                "-c",
                &logged(&log, "sleep 60", "0"),
            ])
        })
        .collect();
    wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|s| s.matches("start").count() == 3)
    });
    pg.db.query(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = 'baton' AND datname = '{}'",
        pg.db.name
    ));
    for h in holders {
        let out = finish(h, Duration::from_secs(30));
        assert_eq!(code(&out), 76, "{}", stderr(&out));
        one_line_stderr(&out);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("start").count(), 3, "{text}");
    assert_eq!(
        text.matches("end").count(),
        3,
        "every command recorded its end: {text}"
    );
    let out = pg.run(&["run", "--lock", "a", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// Status.

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// `lock status --json` shows the holder (pid, host, token) with the same
/// keys as the local backend; after a SIGKILL of the holder, before anyone
/// takes the lock: not held, `last_holder_died`.
#[test]
fn status_shows_the_holder_and_a_dead_one() {
    let pg = Pg::new();
    let pidfile = pg.path("cmd.pid");
    let script = format!("echo $$ > {}; sleep 60", pidfile.display());
    let holder = pg.spawn_quiet(&["run", "--lock", "k", "--", "sh", "-c", &script]);
    let cmd_pid: i32 = wait_file(&pidfile, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let st = pg.status("k");
    assert_eq!(st["held"], true, "{st}");
    let h = &st["holder"];
    assert_eq!(h["pid"], holder.id(), "{st}");
    assert_eq!(h["token"], 1, "{st}");
    assert!(h["host"].as_str().is_some_and(|s| !s.is_empty()), "{st}");
    assert_eq!(st["holders"].as_array().unwrap().len(), 1);

    // The same keys as the local backend's.
    let local_pid = pg.path("local.pid");
    let mut local = pg
        .env
        .baton(&sh_under(
            "k",
            &format!("echo $$ > {}; sleep 60", local_pid.display()),
        ))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let local_cmd: i32 = wait_file(&local_pid, Duration::from_secs(20))
        .trim()
        .parse()
        .unwrap();
    let lst = {
        let out = pg.env.run(&["lock", "status", "k", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(keys(&st), keys(&lst), "pg {st}\nlocal {lst}");
    assert_eq!(keys(&st["holder"]), keys(&lst["holder"]));
    kill(-local_cmd, libc::SIGTERM);
    let _ = local.wait();

    kill(holder.id() as i32, libc::SIGKILL);
    let mut holder = holder;
    let _ = holder.wait();
    wait_until(Duration::from_secs(10), || pg.status("k")["held"] == false);
    let st = pg.status("k");
    assert_eq!(st["last_holder_died"], true, "{st}");
    assert_eq!(st["last_holder"]["token"], 1, "{st}");
    assert!(st["holder"].is_null(), "{st}");
    kill(-cmd_pid, libc::SIGKILL);

    // The list shows it too, and the human status names the dead holder.
    let out = pg.run(&["lock", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    let out = pg.run(&["lock", "status", "k"]);
    assert!(
        stdout(&out).contains("died without releasing"),
        "{}",
        stdout(&out)
    );
}

// ---------------------------------------------------------------------------
// Waiting, modes.

/// Busy with `--no-wait` or after `--wait 300ms`: 75.
#[test]
fn busy_exits_75() {
    let pg = Pg::new();
    let out = pg.run(&["lock", "acquire", "k"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    let out = pg.run(&["run", "--lock", "k", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    one_line_stderr(&out);
    let t = Instant::now();
    let out = pg.run(&["run", "--lock", "k", "--wait", "300ms", "--", "true"]);
    eprintln!("--wait 300ms gave up after {:?}", t.elapsed());
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    one_line_stderr(&out);
    assert_eq!(pg.waiting_sessions(), 0, "a waiter stayed in the queue");
    let out = pg.run(&["lock", "release", "k", "--token", &token]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = pg.run(&["run", "--lock", "k", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Shared holders coexist; an exclusive one waits until both are gone.
#[test]
fn shared_holders_coexist_and_exclusive_waits() {
    let pg = Pg::new();
    let go = pg.path("go");
    let cmd = |tag: &str| {
        format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
            pg.path(tag).display(),
            go.display()
        )
    };
    let a = pg.spawn(&[
        "run",
        "--shared",
        "--lock",
        "s",
        "--",
        "sh",
        "-c",
        &cmd("a"),
    ]);
    let b = pg.spawn(&[
        "run",
        "--shared",
        "--lock",
        "s",
        "--",
        "sh",
        "-c",
        &cmd("b"),
    ]);
    wait_until(Duration::from_secs(20), || {
        pg.path("a").exists() && pg.path("b").exists()
    });
    let st = pg.status("s");
    assert_eq!(st["mode"], "shared", "{st}");
    assert_eq!(st["holders"].as_array().unwrap().len(), 2, "{st}");
    let x = pg.path("x");
    let ex = pg.spawn(&sh_under("s", &format!("touch {}", x.display())));
    wait_until(Duration::from_secs(20), || pg.status("s")["waiters"] == 1);
    assert!(!x.exists(), "the exclusive holder ran beside shared ones");
    std::fs::write(&go, "").unwrap();
    for c in [a, b, ex] {
        let out = finish(c, Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    assert!(x.exists());
}

/// `--max 2`: never more than 2 commands at once.
#[test]
fn semaphore_admits_at_most_max() {
    let pg = Pg::new();
    let dir = pg.path("in");
    std::fs::create_dir(&dir).unwrap();
    let counts = pg.path("counts");
    let cmd = format!(
        "touch {d}/$$; ls {d} | wc -l >> {c}; sleep 0.2; rm {d}/$$",
        d = dir.display(),
        c = counts.display()
    );
    let children: Vec<Child> = (0..6)
        .map(|_| pg.spawn(&["run", "--max", "2", "--lock", "sem", "--", "sh", "-c", &cmd]))
        .collect();
    for c in children {
        let out = finish(c, Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let seen: Vec<u32> = std::fs::read_to_string(&counts)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    eprintln!("commands running at once, as each started: {seen:?}");
    assert_eq!(seen.len(), 6);
    assert!(seen.iter().all(|&n| (1..=2).contains(&n)), "{seen:?}");
}

/// Holders that disagree about the mode never run side by side: an
/// exclusive holder and a `--max 2` runner (which would take slot 1), or
/// `--max 2` and `--max 3`.
#[test]
fn disagreeing_modes_do_not_run_side_by_side() {
    let pg = Pg::new();
    let out = pg.run(&["lock", "acquire", "m"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    let ran = pg.path("ran");
    let out = pg.run(&[
        "run",
        "--max",
        "2",
        "--lock",
        "m",
        "--wait",
        "1s",
        "--",
        "touch",
        ran.to_str().unwrap(),
    ]);
    assert!(!ran.exists(), "--max 2 ran beside an exclusive holder");
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    one_line_stderr(&out);
    let out = pg.run(&["lock", "release", "m", "--token", &token]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let two: Vec<Child> = (0..2)
        .map(|_| pg.spawn(&["run", "--max", "2", "--lock", "n", "--", "sleep", "2"]))
        .collect();
    wait_until(Duration::from_secs(20), || {
        pg.status("n")["holders"].as_array().unwrap().len() == 2
    });
    let out = pg.run(&[
        "run",
        "--max",
        "3",
        "--lock",
        "n",
        "--wait",
        "1s",
        "--",
        "touch",
        ran.to_str().unwrap(),
    ]);
    assert!(!ran.exists(), "--max 3 ran beside two --max 2 holders");
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    for c in two {
        let out = finish(c, Duration::from_secs(20));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
}

// ---------------------------------------------------------------------------
// lock acquire / release / break.

/// `lock acquire` prints the token, `lock release --token` frees it;
/// `lock break` ends the holder's session ("session terminated") and the
/// script it held for is stopped.
#[test]
fn acquire_release_and_break() {
    let pg = Pg::new();
    let out = pg.run(&["lock", "acquire", "k"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(token, 1);
    let st = pg.status("k");
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["holder"]["token"], 1, "{st}");
    let out = pg.run(&["lock", "release", "k", "--token", "7"]);
    assert_ne!(code(&out), 0, "a wrong token released it");
    let out = pg.run(&["lock", "release", "k", "--token", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(pg.status("k")["held"], false);

    // A script holding the lock through `lock acquire` in $(...).
    let url = pg.url();
    let baton = env!("CARGO_BIN_EXE_baton");
    let dir = pg.env.dir.display().to_string();
    let marks = pg.path("marks");
    let script = format!(
        "T=$({baton} --dir {dir} lock acquire k) || exit 9; echo \"got $T\" >> {m}; \
         trap 'echo stopped >> {m}; exit 143' TERM; sleep 60 & wait $!; echo finished >> {m}",
        m = marks.display()
    );
    let mut script_proc = Command::new("sh")
        .args(["-c", &script])
        .env("BATON_BACKEND", &url)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&marks).is_ok_and(|s| s.contains("got 2"))
    });
    let t = Instant::now();
    let out = pg.run(&["lock", "break", "k", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["stopped"][0]["action"], "session terminated",
        "{report}"
    );
    let status = script_proc.wait().unwrap();
    eprintln!("lock break -> script stopped: {:?}", t.elapsed());
    assert_eq!(status.code(), Some(143));
    let marks = std::fs::read_to_string(&marks).unwrap();
    assert!(
        marks.contains("stopped") && !marks.contains("finished"),
        "{marks}"
    );
    wait_until(Duration::from_secs(20), || pg.status("k")["held"] == false);
    let out = pg.run(&["run", "--lock", "k", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Ctrl-C of a waiter while it waits in the server: it leaves the queue
/// (no session of it waits any more) and takes nothing.
#[test]
fn interrupted_waiter_leaves_the_server_queue() {
    let pg = Pg::new();
    let out = pg.run(&["lock", "acquire", "k"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    let ran = pg.path("ran");
    let waiter = pg.spawn(&["run", "--lock", "k", "--", "touch", ran.to_str().unwrap()]);
    wait_until(Duration::from_secs(20), || pg.waiting_sessions() == 1);
    let t = Instant::now();
    kill(waiter.id() as i32, libc::SIGINT);
    let out = finish(waiter, Duration::from_secs(10));
    eprintln!(
        "SIGINT of a waiter -> exited {:?} after {:?}",
        out.status,
        t.elapsed()
    );
    wait_until(Duration::from_secs(10), || pg.waiting_sessions() == 0);
    eprintln!(
        "SIGINT of a waiter -> its session left the server's queue after {:?}",
        t.elapsed()
    );
    let out = pg.run(&["lock", "release", "k", "--token", &token]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ran.exists(), "the interrupted waiter ran its command");
    assert_eq!(pg.status("k")["last_token"], 1);
}

/// Several locks with one `--wait`: when one of them stays busy, nothing
/// stays held or recorded, and the others can be taken at once.
#[test]
fn wait_with_several_locks_holds_nothing_on_failure() {
    let pg = Pg::new();
    let out = pg.run(&["lock", "acquire", "b"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    let out = pg.run(&[
        "run", "--lock", "a", "--lock", "b", "--lock", "c", "--wait", "300ms", "--", "true",
    ]);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    let st = pg.status("a");
    assert_eq!(st["held"], false, "{st}");
    assert_eq!(
        st["last_holder_died"], false,
        "a failed acquisition left a row: {st}"
    );
    let out = pg.run(&["run", "--lock", "a", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = pg.run(&["lock", "release", "b", "--token", &token]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Names with quotes, unicode, and the longest name allowed work end to
/// end (nothing is spliced into SQL).
#[test]
fn odd_lock_names() {
    let pg = Pg::new();
    let long = "x".repeat(200);
    for name in ["it's", "a\"b", "ünï-cødé", "semi;colon", long.as_str()] {
        let out = pg.run(&["run", "--lock", name, "--", "true"]);
        if code(&out) == 125 {
            // Refused by the name rules, as on the local backend.
            let local = pg.env.run(&["run", "--lock", name, "--", "true"]);
            assert_eq!(code(&local), 125, "{name}: {}", stderr(&out));
            one_line_stderr(&out);
            continue;
        }
        assert_eq!(code(&out), 0, "{name}: {}", stderr(&out));
        let st = pg.status(name);
        assert_eq!(st["name"], name, "{st}");
        assert_eq!(st["last_token"], 1, "{st}");
    }
}

// ---------------------------------------------------------------------------
// Bad input and the schema.

fn assert_failed_cleanly(out: &Output, names: &str) {
    assert_eq!(code(out), 125, "{}", stderr(out));
    let err = one_line_stderr(out);
    assert!(err.contains(names), "expected {names:?} in: {err}");
}

fn baton_tables(dbname: &str) -> usize {
    query_in(
        dbname,
        "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'baton%'",
    )[0][0]
        .as_ref()
        .unwrap()
        .parse()
        .unwrap()
}

/// Bad URLs, unreachable servers, missing databases, refused logins,
/// missing permissions: 125 with one line naming the problem, nothing half
/// created.
#[test]
fn bad_backends_fail_with_one_line() {
    let pg = Pg::new();
    let env = &pg.env;
    let with = |url: &str, args: &[&str]| {
        let mut all = vec!["--backend", url];
        all.extend_from_slice(args);
        env.run(&all)
    };
    let run = ["run", "--lock", "k", "--", "true"];
    assert_failed_cleanly(&with("mysql://u@h/db", &run), "postgres://");
    assert_failed_cleanly(&with("postgres://postgres@127.0.0.1", &run), "no database");
    let t = Instant::now();
    assert_failed_cleanly(
        &with("postgres://postgres@127.0.0.1:1/x", &run),
        "cannot connect",
    );
    eprintln!("unreachable port reported after {:?}", t.elapsed());
    assert_failed_cleanly(
        &with("postgres://postgres@127.0.0.1:5432/baton_no_such_db", &run),
        "does not exist",
    );
    // Through the environment too.
    let out = env
        .baton(&run)
        .env("BATON_BACKEND", "postgres://postgres@127.0.0.1:1/x")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_failed_cleanly(&out, "cannot connect");

    // A login the server refuses. pg_hba may trust 127.0.0.1 (then any
    // password is accepted): a role that does not exist is refused anyway.
    let role = format!("{}_nobody", pg.db.name);
    assert_failed_cleanly(
        &with(
            &format!("postgres://{role}:wrong@127.0.0.1:5432/{}", pg.db.name),
            &run,
        ),
        &role,
    );
    let out = with(
        &format!("postgres://{role}:s3cret@127.0.0.1:5432/{}", pg.db.name),
        &run,
    );
    assert!(
        !stderr(&out).contains("s3cret"),
        "password shown: {}",
        stderr(&out)
    );
    // Passwords given as options are not shown either.
    for url in [
        "postgres://postgres@127.0.0.1:1/x?password=s3cret",
        "host=127.0.0.1 password=s3cret dbname=x",
    ] {
        let out = with(url, &run);
        assert_eq!(code(&out), 125, "{}", stderr(&out));
        one_line_stderr(&out);
        assert!(
            !stderr(&out).contains("s3cret"),
            "password shown: {}",
            stderr(&out)
        );
    }

    // A user who may connect but not create tables (PG15: public allows
    // no CREATE to non-owners).
    let weak = format!("{}_weak", pg.db.name);
    pg_common::admin(&format!("CREATE ROLE {weak} LOGIN PASSWORD 'p'"));
    struct DropRole(String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            pg_common::admin(&format!("DROP ROLE IF EXISTS {}", self.0));
        }
    }
    let _role = DropRole(weak.clone());
    let weak_url = format!("postgres://{weak}:p@127.0.0.1:5432/{}", pg.db.name);
    for args in [
        &["db", "migrate"][..],
        &run[..],
        &["lock", "acquire", "k"][..],
    ] {
        let out = with(&weak_url, args);
        assert_failed_cleanly(&out, "refused to");
        assert!(
            stderr(&out).contains("baton db migrate"),
            "{}",
            stderr(&out)
        );
        assert_eq!(
            baton_tables(&pg.db.name),
            0,
            "half-created tables after {args:?}"
        );
    }
    // `baton db` without a backend.
    let out = env.run(&["db", "migrate"]);
    assert_failed_cleanly(&out, "--backend");
    drop(_role);
}

/// `baton db migrate` twice is fine; 8 first users at once create the
/// schema once, without errors.
#[test]
fn migrate_is_idempotent_and_concurrent_first_use_is_safe() {
    let pg = Pg::new();
    for _ in 0..2 {
        let out = pg.run(&["db", "migrate"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("schema version 5"),
            "{}",
            stdout(&out)
        );
    }
    assert_eq!(baton_tables(&pg.db.name), 8);

    let fresh = TestDb::new();
    let env = Env::new();
    let url = fresh.url();
    let children: Vec<Child> = (0..8)
        .map(|i| {
            let name = format!("l{}", i % 3);
            env.baton(&["run", "--lock", &name, "--", "true"])
                .env("BATON_BACKEND", &url)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = finish(c, Duration::from_secs(60));
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    }
    assert_eq!(baton_tables(&fresh.name), 8);
    assert_eq!(
        fresh.scalar("SELECT count(*) FROM baton_lock_schema"),
        Some("1".into())
    );
    assert_eq!(
        fresh.scalar("SELECT sum(token) FROM baton_locks"),
        Some("8".into())
    );
}

/// A holder SIGSTOPped keeps its lock (its session stays up: the kernel
/// answers TCP keepalives for it) and goes on when SIGCONTed; its waiter
/// then runs after it. (Its command has ended meanwhile; one still running
/// past the guardian's fence is killed: `pg_guardian.rs`.)
#[test]
fn stopped_holder_keeps_the_lock_until_continued() {
    let pg = Pg::new();
    let log = pg.path("log");
    let holder = pg.spawn(&sh_under("k", &logged(&log, "sleep 1", "0")));
    wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|s| s.contains("start"))
    });
    let waiter = pg.spawn(&sh_under("k", &logged(&log, "true", "0")));
    wait_until(Duration::from_secs(20), || pg.waiting_sessions() == 1);
    kill(holder.id() as i32, libc::SIGSTOP);
    // Longer than the heartbeat's interval and limit.
    std::thread::sleep(Duration::from_secs(8));
    let st = pg.status("k");
    kill(holder.id() as i32, libc::SIGCONT);
    eprintln!(
        "status while the holder was stopped: held {} waiters {}",
        st["held"], st["waiters"]
    );
    assert_eq!(st["held"], true, "{st}");
    let out = finish(holder, Duration::from_secs(30));
    let c1 = code(&out);
    eprintln!("holder after SIGCONT: exit {c1}, stderr {:?}", stderr(&out));
    let out2 = finish(waiter, Duration::from_secs(30));
    assert_eq!(code(&out2), 0, "{}", stderr(&out2));
    let iv = intervals(&log);
    assert_exclusive(&iv);
    assert!(alive(std::process::id() as i32));
}

/// Two database roles, `<db>_a` and `<db>_b`, allowed to use baton's tables;
/// removed (with their grants) before the database is dropped.
struct Roles {
    db: String,
    names: [String; 2],
}

impl Roles {
    fn new(db: &TestDb) -> Roles {
        let names = [format!("{}_a", db.name), format!("{}_b", db.name)];
        for r in &names {
            pg_common::admin(&format!("CREATE ROLE {r} LOGIN"));
            db.query(&format!(
                "GRANT ALL ON ALL TABLES IN SCHEMA public TO {r}; \
                 GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {r}"
            ));
        }
        Roles {
            db: db.name.clone(),
            names,
        }
    }

    fn url(&self, i: usize) -> String {
        format!("postgres://{}@127.0.0.1:5432/{}", self.names[i], self.db)
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let [a, b] = &self.names;
        query_in(&self.db, &format!("DROP OWNED BY {a}, {b}"));
        pg_common::admin(&format!("DROP ROLE IF EXISTS {a}, {b}"));
    }
}

/// Holders connected as different roles: a role without pg_read_all_stats
/// sees other roles' sessions without their start time. A live holder of
/// another role must still read as live (held, never settled as dead, so
/// never run beside), and a SIGKILLed one as gone at once.
#[test]
fn holders_connected_as_different_roles_see_each_other_alive_and_dead() {
    let pg = Pg::new();
    let out = pg.run(&["db", "migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let roles = Roles::new(&pg.db);
    let (url_a, url_b) = (roles.url(0), roles.url(1));
    let marker = pg.path("started");
    let script = format!("touch {}; exec sleep 60", marker.display());
    let mut holder = pg
        .env
        .baton(&[
            "--backend",
            &url_a,
            "run",
            "--lock",
            "k",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), || marker.exists());

    let out = pg
        .env
        .run(&["--backend", &url_b, "lock", "status", "k", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["holder"]["alive"], true, "{st}");
    let out = pg.env.run(&[
        "--backend",
        &url_b,
        "run",
        "--lock",
        "k",
        "--wait",
        "500ms",
        "--",
        "true",
    ]);
    assert_eq!(
        code(&out),
        75,
        "another role's live holder: {}",
        stderr(&out)
    );

    kill(holder.id() as i32, libc::SIGKILL);
    let _ = holder.wait();
    let started = Instant::now();
    let out = pg.env.run(&[
        "--backend",
        &url_b,
        "run",
        "--lock",
        "k",
        "--wait",
        "15s",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    eprintln!(
        "SIGKILLed holder of another role -> next holder ran in {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the dead holder of another role was waited for as if it could still run"
    );
}

/// `baton doctor --backend`: a fresh database is fine (tables made on first
/// use); a user who may neither create nor use the tables is an error
/// naming the remedy; with table and sequence grants only `break` on other
/// roles' sessions is missing (a warning); an unreachable server is an error.
#[test]
fn doctor_checks_the_backend() {
    let pg = Pg::new();
    let backend = |out: &Output| -> Value {
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "backend")
            .cloned()
            .unwrap()
    };
    let out = pg.run(&["doctor", "--json"]);
    let c = backend(&out);
    assert_eq!(c["status"], "ok", "{c}");
    assert_eq!(c["detail"]["schema_version"], Value::Null, "{c}");

    let out = pg.run(&["db", "migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let weak = format!("{}_doc", pg.db.name);
    pg_common::admin(&format!("CREATE ROLE {weak} LOGIN"));
    struct DropRole(String, String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            query_in(&self.1, &format!("DROP OWNED BY {}", self.0));
            pg_common::admin(&format!("DROP ROLE IF EXISTS {}", self.0));
        }
    }
    let _role = DropRole(weak.clone(), pg.db.name.clone());
    let weak_url = format!("postgres://{weak}@127.0.0.1:5432/{}", pg.db.name);
    let out = pg.env.run(&["--backend", &weak_url, "doctor", "--json"]);
    assert_eq!(code(&out), 125, "{}", stdout(&out));
    let c = backend(&out);
    assert_eq!(c["status"], "error", "{c}");
    assert!(c["remedy"].as_str().unwrap().contains("GRANT"), "{c}");

    pg.db.query(&format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {weak}; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {weak}"
    ));
    let out = pg.env.run(&["--backend", &weak_url, "doctor", "--json"]);
    let c = backend(&out);
    assert_eq!(c["status"], "warning", "{c}");
    assert!(c["summary"].as_str().unwrap().contains("lock break"), "{c}");
    // And that user can indeed lock (the grants are enough).
    let out = pg.env.run(&[
        "--backend",
        &weak_url,
        "run",
        "--lock",
        "fresh-name",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    let out = pg.env.run(&[
        "--backend",
        "postgres://postgres@127.0.0.1:1/x",
        "doctor",
        "--json",
    ]);
    assert_eq!(code(&out), 125);
    assert_eq!(backend(&out)["status"], "error");
}

/// Tables of a newer schema are refused on the locking path too, as `db
/// migrate` refuses them (125, naming both versions): in a mixed-version
/// fleet, taking a lock on rows whose meaning changed could admit two
/// holders (issue 37, item 5). Fails before: exit 0.
#[test]
fn a_newer_lock_schema_is_refused_when_locking() {
    let pg = Pg::new();
    let out = pg.run(&["run", "--lock", "k", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    pg.db.query("UPDATE baton_lock_schema SET version = 999");
    for args in [
        &["run", "--lock", "k", "--", "true"][..],
        &["run", "--lock", "new-name", "--", "true"][..],
        &["lock", "acquire", "k"][..],
    ] {
        let out = pg.run(args);
        assert_eq!(code(&out), 125, "{args:?}: {}", stderr(&out));
        let line = one_line_stderr(&out);
        assert!(line.contains("999"), "{args:?}: {line}");
    }
    assert_eq!(pg.holder_sessions().len(), 0, "a lock was taken");
}
