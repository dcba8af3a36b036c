#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! A lock name means one lock per user on the machine (docs/src/design/architecture.md, decision
//! 10): callers in separate clones of one repository, with no `--dir` and
//! no `BATON_DIR`, exclude each other; what belongs to a repository
//! (workspaces, its lock) stays in that repository. Real binary, real git
//! clones; HOME, XDG_RUNTIME_DIR and TMPDIR are the test's own directories.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use baton_contract::exit;
use common::{code, stderr, stdout, wait_until, Env};

/// An origin repository with one commit and two separate clones of it.
struct Clones {
    env: Env,
    run: PathBuf,
    a: PathBuf,
    b: PathBuf,
}

impl Clones {
    fn new() -> Clones {
        let env = Env::new();
        let run = env.path("run");
        fs::create_dir(&run).unwrap();
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(
            env.path("gitconfig"),
            "[init]\n\tdefaultBranch = main\n[maintenance]\n\tauto = false\n[gc]\n\tauto = 0\n[user]\n\tname = t\n\temail = t@t\n",
        )
        .unwrap();
        let c = Clones {
            a: env.path("a"),
            b: env.path("b"),
            run,
            env,
        };
        let top = c.env.tmp.path();
        c.git(top, &["init", "-q", "origin"]);
        fs::write(top.join("origin/f.txt"), "one\n").unwrap();
        c.git(&top.join("origin"), &["add", "."]);
        c.git(&top.join("origin"), &["commit", "-qm", "init"]);
        c.git(top, &["clone", "-q", "origin", "a"]);
        c.git(top, &["clone", "-q", "origin", "b"]);
        c
    }

    fn git(&self, cwd: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("HOME", self.env.tmp.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.env.path("gitconfig"))
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    }

    /// `baton ARGS` in `cwd` as an agent runs it: no `--dir`, no `BATON_DIR`.
    fn baton(&self, cwd: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.env.tmp.path())
            .env("TMPDIR", self.env.tmp.path())
            .env("XDG_RUNTIME_DIR", &self.run)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.env.path("gitconfig"))
            .current_dir(cwd)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn output(&self, cwd: &Path, args: &[&str]) -> Output {
        self.baton(cwd, args).output().unwrap()
    }

    /// `baton doctor --json` in `cwd`: the report and its check `name`.
    fn doctor(&self, cwd: &Path, name: &str) -> (serde_json::Value, serde_json::Value) {
        let out = self.output(cwd, &["doctor", "--json"]);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let check = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name} in {r}"))
            .clone();
        (r, check)
    }

    /// `baton ARGS -- sh -c '...'` in `cwd`, holding until `release` exists.
    fn hold(&self, cwd: &Path, args: &[&str], ready: &Path, release: &Path) -> Child {
        let script = format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
            ready.display(),
            release.display()
        );
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--", "sh", "-c", &script]);
        let child = self
            .baton(cwd, &all)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_until(Duration::from_secs(30), || ready.exists());
        child
    }
}

#[test]
fn separate_clones_of_one_repository_share_lock_names() {
    let c = Clones::new();
    let (ready, release) = (c.env.path("ready"), c.env.path("release"));
    let holder = c.hold(&c.a, &["run", "--lock", "michi"], &ready, &release);

    // From the other clone: the same lock, busy.
    let busy = c.output(&c.b, &["run", "--lock", "michi", "--no-wait", "--", "true"]);
    assert_eq!(code(&busy), exit::NOT_ACQUIRED, "{}", stderr(&busy));
    let st = c.output(&c.b, &["lock", "status", "michi", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["held"], true, "{st}");
    assert!(
        Path::new(st["path"].as_str().unwrap()).starts_with(c.env.tmp.path())
            && st["path"].as_str().unwrap().contains("/baton-"),
        "the lock lives in this user's <temp dir>/baton-<uid>: {st}"
    );
    fs::write(&release, "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // Both clones at once, many times: never two in the critical section.
    let inside = c.env.path("inside");
    let section = format!(
        "mkdir '{0}' || exit 9; sleep 0.02; rmdir '{0}'",
        inside.display()
    );
    let runners: Vec<Child> = (0..6)
        .map(|i| {
            let cwd = if i % 2 == 0 { &c.a } else { &c.b };
            c.baton(cwd, &["run", "--lock", "michi", "--", "sh", "-c", &section])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for r in runners {
        let out = r.wait_with_output().unwrap();
        assert_eq!(code(&out), 0, "overlap or failure: {}", stderr(&out));
    }
}

#[test]
fn groups_and_state_locks_are_per_machine_too() {
    let c = Clones::new();
    let (ready, release) = (c.env.path("ready"), c.env.path("release"));
    let holder = c.hold(
        &c.a,
        &["run", "--group", "deploy", "--mode", "skip"],
        &ready,
        &release,
    );
    let skipped = c.output(
        &c.b,
        &["run", "--group", "deploy", "--mode", "skip", "--", "true"],
    );
    assert_eq!(code(&skipped), exit::NOT_ACQUIRED, "{}", stderr(&skipped));
    fs::write(&release, "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));

    // A state file's lock, named by a caller in one clone, by a writer in the other.
    let (ready, release) = (c.env.path("ready2"), c.env.path("release2"));
    let holder = c.hold(&c.a, &["run", "--lock", "memory"], &ready, &release);
    let state = c.env.path("memory.json");
    let busy = c.output(
        &c.b,
        &[
            "state",
            "edit",
            state.to_str().unwrap(),
            "--lock",
            "memory",
            "--no-wait",
            "--",
            "echo",
            "{}",
        ],
    );
    assert_eq!(code(&busy), exit::NOT_ACQUIRED, "{}", stderr(&busy));
    assert!(!state.exists());
    fs::write(&release, "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn workspaces_and_the_repository_lock_stay_in_their_repository() {
    let c = Clones::new();
    let out = c.output(&c.a, &["workspace", "create", "--repo", ".", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let ws: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let path = PathBuf::from(ws["path"].as_str().unwrap());
    let a_git = fs::canonicalize(c.a.join(".git")).unwrap();
    assert!(
        path.starts_with(a_git.join("baton/workspaces")),
        "a workspace lives with its repository, not in the runtime dir: {}",
        path.display()
    );
    assert!(!c.run.join("baton/workspaces").exists());
    // The repository lock was taken in the repository's own baton dir.
    let repo_lock = baton_git::Repo::open(&c.a).unwrap().lock_name().unwrap();
    assert!(a_git
        .join("baton/locks")
        .join(format!("{}.lock", repo_lock.file_stem()))
        .exists());

    let listed = |cwd: &Path| -> Vec<String> {
        let out = c.output(cwd, &["workspace", "list", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        all.as_array()
            .unwrap()
            .iter()
            .map(|w| w["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&c.a), vec![ws["id"].as_str().unwrap().to_string()]);
    assert!(listed(&c.b).is_empty(), "clone b has no workspaces");

    // `run --workspace` from elsewhere records it with the base repository.
    let out = c.output(
        c.env.tmp.path(),
        &[
            "run",
            "--workspace",
            c.b.to_str().unwrap(),
            "--keep-workspace",
            "--",
            "sh",
            "-c",
            "pwd",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let b_git = fs::canonicalize(c.b.join(".git")).unwrap();
    assert!(
        Path::new(stdout(&out).trim()).starts_with(b_git.join("baton/workspaces")),
        "{}",
        stdout(&out)
    );
    assert_eq!(listed(&c.b).len(), 1);

    // A workspace whose owner (the shell that made it) is gone: `doctor`
    // inside its repository finds it.
    let bin = env!("CARGO_BIN_EXE_baton");
    let sh = c.baton(&c.a, &[]); // its environment, for a shell that runs baton
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("'{bin}' workspace create --repo . --id orphan"),
        ])
        .env_clear()
        .envs(sh.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(&c.a)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let (_, check) = c.doctor(&c.a, "workspaces");
    assert_eq!(check["status"], "warning", "{check:#}");
    assert!(check.to_string().contains("orphan"), "{check:#}");
}

#[test]
fn a_holder_in_the_old_per_clone_dir_is_named_during_an_upgrade() {
    let c = Clones::new();
    let old = fs::canonicalize(c.a.join(".git")).unwrap().join("baton");
    let (ready, release) = (c.env.path("ready"), c.env.path("release"));
    // An older baton's default inside clone a was <git common dir>/baton.
    let holder = c.hold(
        &c.a,
        &["--dir", old.to_str().unwrap(), "run", "--lock", "michi"],
        &ready,
        &release,
    );
    let out = c.output(&c.a, &["run", "--lock", "michi", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains("michi") && err.contains(old.to_str().unwrap()),
        "{err}"
    );
    let (r, check) = c.doctor(&c.a, "baton_dir");
    assert_eq!(check["status"], "warning", "{check:#}");
    assert_eq!(check["detail"]["held_in_previous_default"][0], "michi");
    assert_eq!(r["rule"], "temp_dir");

    fs::write(&release, "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Nobody left there: no warning.
    let out = c.output(&c.a, &["run", "--lock", "michi", "--", "true"]);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn init_shared_never_shares_the_users_own_default_dir() {
    let c = Clones::new();
    let out = c.output(&c.a, &["init", "--shared", "0"]);
    assert_eq!(code(&out), exit::BATON_FAILED, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("name the dir to share"),
        "{}",
        stderr(&out)
    );
    assert!(!c.run.join("baton").exists(), "nothing created or changed");
}

/// A cron job or a systemd service has no `XDG_RUNTIME_DIR`; the user's
/// shells do. Both name the same lock: the default dir does not depend on
/// whether the caller runs in a login session.
#[test]
fn a_caller_without_a_login_session_shares_names_with_one_in_a_session() {
    let c = Clones::new();
    let (ready, release) = (c.env.path("ready"), c.env.path("release"));
    let holder = c.hold(&c.a, &["run", "--lock", "michi"], &ready, &release);
    for cwd in [&c.a, &c.b] {
        let busy = c
            .baton(cwd, &["run", "--lock", "michi", "--no-wait", "--", "true"])
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .unwrap();
        assert_eq!(code(&busy), exit::NOT_ACQUIRED, "{}", stderr(&busy));
    }
    fs::write(&release, "").unwrap();
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let free = c
        .baton(&c.b, &["run", "--lock", "michi", "--no-wait", "--", "true"])
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .unwrap();
    assert_eq!(code(&free), 0, "{}", stderr(&free));
}

/// A `$TMPDIR` that names nothing is reported (exit 125, one line naming
/// it), never created as a tree of directories.
#[test]
fn a_missing_temporary_dir_is_reported_not_created() {
    let c = Clones::new();
    let missing = c.env.path("no/such/tmp");
    let out = c
        .baton(&c.a, &["run", "--lock", "michi", "--", "true"])
        .env("TMPDIR", &missing)
        .output()
        .unwrap();
    assert_eq!(code(&out), exit::BATON_FAILED, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(missing.to_str().unwrap()) && err.lines().count() == 1,
        "{err}"
    );
    assert!(!c.env.path("no").exists(), "nothing was created");
}
