#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Issue 37, item 8: two jobs at once on one branch. Each clones the base and
//! commits on the branch; the first to end hands its commits to the base's
//! branch, and the second's cannot follow (not a fast-forward). Its workspace
//! used to stay on disk with nothing to ever collect it. Now its commits are
//! kept in the base under `refs/baton/kept/<branch>/...`, its stderr log
//! says so, and its workspace goes — a real `baton serve`, real git repos.
//! The same for `baton run --workspace` from the command line.

use crate::common::Env;
use crate::serve_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use serve_common::{git, gitconfig, wait_for_file, Server};

/// A base repository with one commit on `main`.
fn base(root: &Path) -> PathBuf {
    gitconfig(root);
    let base = root.join("base");
    git(root, root, &["init", "-q", "-b", "main", "base"]);
    std::fs::write(base.join("a.txt"), "one\n").unwrap();
    git(root, &base, &["add", "."]);
    git(root, &base, &["commit", "-qm", "init"]);
    base
}

/// Commits `NAME.txt` on the job's branch, records its workspace and
/// commit, then waits for `{t}/go-NAME`.
fn committing(t: &str, name: &str) -> String {
    format!(
        "echo {name} > {name}.txt && git add {name}.txt && git -c user.name=t -c user.email=t@example.com commit -qm {name} && pwd > {t}/{name}.dir && git rev-parse HEAD > {t}/{name}.head && while [ ! -e {t}/go-{name} ]; do sleep 0.05; done"
    )
}

fn kept_refs(root: &Path, base: &Path, branch: &str) -> Vec<(String, String)> {
    let out = git(
        root,
        base,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            &format!("refs/baton/kept/{branch}/"),
        ],
    );
    out.lines()
        .map(|l| {
            let (r, c) = l.split_once(' ').unwrap();
            (r.to_string(), c.to_string())
        })
        .collect()
}

#[test]
fn a_job_whose_branch_moved_on_keeps_its_commits_under_a_ref_and_leaves_no_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let base = base(tmp.path());
    let config = format!(
        r#"
grace = "1s"
max_concurrency = 2
[templates.default]
command = ["sh", "-c", "{{prompt}}"]
workspace = {{ repo = "{}", branch = "main" }}
"#,
        base.display()
    );
    let s = Server::start(&config, &[]);
    gitconfig(s.tmp.path());
    let t = s.tmp();
    let submit = |name: &str| {
        s.submit(json!({"prompt": committing(&t, name), "workspace": {"branch": "feature"}}))
    };
    let a = submit("a");
    let b = submit("b");
    let a_dir = wait_for_file(Path::new(&format!("{t}/a.dir")));
    let b_dir = wait_for_file(Path::new(&format!("{t}/b.dir")));
    let a_head = wait_for_file(Path::new(&format!("{t}/a.head")));
    let b_head = wait_for_file(Path::new(&format!("{t}/b.head")));
    assert_ne!(a_dir.trim(), b_dir.trim(), "two jobs, two workspaces");

    std::fs::write(format!("{t}/go-a"), "").unwrap();
    let done = s.wait_final(&a);
    assert_eq!(done["status"], "succeeded", "{done}");
    std::fs::write(format!("{t}/go-b"), "").unwrap();
    let done = s.wait_final(&b);
    assert_eq!(done["status"], "succeeded", "{done}");

    // The first job's commits are on the base's branch; the second's are
    // kept under a ref of their own, named in its stderr log.
    let feature = git(tmp.path(), &base, &["rev-parse", "refs/heads/feature"]);
    assert_eq!(feature, a_head.trim());
    let kept = kept_refs(tmp.path(), &base, "feature");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].1, b_head.trim());
    let (code, log) = s.get_text(&format!("/v1/jobs/{b}/log?stream=stderr"));
    assert_eq!(code, 200);
    assert!(log.contains(&kept[0].0), "stderr log: {log}");

    // Neither workspace is left on disk.
    for dir in [a_dir.trim(), b_dir.trim()] {
        let gone = (0..100).any(|_| {
            let gone = !Path::new(dir).exists();
            if !gone {
                std::thread::sleep(Duration::from_millis(50));
            }
            gone
        });
        assert!(gone, "workspace {dir} is still on disk");
    }
}

#[test]
fn a_run_whose_branch_moved_on_keeps_its_commits_under_a_ref_and_leaves_no_workspace() {
    let env = Env::new();
    let root = env.tmp.path();
    let base = base(root);
    let t = root.display().to_string();
    let run = |name: &str| {
        let script = committing(&t, name);
        env.spawn(&[
            "run",
            "--workspace",
            base.to_str().unwrap(),
            "--branch",
            "feature",
            "--",
            "sh",
            "-c",
            &script,
        ])
    };
    let a = run("a");
    let b = run("b");
    let b_dir = wait_for_file(Path::new(&format!("{t}/b.dir")));
    let a_head = wait_for_file(Path::new(&format!("{t}/a.head")));
    let b_head = wait_for_file(Path::new(&format!("{t}/b.head")));
    std::fs::write(format!("{t}/go-a"), "").unwrap();
    let out = a.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::write(format!("{t}/go-b"), "").unwrap();
    let out = b.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    let feature = git(root, &base, &["rev-parse", "refs/heads/feature"]);
    assert_eq!(feature, a_head.trim());
    let kept = kept_refs(root, &base, "feature");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].1, b_head.trim());
    assert!(stderr.contains(&kept[0].0), "{stderr}");
    assert!(
        !Path::new(b_dir.trim()).exists(),
        "the second run's workspace is left"
    );
}
