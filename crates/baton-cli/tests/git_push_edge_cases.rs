#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Hostile uses of `baton git push`: a work tree where a rebase is in
//! progress, as a push killed (SIGKILL, OOM) during its own rebase leaves it
//! (HEAD is detached at the remote branch and the local commits are only on
//! the branch: pushing HEAD from there "succeeds" without them), and branch
//! or remote names that git itself would refuse.

use crate::common;
use crate::git::GitEnv;

use common::{code, stderr};

#[test]
fn push_refuses_a_work_tree_in_the_middle_of_a_rebase() {
    let g = GitEnv::new();
    // Another agent lands a commit; ours has one the remote lacks.
    let other = g.env.path("other");
    g.git_ok(
        g.env.tmp.path(),
        &["clone", "-q", g.remote.to_str().unwrap(), "other"],
    );
    std::fs::write(other.join("b.txt"), "theirs\n").unwrap();
    g.git_ok(&other, &["add", "."]);
    g.git_ok(&other, &["commit", "-qm", "theirs"]);
    g.git_ok(&other, &["push", "-q", "origin", "main"]);
    std::fs::write(g.base.join("c.txt"), "ours\n").unwrap();
    g.git_ok(&g.base, &["add", "."]);
    g.git_ok(&g.base, &["commit", "-qm", "ours"]);
    let ours = g.git_ok(&g.base, &["rev-parse", "HEAD"]);
    g.git_ok(&g.base, &["fetch", "-q", "origin"]);
    // The state a rebase killed before its first pick leaves: HEAD detached
    // at origin/main, our commit still only on `main`.
    g.git_ok(
        &g.base,
        &[
            "-c",
            "sequence.editor=sed -i 1ibreak",
            "rebase",
            "-q",
            "-i",
            "origin/main",
        ],
    );
    assert!(
        g.git_ok(&g.base, &["rev-parse", "--git-path", "rebase-merge"])
            .ends_with("rebase-merge")
            && g.base.join(".git/rebase-merge").is_dir(),
        "the rebase was not left in progress"
    );
    let theirs = g.git_ok(&g.remote, &["rev-parse", "main"]);
    let base = g.base.to_str().unwrap();
    for args in [
        vec!["git", "push", "--repo", base],
        vec!["git", "push", "--repo", base, "--branch", "main"],
    ] {
        let out = g.run(&args);
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("rebase is in progress") && err.contains("git rebase --abort"),
            "{args:?}: {err}"
        );
        assert_eq!(g.git_ok(&g.remote, &["rev-parse", "main"]), theirs);
    }
    // Once the rebase is aborted, the push lands our commit.
    g.git_ok(&g.base, &["rebase", "--abort"]);
    let out = g.run(&["git", "push", "--repo", base]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let landed = g.git_ok(&g.remote, &["log", "--format=%s", "main"]);
    assert!(landed.starts_with("ours\ntheirs"), "{landed} ({ours})");
}

#[test]
fn push_refuses_branch_and_remote_names_git_would_refuse() {
    let g = GitEnv::new();
    std::fs::write(g.base.join("c.txt"), "ours\n").unwrap();
    g.git_ok(&g.base, &["add", "."]);
    g.git_ok(&g.base, &["commit", "-qm", "ours"]);
    let base = g.base.to_str().unwrap();
    let before = g.git_ok(&g.remote, &["for-each-ref", "--format=%(refname)"]);
    for (flag, value) in [
        ("--branch", "--force"),
        ("--branch", "-f"),
        ("--branch", "a..b"),
        ("--branch", "x:refs/heads/main"),
        ("--branch", "main\nx"),
        ("--remote", "--exec=/bin/false"),
        ("--remote", "-v"),
    ] {
        let arg = format!("{flag}={value}");
        let out = g.run(&["git", "push", "--repo", base, &arg]);
        let err = stderr(&out);
        assert_eq!(code(&out), 125, "{arg:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{arg:?}: one line: {err}"
        );
        assert!(err.contains("invalid"), "{arg:?}: {err}");
    }
    // Nothing was created on the remote (no branch named `--force`).
    assert_eq!(
        g.git_ok(&g.remote, &["for-each-ref", "--format=%(refname)"]),
        before
    );
    // A valid name still works.
    let out = g.run(&["git", "push", "--repo", base, "--branch", "agent/x-1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}
