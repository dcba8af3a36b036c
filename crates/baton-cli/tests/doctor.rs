#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton doctor` and the network-filesystem warning of `run` and `lock
//! acquire`. Real binary, real directories, a real OFD probe. A network or
//! FUSE mount cannot be made here: those judgements run in process, with
//! the filesystem probe injected (`baton::seams`); the binary always asks
//! the kernel.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use baton_contract::exit;
use baton_contract::json::DOCTOR_CHECKS;
use common::{code, stderr, stdout, Env};

use baton::seams::{doctor, remote_warning};
use baton_lock::{Filesystem, LockError};

/// Probes that find a network (NFS) or FUSE filesystem under every path.
fn nfs(_: &Path) -> Result<Filesystem, LockError> {
    Ok(Filesystem::from_magic(0x6969))
}
fn fuse(_: &Path) -> Result<Filesystem, LockError> {
    Ok(Filesystem::from_magic(0x6573_5546))
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}{}", stdout(out), stderr(out)))
}

fn check<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {r}"))
}

/// `baton ARGS` with a cleared environment, in `cwd`, with no `--dir`.
fn bare(env: &Env, cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .env("TMPDIR", env.tmp.path())
        .current_dir(cwd)
        .args(args)
        .stdin(Stdio::null());
    c
}

#[test]
fn doctor_on_a_fresh_temp_dir_is_all_good() {
    let env = Env::new();
    let out = env.run(&["doctor", "--json"]);
    let r = report(&out);
    assert_eq!(code(&out), exit::SUCCESS, "{r:#}");
    assert_eq!(r["status"], "ok");
    assert_eq!(r["rule"], "explicit");
    assert_eq!(r["baton_dir"], env.dir.to_str().unwrap());
    let names: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, DOCTOR_CHECKS);
    // Every check passes; the backend's is skipped without --backend.
    for c in r["checks"].as_array().unwrap() {
        let want = if c["name"] == "backend" {
            "skipped"
        } else {
            "ok"
        };
        assert_eq!(c["status"], want, "{c:#}");
        assert!(c["remedy"].is_null(), "{c:#}");
    }
    assert_eq!(check(&r, "locks")["status"], "ok");
    assert_eq!(check(&r, "filesystem")["detail"]["class"], "local");
    // The probe left nothing behind in the baton dir.
    let left: Vec<_> = fs::read_dir(&env.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["locks"], "{left:?}");

    let text = env.run(&["doctor"]);
    assert_eq!(code(&text), exit::SUCCESS);
    assert!(stdout(&text).contains("all good"), "{}", stdout(&text));
    assert!(stderr(&text).is_empty(), "{}", stderr(&text));
}

#[test]
fn doctor_refuses_a_world_writable_dir_and_names_the_remedy() {
    let env = Env::new();
    fs::create_dir(&env.dir).unwrap();
    fs::set_permissions(&env.dir, fs::Permissions::from_mode(0o777)).unwrap();
    let out = env.run(&["doctor", "--json"]);
    let r = report(&out);
    assert_eq!(code(&out), exit::BATON_FAILED, "{r:#}");
    assert_eq!(r["status"], "error");
    let perm = check(&r, "permissions");
    assert_eq!(perm["status"], "error");
    assert!(
        perm["summary"]
            .as_str()
            .unwrap()
            .contains("writable by every user"),
        "{perm:#}"
    );
    assert!(
        perm["remedy"].as_str().unwrap().contains("chmod o-w"),
        "{perm:#}"
    );
    assert_eq!(check(&r, "locks")["status"], "skipped");
    // Nothing was created in a directory baton refuses.
    assert_eq!(fs::read_dir(&env.dir).unwrap().count(), 0);

    let text = env.run(&["doctor"]);
    assert_eq!(code(&text), exit::BATON_FAILED);
    let s = stdout(&text);
    assert!(s.contains("ERROR    permissions"), "{s}");
    assert!(s.contains("remedy: chmod o-w"), "{s}");
    assert!(s.contains("baton cannot work here"), "{s}");
}

#[test]
fn doctor_warns_loudly_about_network_and_fuse_filesystems() {
    type Probe = fn(&Path) -> Result<Filesystem, LockError>;
    for (probe, name, class) in [(nfs as Probe, "nfs", "network"), (fuse, "fuse", "fuse")] {
        let env = Env::new();
        let out = doctor(Some(&env.dir), None, probe);
        let r: serde_json::Value = serde_json::from_str(out.json.as_ref().unwrap()).unwrap();
        assert_eq!(i32::from(out.code), exit::DOCTOR_WARNINGS, "{r:#}");
        assert_eq!(r["status"], "warning");
        assert!(
            out.text.contains("baton works here, with 1 warning(s)"),
            "{}",
            out.text
        );
        let fs_check = check(&r, "filesystem");
        assert_eq!(fs_check["status"], "warning", "{fs_check:#}");
        assert_eq!(fs_check["detail"]["name"], name);
        assert_eq!(fs_check["detail"]["class"], class);
        let summary = fs_check["summary"].as_str().unwrap();
        assert!(summary.starts_with("NOT A LOCAL FILESYSTEM"), "{summary}");
        assert!(
            fs_check["remedy"]
                .as_str()
                .unwrap()
                .contains("local filesystem"),
            "{fs_check:#}"
        );
        // Every other check still passes: the warning is the filesystem's.
        for c in r["checks"].as_array().unwrap() {
            match c["name"].as_str() {
                Some("filesystem") => {}
                Some("backend") => assert_eq!(c["status"], "skipped", "{c:#}"),
                _ => assert_eq!(c["status"], "ok", "{c:#}"),
            }
        }
    }
}

#[test]
fn doctor_reports_which_rule_chose_the_baton_dir() {
    let env = Env::new();
    let plain = env.path("plain");
    fs::create_dir(&plain).unwrap();
    assert_eq!(
        baton_lock::git_common_dir(&plain),
        None,
        "the temp dir must not be inside a git repository for this test"
    );
    let rule_of = |c: &mut Command| {
        let out = c.output().unwrap();
        let r = report(&out);
        assert_eq!(code(&out), exit::SUCCESS, "{r:#}");
        (
            r["rule"].as_str().unwrap().to_string(),
            r["baton_dir"].as_str().unwrap().to_string(),
        )
    };

    let from_env = env.path("from-env");
    let (rule, dir) =
        rule_of(bare(&env, &plain, &["doctor", "--json"]).env("BATON_DIR", &from_env));
    assert_eq!(
        (rule.as_str(), dir.as_str()),
        ("env", from_env.to_str().unwrap())
    );

    let repo = env.path("repo");
    fs::create_dir(&repo).unwrap();
    let init = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", stderr(&init));
    let run = env.path("run");
    fs::create_dir(&run).unwrap();
    fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).unwrap();
    // Inside a git repository as outside, in a login session (with
    // XDG_RUNTIME_DIR) or not: this user's <temp dir>/baton-<uid>, not the
    // clone's (lock names are per machine, docs/src/design/architecture.md decision 10; TMPDIR is
    // the test's own dir).
    for cwd in [&plain, &repo] {
        for session in [true, false] {
            let mut cmd = bare(&env, cwd, &["doctor", "--json"]);
            if session {
                cmd.env("XDG_RUNTIME_DIR", &run);
            }
            let (rule, dir) = rule_of(&mut cmd);
            assert_eq!(rule, "temp_dir");
            assert!(
                Path::new(&dir).starts_with(env.tmp.path()) && dir.contains("baton-"),
                "{dir}"
            );
        }
    }

    let text = bare(&env, &plain, &["doctor"])
        .env("BATON_DIR", &from_env)
        .output()
        .unwrap();
    assert!(
        stdout(&text).contains("from $BATON_DIR"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn doctor_lists_leftover_workspaces_of_dead_owners_and_names_gc() {
    let env = Env::new();
    let repo = env.path("repo");
    fs::create_dir(&repo).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &[
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "one",
        ],
    ] {
        let out = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    }
    // The owner of a workspace is the process that ran `workspace create`'s
    // parent: a shell that exits right after (`; true` keeps it from exec'ing).
    let script = format!(
        "'{}' --dir '{}' workspace create --json; true",
        env!("CARGO_BIN_EXE_baton"),
        env.dir.display()
    );
    let created = Command::new("sh")
        .args(["-c", &script])
        .current_dir(&repo)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    let ws: serde_json::Value = serde_json::from_slice(&created.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", stderr(&created)));

    let out = env.run(&["doctor", "--json"]);
    let r = report(&out);
    assert_eq!(code(&out), exit::DOCTOR_WARNINGS, "{r:#}");
    let c = check(&r, "workspaces");
    assert_eq!(c["status"], "warning", "{c:#}");
    assert_eq!(c["detail"]["leftovers"][0]["id"], ws["id"]);
    assert!(c["remedy"].as_str().unwrap().contains("baton workspace gc"));

    // After gc, all is well again.
    let gc = env.run(&["workspace", "gc"]);
    assert!(gc.status.success(), "{}", stderr(&gc));
    let after = env.run(&["doctor", "--json"]);
    assert_eq!(code(&after), exit::SUCCESS, "{:#}", report(&after));
}

#[test]
fn run_and_lock_acquire_warn_on_a_network_filesystem() {
    let env = Env::new();
    let err = remote_warning(&env.dir, nfs).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("baton: warning: the baton dir"), "{err}");
    assert!(err.contains("nfs (a network filesystem"), "{err}");
    let err = remote_warning(&env.dir, fuse).unwrap();
    assert!(err.contains("fuse (a FUSE filesystem"), "{err}");
    assert_eq!(remote_warning(&env.dir, baton_lock::filesystem), None);

    // The real binary, on this machine's local filesystem: no warning.
    let out = env.run(&["run", "--lock", "x", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let held = env
        .baton(&["lock", "acquire", "y"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(code(&held), 0, "{}", stderr(&held));
    assert!(stderr(&held).is_empty(), "{}", stderr(&held));
    let token = stdout(&held).trim().to_string();
    let rel = env.run(&["lock", "release", "y", "--token", &token]);
    assert!(rel.status.success(), "{}", stderr(&rel));
}
