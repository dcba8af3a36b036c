#![cfg(unix)] // sh and Unix paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Three frictions a trial of users' git workflows found, with the real
//! binary, real repositories and a bare remote in a temp dir:
//! an unattended agent whose branch was left diverged by a conflicting push
//! starts it over with `--reset-branch` (nothing lost, exactly one of two
//! racing resets wins); a pipeline re-run on a branch it pushed continues the
//! pushed branch instead of being refused; `git init-attributes --commit`
//! commits `.gitattributes` under the repository's lock; a remote given by
//! a relative URL is reached from worktree workspaces too.

use std::fs;
use std::time::Duration;

use crate::common::{code, stderr, wait_until};
use crate::git::{pusher, GitEnv};

/// The binary, for commands run inside a run.
const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// `refs/baton/abandoned/...` refs of the base and their commits.
fn abandoned(g: &GitEnv) -> Vec<(String, String)> {
    g.git_ok(
        &g.base,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/baton/abandoned/",
        ],
    )
    .lines()
    .map(|l| {
        let (r, c) = l.split_once(' ').unwrap();
        (r.to_string(), c.to_string())
    })
    .collect()
}

/// A commit that changes `a.txt` to `text`.
fn commit_a(text: &str, subject: &str) -> String {
    format!("echo {text} > a.txt && git commit -qam '{subject}'")
}

/// A pipeline re-run within the fetch debounce (30 s by default, no group
/// or lock) starts from every push that completed before it started: the
/// earlier run's fetch is not reused. Fails before: the re-run skipped the
/// fetch and started from the stale origin/main (issue 36, item 7).
#[test]
fn a_quick_rerun_with_fetch_sees_a_push_made_before_it_started() {
    let g = GitEnv::new();
    let base = g.base.to_str().unwrap();
    let other = pusher(&g, "other");
    let subject = |g: &GitEnv| {
        let out = g.run(&[
            "run",
            "--workspace",
            base,
            "--fetch",
            "--ref",
            "origin/main",
            "--",
            "git",
            "log",
            "-1",
            "--format=%s",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = subject(&g);
    g.git_ok(
        &other,
        &["commit", "-q", "--allow-empty", "-m", "pushed meanwhile"],
    );
    g.git_ok(&other, &["push", "-q", "origin", "main"]);
    assert_ne!(before, "pushed meanwhile");
    assert_eq!(subject(&g), "pushed meanwhile");
}

/// Trial (GitHub Actions agent): a run whose push conflicts leaves its
/// commit on the branch in the base; the next run with the same --ref and
/// --branch is refused (by design) until --reset-branch starts the branch
/// over at --ref, keeping the old tip under refs/baton/abandoned/.
#[test]
fn reset_branch_starts_a_diverged_branch_over_and_keeps_its_old_tip() {
    let g = GitEnv::new();
    let base = g.base.to_str().unwrap();
    let other = pusher(&g, "other");
    // The agent commits a.txt; meanwhile someone lands a conflicting a.txt.
    let racing = format!(
        "{} && (cd {} && {} && git push -q origin main) && {BATON} git push --branch main",
        commit_a("agent", "agent"),
        other.display(),
        commit_a("other", "other")
    );
    let agent = |extra: &[&str], script: &str| {
        let mut args = vec![
            "run",
            "--workspace",
            base,
            "--fetch",
            "--fetch-debounce",
            "0s",
            "--ref",
            "origin/main",
            "--branch",
            "agent/issue-1",
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        g.run(&args)
    };
    let out = agent(&[], &racing);
    assert_eq!(code(&out), 1, "the push conflicts: {}", stderr(&out));
    let old = g.git_ok(&g.base, &["rev-parse", "agent/issue-1"]);
    assert_eq!(
        g.git_ok(&g.base, &["log", "-1", "--format=%s", &old]),
        "agent"
    );

    // The next run is refused, naming both commits and the way out.
    let out = agent(&[], "true");
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&old) && err.contains("--reset-branch"),
        "{err}"
    );

    // Started over: the run begins at origin/main, lands its commit, and
    // names where the old tip is kept.
    let out = agent(
        &["--reset-branch"],
        &format!(
            "echo b > b.txt && git add b.txt && git commit -qm again && {BATON} git push --branch main"
        ),
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let kept = abandoned(&g);
    assert_eq!(kept.len(), 1, "{kept:?}");
    let (kept_ref, kept_commit) = &kept[0];
    assert!(
        kept_ref.starts_with("refs/baton/abandoned/agent/issue-1/"),
        "{kept_ref}"
    );
    assert_eq!(kept_commit, &old, "the old tip is kept");
    assert!(
        err.contains(kept_ref.as_str()) && err.contains(&old),
        "{err}"
    );
    g.git_ok(&other, &["pull", "-q", "--rebase", "origin", "main"]);
    assert_eq!(
        g.git_ok(&other, &["log", "--format=%s", "-3"]),
        "again\nother\nother",
        "the run started at origin/main and its commit landed"
    );
    assert!(g.workspaces().is_empty());

    // `workspace create` takes it too; --json names the kept ref; the
    // branch in the base is at --ref.
    g.git_ok(&g.base, &["checkout", "-q", "agent/issue-1"]);
    fs::write(g.base.join("c.txt"), "local\n").unwrap();
    g.git_ok(&g.base, &["add", "c.txt"]);
    g.git_ok(&g.base, &["commit", "-qm", "local"]);
    let local = g.git_ok(&g.base, &["rev-parse", "HEAD"]);
    g.git_ok(&g.base, &["checkout", "-q", "main"]);
    let fresh = g.git_ok(&g.base, &["rev-parse", "origin/main"]);
    let ws = g.json_ok(&[
        "workspace",
        "create",
        "--repo",
        base,
        "--strategy",
        "worktree",
        "--ref",
        "origin/main",
        "--branch",
        "agent/issue-1",
        "--reset-branch",
        "--json",
    ]);
    assert_eq!(ws["commit"], fresh.as_str(), "{ws}");
    assert_eq!(ws["abandoned_commit"], local.as_str(), "{ws}");
    let kept_ref = ws["abandoned_ref"].as_str().unwrap();
    assert_eq!(g.git_ok(&g.base, &["rev-parse", kept_ref]), local);
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "agent/issue-1"]), fresh);
    assert_eq!(abandoned(&g).len(), 2);

    // While that workspace lives, another reset of the branch is refused
    // (75, naming it), and nothing moves.
    let out = g.run(&[
        "workspace",
        "create",
        "--repo",
        base,
        "--ref",
        "main",
        "--branch",
        "agent/issue-1",
        "--reset-branch",
    ]);
    let err = stderr(&out);
    assert_eq!(code(&out), 75, "{err}");
    assert!(err.contains(ws["id"].as_str().unwrap()), "{err}");
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "agent/issue-1"]), fresh);

    // Bad usage: --reset-branch without --ref.
    let out = g.run(&[
        "workspace",
        "create",
        "--repo",
        base,
        "--branch",
        "agent/issue-1",
        "--reset-branch",
    ]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
}

/// Two agents reset one diverged branch at the same instant: both pass
/// their first checks and wait for the repository's lock; exactly one
/// starts the branch over, the other is refused naming the winner's
/// workspace, and the old tip is kept exactly once.
#[test]
fn of_two_racing_resets_of_a_branch_exactly_one_wins_and_nothing_is_lost() {
    let g = GitEnv::new();
    let base = g.base.to_str().unwrap();
    g.git_ok(&g.base, &["checkout", "-q", "-b", "agent/x"]);
    fs::write(g.base.join("x.txt"), "x\n").unwrap();
    g.git_ok(&g.base, &["add", "x.txt"]);
    g.git_ok(&g.base, &["commit", "-qm", "diverged"]);
    let old = g.git_ok(&g.base, &["rev-parse", "HEAD"]);
    g.git_ok(&g.base, &["checkout", "-q", "main"]);
    let main = g.git_ok(&g.base, &["rev-parse", "main"]);

    let repo = baton_git::Repo::open(&g.base).unwrap();
    let home = repo.common_dir.join("baton");
    let name = repo.lock_name().unwrap();
    let waiters = || -> u64 {
        let out = g
            .baton_in(
                &g.base,
                &[
                    "--dir",
                    home.to_str().unwrap(),
                    "lock",
                    "status",
                    name.as_str(),
                    "--json",
                ],
            )
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["waiters"].as_u64().unwrap()
    };
    let held = g.hold_repo_lock(&g.base);
    let racers: Vec<_> = (0..2)
        .map(|i| {
            g.baton(&[
                "workspace",
                "create",
                "--repo",
                base,
                "--id",
                &format!("racer-{i}"),
                "--ref",
                "main",
                "--branch",
                "agent/x",
                "--reset-branch",
                "--json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    // Both have passed their checks and wait for the lock to claim the branch.
    wait_until(Duration::from_secs(20), || waiters() == 2);
    drop(held);
    let outs: Vec<_> = racers
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let codes: Vec<i32> = outs.iter().map(code).collect();
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [0, 75],
        "{codes:?}: {} / {}",
        stderr(&outs[0]),
        stderr(&outs[1])
    );
    let winner = codes.iter().position(|c| *c == 0).unwrap();
    let loser = &outs[1 - winner];
    let err = stderr(loser);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("racer-{winner}")) && err.contains("held by"),
        "{err}"
    );
    let ws: serde_json::Value = serde_json::from_slice(&outs[winner].stdout).unwrap();
    assert_eq!(ws["abandoned_commit"], old.as_str(), "{ws}");
    assert_eq!(
        abandoned(&g),
        [(ws["abandoned_ref"].as_str().unwrap().to_string(), old)],
        "the old tip is kept, once"
    );
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "agent/x"]), main);
    let listed: Vec<String> = g
        .workspaces()
        .iter()
        .map(|w| w["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, [format!("racer-{winner}")]);
}

/// The arguments of `baton run` with a fresh `--fetch` of the workspace
/// `base` on `--ref origin/main --branch NAME`, running `sh -c SCRIPT`.
fn run_on_main<'a>(
    base: &'a str,
    strategy: &'a str,
    branch: &'a str,
    script: &'a str,
) -> [&'a str; 16] {
    [
        "run",
        "--workspace",
        base,
        "--strategy",
        strategy,
        "--fetch",
        "--fetch-debounce",
        "0s",
        "--ref",
        "origin/main",
        "--branch",
        branch,
        "--",
        "sh",
        "-c",
        script,
    ]
}

/// A pipeline run on `--ref origin/main --branch NAME` that appends to
/// `log.txt` and pushes NAME with `baton git push`.
fn pipeline(g: &GitEnv, strategy: &str, branch: &str, n: u32) -> std::process::Output {
    let script = format!(
        "echo {n} >> log.txt && git add log.txt && git commit -qm run-{n} && {BATON} git push"
    );
    g.run(&run_on_main(
        g.base.to_str().unwrap(),
        strategy,
        branch,
        &script,
    ))
}

/// The remote's `log.txt` on `branch`.
fn remote_log(g: &GitEnv, branch: &str) -> String {
    g.git_ok(&g.remote, &["show", &format!("{branch}:log.txt")])
}

/// Trial (a Go pipeline runner): re-running a pipeline on a branch it
/// pushed before. With a worktree the branch is in the base (equal to the
/// pushed one): it was refused (125); with a clone the re-run started from
/// origin/main again and its push conflicted with its own earlier run (1).
/// Now both continue the pushed branch (said on stderr), also when the
/// local branch is behind it; a local branch with unpushed commits of its
/// own is still refused.
#[test]
fn a_pipeline_rerun_on_a_pushed_branch_continues_it() {
    let g = GitEnv::new();
    for strategy in ["worktree", "clone"] {
        let branch = format!("feat-{strategy}");
        for n in 1..=2 {
            let out = pipeline(&g, strategy, &branch, n);
            let err = stderr(&out);
            assert_eq!(code(&out), 0, "{strategy} run {n}: {err}");
            if n == 2 {
                assert!(
                    err.contains(&format!(
                        "continuing the pushed branch refs/remotes/origin/{branch}"
                    )),
                    "{strategy}: {err}"
                );
            }
        }
        assert_eq!(remote_log(&g, &branch), "1\n2", "{strategy}");
    }

    // The local branch behind the pushed one (another machine pushed):
    // the run starts at the pushed tip.
    let elsewhere = g.env.path("elsewhere");
    g.git_ok(
        g.env.tmp.path(),
        &[
            "clone",
            "-q",
            "-b",
            "feat-worktree",
            g.remote.to_str().unwrap(),
            elsewhere.to_str().unwrap(),
        ],
    );
    fs::write(elsewhere.join("log.txt"), "1\n2\nelsewhere\n").unwrap();
    g.git_ok(&elsewhere, &["commit", "-qam", "elsewhere"]);
    g.git_ok(&elsewhere, &["push", "-q", "origin", "feat-worktree"]);
    let out = pipeline(&g, "worktree", "feat-worktree", 3);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(remote_log(&g, "feat-worktree"), "1\n2\nelsewhere\n3");

    // A local commit that was never pushed: refused, naming both commits,
    // nothing moved.
    g.git_ok(&g.base, &["checkout", "-q", "feat-worktree"]);
    fs::write(g.base.join("local.txt"), "local\n").unwrap();
    g.git_ok(&g.base, &["add", "local.txt"]);
    g.git_ok(&g.base, &["commit", "-qm", "local"]);
    let local = g.git_ok(&g.base, &["rev-parse", "HEAD"]);
    g.git_ok(&g.base, &["checkout", "-q", "main"]);
    let out = pipeline(&g, "worktree", "feat-worktree", 4);
    let err = stderr(&out);
    assert_eq!(code(&out), 125, "{err}");
    assert!(err.contains(&local) && err.contains("origin/main"), "{err}");
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "feat-worktree"]), local);
    assert!(g.workspaces().is_empty());
}

fn status(g: &GitEnv, path: &str) -> String {
    g.git_ok(&g.base, &["status", "--porcelain", "--", path])
}

fn init_attributes(g: &GitEnv, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["git", "init-attributes", "--repo", g.base.to_str().unwrap()];
    args.extend_from_slice(extra);
    g.run(&args)
}

/// Trial (a task tool): `git init-attributes` leaves `.gitattributes`
/// uncommitted (and says so); `--commit` commits it alone, under the
/// repository's lock, once.
#[test]
fn init_attributes_commits_the_file_alone_when_asked() {
    let g = GitEnv::new();
    let head = g.git_ok(&g.base, &["rev-parse", "HEAD"]);
    let out = init_attributes(&g, &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("--commit"), "{}", stderr(&out));
    assert_eq!(status(&g, ".gitattributes"), "?? .gitattributes");
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "HEAD"]), head, "default");

    // Something else is staged: it stays staged, out of the commit.
    fs::write(g.base.join("staged.txt"), "s\n").unwrap();
    g.git_ok(&g.base, &["add", "staged.txt"]);
    let out = init_attributes(&g, &["--commit", "--pattern", "logs/*.ndjson"]);
    let err = stderr(&out);
    assert_eq!(code(&out), 0, "{err}");
    let commit = g.git_ok(&g.base, &["rev-parse", "HEAD"]);
    assert_ne!(commit, head);
    assert!(err.contains(&commit), "{err}");
    assert_eq!(
        g.git_ok(&g.base, &["show", "--name-only", "--format=%s", "HEAD"]),
        format!("{}\n\n.gitattributes", baton_git::ATTRIBUTES_COMMIT_MESSAGE)
    );
    assert_eq!(
        g.git_ok(&g.base, &["show", "HEAD:.gitattributes"]),
        "*.jsonl merge=union\nlogs/*.ndjson merge=union"
    );
    assert_eq!(status(&g, ".gitattributes"), "");
    assert_eq!(status(&g, "staged.txt"), "A  staged.txt");

    // Again: nothing to commit.
    let out = init_attributes(&g, &["--commit"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "HEAD"]), commit);

    // Under the repository's lock: busy past --git-lock-wait is 75, and
    // the file is not touched.
    let held = g.hold_repo_lock(&g.base);
    let out = init_attributes(
        &g,
        &["--commit", "--pattern", "*.csv", "--git-lock-wait", "200ms"],
    );
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    drop(held);
    let attrs = fs::read_to_string(g.base.join(".gitattributes")).unwrap();
    assert!(!attrs.contains("csv"), "{attrs}");
    assert_eq!(g.git_ok(&g.base, &["rev-parse", "HEAD"]), commit);
}

/// `baton ARGS` run in the base without a baton dir, as a user there would:
/// workspaces are made in `<base>/.git/baton/workspaces`.
fn in_base(g: &GitEnv, args: &[&str]) -> std::process::Output {
    g.baton_in(&g.base, args).output().unwrap()
}

/// Found by a trial: with `git remote add origin ../remote.git` in the base,
/// `baton git push` in a worktree workspace (under `<base>/.git/baton/`,
/// sharing the base's config) failed: git read `../remote.git` against the
/// workspace. Now every git command baton runs there that talks to the
/// remote (the push, its fetch and rebase on rejection, `--fetch` from a
/// base that is itself a worktree) reads it against the base's top, as git
/// does from the base; the remote-tracking refs follow the push, the clone
/// strategy keeps working, and the user's config is left as it was.
#[test]
fn a_remote_given_by_a_relative_url_is_reached_from_every_workspace() {
    let g = GitEnv::new();
    g.git_ok(&g.base, &["remote", "set-url", "origin", "../remote.git"]);
    let config = || g.git_ok(&g.base, &["config", "--get-regexp", "^remote\\."]);
    let before = config();
    let other = pusher(&g, "other");
    let remote_main = || g.git_ok(&g.remote, &["rev-parse", "main"]);
    for strategy in ["worktree", "clone"] {
        let branch = format!("rel-{strategy}");
        // Someone lands on main between the run's fetch and its push: the
        // push to main is rejected once, fetched, rebased and retried.
        let script = format!(
            "echo {strategy} > {strategy}.txt && git add . && git commit -qm {strategy} \
             && (cd {} && git pull -q --rebase origin main && echo {strategy} >> other.txt && git commit -qam other-{strategy} && git push -q origin main) \
             && {BATON} git push --json --branch main && {BATON} git push --json",
            other.display()
        );
        let out = in_base(&g, &run_on_main(".", strategy, &branch, &script));
        let err = stderr(&out);
        assert_eq!(code(&out), 0, "{strategy}: {err}");
        let reports: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&out.stdout)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(reports.len(), 2, "{strategy}: {reports:?}");
        assert_eq!(reports[0]["attempts"], 2, "{strategy}: {reports:?}");
        assert_eq!(reports[0]["remote"], "origin", "{strategy}: {reports:?}");
        assert_eq!(reports[0]["commit"], remote_main().as_str(), "{strategy}");
        assert_eq!(
            g.git_ok(&g.remote, &["log", "-2", "--format=%s", "main"]),
            format!("{strategy}\nother-{strategy}"),
            "{strategy}: rebased onto the commit that landed first"
        );
        let pushed = g.git_ok(&g.remote, &["rev-parse", &branch]);
        assert_eq!(reports[1]["commit"], pushed.as_str(), "{strategy}");
        if strategy == "worktree" {
            // The workspace shares the base's refs: the push moved them.
            assert_eq!(
                g.git_ok(&g.base, &["rev-parse", "origin/main"]),
                remote_main()
            );
            assert_eq!(
                g.git_ok(&g.base, &["rev-parse", &format!("origin/{branch}")]),
                pushed
            );
        }
    }

    // `--fetch` with a worktree workspace as the base, and a clone of it.
    let made = in_base(
        &g,
        &[
            "workspace",
            "create",
            "--repo",
            ".",
            "--strategy",
            "worktree",
            "--json",
        ],
    );
    assert_eq!(code(&made), 0, "{}", stderr(&made));
    let made: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
    let (ws, id) = (made["path"].as_str().unwrap(), made["id"].as_str().unwrap());
    assert!(
        ws.starts_with(g.base.join(".git/baton/workspaces").to_str().unwrap()),
        "{ws}"
    );
    let script =
        format!("echo n > n.txt && git add n.txt && git commit -qm nested && {BATON} git push");
    let out = g
        .baton_in(
            std::path::Path::new(ws),
            &[
                "run",
                "--workspace",
                ".",
                "--fetch",
                "--fetch-debounce",
                "0s",
                "--ref",
                "origin/main",
                "--branch",
                "rel-nested",
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        g.git_ok(&g.remote, &["log", "-1", "--format=%s", "rel-nested"]),
        "nested"
    );
    let out = in_base(&g, &["workspace", "remove", id]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    assert_eq!(config(), before, "the user's remote config is untouched");
}
