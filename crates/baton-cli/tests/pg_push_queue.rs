#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Issue 36, item 6: `baton git push` from separate machines. Each machine
//! queues pushes to a network remote in its own per-user baton dir, so
//! pushers on different machines raced into the retry limit even with
//! `BATON_BACKEND` set. With a backend the queue is on the database: 20
//! pushers on 20 simulated machines (each its own clone, baton dir and
//! per-user temp dir), a real `git daemon` remote, all at once, each allowed
//! one push attempt: every one lands, since each waits its turn and catches
//! up before it pushes.

use crate::pg_common::TestDb;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PUSHERS: usize = 20;

fn git(home: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", home.join("gitconfig"))
        .env("GIT_AUTHOR_NAME", "Agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.com")
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `git daemon` serving `root` (pushes allowed) on a free local port.
struct Daemon {
    child: Child,
    url: String,
}

impl Daemon {
    fn start(root: &Path) -> Daemon {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", root.display()),
                &root.display().to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon {
            child,
            url: format!("git://127.0.0.1:{port}/remote.git"),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Machine `n`: its own clone, baton dir and per-user temp dir.
struct Machine {
    clone: PathBuf,
    dir: PathBuf,
    tmp: PathBuf,
}

fn push(home: &Path, m: &Machine, backend: Option<&str>) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TMPDIR", &m.tmp)
        .env("BATON_DIR", &m.dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", home.join("gitconfig"))
        .env("GIT_AUTHOR_NAME", "Agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.com")
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.com")
        .current_dir(&m.clone)
        .args(["git", "push", "--attempts", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(url) = backend {
        c.env("BATON_BACKEND", url);
    }
    c.spawn().unwrap()
}

#[test]
fn pushers_on_separate_machines_queue_on_the_backend_and_all_land() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    std::fs::write(
        home.join("gitconfig"),
        "[init]\n\tdefaultBranch = main\n[maintenance]\n\tauto = false\n[gc]\n\tauto = 0\n",
    )
    .unwrap();
    git(home, home, &["init", "-q", "--bare", "remote.git"]);
    let seed = home.join("seed");
    git(home, home, &["init", "-q", "seed"]);
    std::fs::write(seed.join("README"), "seed\n").unwrap();
    git(home, &seed, &["add", "."]);
    git(home, &seed, &["commit", "-qm", "seed"]);
    let remote = home.join("remote.git");
    git(
        home,
        &seed,
        &["push", "-q", remote.to_str().unwrap(), "main"],
    );
    let daemon = Daemon::start(home);
    let db = TestDb::new();
    let url = db.url();

    let machines: Vec<Machine> = (0..PUSHERS)
        .map(|n| {
            let m = Machine {
                clone: home.join(format!("m{n}/clone")),
                dir: home.join(format!("m{n}/baton")),
                tmp: home.join(format!("m{n}/tmp")),
            };
            std::fs::create_dir_all(&m.tmp).unwrap();
            git(
                home,
                home,
                &["clone", "-q", &daemon.url, m.clone.to_str().unwrap()],
            );
            std::fs::write(m.clone.join(format!("f{n}.txt")), format!("{n}\n")).unwrap();
            git(home, &m.clone, &["add", "."]);
            git(home, &m.clone, &["commit", "-qm", &format!("commit {n}")]);
            m
        })
        .collect();

    let pushers: Vec<Child> = machines.iter().map(|m| push(home, m, Some(&url))).collect();
    let outs: Vec<Output> = pushers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let failed: Vec<String> = outs
        .iter()
        .filter(|o| !o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {PUSHERS} pushes did not land: {failed:?}",
        failed.len()
    );
    let log = git(home, &remote, &["log", "--format=%s", "main"]);
    for n in 0..PUSHERS {
        assert!(
            log.lines().any(|l| l == format!("commit {n}")),
            "commit {n} is not on the remote: {log}"
        );
    }
    assert_eq!(log.lines().count(), PUSHERS + 1, "{log}");
}
