#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Containers and sandboxes: cleaning up after a holder in a PID namespace
//! (README "Containers and sandboxes"): its dead run's leftovers, its
//! workspaces. Real namespaces (`unshare --pid --fork --mount-proc`, as
//! root), the real `baton` binary, real signals.
//!
//! Where the kernel refuses to create a PID namespace the tests say so loudly
//! and pass, except under CI (env `CI` set), where that is a failure.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::ns::{forked_child, namespaces_available, pid_here, pid_ns_of, running, NsGuard};
use common::{code, stderr, wait_until, Env};

/// Containment inside a PID namespace: a supervisor in a container dies by
/// SIGKILL, its command's background process goes on in the container; the
/// next holder, on the host, finishes it off (its ids translated from the
/// container's) before it runs.
#[test]
fn the_next_holder_on_the_host_stops_what_a_dead_holder_in_a_container_left_running() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    let baton = env!("CARGO_BIN_EXE_baton");
    let left = env.path("leftover");
    // pid 1 is a shell that outlives the supervisor, as a container's init.
    let mut container = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c"])
        .arg(format!(
            r#"{baton} --dir {dir} run --lock c -- sh -c 'sleep 300 & echo $! > {left}.tmp; mv {left}.tmp {left}; wait'; sleep 300"#,
            dir = env.dir.display(),
            left = left.display()
        ))
        .current_dir(env.tmp.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let init = forked_child(container.id());
    let _guard = NsGuard(init);
    let ns = pid_ns_of(init);
    let mut inner = String::new();
    wait_until(Duration::from_secs(20), || {
        inner = fs::read_to_string(&left).unwrap_or_default();
        inner.ends_with('\n')
    });
    let leftover = pid_here(ns, inner.trim().parse().unwrap());
    wait_until(Duration::from_secs(20), || {
        fs::read_to_string(env.dir.join("locks/c.lock")).is_ok_and(|t| t.contains("command_group"))
    });
    let st = env.status("c");
    let supervisor = i32::try_from(st["holder"]["local_pid"].as_i64().unwrap()).unwrap();
    assert_ne!(supervisor, init);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(supervisor).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    env.wait_for_held("c", false);
    assert!(running(leftover), "the leftover outlived its supervisor");
    // The host's run first stops the leftover, then runs its command.
    let marker = env.path("ran");
    let out = env.run(&[
        "run",
        "--lock",
        "c",
        "--",
        "sh",
        "-c",
        &format!(
            "if [ -e /proc/{leftover} ] && ! grep -q ') [ZX]' /proc/{leftover}/stat; then echo alive > {m}; else echo gone > {m}; fi",
            m = marker.display()
        ),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&marker).unwrap().trim(), "gone");
    assert!(
        running(init),
        "the container's init is not the dead holder's"
    );
    drop(_guard);
    let _ = container.wait();
}

/// Workspace gc across containers sharing a baton dir: another container's
/// gc never removes a workspace whose owner runs (its pid 1 is not the
/// owner, whatever its pid); the host removes it once that container is gone.
#[test]
fn workspace_gc_in_one_container_keeps_a_live_workspace_of_another() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    let home = env.tmp.path();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .env("HOME", home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(home)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    git(&["init", "-q", "base"]);
    fs::write(env.path("base/a.txt"), "one\n").unwrap();
    git(&["-C", "base", "add", "."]);
    git(&["-C", "base", "commit", "-qm", "init"]);
    let baton = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.display().to_string();
    let container = |script: String| {
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .current_dir(home)
            .stdin(Stdio::null());
        c
    };
    // Container A: its pid 1 (a shell, then `sleep` in its place: same
    // process) creates a workspace and lives on.
    let mut a = container(format!(
        "{baton} --dir {dir} workspace create --repo base --id wa > /dev/null && touch created; exec sleep 300"
    ))
    .spawn()
    .unwrap();
    let a_init = forked_child(a.id());
    let _guard = NsGuard(a_init);
    wait_until(Duration::from_secs(30), || env.path("created").exists());
    let list = json_of(&env.run(&["workspace", "list", "--json"]));
    let ws_path = std::path::PathBuf::from(list[0]["path"].as_str().unwrap());
    assert_eq!(list[0]["owner"]["pid"], 1, "{list}");
    assert_eq!(list[0]["owner_alive"], "alive", "{list}");

    // Container B: its own pid 1 runs gc. A's owner is not visible there.
    let out = container(format!("{baton} --dir {dir} workspace gc --json"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["removed"].as_array().unwrap().is_empty(), "{report}");
    assert!(ws_path.is_dir(), "B's gc removed A's live workspace");
    // The host sees A's owner alive.
    let report = json_of(&env.run(&["workspace", "gc", "--json"]));
    assert!(report["removed"].as_array().unwrap().is_empty(), "{report}");
    assert!(ws_path.is_dir());

    // A is gone: from the host (which sees every namespace) its owner is dead.
    drop(_guard);
    let _ = a.wait();
    let report = json_of(&env.run(&["workspace", "gc", "--json"]));
    assert_eq!(report["removed"].as_array().unwrap().len(), 1, "{report}");
    assert!(!ws_path.exists());
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    assert_eq!(code(out), 0, "{}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A container without an init (issue 26, item 7): the caller is pid 1 and
/// reaps only the processes it started itself, so every background holder
/// of `lock acquire` stays defunct when it ends. The caller is told once,
/// with the fix, and `doctor` says so.
#[test]
fn a_caller_as_pid_1_without_an_init_is_warned_once_and_doctor_says_so() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    let program = r#"
import subprocess, sys
baton, d = sys.argv[1], sys.argv[2]
warned = 0
for i in range(20):
    a = subprocess.run([baton, "--dir", d, "lock", "acquire", "z"], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    warned += a.stderr.count("does not reap")
    r = subprocess.run([baton, "--dir", d, "lock", "release", "z", "--token", a.stdout.strip()], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
doc = subprocess.run([baton, "--dir", d, "doctor"], capture_output=True, text=True)
print("warned", warned)
print("doctor", "does not reap" in doc.stdout + doc.stderr)
"#;
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "python3", "-c", program])
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg(&env.dir)
        .current_dir(env.tmp.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!("{} {}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(out.status.success(), "{said}");
    assert!(said.contains("warned 1\n"), "{said}");
    assert!(said.contains("doctor True"), "{said}");
}
