#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service's jobs under pressure: cancel (queued, running and
//! ignoring TERM, finished, unknown), a workspace per job from a real git
//! repository (setup hook, branch, origin, removal on every path), and
//! overload (429 with Retry-After, the queue-depth bound, every accepted
//! job finishing) — a real `baton serve` on 127.0.0.1.

use crate::serve_common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use serve_common::{alive, git, gitconfig, sh_config, wait_for_file, Server};

fn status(j: &Value) -> &str {
    j["status"].as_str().unwrap_or("")
}

fn read_pid(path: String) -> i32 {
    wait_for_file(Path::new(&path)).trim().parse().unwrap()
}

#[test]
fn cancel_queued_running_finished_and_unknown_jobs() {
    let s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    // Ignores TERM, and so does its background child: only KILL stops them.
    let stubborn = s.submit(json!({
        "prompt": format!("trap '' TERM; echo $$ > {t}/s.pid; sleep 300 & echo $! > {t}/s.bg; wait")
    }));
    let pids = [
        read_pid(format!("{t}/s.pid")),
        read_pid(format!("{t}/s.bg")),
    ];
    let queued = s.submit(json!({"prompt": format!("echo ran > {t}/q.ran")}));

    let (code, j) = s.cancel(&queued);
    assert_eq!(code, 200, "{j}");
    assert_eq!(status(&j), "cancelled", "{j}");
    assert_eq!(status(&s.job(&queued)), "cancelled");
    assert_eq!(status(&s.job(&stubborn)), "running");

    // TERM is ignored: KILL after grace; the cancel returns once it ended.
    let (code, j) = s.cancel(&stubborn);
    assert_eq!(code, 200, "{j}");
    assert_eq!(status(&j), "cancelled", "{j}");
    for p in pids {
        assert!(
            !alive(p),
            "process {p} of the cancelled job is still running"
        );
    }

    // FIFO: had the cancelled job been run, it would have run before this.
    let after = s.submit(json!({"prompt": "echo after"}));
    assert_eq!(status(&s.wait_final(&after)), "succeeded");
    assert!(
        !Path::new(&format!("{t}/q.ran")).exists(),
        "a cancelled queued job ran"
    );
    assert_eq!(status(&s.job(&queued)), "cancelled");

    let (code, j) = s.cancel(&after);
    assert_eq!(code, 409, "{j}");
    assert_eq!(j["error"]["code"], "already_finished", "{j}");
    let (code, j) = s.cancel(&stubborn);
    assert_eq!(code, 409, "{j}");
    let (code, j) = s.cancel("no-such-job");
    assert_eq!(code, 404, "{j}");
    let (_, h) = s.get("/health");
    assert_eq!(h["active"], 0, "{h}");
    assert_eq!(h["queued"], 0, "{h}");
}

/// `DELETE /v1/jobs/{id}` removes a job that has ended, record and output,
/// so that it is gone afterwards (a strict fuzzer's "use after free"; it
/// used to cancel, and the job was still there); a job that has not ended
/// is left alone (409, cancel it first). Issue 37, item 7.
#[test]
fn delete_removes_an_ended_job_and_refuses_one_still_running() {
    let s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let done = s.submit(json!({"prompt": "echo hello"}));
    assert_eq!(status(&s.wait_final(&done)), "succeeded");
    let files = s.dir.join("serve").join("jobs").join(&done);
    assert!(files.exists(), "no files at {}", files.display());
    let running = s.submit(json!({"prompt": format!("echo $$ > {t}/r.pid; sleep 300")}));
    read_pid(format!("{t}/r.pid"));

    let (code, j) = s.delete(&format!("/v1/jobs/{running}"));
    assert_eq!(code, 409, "{j}");
    assert_eq!(j["error"]["code"], "not_finished", "{j}");
    assert!(
        j["error"]["message"].as_str().unwrap().contains("/cancel"),
        "{j}"
    );
    assert_eq!(status(&s.job(&running)), "running");

    let (code, j) = s.delete(&format!("/v1/jobs/{done}"));
    assert_eq!(code, 204, "{j}");
    let (code, j) = s.get(&format!("/v1/jobs/{done}"));
    assert_eq!(code, 404, "a deleted job is still there: {j}");
    let (code, _) = s.get(&format!("/v1/jobs/{done}/log"));
    assert_eq!(code, 404);
    assert!(!files.exists(), "{} is left", files.display());
    let (code, j) = s.delete(&format!("/v1/jobs/{done}"));
    assert_eq!(code, 404, "{j}");

    let (code, j) = s.cancel(&running);
    assert_eq!((code, status(&j)), (200, "cancelled"), "{j}");
    let (code, j) = s.delete(&format!("/v1/jobs/{running}"));
    assert_eq!(code, 204, "{j}");
}

/// A bare remote with one commit on `main`, and a clone of it as the base,
/// in `root`; git never sees the user's configuration.
struct Repo {
    remote: PathBuf,
    base: PathBuf,
    /// `main` of the remote: one commit ahead of the base's `origin/main`.
    head: String,
}

impl Repo {
    fn new(root: &Path) -> Repo {
        gitconfig(root);
        let remote = root.join("remote.git");
        let base = root.join("base");
        git(root, root, &["init", "-q", "--bare", "remote.git"]);
        git(root, root, &["init", "-q", "base"]);
        std::fs::write(base.join("a.txt"), "one\n").unwrap();
        git(root, &base, &["add", "."]);
        git(root, &base, &["commit", "-qm", "init"]);
        git(
            root,
            &base,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        git(root, &base, &["push", "-q", "origin", "main"]);
        git(root, &base, &["fetch", "-q", "origin"]);
        // Someone pushes after the base was cloned: the base is stale.
        git(
            root,
            root,
            &["clone", "-q", remote.to_str().unwrap(), "other"],
        );
        let other = root.join("other");
        std::fs::write(other.join("b.txt"), "two\n").unwrap();
        git(root, &other, &["add", "."]);
        git(root, &other, &["commit", "-qm", "second"]);
        git(root, &other, &["push", "-q", "origin", "main"]);
        let head = git(root, &remote, &["rev-parse", "main"]);
        Repo { remote, base, head }
    }
}

fn ws_config(repo: &Repo) -> String {
    let base = repo.base.display();
    format!(
        r#"
default_template = "ws"
grace = "1s"
[templates.ws]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "30s", setup = ["sh", "-c", "pwd > setup.ran"] }}
[templates.badsetup]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "30s", setup = ["sh", "-c", "exit 7"] }}
"#
    )
}

/// A job that records, as `{t}/NAME.*`, its cwd, what the setup wrote,
/// its origin and its branch, then waits for `{t}/go` and exits `code`.
fn recording(t: &str, name: &str, code: i32) -> String {
    format!(
        "pwd > {t}/{name}.cwd; cat setup.ran > {t}/{name}.setup; \
         git remote get-url origin > {t}/{name}.origin; \
         git rev-parse HEAD > {t}/{name}.head; \
         git rev-parse --abbrev-ref HEAD > {t}/{name}.branch; \
         while [ ! -e {t}/go ]; do sleep 0.02; done; exit {code}"
    )
}

#[test]
fn each_job_runs_in_its_own_workspace_which_is_removed_afterwards() {
    let root = tempfile::tempdir().unwrap();
    let repo = Repo::new(root.path());
    let s = Server::start(&ws_config(&repo), &["--max-concurrency", "3"]);
    gitconfig(s.tmp.path());
    let t = s.tmp();
    let a = s.submit(json!({"prompt": recording(&t, "a", 0)}));
    let b = s.submit(json!({"prompt": recording(&t, "b", 3)}));
    let x =
        s.submit(json!({"prompt": recording(&t, "x", 0), "workspace": {"branch": "feature/x"}}));
    let mut cwds = Vec::new();
    for (id, name) in [(&a, "a"), (&b, "b"), (&x, "x")] {
        // All three run at once, each in its own workspace.
        let cwd = wait_for_file(Path::new(&format!("{t}/{name}.branch")));
        assert!(!cwd.is_empty());
        let cwd = PathBuf::from(
            std::fs::read_to_string(format!("{t}/{name}.cwd"))
                .unwrap()
                .trim(),
        );
        let j = s.wait_job(id, Duration::from_secs(30), |j| !j["workspace"].is_null());
        assert_eq!(status(&j), "running", "{j}");
        assert_eq!(
            Path::new(j["workspace"].as_str().unwrap())
                .canonicalize()
                .unwrap(),
            cwd.canonicalize().unwrap(),
            "{j}"
        );
        assert_ne!(
            cwd.canonicalize().unwrap(),
            repo.base.canonicalize().unwrap()
        );
        // The setup ran in the workspace, before the command.
        let setup = std::fs::read_to_string(format!("{t}/{name}.setup")).unwrap();
        assert_eq!(setup.trim(), cwd.display().to_string());
        let origin = std::fs::read_to_string(format!("{t}/{name}.origin")).unwrap();
        assert_eq!(origin.trim(), repo.remote.display().to_string());
        let branch = std::fs::read_to_string(format!("{t}/{name}.branch")).unwrap();
        // Detached at the refreshed origin/main, or on the branch asked for.
        let want = if name == "x" { "feature/x" } else { "HEAD" };
        assert_eq!(branch.trim(), want, "job {name}");
        let head = std::fs::read_to_string(format!("{t}/{name}.head")).unwrap();
        assert_eq!(
            head.trim(),
            repo.head,
            "job {name} did not start at the remote's main"
        );
        cwds.push(cwd);
    }
    cwds.sort();
    cwds.dedup();
    assert_eq!(cwds.len(), 3, "the jobs shared a workspace: {cwds:?}");

    std::fs::write(format!("{t}/go"), "").unwrap();
    assert_eq!(status(&s.wait_final(&a)), "succeeded");
    let j = s.wait_final(&b);
    assert_eq!(status(&j), "failed", "{j}");
    assert_eq!(j["exit_code"], 3, "{j}");
    assert_eq!(status(&s.wait_final(&x)), "succeeded");
    for cwd in &cwds {
        assert!(!cwd.exists(), "workspace {} was not removed", cwd.display());
    }
    // The base is untouched.
    assert_eq!(git(root.path(), &repo.base, &["status", "--porcelain"]), "");
}

#[test]
fn a_failing_setup_fails_the_job_without_running_its_command() {
    let root = tempfile::tempdir().unwrap();
    let repo = Repo::new(root.path());
    let s = Server::start(&ws_config(&repo), &[]);
    gitconfig(s.tmp.path());
    let t = s.tmp();
    let id = s.submit(json!({"template": "badsetup", "prompt": format!("echo ran > {t}/ran")}));
    let j = s.wait_final(&id);
    assert_eq!(status(&j), "failed", "{j}");
    assert!(j["error"].as_str().unwrap_or("").contains("setup"), "{j}");
    assert!(
        !Path::new(&format!("{t}/ran")).exists(),
        "the command ran after a failed setup"
    );
    if let Some(w) = j["workspace"].as_str() {
        assert!(!Path::new(w).exists(), "workspace {w} was not removed");
    }
    // Nothing is left under the baton dir's workspaces either.
    let out = s.baton(&["workspace", "list", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!listed.contains(&id), "workspace still listed: {listed}");
}

#[test]
fn overload_answers_202_or_429_never_exceeds_the_queue_depth_and_runs_every_accepted_job() {
    let s = Arc::new(Server::start(
        &sh_config(""),
        &["--max-concurrency", "2", "--max-queue-depth", "5"],
    ));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into();
    let done = Arc::new(AtomicBool::new(false));
    let max_seen = Arc::new(AtomicU64::new(0));
    let monitor = {
        let (s, done, max_seen) = (Arc::clone(&s), Arc::clone(&done), Arc::clone(&max_seen));
        std::thread::spawn(move || {
            let mut polls = 0u64;
            while !done.load(Ordering::SeqCst) {
                let (_, h) = s.get("/health");
                let n = h["active"].as_u64().unwrap() + h["queued"].as_u64().unwrap();
                max_seen.fetch_max(n, Ordering::SeqCst);
                polls += 1;
            }
            polls
        })
    };
    let url = s.url("/v1/jobs");
    let submitters: Vec<_> = (0..5)
        .map(|_| {
            let (agent, url) = (agent.clone(), url.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for _ in 0..10 {
                    let mut resp = agent
                        .post(&url)
                        .send_json(json!({"prompt": "sleep 0.1"}))
                        .unwrap();
                    let code = resp.status().as_u16();
                    let retry = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let body: Value = resp.body_mut().read_json().unwrap();
                    out.push((code, retry, body));
                }
                out
            })
        })
        .collect();
    let results: Vec<_> = submitters
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    done.store(true, Ordering::SeqCst);
    let polls = monitor.join().unwrap();
    assert!(polls > 0);
    assert!(
        max_seen.load(Ordering::SeqCst) <= 5,
        "active + queued reached {}",
        max_seen.load(Ordering::SeqCst)
    );

    let mut accepted = Vec::new();
    let mut refused = 0;
    for (code, retry, body) in &results {
        match code {
            202 => accepted.push(body["id"].as_str().unwrap().to_string()),
            429 => {
                refused += 1;
                let secs: u64 = retry
                    .as_deref()
                    .expect("429 without Retry-After")
                    .parse()
                    .unwrap();
                assert!(secs >= 1, "Retry-After {secs}");
                assert!(body["error"]["message"].as_str().is_some(), "{body}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(accepted.len() + refused, 50);
    assert!(accepted.len() >= 5, "only {} accepted", accepted.len());
    assert!(refused > 0, "50 jobs at once never hit a queue depth of 5");
    for id in &accepted {
        let j = s.wait_final(id);
        assert_eq!(status(&j), "succeeded", "{j}");
    }
    // Nothing refused was stored.
    let (_, list) = s.get("/v1/jobs?limit=100");
    let listed = list["jobs"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(listed, accepted.len(), "{list}");
}

#[test]
fn kill9_during_a_workspace_job_removes_its_workspace_and_the_retry_gets_a_fresh_one() {
    let root = tempfile::tempdir().unwrap();
    let repo = Repo::new(root.path());
    let config = format!(
        "{}\n[templates.wsretry]\ncommand = [\"sh\", \"-c\", \"{{prompt}}\"]\nretry_on_interrupt = true\n\
         workspace = {{ repo = \"{}\", branch = \"main\", fetch_debounce = \"30s\" }}\n",
        ws_config(&repo),
        repo.base.display()
    );
    let mut s = Server::start(&config, &[]);
    gitconfig(s.tmp.path());
    let t = s.tmp();
    // The first run leaves a file in its workspace and waits; the second
    // checks that it starts clean.
    let script = format!(
        "echo run >> {t}/runs; n=$(grep -c run {t}/runs); \
         if [ -e dirty ]; then echo reused > {t}/reused; fi; echo x > dirty; \
         pwd > {t}/cwd$n; if [ $n -eq 1 ]; then sleep 300 & echo $! > {t}/bg1; wait; fi"
    );
    let id = s.submit(json!({"template": "wsretry", "prompt": script}));
    let bg = read_pid(format!("{t}/bg1"));
    let first = PathBuf::from(wait_for_file(Path::new(&format!("{t}/cwd1"))).trim());
    assert!(first.exists());
    s.kill9();

    s.spawn();
    serve_common::wait_until_gone(bg);
    let j = s.wait_final(&id);
    assert_eq!(status(&j), "succeeded", "{j}");
    assert!(
        !Path::new(&format!("{t}/reused")).exists(),
        "the retry reused the old workspace"
    );
    let second = PathBuf::from(wait_for_file(Path::new(&format!("{t}/cwd2"))).trim());
    for w in [&first, &second] {
        assert!(!w.exists(), "workspace {} was not removed", w.display());
    }
    let out = s.baton(&["workspace", "list", "--json"]).output().unwrap();
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!listed.contains(&id), "workspace still listed: {listed}");
}

#[test]
fn cancel_reaches_a_job_waiting_for_its_group_behind_a_cli_run() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let mut cli = s
        .baton(&[
            "run",
            "--group",
            "issue/42",
            "--",
            "sh",
            "-c",
            &format!("echo x > {t}/cli.started; sleep 300"),
        ])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(Path::new(&format!("{t}/cli.started")));
    let id = s.submit(json!({"prompt": format!("echo ran > {t}/job.ran"), "group": "issue/42"}));
    s.wait_job(&id, Duration::from_secs(30), |j| status(j) == "running");
    let (code, j) = s.cancel(&id);
    assert_eq!(code, 200, "{j}");
    assert_eq!(status(&j), "cancelled", "{j}");
    assert!(
        cli.try_wait().unwrap().is_none(),
        "the CLI run was disturbed"
    );
    // TERM: the CLI run stops its whole group.
    let pid = rustix::process::Pid::from_raw(cli.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    cli.wait().unwrap();
    // The cancelled job never runs, even once the group is free.
    let after = s.submit(json!({"prompt": "true", "group": "issue/42"}));
    assert_eq!(status(&s.wait_final(&after)), "succeeded");
    assert!(
        !Path::new(&format!("{t}/job.ran")).exists(),
        "a cancelled job ran"
    );
    let (_, h) = s.get("/health");
    assert_eq!(h["active"], 0, "{h}");
}
