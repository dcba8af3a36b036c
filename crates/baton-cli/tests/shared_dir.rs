#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! A baton dir shared by several users (`baton init --shared GROUP DIR`):
//! real unprivileged users, created for the test with `useradd` and removed
//! at the end, run the real `baton` binary (copied where they can execute
//! it) with a umask of 077, and coordinate through one dir. Needs root;
//! without it the test says so loudly and passes, except under CI.

use crate::common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{code, stderr, stdout, wait_until};

/// Users and a group made for one test, removed when dropped.
struct Accounts {
    group: String,
    users: Vec<String>,
}

impl Accounts {
    fn create(tag: &str) -> Accounts {
        let group = format!("bt{tag}g");
        must(Command::new("groupadd").arg(&group));
        let mut accounts = Accounts {
            group,
            users: Vec::new(),
        };
        for (who, member) in [("a", true), ("b", true), ("c", false)] {
            let name = format!("bt{tag}{who}");
            let mut add = Command::new("useradd");
            add.args(["-M", "-N", "-s", "/bin/sh"]);
            if member {
                add.args(["-G", &accounts.group]);
            }
            must(add.arg(&name));
            accounts.users.push(name);
        }
        accounts
    }

    fn user(&self, i: usize) -> &str {
        &self.users[i]
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = Command::new("userdel").arg(u).output();
        }
        let _ = Command::new("groupdel").arg(&self.group).output();
    }
}

fn must(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        stdout(&out),
        stderr(&out)
    );
    out
}

fn is_root() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "the shared-dir test needs root (it creates users); CI runs the tests as root"
    );
    eprintln!("\n!!! SKIPPED: not root, cannot create users to test a shared baton dir !!!\n");
    false
}

/// The test's world: a temp dir everyone may enter, the binary copied into it.
struct World {
    tmp: tempfile::TempDir,
    baton: PathBuf,
    shared: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let baton = tmp.path().join("baton");
        fs::copy(env!("CARGO_BIN_EXE_baton"), &baton).unwrap();
        fs::set_permissions(&baton, fs::Permissions::from_mode(0o755)).unwrap();
        // A place every user may write markers to.
        let work = tmp.path().join("work");
        fs::create_dir(&work).unwrap();
        fs::set_permissions(&work, fs::Permissions::from_mode(0o1777)).unwrap();
        // HOME of every user: the base repository belongs to root, which git
        // refuses to use for others unless told (as every user of a shared
        // repository must tell it).
        fs::write(work.join(".gitconfig"), "[safe]\n\tdirectory = *\n").unwrap();
        let shared = tmp.path().join("shared");
        World { tmp, baton, shared }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `baton --dir DIR ARGS` as `user`, umask 077, in a clean environment.
    fn baton_as(&self, user: &str, dir: &Path, args: &[&str]) -> Command {
        let gid = stdout(&must(Command::new("id").args(["-g", user])))
            .trim()
            .to_string();
        let mut c = Command::new("setpriv");
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path("work"))
            .current_dir(self.path("work"))
            .arg(format!("--reuid={user}"))
            .arg(format!("--regid={gid}"))
            .args([
                "--init-groups",
                "--",
                "sh",
                "-c",
                "umask 077; exec \"$@\"",
                "sh",
            ])
            .arg(&self.baton)
            .arg("--dir")
            .arg(dir)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn run_as(&self, user: &str, args: &[&str]) -> Output {
        self.baton_as(user, &self.shared, args).output().unwrap()
    }
}

#[test]
fn members_of_the_group_share_a_baton_dir_and_others_are_refused_with_the_remedy() {
    if !is_root() {
        return;
    }
    let tag = format!("{:05}", std::process::id() % 100_000);
    let acc = Accounts::create(&tag);
    let w = World::new();
    let (a, b, c) = (acc.user(0), acc.user(1), acc.user(2));
    let gid = stdout(&must(Command::new("getent").args(["group", &acc.group])))
        .split(':')
        .nth(2)
        .unwrap()
        .parse::<u32>()
        .unwrap();

    // Set up by root; the dir is root's, shared with the group.
    let out = must(
        Command::new(&w.baton)
            .args(["init", "--shared", &acc.group])
            .arg(&w.shared),
    );
    assert!(stdout(&out).contains(&acc.group), "{}", stdout(&out));
    let meta = fs::metadata(&w.shared).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o2770);
    assert_eq!((meta.uid(), meta.gid()), (0, gid));

    // Locks: b sees a's hold and waits for it; the lock file a created
    // (umask 077) is usable by b.
    let mut holder = w
        .baton_as(
            a,
            &w.shared,
            &[
                "run",
                "--lock",
                "deploy",
                "--",
                "sh",
                "-c",
                "touch started; while [ ! -e go ]; do sleep 0.05; done",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), || w.path("work/started").exists());
    let out = w.run_as(b, &["run", "--lock", "deploy", "--no-wait", "--", "true"]);
    assert_eq!(
        code(&out),
        75,
        "b must find a's lock busy: {}",
        stderr(&out)
    );
    let out = w.run_as(b, &["lock", "status", "deploy", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["holder"]["liveness"], "alive", "{st}");
    fs::write(w.path("work/go"), "").unwrap();
    let status = holder.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let out = w.run_as(b, &["run", "--lock", "deploy", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let lock_file = fs::metadata(w.shared.join("locks/deploy.lock")).unwrap();
    assert_eq!(lock_file.gid(), gid);
    assert_eq!(
        lock_file.mode() & 0o060,
        0o060,
        "group read-write despite umask 077"
    );

    // Groups and the event log, created by one, used by the other.
    for u in [a, b] {
        let out = w.run_as(u, &["run", "--group", "nightly", "--", "true"]);
        assert_eq!(code(&out), 0, "{u}: {}", stderr(&out));
    }
    let out = w.run_as(a, &["events", "--group", "nightly"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("\"finished\"").count(),
        2,
        "{}",
        stdout(&out)
    );

    // State files in a project dir of the group keep their group.
    let proj = w.path("proj");
    fs::create_dir(&proj).unwrap();
    rustix::fs::chown(&proj, None, Some(rustix::fs::Gid::from_raw(gid))).unwrap();
    fs::set_permissions(&proj, fs::Permissions::from_mode(0o2770)).unwrap();
    let tasks = proj.join("tasks.json");
    let tasks_arg = tasks.to_str().unwrap();
    for u in [a, b, a] {
        let out = w.run_as(
            u,
            &[
                "state",
                "edit",
                tasks_arg,
                "--",
                "jq",
                "-c",
                "-n",
                "(try input catch {}) | .n = ((.n // 0) + 1)",
            ],
        );
        assert_eq!(code(&out), 0, "{u}: {}", stderr(&out));
    }
    let value: serde_json::Value = serde_json::from_slice(&fs::read(&tasks).unwrap()).unwrap();
    assert_eq!(value["n"], 3);
    assert_eq!(fs::metadata(&tasks).unwrap().gid(), gid);

    // Workspaces of one repository, created by both.
    let repo = w.path("repo");
    must(
        Command::new("git")
            .args(["init", "-q", "--shared=group"])
            .arg(&repo),
    );
    fs::write(repo.join("README"), "hello\n").unwrap();
    must(
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["add", "README"]),
    );
    must(
        Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(["commit", "-q", "-m", "init"]),
    );
    must(Command::new("chgrp").args(["-R", &acc.group]).arg(&repo));
    must(Command::new("chmod").args(["-R", "g+rwX"]).arg(&repo));
    must(
        Command::new(&w.baton)
            .args(["init", "--shared", &acc.group])
            .arg(repo.join(".git/baton")),
    );
    for (u, id) in [(a, "ws-a"), (b, "ws-b")] {
        let out = w.run_as(
            u,
            &[
                "workspace",
                "create",
                "--repo",
                repo.to_str().unwrap(),
                "--id",
                id,
            ],
        );
        assert_eq!(code(&out), 0, "{u}: {}", stderr(&out));
    }
    let out = w.run_as(b, &["workspace", "list", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");

    // Someone outside the group is refused, with the remedy named.
    let out = w.run_as(c, &["lock", "status"]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("you (uid") && err.contains(&format!("usermod -aG {}", acc.group)),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Still refused: a world-writable shared dir, and a symlink to one.
    let open = w.path("open");
    must(
        Command::new(&w.baton)
            .args(["init", "--shared", &acc.group])
            .arg(&open),
    );
    fs::set_permissions(&open, fs::Permissions::from_mode(0o2777)).unwrap();
    let out = w.baton_as(a, &open, &["lock", "status"]).output().unwrap();
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains("writable by every user"),
        "{}",
        stderr(&out)
    );
    let link = w.path("link");
    std::os::unix::fs::symlink(&w.shared, &link).unwrap();
    let out = w.baton_as(a, &link, &["lock", "status"]).output().unwrap();
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
}

#[test]
fn init_with_an_unknown_group_or_without_one_is_a_one_line_error() {
    let env = common::Env::new();
    let dir = env.path("shared");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["init", "--shared", "no-such-group-for-baton"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    let err = stderr(&out);
    assert!(
        err.contains("unknown group 'no-such-group-for-baton'"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!dir.exists(), "nothing is created on bad input");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("init")
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("--shared"), "{}", stderr(&out));
    assert!(!dir.exists());
}
