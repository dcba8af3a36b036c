#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `workspace.reset_branch` of the job service (`baton job submit
//! --reset-branch`): a job on a branch that diverged from its template's
//! branch starts it over there, the old tip kept under
//! `refs/baton/abandoned/...` and named in the job; refused (400) where there
//! is nothing to start over; a reset a running job's workspace stands in
//! the way of fails the job like any workspace set-up failure; a queued job
//! still resets after a restart (the store keeps the field), and a store of
//! an older schema opens, migrated — a real `baton serve`, real git repos.

use crate::serve_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use serve_common::{git, gitconfig, wait_for_file, Server};

/// A base repository whose branch `agent/x` diverged from `main`: each has
/// a commit the other lacks.
struct Diverged {
    base: PathBuf,
    /// `main`'s tip.
    main: String,
    /// `agent/x`'s tip (its own commit on the first one).
    work: String,
}

impl Diverged {
    fn new(root: &Path) -> Diverged {
        gitconfig(root);
        let base = root.join("base");
        git(root, root, &["init", "-q", "base"]);
        std::fs::write(base.join("a.txt"), "one\n").unwrap();
        git(root, &base, &["add", "."]);
        git(root, &base, &["commit", "-qm", "init"]);
        git(root, &base, &["checkout", "-qb", "agent/x"]);
        std::fs::write(base.join("work.txt"), "an earlier run's work\n").unwrap();
        git(root, &base, &["add", "."]);
        git(root, &base, &["commit", "-qm", "work"]);
        let work = git(root, &base, &["rev-parse", "HEAD"]);
        git(root, &base, &["checkout", "-q", "main"]);
        std::fs::write(base.join("b.txt"), "two\n").unwrap();
        git(root, &base, &["add", "."]);
        git(root, &base, &["commit", "-qm", "second"]);
        let main = git(root, &base, &["rev-parse", "HEAD"]);
        Diverged { base, main, work }
    }

    fn rev(&self, rev: &str) -> String {
        git(self.base.parent().unwrap(), &self.base, &["rev-parse", rev])
    }
}

/// `ws` works on the base and starts from its `main` (no fetch); `sh` has no
/// workspace; `nobranch` has a workspace that names no branch.
fn config(repo: &Diverged) -> String {
    let base = repo.base.display();
    format!(
        r#"
grace = "1s"
[templates.ws]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "0s" }}
[templates.nobranch]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", fetch_debounce = "0s" }}
[templates.sh]
command = ["sh", "-c", "{{prompt}}"]
"#
    )
}

/// A job that records its HEAD and branch as `{t}/NAME.head|.branch`.
fn recording(t: &str, name: &str) -> String {
    format!(
        "git rev-parse HEAD > {t}/{name}.head; git rev-parse --abbrev-ref HEAD > {t}/{name}.branch"
    )
}

fn start(repo: &Diverged, extra: &[&str]) -> Server {
    let s = Server::start(&config(repo), extra);
    gitconfig(s.tmp.path());
    s
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The job's `abandoned_ref`, checked: under refs/baton/abandoned/agent/x/,
/// ending with the job's id, and keeping `work` in the base.
fn check_kept(repo: &Diverged, job: &Value) -> String {
    let id = job["id"].as_str().unwrap();
    let kept = job["abandoned_ref"].as_str().unwrap_or_else(|| {
        panic!("the job names no abandoned_ref: {job}");
    });
    assert!(
        kept.starts_with("refs/baton/abandoned/agent/x/") && kept.ends_with(&format!("-{id}")),
        "{kept}"
    );
    assert_eq!(repo.rev(kept), repo.work, "the old tip is not kept");
    kept.to_string()
}

#[test]
fn reset_branch_starts_a_diverged_branch_over_where_a_plain_job_fails() {
    let root = tempfile::tempdir().unwrap();
    let repo = Diverged::new(root.path());
    let s = start(&repo, &[]);
    let t = s.tmp();

    // As today: the branch has commits `main` lacks, so the job fails
    // before its command runs, saying how to start over.
    let plain = s.submit(json!({
        "template": "ws", "prompt": recording(&t, "plain"), "workspace": {"branch": "agent/x"}
    }));
    let j = s.wait_final(&plain);
    assert_eq!(j["status"], "failed", "{j}");
    assert_eq!(j["exit_code"], 125, "{j}");
    assert_eq!(j["reset_branch"], false, "{j}");
    assert!(j["abandoned_ref"].is_null(), "{j}");
    let error = j["error"].as_str().unwrap();
    assert!(
        error.contains("agent/x") && error.contains("workspace.reset_branch"),
        "{error}"
    );
    assert!(!Path::new(&format!("{t}/plain.head")).exists());
    assert_eq!(
        repo.rev("agent/x"),
        repo.work,
        "a failed job moved the branch"
    );

    // With --reset-branch (through the CLI): started over at main.
    let url = s.url("");
    let out = s
        .baton(&[
            "job",
            "--server",
            &url,
            "submit",
            "--template",
            "ws",
            "--branch",
            "agent/x",
            "--reset-branch",
            "--wait",
            "--json",
            &recording(&t, "reset"),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(j["status"], "succeeded", "{j}");
    assert_eq!(j["reset_branch"], true, "{j}");
    let head = wait_for_file(Path::new(&format!("{t}/reset.head")));
    assert_eq!(head.trim(), repo.main, "the job did not start at main");
    let branch = wait_for_file(Path::new(&format!("{t}/reset.branch")));
    assert_eq!(branch.trim(), "agent/x");
    let kept = check_kept(&repo, &j);
    assert_eq!(repo.rev("agent/x"), repo.main, "the branch was not moved");
    // The job's stderr log says it too.
    let id = j["id"].as_str().unwrap();
    let (code, log) = s.get_text(&format!("/v1/jobs/{id}/log?stream=stderr"));
    assert_eq!(code, 200, "{log}");
    assert!(
        log.contains(&kept) && log.contains(&repo.work),
        "the stderr log does not name the kept tip: {log:?}"
    );
    // `job status` shows it.
    let out = s
        .baton(&["job", "--server", &url, "status", id])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&kept), "{shown}");
}

#[test]
fn a_reset_a_running_jobs_workspace_holds_fails_the_job_as_a_workspace_failure() {
    let root = tempfile::tempdir().unwrap();
    let repo = Diverged::new(root.path());
    let s = start(&repo, &["--max-concurrency", "3"]);
    let t = s.tmp();
    let holder = s.submit(json!({
        "template": "ws", "workspace": {"branch": "agent/x", "reset_branch": true},
        "prompt": format!("while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    let j = s.wait_job(&holder, Duration::from_secs(60), |j| {
        !j["workspace"].is_null()
    });
    assert_eq!(j["status"], "running", "{j}");
    check_kept(&repo, &j);

    let refused = s.submit(json!({
        "template": "ws", "workspace": {"branch": "agent/x", "reset_branch": true},
        "prompt": format!("touch {t}/refused.ran")
    }));
    let j = s.wait_final(&refused);
    assert_eq!(j["status"], "failed", "{j}");
    assert_eq!(j["exit_code"], 125, "{j}");
    let error = j["error"].as_str().unwrap();
    assert!(
        error.contains("is held by workspace") && error.contains(&holder),
        "{error}"
    );
    assert!(j["abandoned_ref"].is_null(), "{j}");
    assert!(!Path::new(&format!("{t}/refused.ran")).exists());
    // As another workspace set-up failure ends (the branch diverged).
    git(
        root.path(),
        &repo.base,
        &["branch", "-f", "agent/y", &repo.work],
    );
    let diverged = s.submit(json!({
        "template": "ws", "workspace": {"branch": "agent/y"}, "prompt": "true"
    }));
    let d = s.wait_final(&diverged);
    assert_eq!(
        (&d["status"], &d["exit_code"]),
        (&j["status"], &j["exit_code"]),
        "{d}"
    );

    std::fs::write(format!("{t}/go"), "").unwrap();
    assert_eq!(s.wait_final(&holder)["status"], "succeeded");
    let (code, h) = s.get("/health");
    assert_eq!(code, 200, "{h}");
}

#[test]
fn reset_branch_is_refused_where_there_is_nothing_to_start_over() {
    let root = tempfile::tempdir().unwrap();
    let repo = Diverged::new(root.path());
    let s = start(&repo, &[]);
    let cases = [
        (
            json!({"template": "sh", "prompt": "true", "workspace": {"reset_branch": true}}),
            "has no workspace",
        ),
        (
            json!({"template": "sh", "prompt": "true",
                   "workspace": {"branch": "agent/x", "reset_branch": true}}),
            "has no workspace",
        ),
        (
            json!({"template": "ws", "prompt": "true", "workspace": {"reset_branch": true}}),
            "needs 'workspace.branch'",
        ),
        (
            json!({"template": "nobranch", "prompt": "true",
                   "workspace": {"branch": "agent/x", "reset_branch": true}}),
            "names no branch",
        ),
        (
            json!({"template": "ws", "prompt": "true",
                   "workspace": {"branch": "agent/x", "reset_branch": null}}),
            "",
        ),
    ];
    for (body, why) in cases {
        let (code, v) = s.post("/v1/jobs", &body);
        assert_eq!(code, 400, "{body}: {v}");
        let m = message(&v);
        assert!(
            m.contains("'workspace.reset_branch'") && m.contains(why),
            "{body}: {m}"
        );
    }
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "a refused submission was stored");
    // reset_branch = false asks for nothing.
    let id = s.submit(json!({"template": "sh", "prompt": "true",
                             "workspace": {"reset_branch": false}}));
    assert_eq!(s.wait_final(&id)["status"], "succeeded");
    // The CLI refuses --reset-branch without --branch before sending.
    let url = s.url("");
    let out = s
        .baton(&[
            "job",
            "--server",
            &url,
            "submit",
            "--template",
            "ws",
            "--reset-branch",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--branch"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_queued_job_still_resets_after_the_service_restarts() {
    let root = tempfile::tempdir().unwrap();
    let repo = Diverged::new(root.path());
    let mut s = start(&repo, &["--max-concurrency", "1"]);
    let t = s.tmp();
    let first = s.submit(json!({
        "template": "sh", "prompt": format!("while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    s.wait_job(&first, Duration::from_secs(60), |j| {
        j["status"] == "running"
    });
    let queued = s.submit(json!({
        "template": "ws", "workspace": {"branch": "agent/x", "reset_branch": true},
        "prompt": recording(&t, "queued")
    }));
    assert_eq!(s.job(&queued)["status"], "queued");
    s.kill9();
    s.spawn();
    let j = s.wait_final(&queued);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert_eq!(j["reset_branch"], true, "{j}");
    check_kept(&repo, &j);
    let head = wait_for_file(Path::new(&format!("{t}/queued.head")));
    assert_eq!(head.trim(), repo.main);
}

/// The `jobs` table of schema 2 (schema 1 lacks `waiter`), as older
/// services made it.
const SCHEMA_2: &str = "
CREATE TABLE jobs (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    template      TEXT NOT NULL,
    prompt        TEXT,
    grp           TEXT,
    mode          TEXT NOT NULL,
    timeout_ms    INTEGER NOT NULL,
    branch        TEXT,
    command       TEXT,
    created_at    INTEGER NOT NULL,
    status        TEXT NOT NULL,
    exit_code     INTEGER,
    error         TEXT,
    started_at    INTEGER,
    finished_at   INTEGER,
    workspace     TEXT,
    superseded_by TEXT,
    node          TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    pgroup        TEXT,
    priority      INTEGER NOT NULL DEFAULT 0,
    waiter        TEXT
);
CREATE INDEX jobs_queue ON jobs(status, priority DESC, seq);
CREATE INDEX jobs_finished ON jobs(finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_group ON jobs(grp, status);
";

#[test]
fn an_sqlite_store_of_an_older_schema_opens_migrated_with_its_jobs() {
    for version in [1, 2] {
        let root = tempfile::tempdir().unwrap();
        let repo = Diverged::new(root.path());
        let db = root.path().join("old.db");
        let out = root.path().join(format!("old-{version}.ran"));
        {
            let conn = rusqlite::Connection::open(&db).unwrap();
            let schema = match version {
                1 => SCHEMA_2.replace(",\n    waiter        TEXT", ""),
                _ => SCHEMA_2.to_string(),
            };
            conn.execute_batch(&schema).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
            let now = i64::try_from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis(),
            )
            .unwrap();
            conn.execute(
                "INSERT INTO jobs (id, template, prompt, mode, timeout_ms, created_at, status) \
                 VALUES ('old-job', 'sh', ?1, 'queue', 60000, ?2, 'queued')",
                rusqlite::params![format!("touch {}", out.display()), now],
            )
            .unwrap();
        }
        let config = format!("store = \"sqlite://{}\"\n{}", db.display(), config(&repo));
        let s = Server::start(&config, &[]);
        gitconfig(s.tmp.path());
        // The job stored by the older service runs, and reads as no reset.
        let j = s.wait_final("old-job");
        assert_eq!(j["status"], "succeeded", "schema {version}: {j}");
        assert_eq!(j["reset_branch"], false, "{j}");
        assert!(j["abandoned_ref"].is_null(), "{j}");
        assert!(out.exists(), "schema {version}: the old job did not run");
        // New jobs store the new field.
        let id = s.submit(json!({
            "template": "ws", "workspace": {"branch": "agent/x", "reset_branch": true},
            "prompt": "true"
        }));
        let j = s.wait_final(&id);
        assert_eq!(j["status"], "succeeded", "schema {version}: {j}");
        check_kept(&repo, &j);
        drop(s);
        let conn = rusqlite::Connection::open(&db).unwrap();
        let now: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(now, 4, "schema {version} was not migrated");
    }
}

/// Issue 36, item 3, through the service: a job's branch that was pushed
/// (another agent added to it) and that holds a commit of its own that was
/// never pushed. `workspace.reset_branch` drops only that commit (kept
/// under refs/baton/abandoned/) and continues the pushed branch, instead
/// of restarting at the template's branch, where the job's next push would
/// conflict with the pushed branch again. Fails before: the job started at
/// `origin/main`.
#[test]
fn reset_branch_of_a_pushed_branch_continues_it_and_drops_only_what_was_never_pushed() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let repo = Diverged::new(r);
    // The remote has main and agent/x, where another agent added a commit.
    git(r, r, &["init", "-q", "--bare", "remote.git"]);
    let remote = r.join("remote.git");
    git(
        r,
        &repo.base,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    git(r, &repo.base, &["push", "-q", "origin", "main", "agent/x"]);
    git(
        r,
        r,
        &[
            "clone",
            "-q",
            "-b",
            "agent/x",
            remote.to_str().unwrap(),
            "other",
        ],
    );
    let other = r.join("other");
    std::fs::write(other.join("other.txt"), "pushed by another agent\n").unwrap();
    git(r, &other, &["add", "."]);
    git(r, &other, &["commit", "-qm", "pushed"]);
    git(r, &other, &["push", "-q", "origin", "agent/x"]);
    let pushed = git(r, &other, &["rev-parse", "HEAD"]);
    // The base's agent/x: the pushed commit `work`, then one never pushed.
    git(r, &repo.base, &["checkout", "-q", "agent/x"]);
    std::fs::write(repo.base.join("local.txt"), "never pushed\n").unwrap();
    git(r, &repo.base, &["add", "."]);
    git(r, &repo.base, &["commit", "-qm", "local"]);
    let local = repo.rev("HEAD");
    git(r, &repo.base, &["checkout", "-q", "main"]);

    let base = repo.base.display();
    let config = format!(
        r#"
grace = "1s"
[templates.fetched]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "1ms" }}
"#
    );
    let s = Server::start(&config, &[]);
    gitconfig(s.tmp.path());
    let t = s.tmp();
    let id = s.submit(json!({
        "template": "fetched", "workspace": {"branch": "agent/x", "reset_branch": true},
        "prompt": recording(&t, "continued")
    }));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{j}");
    let head = wait_for_file(Path::new(&format!("{t}/continued.head")));
    assert_eq!(
        head.trim(),
        pushed,
        "the job did not continue the pushed branch"
    );
    let kept = j["abandoned_ref"].as_str().unwrap();
    assert!(kept.starts_with("refs/baton/abandoned/agent/x/"), "{kept}");
    assert_eq!(repo.rev(kept), local, "the unpushed commit is not kept");
    assert_eq!(repo.rev("agent/x"), pushed, "the branch was not moved");
}
