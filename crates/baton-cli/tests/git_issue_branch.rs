#![cfg(unix)] // sh, fifos and Unix paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! An issue branch never loops (issue 36, item 3): two agents, each in its
//! own clone of one bare origin, answer an issue on its own branch with the
//! trial's command (`baton run --workspace BASE --fetch --ref origin/main
//! --branch gitclaw/issue-7 --reset-branch -- agent`). Their first pushes
//! conflict; every later run continues the pushed branch, drops only the
//! commit that was never pushed (kept under `refs/baton/abandoned/`), and
//! lands. The real binary, real git, real repositories in a temp dir.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{code, stderr, wait_until};
use crate::git::GitEnv;

/// The binary, for commands run inside a run.
const BATON: &str = env!("CARGO_BIN_EXE_baton");
const BRANCH: &str = "gitclaw/issue-7";

/// A second agent's clone of the remote (its own base).
fn clone_of_remote(g: &GitEnv, name: &str) -> PathBuf {
    g.git_ok(
        g.env.tmp.path(),
        &["clone", "-q", g.remote.to_str().unwrap(), name],
    );
    g.env.path(name)
}

/// The trial's command on `base`: the agent appends `line` to `reply.md`,
/// commits it and pushes its branch with `baton git push`; `before_push`
/// runs between the commit and the push.
fn agent(g: &GitEnv, base: &Path, line: &str, before_push: &str) -> Command {
    let script = format!(
        "echo '{line}' >> reply.md && git add reply.md && git commit -qm '{line}' && {before_push} {BATON} git push"
    );
    let mut c = g.baton(&[
        "run",
        "--workspace",
        base.to_str().unwrap(),
        "--fetch",
        "--fetch-debounce",
        "0s",
        "--ref",
        "origin/main",
        "--branch",
        BRANCH,
        "--reset-branch",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn agent_ok(g: &GitEnv, base: &Path, line: &str) -> Output {
    let out = agent(g, base, line, "").output().unwrap();
    assert_eq!(code(&out), 0, "{line}: {}", stderr(&out));
    out
}

/// The trial's sequence: agent A commits its reply, agent B's whole run
/// (the branch's first on the remote) lands meanwhile, A's push conflicts
/// (exit 1) and leaves A's commit unpushed on the branch in A's base. Then
/// five more runs, alternating: every one exits 0. Fails before: A's next
/// run restarted at origin/main, conflicted with the pushed branch again
/// and exited 1 on every later run.
#[test]
fn an_issue_branch_continues_the_pushed_branch_after_a_conflict() {
    let g = GitEnv::new();
    let a = g.base.clone();
    let b = clone_of_remote(&g, "agent-b");

    // A stops between its commit and its push until B has landed.
    let (ready, fifo) = (g.env.path("a-committed"), g.env.path("a.fifo"));
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let hold = format!(
        "touch {} && read _ < {} &&",
        ready.display(),
        fifo.display()
    );
    let first = agent(&g, &a, "a1", &hold).spawn().unwrap();
    wait_until(Duration::from_secs(60), || ready.exists());
    agent_ok(&g, &b, "b1");
    fs::write(&fifo, "go\n").unwrap();
    let out = first.wait_with_output().unwrap();
    assert_eq!(code(&out), 1, "A's push conflicts: {}", stderr(&out));
    let unpushed = g.git_ok(&a, &["rev-parse", &format!("refs/heads/{BRANCH}")]);
    assert_eq!(g.git_ok(&a, &["log", "-1", "--format=%s", &unpushed]), "a1");
    let landed = g.git_ok(&g.remote, &["rev-parse", BRANCH]);

    // Five more runs, alternating agents: all land.
    let mut expected = vec!["b1".to_string()];
    for (n, base) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
        let who = if *base == a { "a" } else { "b" };
        let line = format!("{who}{}", n + 2);
        let out = agent_ok(&g, base, &line);
        expected.push(line);
        if n == 0 {
            // A's unpushed commit was dropped, kept under
            // refs/baton/abandoned/, and the run said so.
            let kept = g.git_ok(
                &a,
                &[
                    "for-each-ref",
                    "--format=%(refname) %(objectname)",
                    &format!("refs/baton/abandoned/{BRANCH}/"),
                ],
            );
            let (kept_ref, kept_commit) = kept.split_once(' ').unwrap();
            assert_eq!(kept_commit, unpushed, "{kept}");
            let err = stderr(&out);
            assert!(
                err.contains(kept_ref) && err.contains(&landed),
                "names the kept tip and where it started: {err}"
            );
        }
    }
    assert_eq!(
        g.git_ok(&g.remote, &["show", &format!("{BRANCH}:reply.md")]),
        expected.join("\n"),
        "every reply landed, in order, on the pushed branch"
    );
    assert_eq!(
        g.git_ok(&g.remote, &["rev-parse", "main"]),
        g.git_ok(&a, &["rev-parse", "origin/main"]),
        "main is untouched"
    );
}

/// Without --ref, a branch only the remote has is made from the pushed
/// branch (as `git checkout B` does), not from HEAD, where its next push
/// would fight the pushed one. Fails before: the workspace started at HEAD.
#[test]
fn a_branch_only_the_remote_has_starts_from_the_pushed_branch() {
    let g = GitEnv::new();
    let b = clone_of_remote(&g, "agent-b");
    let out = agent(&g, &b, "b1", "").output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    g.git_ok(&g.base, &["fetch", "-q", "origin"]);
    let pushed = g.git_ok(&g.remote, &["rev-parse", BRANCH]);
    let ws = g.json_ok(&[
        "workspace",
        "create",
        "--repo",
        g.base.to_str().unwrap(),
        "--branch",
        BRANCH,
        "--json",
    ]);
    assert_eq!(ws["commit"], pushed.as_str(), "{ws}");
    assert_eq!(
        ws["reference"],
        format!("refs/remotes/origin/{BRANCH}").as_str(),
        "{ws}"
    );
    let path = ws["path"].as_str().unwrap();
    assert_eq!(
        g.git_ok(Path::new(path), &["rev-parse", "HEAD"]),
        pushed,
        "checked out at the pushed tip"
    );
}
