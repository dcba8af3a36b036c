#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Issue 37, item 2, on the command line: a branch name that would shadow
//! another namespace (`origin/main` is read as `refs/heads/origin/main`
//! before `refs/remotes/origin/main`) is refused by `baton run --workspace`,
//! `baton workspace create` and `baton git push` with exit 125 and one line
//! naming the branch and why, before anything is made; a workspace started
//! at a remote-tracking branch by its full name is not redirected by such a
//! branch made by hand.

use crate::common;
use crate::git::GitEnv;

use common::{code, stderr};

#[test]
fn branch_names_that_shadow_a_remote_or_a_namespace_are_refused_with_125() {
    let g = GitEnv::new();
    let base = g.base.to_str().unwrap();
    g.git_ok(
        &g.base,
        &["remote", "add", "upstream", "/nonexistent/upstream.git"],
    );
    let marker = g.env.path("ran");
    let touch = format!("touch {}", marker.display());
    let cases = [
        ("origin/main", "remote 'origin'"),
        ("origin", "remote 'origin'"),
        ("upstream/x", "remote 'upstream'"),
        ("refs/heads/x", "refs/heads/x"),
        ("heads/x", "refs/heads/x"),
        ("remotes/origin/main", "refs/remotes/origin/main"),
        ("tags/v1", "refs/tags/v1"),
        ("HEAD", "HEAD"),
        ("a..b", "'..'"),
    ];
    for (branch, why) in cases {
        let flag = format!("--branch={branch}");
        for args in [
            vec!["run", "--workspace", base, &flag, "--", "sh", "-c", &touch],
            vec![
                "run",
                "--workspace",
                base,
                "--strategy",
                "worktree",
                &flag,
                "--",
                "sh",
                "-c",
                &touch,
            ],
            vec!["workspace", "create", "--repo", base, &flag],
            vec![
                "workspace",
                "create",
                "--repo",
                base,
                "--ref",
                "origin/main",
                &flag,
                "--reset-branch",
            ],
            vec!["git", "push", "--repo", base, &flag],
        ] {
            let out = g.run(&args);
            let err = stderr(&out);
            assert_eq!(code(&out), 125, "{args:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.contains(&format!("invalid branch name '{branch}'")) && err.contains(why),
                "{args:?}: {err}"
            );
        }
    }
    assert!(!marker.exists(), "a refused run ran its command");
    assert!(g.workspaces().is_empty(), "a refused create left a record");
    let refs = g.git_ok(&g.base, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        refs.lines()
            .all(|r| r == "refs/heads/main" || r.starts_with("refs/remotes/origin/")),
        "a refused branch left a ref: {refs}"
    );
    let remote = g.git_ok(&g.remote, &["for-each-ref", "--format=%(refname)"]);
    assert_eq!(
        remote, "refs/heads/main",
        "a refused push reached the remote"
    );

    // A name that merely contains a remote's or a namespace's name is a
    // branch like any other.
    let out = g.run(&[
        "run",
        "--workspace",
        base,
        "--branch",
        "agent/origin/tags",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(marker.exists());
}

#[test]
fn a_workspace_at_a_full_remote_ref_ignores_a_shadowing_branch_made_by_hand() {
    let g = GitEnv::new();
    let base = g.base.to_str().unwrap();
    let origin_main = g.git_ok(&g.base, &["rev-parse", "refs/remotes/origin/main"]);
    // A commit of its own on a branch named like the remote-tracking one.
    g.git_ok(&g.base, &["checkout", "-qb", "origin/main"]);
    std::fs::write(g.base.join("planted.txt"), "planted\n").unwrap();
    g.git_ok(&g.base, &["add", "planted.txt"]);
    g.git_ok(&g.base, &["commit", "-qm", "planted"]);
    g.git_ok(&g.base, &["checkout", "-q", "main"]);
    let planted = g.git_ok(&g.base, &["rev-parse", "refs/heads/origin/main"]);
    assert_ne!(planted, origin_main);

    for strategy in ["clone", "worktree"] {
        let ws = g.json_ok(&[
            "workspace",
            "create",
            "--repo",
            base,
            "--strategy",
            strategy,
            "--ref",
            "refs/remotes/origin/main",
            "--branch",
            &format!("agent/{strategy}"),
            "--json",
        ]);
        assert_eq!(ws["commit"], origin_main.as_str(), "{strategy}: {ws}");
        assert_eq!(ws["reference"], "refs/remotes/origin/main", "{ws}");
        let path = std::path::PathBuf::from(ws["path"].as_str().unwrap());
        assert!(!path.join("planted.txt").exists(), "{strategy}");
        let out = g.run(&["workspace", "remove", ws["id"].as_str().unwrap()]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        // A workspace on an existing branch without --ref starts at its
        // tip, recorded by its full name (a tag of that name answers first
        // to the short one).
        let existing = format!("agent/{strategy}-2");
        g.git_ok(&g.base, &["branch", &existing, &origin_main]);
        g.git_ok(&g.base, &["tag", &existing, &planted]);
        let again = g.json_ok(&[
            "workspace",
            "create",
            "--repo",
            base,
            "--strategy",
            strategy,
            "--branch",
            &existing,
            "--json",
        ]);
        assert_eq!(again["commit"], origin_main.as_str(), "{again}");
        assert_eq!(
            again["reference"],
            format!("refs/heads/{existing}"),
            "{again}"
        );
        let path = std::path::PathBuf::from(again["path"].as_str().unwrap());
        assert!(!path.join("planted.txt").exists(), "{strategy}");
        let out = g.run(&["workspace", "remove", again["id"].as_str().unwrap()]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
}
