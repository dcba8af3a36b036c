#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Issue 37, item 2: a job's branch never redirects the jobs after it. A
//! branch named `origin/main` (kept in the base as `refs/heads/origin/main`)
//! used to answer for the template's start point `origin/main` (git reads
//! heads before remotes), so one client could plant code under every later
//! job. Now such names are refused at submission (400, naming the field and
//! why), and a template's start point is a full ref name
//! (`refs/remotes/origin/main`, `refs/heads/main`) that a ref made by hand
//! cannot shadow either — a real `baton serve`, real git repos.

use crate::serve_common;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use serve_common::{git, gitconfig, wait_for_file, Server};

/// A bare remote with one commit on `main` and a clone of it as the base
/// (`origin/main` there is the remote's `main`).
struct Repo {
    root: PathBuf,
    base: PathBuf,
    /// `main` of the remote (and of the base).
    main: String,
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
        let main = git(root, &base, &["rev-parse", "refs/remotes/origin/main"]);
        Repo {
            root: root.to_path_buf(),
            base,
            main,
        }
    }

    fn git(&self, args: &[&str]) -> String {
        git(&self.root, &self.base, args)
    }

    /// A commit on top of `main` that adds `planted.txt`, on no branch
    /// (made on a branch deleted again; the base is back on `main`).
    fn evil_commit(&self) -> String {
        self.git(&["checkout", "-qb", "evil"]);
        std::fs::write(self.base.join("planted.txt"), "planted\n").unwrap();
        self.git(&["add", "planted.txt"]);
        self.git(&["commit", "-qm", "evil"]);
        let evil = self.git(&["rev-parse", "HEAD"]);
        self.git(&["checkout", "-q", "main"]);
        self.git(&["branch", "-qD", "evil"]);
        assert!(!self.base.join("planted.txt").exists());
        evil
    }
}

/// `fetching` starts from `refs/remotes/origin/main` (it fetches), `local`
/// from the base's `refs/heads/main`; both clone.
fn config(repo: &Repo) -> String {
    let base = repo.base.display();
    format!(
        r#"
grace = "1s"
[templates.fetching]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "1h" }}
[templates.local]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{base}", branch = "main", fetch_debounce = "0s" }}
"#
    )
}

fn start(repo: &Repo) -> Server {
    let s = Server::start(&config(repo), &[]);
    gitconfig(s.tmp.path());
    s
}

/// A job that records where it started (`{t}/NAME.head`) and whether it
/// sees the planted file (`{t}/NAME.planted`: `yes` or `no`).
fn recording(t: &str, name: &str) -> String {
    format!(
        "git rev-parse HEAD > {t}/{name}.head; if [ -e planted.txt ]; then echo yes; else echo no; fi > {t}/{name}.planted"
    )
}

fn check_clean_start(repo: &Repo, t: &str, name: &str) {
    let head = wait_for_file(Path::new(&format!("{t}/{name}.head")));
    assert_eq!(
        head.trim(),
        repo.main,
        "job {name} did not start at origin's main"
    );
    let planted = wait_for_file(Path::new(&format!("{t}/{name}.planted")));
    assert_eq!(planted.trim(), "no", "job {name} sees the planted file");
}

fn message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_job_branch_named_like_a_remote_branch_is_refused_and_plants_nothing() {
    let root = tempfile::tempdir().unwrap();
    let repo = Repo::new(root.path());
    // Another remote of the base: its name is refused as a first component too.
    repo.git(&["remote", "add", "upstream", "/nonexistent/upstream.git"]);
    let s = start(&repo);
    let t = s.tmp();

    // The attack of the issue: a job on `origin/main` commits a file; its
    // branch would be kept in the base as refs/heads/origin/main.
    let plant = "echo planted > planted.txt && git add planted.txt && \
                 git -c user.name=Evil -c user.email=evil@example.com commit -qm evil";
    let refused = [
        ("origin/main", "remote 'origin'"),
        ("origin", "remote 'origin'"),
        ("upstream/main", "remote 'upstream'"),
        ("refs/heads/main", "refs/heads/main"),
        ("heads/main", "refs/heads/main"),
        ("remotes/origin/main", "refs/remotes/origin/main"),
        ("tags/v1", "refs/tags/v1"),
        ("HEAD", "HEAD"),
        ("-f", "'-'"),
    ];
    for (branch, why) in refused {
        for template in ["fetching", "local"] {
            let body = json!({"template": template, "prompt": plant,
                              "workspace": {"branch": branch}});
            let (code, v) = s.post("/v1/jobs", &body);
            assert_eq!(code, 400, "{body}: {v}");
            let m = message(&v);
            assert!(
                m.contains("'workspace.branch'") && m.contains(branch) && m.contains(why),
                "{body}: {m}"
            );
        }
    }
    // `baton job submit --branch` says the service's reason, exit 125.
    let url = s.url("");
    let out = s
        .baton(&[
            "job",
            "--server",
            &url,
            "submit",
            "--template",
            "fetching",
            "--branch",
            "origin/main",
            plant,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("'workspace.branch'") && err.contains("remote 'origin'"),
        "{err}"
    );
    let (_, list) = s.get("/v1/jobs");
    assert_eq!(list["jobs"], json!([]), "a refused submission was stored");

    // A legitimate branch still works: it starts at origin/main, commits,
    // and its commit is kept on its own branch of the base.
    let ok = s.submit(json!({"template": "fetching",
        "prompt": format!("{}; echo work > ok.txt && git add ok.txt && git -c user.name=A -c user.email=a@example.com commit -qm ok", recording(&t, "ok")),
        "workspace": {"branch": "agent/ok"}}));
    let j = s.wait_final(&ok);
    assert_eq!(j["status"], "succeeded", "{j}");
    check_clean_start(&repo, &t, "ok");
    let kept = repo.git(&["rev-parse", "refs/heads/agent/ok"]);
    assert_ne!(kept, repo.main, "the job's commit was not kept in the base");

    // Later jobs, with and without a branch, start at origin's main and see
    // nothing planted; no shadowing ref was made in the base.
    for (name, template, branch) in [
        ("later", "fetching", None),
        ("later-local", "local", None),
        ("later-branch", "fetching", Some("agent/later")),
    ] {
        let mut body = json!({"template": template, "prompt": recording(&t, name)});
        if let Some(b) = branch {
            body["workspace"] = json!({"branch": b});
        }
        let id = s.submit(body);
        assert_eq!(s.wait_final(&id)["status"], "succeeded");
        check_clean_start(&repo, &t, name);
    }
    let refs = repo.git(&["for-each-ref", "--format=%(refname)"]);
    assert!(
        !refs.contains("refs/heads/origin/") && !refs.contains("refs/heads/refs/"),
        "{refs}"
    );
}

#[test]
fn a_template_start_point_is_its_full_ref_whatever_else_the_base_holds() {
    let root = tempfile::tempdir().unwrap();
    let repo = Repo::new(root.path());
    // Made by hand (or by a baton before this fix): refs that git's short
    // names reach before the ones the templates mean.
    let evil = repo.evil_commit();
    repo.git(&["update-ref", "refs/heads/origin/main", &evil]);
    repo.git(&["update-ref", "refs/tags/origin/main", &evil]);
    repo.git(&["update-ref", "refs/tags/main", &evil]);
    assert_eq!(repo.git(&["rev-parse", "origin/main"]), evil);
    assert_eq!(repo.git(&["rev-parse", "main"]), evil);
    let s = start(&repo);
    let t = s.tmp();

    for (name, template, branch) in [
        ("fetching", "fetching", None),
        ("local", "local", None),
        ("fetching-branch", "fetching", Some("agent/a")),
        ("local-branch", "local", Some("agent/b")),
    ] {
        let mut body = json!({"template": template, "prompt": recording(&t, name)});
        if let Some(b) = branch {
            body["workspace"] = json!({"branch": b});
        }
        let id = s.submit(body);
        let j = s.wait_final(&id);
        assert_eq!(j["status"], "succeeded", "{j}");
        check_clean_start(&repo, &t, name);
    }
}
