#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! Shared helpers: a clean environment per test and the real `baton` binary.

#![allow(dead_code)] // each test file uses a different subset

pub mod ns;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A fresh temp directory with a baton dir path inside it (not yet created).
pub struct Env {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("baton");
        Env { tmp, dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `baton --dir <dir> ARGS` with a cleared environment.
    pub fn baton(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path())
            .current_dir(self.tmp.path())
            .arg("--dir")
            .arg(&self.dir)
            .args(args);
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.baton(args)
            .stdin(Stdio::null())
            .output()
            .expect("run baton")
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.baton(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baton")
    }

    /// `baton lock status NAME --json`, parsed.
    pub fn status(&self, name: &str) -> serde_json::Value {
        let out = self.run(&["lock", "status", name, "--json"]);
        assert!(out.status.success(), "status failed: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// Waits until `name` has `n` waiters.
    pub fn wait_for_waiters(&self, name: &str, n: u64) {
        wait_until(Duration::from_secs(20), || {
            self.status(name)["waiters"] == n
        });
    }

    /// Waits until `name` is held (or free).
    pub fn wait_for_held(&self, name: &str, held: bool) {
        wait_until(Duration::from_secs(20), || {
            self.status(name)["held"] == held
        });
    }
}

/// `sh -c SCRIPT` with a cleared environment (PATH kept, HOME = `home`),
/// for scripts that run baton themselves.
pub fn shell(home: &Path, script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .stdin(Stdio::null());
    c
}

/// Runs `sh -c SCRIPT` (see [`shell`]), which must succeed, and returns the
/// first JSON value it printed (`lock acquire --json && lock release`
/// prints the acquire's object first).
pub fn first_json_of(home: &Path, script: &str) -> serde_json::Value {
    let out = shell(home, script).output().expect("run sh");
    assert_eq!(code(&out), 0, "{script}: {}", stderr(&out));
    serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<serde_json::Value>()
        .next()
        .expect("a JSON value")
        .expect("valid JSON")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `cond` every few milliseconds until it holds; panics after `limit`.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `path` exists and returns its content.
pub fn wait_for_file(path: &Path) -> String {
    wait_until(Duration::from_secs(20), || path.exists());
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until `path` holds a whole line (a shell's `echo $! > path` creates
/// the file before it writes the line), and returns the file's text.
pub fn wait_for_line(path: &Path) -> String {
    wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(path).is_ok_and(|t| t.ends_with('\n'))
    });
    std::fs::read_to_string(path).unwrap_or_default()
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// `git ARGS` in `dir` with a fixed identity and no global configuration;
/// panics (fails the test) unless it succeeds.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
}
