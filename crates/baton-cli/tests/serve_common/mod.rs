#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
//! A real `baton serve` on 127.0.0.1 (port 0) in a temp dir, and a small
//! HTTP client for the tests of the job service.

#![allow(dead_code)] // each test file uses a different subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A service and its temp dir (baton dir `<tmp>/baton`, config `<tmp>/serve.toml`).
pub struct Server {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub addr: String,
    pub child: Option<Child>,
    pub extra: Vec<String>,
    stdout: Option<BufReader<ChildStdout>>,
    agent: ureq::Agent,
    pub token: Option<String>,
}

impl Server {
    /// Writes `config` (TOML; `{tmp}` stands for the server's temp dir) and starts `baton serve --config it --listen 127.0.0.1:0 EXTRA`.
    pub fn start(config: &str, extra: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("baton");
        let path = tmp.path().join("serve.toml");
        let config = config.replace("{tmp}", tmp.path().to_str().expect("utf-8 temp dir"));
        std::fs::write(&path, config).expect("write config");
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let mut s = Server {
            tmp,
            dir,
            config: path,
            addr: String::new(),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            stdout: None,
            agent,
            token: None,
        };
        s.spawn();
        s
    }

    /// `baton --dir <dir> ARGS` with a cleared environment (HOME in the temp dir).
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

    /// Starts the service process (again, after a kill) on a new port.
    pub fn spawn(&mut self) {
        let config = self.config.display().to_string();
        let mut args = vec!["serve", "--config", config.as_str()];
        if !self.extra.iter().any(|a| a == "--listen") {
            args.extend(["--listen", "127.0.0.1:0"]);
        }
        let extra = self.extra.clone();
        args.extend(extra.iter().map(String::as_str));
        let mut child = self
            .baton(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn baton serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("read the listening line");
        let addr = line
            .trim()
            .strip_prefix("baton serve: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line from baton serve: {line:?}"))
            .to_string();
        self.addr = addr;
        self.child = Some(child);
        self.stdout = Some(out);
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    fn auth<B>(&self, mut r: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        if let Some(t) = &self.token {
            r = r.header("Authorization", &format!("Bearer {t}"));
        }
        r
    }

    fn parse(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
        let mut resp = resp.expect("HTTP request");
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, v)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        Self::parse(self.auth(self.agent.get(&self.url(path))).call())
    }

    pub fn get_text(&self, path: &str) -> (u16, String) {
        let mut resp = self
            .auth(self.agent.get(&self.url(path)))
            .call()
            .expect("HTTP request");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        Self::parse(self.auth(self.agent.post(&self.url(path))).send_json(body))
    }

    pub fn post_raw(&self, path: &str, body: &[u8]) -> (u16, Value) {
        Self::parse(
            self.auth(self.agent.post(&self.url(path)))
                .header("Content-Type", "application/json")
                .send(body),
        )
    }

    pub fn delete(&self, path: &str) -> (u16, Value) {
        Self::parse(self.auth(self.agent.delete(&self.url(path))).call())
    }

    /// `POST /v1/jobs/{id}/cancel`.
    pub fn cancel(&self, id: &str) -> (u16, Value) {
        self.post(&format!("/v1/jobs/{id}/cancel"), &serde_json::json!({}))
    }

    /// Submits a job; panics unless 202. Returns its id.
    pub fn submit(&self, body: Value) -> String {
        let (code, v) = self.post("/v1/jobs", &body);
        assert_eq!(code, 202, "submit {body}: {v}");
        v["id"].as_str().expect("id").to_string()
    }

    pub fn job(&self, id: &str) -> Value {
        let (code, v) = self.get(&format!("/v1/jobs/{id}"));
        assert_eq!(code, 200, "job {id}: {v}");
        v
    }

    /// Polls the job until `cond` holds (at most `limit`).
    pub fn wait_job(&self, id: &str, limit: Duration, cond: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let v = self.job(id);
            if cond(&v) {
                return v;
            }
            assert!(start.elapsed() < limit, "job {id} never got there: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the job has ended.
    pub fn wait_final(&self, id: &str) -> Value {
        self.wait_job(id, Duration::from_secs(60), |v| {
            !matches!(v["status"].as_str(), Some("queued" | "running"))
        })
    }

    /// SIGKILL of the service, reaped.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stdout = None;
    }

    /// SIGTERM; returns how the service exited (at most `limit`).
    pub fn term(&mut self, limit: Duration) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_raw(c.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let start = Instant::now();
        loop {
            if let Some(st) = c.try_wait().expect("wait") {
                return st;
            }
            assert!(
                start.elapsed() < limit,
                "baton serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The server's temp dir as a string.
    pub fn tmp(&self) -> String {
        self.tmp.path().display().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Reads a file written by a job, waiting for it (at most 30 s).
pub fn wait_for_file(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.is_empty() {
                return s;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` exists (and is not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Waits (at most 60 s) until process `pid` is gone.
pub fn wait_until_gone(pid: i32) {
    let start = Instant::now();
    while alive(pid) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "pid {pid} is still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A config whose default template `sh` runs its prompt as a shell script
/// (grace 1 s), with `extra` settings.
pub fn sh_config(extra: &str) -> String {
    format!(
        r#"
default_template = "sh"
grace = "1s"
{extra}
[templates.sh]
command = ["sh", "-c", "{{prompt}}"]
"#
    )
}

/// The node id a server recorded in its baton dir (`serve/node-id`).
pub fn node_id(s: &Server) -> String {
    std::fs::read_to_string(s.dir.join("serve").join("node-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// A script that starts a background child in its process group, records
/// both pids (`{t}/NAME.pid`, `{t}/NAME.bg`) and waits for it; with
/// `stubborn`, both ignore SIGTERM.
pub fn lingering(t: &str, name: &str, stubborn: bool) -> String {
    let trap = if stubborn { "trap '' TERM; " } else { "" };
    format!("{trap}echo $$ > {t}/{name}.pid; sleep 300 & echo $! > {t}/{name}.bg; wait")
}

/// The pids a [`lingering`] job recorded (waiting for them).
pub fn pids(t: &str, name: &str) -> Vec<i32> {
    ["pid", "bg"]
        .iter()
        .map(|ext| {
            wait_for_file(Path::new(&format!("{t}/{name}.{ext}")))
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

/// A tmpfs mounted at a path for as long as it lives.
pub struct Mounted(PathBuf);

impl Mounted {
    pub fn tmpfs(at: &Path, size: &str) -> Mounted {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(at)
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs at {} (the test needs root): {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Mounted(at.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `git ARGS` in `dir`, with `home` as HOME and its `.gitconfig` only (never
/// the user's); panics unless it succeeds. Its stdout, trimmed.
pub fn git(home: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", home.join(".gitconfig"))
        .env("GIT_AUTHOR_NAME", "Agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.com")
        .env("GIT_COMMITTER_NAME", "Agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Git's configuration for `home` (also the service's HOME: no automatic
/// maintenance, which would detach into its own session).
pub fn gitconfig(home: &Path) {
    std::fs::write(
        home.join(".gitconfig"),
        "[init]\n\tdefaultBranch = main\n[maintenance]\n\tauto = false\n[gc]\n\tauto = 0\n",
    )
    .unwrap();
}
