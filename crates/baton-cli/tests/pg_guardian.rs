#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Across machines, never two holders: a dead or stalled supervisor's whole
//! command is stopped by its guardian before another host takes over.
//!
//! Each "host" is a `baton` in its own UTS namespace (`unshare --uts`, its
//! own host name) with its own baton dir, on one PostgreSQL database: to
//! baton the other host's processes are not this machine's, so nobody on
//! this side may stop them. The command's work runs in a *child* of the
//! command (a ticker writing CLOCK_MONOTONIC to a log every 100 ms), which
//! the parent-death signal of the leader does not reach.
//!
//! No timed assertions beyond liveness bounds (generous); the order of the
//! ticks in the log is the assertion.

use crate::common;
use crate::pg_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{code, stderr, wait_until, Env};
use pg_common::{running, TestDb};

/// `baton --backend URL ARGS` in `env` (this host), stdin and stdout
/// closed, stderr as given.
fn spawn_on(env: &Env, url: &str, args: &[&str], stderr: Stdio) -> Child {
    let mut all = vec!["--backend", url];
    all.extend_from_slice(args);
    env.baton(&all)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// A simulated machine: its own host name and baton dir.
struct Host {
    env: Env,
    name: &'static str,
    url: String,
}

impl Host {
    fn new(name: &'static str, db: &TestDb) -> Host {
        Host {
            env: Env::new(),
            name,
            url: db.url(),
        }
    }

    /// `baton --dir D --backend URL ARGS` under host name `name`: the pid of
    /// the returned command is baton's (unshare and sh exec it).
    fn baton(&self, args: &[&str]) -> Command {
        let inner = self.env.baton(&[]);
        let mut c = Command::new("unshare");
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.env.tmp.path())
            .current_dir(self.env.tmp.path())
            .args(["--uts", "--", "sh", "-c"])
            .arg(format!("hostname {} && exec \"$0\" \"$@\"", self.name))
            .arg(inner.get_program())
            .args(inner.get_args())
            .args(["--backend", self.url.as_str()])
            .args(args);
        c
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.baton(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baton under unshare")
    }

    /// Starts `baton ARGS -- sh -c TICKER` (the ticker: a child of the
    /// command, see [`ticking`]) and waits until it ticks; returns baton,
    /// the ticker's pid and the log (tag "A").
    fn start_ticking(&self, args: &[&str]) -> (Child, i32, PathBuf) {
        let log = self.env.path("log");
        let pidfile = self.env.path("ticker.pid");
        let script = ticking("A", &log, &pidfile);
        let mut all = args.to_vec();
        all.extend(["--", "sh", "-c", script.as_str()]);
        let holder = self.spawn(&all);
        let ticker = read_pid(&pidfile);
        wait_until(Duration::from_secs(30), || ticks(&log, "A").len() >= 3);
        (holder, ticker, log)
    }

    fn output(&self, args: &[&str]) -> Output {
        self.baton(args)
            .stdin(Stdio::null())
            .output()
            .expect("run baton under unshare")
    }
}

/// A command whose work is a child ticker: it writes `TAG NS` to `log`
/// every 100 ms, and its pid to `pidfile`; the command waits for it.
fn ticking(tag: &str, log: &Path, pidfile: &Path) -> String {
    format!(
        "/usr/bin/python3 -c 'import time\nf = open(\"{log}\", \"a\", buffering=1)\nwhile True:\n    f.write(\"{tag} %d\\n\" % time.monotonic_ns())\n    time.sleep(0.1)' & echo $! > {pid}; wait",
        log = log.display(),
        pid = pidfile.display(),
    )
}

/// A command that writes one `TAG NS` line.
fn one_tick(tag: &str, log: &Path) -> String {
    format!(
        "/usr/bin/python3 -c 'import time; open(\"{log}\", \"a\").write(\"{tag} %d\\n\" % time.monotonic_ns())'",
        log = log.display()
    )
}

/// The ticks of `tag` in `log`.
fn ticks(log: &Path, tag: &str) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{tag} ")))
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

fn kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) with a pid this test started.
    unsafe { libc::kill(pid, sig) };
}

fn read_pid(path: &PathBuf) -> i32 {
    wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(path).is_ok_and(|s| s.ends_with('\n'))
    });
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            kill(child.id() as i32, libc::SIGKILL);
            panic!("baton (pid {}) did not exit within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The ticker of host A ended before host B's command started.
fn assert_a_before_b(log: &Path) {
    let a = ticks(log, "A");
    let b = ticks(log, "B");
    assert!(!a.is_empty() && !b.is_empty(), "both ran: {a:?} {b:?}");
    let (last_a, first_b) = (*a.iter().max().unwrap(), *b.iter().min().unwrap());
    eprintln!(
        "A's last tick -> B's first: {:.2} s",
        (first_b as f64 - last_a as f64) / 1e9
    );
    assert!(
        last_a < first_b,
        "A's command ran {:.2} s beside B's: two holders",
        (last_a - first_b) as f64 / 1e9
    );
}

/// Fault 1 of the review: `kill -9` of `baton run` on host A, whose
/// command's work runs in a child of the command. The child used to run on
/// for ever (only the leader gets the parent-death signal); now the run's
/// guardian kills the whole group at once, with no other baton involved,
/// and host B's run of the lock starts after it.
#[test]
fn sigkill_of_a_supervisor_stops_its_commands_children() {
    let db = TestDb::new();
    let (a, b) = (Host::new("host-a", &db), Host::new("host-b", &db));
    let (holder, ticker, log) = a.start_ticking(&["run", "--lock", "k"]);
    let killed = Instant::now();
    kill(holder.id() as i32, libc::SIGKILL);
    let _ = finish(holder, Duration::from_secs(10));
    wait_until(Duration::from_secs(10), || !running(ticker));
    eprintln!(
        "SIGKILL of the supervisor -> its command's child gone: {:?}",
        killed.elapsed()
    );

    let out = b.output(&["run", "--lock", "k", "--", "sh", "-c", &one_tick("B", &log)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_a_before_b(&log);
}

/// Faults 2 and 3: host A's supervisor is stopped (SIGSTOP) while its
/// command runs, and host B breaks the lock (its session is terminated)
/// and takes it. B starts after the settle wait; A's command, which used to
/// run until A was continued, is stopped by A's guardian before that (its
/// supervisor stopped vouching). When A is continued it exits 76, saying so.
#[test]
fn stopped_supervisor_is_fenced_before_another_host_takes_over() {
    let db = TestDb::new();
    let (a, b) = (Host::new("host-a", &db), Host::new("host-b", &db));
    let (holder, ticker, log) = a.start_ticking(&["run", "--grace", "1s", "--lock", "k"]);
    kill(holder.id() as i32, libc::SIGSTOP);
    let stopped = Instant::now();

    let broke = b.output(&["lock", "break", "k"]);
    assert_eq!(code(&broke), 0, "break: {}", stderr(&broke));
    let out = b.output(&["run", "--lock", "k", "--", "sh", "-c", &one_tick("B", &log)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    eprintln!("A stopped -> B's run done: {:?}", stopped.elapsed());
    assert!(!running(ticker), "A's command still runs after B ran");
    kill(holder.id() as i32, libc::SIGCONT);
    let out = finish(holder, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("A after SIGCONT: exit {}, stderr {err:?}", code(&out));
    assert_eq!(code(&out), 76, "{err}");
    assert!(err.contains("guardian"), "{err}");
    assert_a_before_b(&log);
}

/// Fault 4: groups. After `kill -9` of the older run's supervisor on host
/// A, the next run of the group on host B starts only once the older run's
/// child is gone.
#[test]
fn a_group_run_of_another_host_starts_after_the_dead_runs_children() {
    let db = TestDb::new();
    let (a, b) = (Host::new("host-a", &db), Host::new("host-b", &db));
    let (holder, ticker, log) = a.start_ticking(&["run", "--group", "g"]);
    let newer = b.spawn(&[
        "run",
        "--group",
        "g",
        "--",
        "sh",
        "-c",
        &one_tick("B", &log),
    ]);
    kill(holder.id() as i32, libc::SIGKILL);
    let _ = finish(holder, Duration::from_secs(10));
    let out = finish(newer, Duration::from_secs(60));
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!running(ticker), "A's command's child still runs");
    assert_a_before_b(&log);
}

/// A TCP proxy to the machine's PostgreSQL that can be frozen: it then
/// stops moving bytes and holds every connection open (a black-holed
/// network path: no RST, no FIN, ever).
struct Proxy {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Milliseconds by which the server's answers are held back.
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Proxy {
    fn start() -> Proxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = Arc::clone(&frozen);
        let delay_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let d = Arc::clone(&delay_ms);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let Ok(down) = conn else { continue };
                if f.load(Ordering::SeqCst) {
                    held.push(down); // accepted, never answered
                    continue;
                }
                let Ok(up) = std::net::TcpStream::connect("127.0.0.1:5432") else {
                    continue;
                };
                for (from, to, delayed) in [
                    (down.try_clone(), up.try_clone(), None),
                    (Ok(up), Ok(down), Some(Arc::clone(&d))),
                ] {
                    let (Ok(from), Ok(to)) = (from, to) else {
                        continue;
                    };
                    let f = Arc::clone(&f);
                    std::thread::spawn(move || pump(from, to, &f, delayed.as_deref()));
                }
            }
        });
        Proxy {
            port,
            frozen,
            delay_ms,
        }
    }

    /// Holds every answer of the server back by `d` from now on.
    fn delay(&self, d: Duration) {
        let ms = u64::try_from(d.as_millis()).unwrap();
        self.delay_ms.store(ms, std::sync::atomic::Ordering::SeqCst);
    }

    fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn pump(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    frozen: &std::sync::atomic::AtomicBool,
    delay_ms: Option<&std::sync::atomic::AtomicU64>,
) {
    use std::io::{Read, Write};
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 16384];
    loop {
        if frozen.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                return;
            }
            Ok(n) => {
                let delay = delay_ms.map_or(0, |d| d.load(std::sync::atomic::Ordering::SeqCst));
                std::thread::sleep(Duration::from_millis(delay));
                if frozen.load(std::sync::atomic::Ordering::SeqCst)
                    || to.write_all(&buf[..n]).is_err()
                {
                    continue; // black hole: the bytes go nowhere
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// Fault 7: the network path to the database black-holed while the
/// command runs. `baton run` stopped its command in time, then hung in its
/// release for as long as the stall lasted; now every step of the release
/// (and a new session's connection) is bounded, and it exits 76.
#[test]
fn a_black_holed_database_ends_the_run_with_76_in_bounded_time() {
    let db = TestDb::new();
    let proxy = Proxy::start();
    let url = db.url().replace(":5432/", &format!(":{}/", proxy.port));
    let env = Env::new();
    let holder = spawn_on(
        &env,
        &url,
        &[
            "run",
            "--grace",
            "1s",
            "--lock",
            "k",
            "--",
            "sh",
            "-c",
            "touch started; exec sleep 600",
        ],
        Stdio::piped(),
    );
    let started = env.path("started");
    wait_until(Duration::from_secs(30), || started.exists());
    proxy.freeze();
    let frozen = Instant::now();
    let out = finish(holder, Duration::from_secs(60));
    let waited = frozen.elapsed();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!(
        "network black-holed -> baton run exited {} after {waited:?}: {err:?}",
        code(&out)
    );
    assert_eq!(code(&out), 76, "{err}");
    assert!(waited < Duration::from_secs(45), "took {waited:?}");
}

/// Fault 8: a waiter whose session is ended while it waits (as in a fast
/// restart of the server: "terminating connection due to administrator
/// command") used to exit 125 at once; with a wait budget it reconnects
/// with backoff and waits on, saying so once on stderr, then runs.
#[test]
fn a_waiter_waits_on_through_a_lost_session() {
    waiter_waits_on_through_a_lost_session(&["--lock", "k"]);
}

/// Fault 3: host A's supervisor is stalled (SIGSTOP) *and* cut off from
/// the database (its path black-holed); the server ends its session (as
/// its keepalives would; here at once) and host B takes the lock after the
/// settle wait. A's command, which used to run beside B's until A resumed,
/// is stopped by its guardian first.
#[test]
fn a_stalled_and_cut_off_supervisor_is_fenced_before_another_host_takes_over() {
    let db = TestDb::new();
    let proxy = Proxy::start();
    let mut a = Host::new("host-a", &db);
    a.url = db.url().replace(":5432/", &format!(":{}/", proxy.port));
    let b = Host::new("host-b", &db);
    let (holder, ticker, log) = a.start_ticking(&["run", "--grace", "1s", "--lock", "k"]);
    kill(holder.id() as i32, libc::SIGSTOP);
    proxy.freeze();
    let ended = db.query(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
         AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    assert_eq!(ended.len(), 1, "A's session was ended");
    let stalled = Instant::now();
    let out = b.output(&["run", "--lock", "k", "--", "sh", "-c", &one_tick("B", &log)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    eprintln!(
        "A stalled and cut off -> B's run done: {:?}",
        stalled.elapsed()
    );
    assert!(!running(ticker), "A's command still runs after B ran");
    kill(holder.id() as i32, libc::SIGCONT);
    let out = finish(holder, Duration::from_secs(60));
    eprintln!(
        "A after SIGCONT: exit {}, stderr {:?}",
        code(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(code(&out), 76);
    assert_a_before_b(&log);
}

/// Found by a hostile review: an ending backend releases its advisory
/// locks before it leaves `pg_stat_activity`, and a waiter woken by that
/// release was granted at once (the holder's row still read as a live
/// session's), skipping the wait for the old command to stop. A holder row
/// whose session is alive but holds no advisory lock is such a session: a
/// new holder must treat it as ended and wait for its command (here the
/// row is another host's, so at most the settle wait: `--wait 2s` ends
/// busy). Also: a database at schema version 1 is upgraded in place.
#[test]
fn a_holder_row_whose_session_no_longer_holds_its_lock_is_waited_for() {
    let db = TestDb::new();
    let env = Env::new();
    let url = db.url();
    let out = env.run(&["--backend", url.as_str(), "db", "migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The database as version 1 left it, then upgraded by the next use.
    db.query("DROP FUNCTION baton_holder_live(integer, timestamptz) CASCADE");
    db.query("DROP TABLE baton_group_order");
    db.query(
        "DROP FUNCTION baton_grant(integer, integer, integer, text, text, integer, text, text, \
         text, jsonb, boolean)",
    );
    db.query("DROP TABLE baton_lock_outcomes");
    db.query("UPDATE baton_lock_schema SET version = 1");
    let out = env.run(&[
        "--backend",
        url.as_str(),
        "run",
        "--lock",
        "k",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        db.scalar("SELECT version FROM baton_lock_schema"),
        Some("5".into())
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM baton_group_order"),
        Some("0".into()),
        "version 3's table was added"
    );
    assert_eq!(
        db.scalar("SELECT outcome FROM baton_lock_outcomes"),
        Some("released".into()),
        "version 4's table was added, and the run left its outcome"
    );

    // A live session that holds nothing, named by a holder row of host-x.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (pid_tx, pid_rx) = std::sync::mpsc::channel::<i32>();
    let conn = format!(
        "host=127.0.0.1 port=5432 user=postgres dbname={} connect_timeout=5",
        db.name
    );
    let idle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            let row = client
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .unwrap();
            pid_tx.send(row.get(0)).unwrap();
            let _ = tokio::task::spawn_blocking(move || rx.recv()).await;
        });
    });
    let pid = pid_rx.recv().unwrap();
    db.query(&format!(
        "INSERT INTO baton_lock_holders (lock_id, token, slot, mode, slots, session_pid, \
         session_start, host, pid, owner, operation, run_id, record) \
         SELECT id, token + 100, 0, 'exclusive', 1, {pid}, \
         (SELECT backend_start FROM pg_stat_activity WHERE pid = {pid}), 'host-x', 4242, \
         'o', 'op', 'r', '{{\"pid\": 4242, \"start_time\": 1, \"boot_id\": \"b\", \
         \"host\": \"host-x\", \"owner\": \"o\", \"run_id\": \"r\", \"acquired_at\": \"t\", \
         \"token\": 1, \"mode\": \"exclusive\"}}'::jsonb FROM baton_locks WHERE name = 'k'"
    ));
    let started = Instant::now();
    let out = env.run(&[
        "--backend",
        url.as_str(),
        "run",
        "--wait",
        "2s",
        "--lock",
        "k",
        "--",
        "true",
    ]);
    eprintln!(
        "acquire beside a lock-less holder row: exit {} after {:?}",
        code(&out),
        started.elapsed()
    );
    assert_eq!(
        code(&out),
        75,
        "granted beside an ended holder's row: {}",
        stderr(&out)
    );
    tx.send(()).unwrap();
    idle.join().unwrap();
}

/// Found by a hostile review: a process that forks and exits in a loop
/// (its pid changes all the time, its process group does not) survived the
/// guardian's scan of /proc after `kill -9` of its supervisor. One atomic
/// kill of the group now ends it.
#[test]
fn a_pid_hopping_child_dies_with_its_supervisor() {
    let db = TestDb::new();
    let a = Host::new("host-a", &db);
    let log = a.env.path("hops");
    let hopper = format!(
        "/usr/bin/python3 -c 'import os, time\nlast = 0\nwhile True:\n    if os.fork():\n        os._exit(0)\n    now = time.monotonic_ns()\n    if now - last > 100000000:\n        open(\"{}\", \"a\").write(\"%d\\n\" % now)\n        last = now' & sleep 1000",
        log.display()
    );
    let pgid_file = a.env.path("pgid");
    let hopper = format!("echo $$ > {}; {hopper}", pgid_file.display());
    let holder = a.spawn(&["run", "--lock", "k", "--", "sh", "-c", &hopper]);
    // Should this test fail, the hopper must not outlive it.
    struct KillGroup(i32);
    impl Drop for KillGroup {
        fn drop(&mut self) {
            kill(-self.0, libc::SIGKILL);
        }
    }
    let _cleanup = KillGroup(read_pid(&pgid_file));
    let count = || {
        std::fs::read_to_string(&log)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    wait_until(Duration::from_secs(30), || count() >= 10);
    kill(holder.id() as i32, libc::SIGKILL);
    let _ = finish(holder, Duration::from_secs(10));
    // Gone: no new hop for a whole second, within 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let before = count();
        std::thread::sleep(Duration::from_secs(1));
        if count() == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the hopper still runs 10 s after its supervisor died"
        );
    }
}

/// Found by a hostile review: a database that answers every heartbeat in
/// 2.6 s (slow, but within the limit: the session is fine) got the command
/// fenced, because the next heartbeat waited 2 s after each slow answer.
/// Heartbeats now keep a fixed cadence: a slow, live database fences
/// nothing.
#[test]
fn a_slow_but_live_database_does_not_fence_the_command() {
    let db = TestDb::new();
    let proxy = Proxy::start();
    let url = db.url().replace(":5432/", &format!(":{}/", proxy.port));
    let env = Env::new();
    let started = env.path("started");
    let script = format!("touch {}; sleep 12", started.display());
    let holder = spawn_on(
        &env,
        &url,
        &["run", "--lock", "k", "--", "sh", "-c", &script],
        Stdio::piped(),
    );
    wait_until(Duration::from_secs(30), || started.exists());
    proxy.delay(Duration::from_millis(2600));
    let out = finish(holder, Duration::from_secs(90));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("slow database: exit {}, stderr {err:?}", code(&out));
    assert_eq!(code(&out), 0, "{err}");
}

/// Found by a hostile review: a group run waiting for its `--lock` whose
/// group slot's session ended exited 79 ("superseded") without a word;
/// nobody superseded it: it lost its slot, exit 76 with the reason.
#[test]
fn a_group_run_that_loses_its_slot_while_waiting_for_its_lock_exits_76() {
    let db = TestDb::new();
    let env = Env::new();
    let url = db.url();
    let held = env.path("held");
    let go = env.path("go");
    let holder_script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        go.display()
    );
    let holder = spawn_on(
        &env,
        &url,
        &["run", "--lock", "lx", "--", "sh", "-c", &holder_script],
        Stdio::null(),
    );
    wait_until(Duration::from_secs(30), || held.exists());
    let waiter = spawn_on(
        &env,
        &url,
        &["run", "--group", "gx", "--lock", "lx", "--", "true"],
        Stdio::piped(),
    );
    wait_until(Duration::from_secs(30), || {
        // This test's database only: other tests wait for locks too.
        db.scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .is_some_and(|n| n != "0")
    });
    let ended = db.query("SELECT pg_terminate_backend(session_pid) FROM baton_group_runs");
    assert_eq!(ended.len(), 1, "the group slot's session was ended");
    let out = finish(waiter, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("waiter: exit {}, stderr {err:?}", code(&out));
    assert_eq!(code(&out), 76, "{err}");
    assert!(err.contains("gx"), "{err}");
    std::fs::write(&go, "").unwrap();
    assert_eq!(code(&finish(holder, Duration::from_secs(30))), 0);
}

/// Found by a hostile review: a guardian killed during the run went
/// unnoticed, and the command ran on unguarded (then outlived its
/// supervisor's `kill -9` beside the next host's holder). The supervisor
/// now watches its guardian: the command is stopped and the run fails
/// (125), saying why.
#[test]
fn a_killed_guardian_stops_the_command() {
    let db = TestDb::new();
    let a = Host::new("host-a", &db);
    let (holder, ticker, _log) = a.start_ticking(&["run", "--grace", "1s", "--lock", "k"]);
    let children = std::fs::read_to_string(format!(
        "/proc/{pid}/task/{pid}/children",
        pid = holder.id()
    ))
    .unwrap();
    let guardian = children
        .split_whitespace()
        .map(|p| p.parse::<i32>().unwrap())
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__baton-guard"))
        })
        .expect("the run's guardian");
    kill(guardian, libc::SIGKILL);
    let out = finish(holder, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("guardian killed: exit {}, stderr {err:?}", code(&out));
    assert_eq!(code(&out), 125, "{err}");
    assert!(err.contains("guardian died"), "{err}");
    wait_until(Duration::from_secs(10), || !running(ticker));
}

/// Fault 8, for groups (found by a hostile review): a run waiting for its
/// group's slot whose session is ended (as in a restart of the server) used
/// to exit 125; it joins again on a new session and waits on, saying so
/// once, then runs.
#[test]
fn a_group_waiter_waits_on_through_a_lost_session() {
    waiter_waits_on_through_a_lost_session(&["--group", "gz"]);
}

/// A waiter (`baton run TARGET -- ...`, TARGET the same `--lock` or
/// `--group` as a holder's) whose waiting session is terminated waits on,
/// on a new session, says so once on stderr, and runs once the holder ends.
fn waiter_waits_on_through_a_lost_session(target: &[&str]) {
    let db = TestDb::new();
    let env = Env::new();
    let url = db.url();
    let (held, go, log) = (env.path("held"), env.path("go"), env.path("log"));
    let hold = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        go.display()
    );
    let spawn = |script: &str, stderr: Stdio| {
        let mut args = vec!["run", "--wait", "60s"];
        args.extend_from_slice(target);
        args.extend(["--", "sh", "-c", script]);
        spawn_on(&env, &url, &args, stderr)
    };
    let holder = spawn(&hold, Stdio::null());
    wait_until(Duration::from_secs(30), || held.exists());
    let waiter = spawn(&format!("echo ran >> {}", log.display()), Stdio::piped());
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    wait_until(Duration::from_secs(30), || {
        db.scalar(waiting).is_some_and(|n| n == "1")
    });
    let ended = db.query(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
         AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    );
    assert_eq!(ended.len(), 1, "the waiter's session was terminated");
    // It waits again, on a new session.
    wait_until(Duration::from_secs(30), || {
        db.scalar(waiting).is_some_and(|n| n == "1")
    });
    assert!(!log.exists(), "the waiter ran while the holder held");
    std::fs::write(&go, "").unwrap();
    let out = finish(waiter, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("waiter: exit {}, stderr {err:?}", code(&out));
    assert_eq!(code(&out), 0, "{err}");
    assert_eq!(err.lines().count(), 1, "told once: {err:?}");
    assert!(err.contains("reconnecting"), "{err}");
    assert!(log.exists(), "the waiter's command ran");
    assert_eq!(code(&finish(holder, Duration::from_secs(30))), 0);
}

/// `lock acquire` on host A: a script holds the lock through the background
/// holder, and its work runs in a child. The holder is SIGKILLed: its
/// session ends, and host B takes over after the settle wait. The script
/// and its child used to run on beside B's holder (the README listed it as
/// a known limit); now the holder's guardian kills them at once.
#[test]
fn sigkill_of_a_background_holder_stops_its_script_before_another_host_takes_over() {
    let db = TestDb::new();
    let (a, b) = (Host::new("host-a", &db), Host::new("host-b", &db));
    let (log, pidfile, report) = (
        a.env.path("log"),
        a.env.path("ticker.pid"),
        a.env.path("held.json"),
    );
    let script = format!(
        "T=$('{baton}' --dir '{dir}' --backend '{url}' lock acquire k --json) || exit 1\n\
         echo \"$T\" > '{report}.tmp' && mv '{report}.tmp' '{report}'\n{ticking}",
        baton = env!("CARGO_BIN_EXE_baton"),
        dir = a.env.dir.display(),
        url = a.url,
        report = report.display(),
        ticking = ticking("A", &log, &pidfile),
    );
    let mut holder_script = Command::new("unshare")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", a.env.tmp.path())
        .current_dir(a.env.tmp.path())
        .args(["--uts", "--", "sh", "-c"])
        .arg(format!("hostname {} && exec sh -c \"$0\"", a.name))
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ticker = read_pid(&pidfile);
    wait_until(Duration::from_secs(30), || ticks(&log, "A").len() >= 3);
    let held: serde_json::Value = serde_json::from_str(&common::wait_for_file(&report)).unwrap();
    let holder = i32::try_from(held["holder_pid"].as_i64().unwrap()).unwrap();

    let killed = Instant::now();
    kill(holder, libc::SIGKILL);
    wait_until(Duration::from_secs(10), || !running(ticker));
    eprintln!(
        "SIGKILL of the background holder -> the script's child gone: {:?}",
        killed.elapsed()
    );
    assert!(!holder_script.wait().unwrap().success());

    let out = b.output(&["run", "--lock", "k", "--", "sh", "-c", &one_tick("B", &log)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_a_before_b(&log);
}
