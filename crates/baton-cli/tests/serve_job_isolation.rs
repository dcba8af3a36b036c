#![cfg(target_os = "linux")] // setpriv, prlimit, the spawner thread of the asynchronous supervisor
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Regression tests from the hostile review of the job service's speed
//! work (issue 24), each against a real `baton serve` running real
//! commands. The service runs as user 65534 (`setpriv`): the limits and
//! permissions tested here do not bind root. The tests themselves must run
//! as root, as CI does, to start it so.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const NOBODY: u32 = 65534;

/// `baton serve` as user 65534 on `dir` (owned by that user) with the
/// config `serve.toml` there and `env`; its address.
struct Nobody {
    child: Child,
    addr: String,
    agent: ureq::Agent,
}

impl Nobody {
    /// Starts it, with at most `nproc` processes of its user (soft limit:
    /// the user's processes and threads it may start more beside).
    fn start(dir: &Path, config: &str, env: &[(&str, &str)], nproc: Option<u32>) -> Nobody {
        std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).expect("chown (needs root)");
        let config_path = dir.join("serve.toml");
        std::fs::write(&config_path, config).unwrap();
        std::os::unix::fs::chown(&config_path, Some(NOBODY), Some(NOBODY)).unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        if let Some(n) = nproc {
            c.arg("prlimit").arg(format!("--nproc={n}:")).arg("--");
        }
        c.arg(env!("CARGO_BIN_EXE_baton"))
            .arg("--dir")
            .arg(dir.join("baton"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config_path)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = c.spawn().expect("spawn setpriv baton serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("baton serve: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line from baton serve: {line:?}"))
            .to_string();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Nobody { child, addr, agent }
    }

    /// Submits `body` (with `token`), waits for its end; the job.
    fn run(&self, body: Value, token: Option<&str>) -> Value {
        let auth = format!("Bearer {}", token.unwrap_or(""));
        let mut resp = self
            .agent
            .post(format!("http://{}/v1/jobs", self.addr))
            .header("Authorization", &auth)
            .send_json(&body)
            .expect("submit");
        assert_eq!(resp.status().as_u16(), 202, "submit {body}");
        let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        let start = Instant::now();
        loop {
            let mut resp = self
                .agent
                .get(format!("http://{}/v1/jobs/{id}", self.addr))
                .header("Authorization", &auth)
                .call()
                .expect("get the job");
            let j: Value =
                serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
            if !matches!(j["status"].as_str(), Some("queued" | "running")) {
                return j;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "job {id} never ended: {j}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nobody {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Processes of user 65534 that keep it at its process limit until
/// released: a shell and its sleeping children.
struct Filler {
    shell: Child,
    dir: tempfile::TempDir,
}

impl Filler {
    /// Starts `n` processes of user 65534 and waits until they run.
    fn start(n: usize) -> Filler {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        let script = format!(
            "for i in $(seq {n}); do sleep 120 & echo $! >> pids; done; echo ready > ready; wait"
        );
        let shell = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "sh",
                "-c",
            ])
            .arg(script)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the filler");
        let start = Instant::now();
        while !dir.path().join("ready").exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the filler never got ready"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Filler { shell, dir }
    }

    /// Kills the sleeping children (their shell reaps them), then reaps
    /// the shell: nothing is left counted against the user.
    fn release(mut self) {
        let pids = std::fs::read_to_string(self.dir.path().join("pids")).unwrap();
        for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        self.shell.wait().unwrap();
    }
}

/// The spawner thread of plain jobs is started by the first plain job. Its
/// start failing once (here: the service's user at its process limit, as a
/// job that forks too much can make it) made every later plain job fail
/// with "could not start the spawner thread" until a restart: the failure
/// was kept for good. A later job must start once threads can again.
#[test]
fn a_spawner_thread_that_could_not_start_once_is_started_by_the_next_job() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Nobody::start(
        tmp.path(),
        "default_template = \"sh\"\n[templates.sh]\ncommand = [\"sh\", \"-c\", \"{prompt}\"]\n",
        &[],
        Some(30),
    );
    let filler = Filler::start(40);
    let j = s.run(json!({"prompt": "echo first"}), None);
    assert_eq!(j["status"], "failed", "the limit did not hold: {j}");
    filler.release();
    let j = s.run(json!({"prompt": "echo second"}), None);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert_eq!(j["output"], "second\n", "{j}");
}

/// The service's token and another template's secret, in the service's
/// environment, must not reach a job. A job gets a clean environment, but
/// it ran as the service's user and read them in `/proc/<service>/environ`
/// (its parent's), readable by every process of that user.
#[test]
fn a_job_cannot_read_the_services_secrets_in_its_proc_environ() {
    let tmp = tempfile::tempdir().unwrap();
    let config = r#"
default_template = "sh"
[templates.sh]
command = ["sh", "-c", "{prompt}"]
[templates.other]
command = ["true"]
env = { API_KEY = "${OTHER_SECRET}" }
"#;
    let token = "tok-0123456789";
    let s = Nobody::start(
        tmp.path(),
        config,
        &[
            ("BATON_SERVE_TOKEN", token),
            ("OTHER_SECRET", "other-0123456789"),
        ],
        None,
    );
    let j = s.run(
        json!({"prompt": "id -u; tr '\\0' '\\n' < /proc/$PPID/environ; echo read=$?"}),
        Some(token),
    );
    let out = j["output"].as_str().unwrap();
    assert!(out.starts_with("65534\n"), "{j}");
    assert!(out.contains("read="), "{j}");
    assert!(
        !out.contains("0123456789"),
        "a job read the service's secrets: {out}"
    );
}
