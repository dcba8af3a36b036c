#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton lock status|list|acquire|release|break` with the real binary.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{code, stderr, stdout, wait_for_file, wait_until, Env};

#[test]
fn status_and_list_report_holder_waiters_and_json_fields() {
    let env = Env::new();
    let mut holder = env.spawn(&[
        "run",
        "--lock",
        "team/deploy",
        "--owner",
        "alice",
        "--operation",
        "deploy prod",
        "--",
        "sleep",
        "30",
    ]);
    env.wait_for_held("team/deploy", true);
    let mut waiter = env.spawn(&["run", "--lock", "team/deploy", "--", "true"]);
    env.wait_for_waiters("team/deploy", 1);
    let st = env.status("team/deploy");
    assert_eq!(st["name"], "team/deploy");
    assert_eq!(st["held"], true);
    assert_eq!(st["mode"], "exclusive");
    assert_eq!(st["waiters"], 1);
    assert_eq!(st["last_holder_died"], false);
    let h = &st["holder"];
    for key in [
        "pid",
        "host",
        "owner",
        "operation",
        "run_id",
        "acquired_at",
        "token",
        "alive",
    ] {
        assert!(!h[key].is_null(), "holder.{key} missing in {st}");
    }
    assert_eq!(h["owner"], "alice");
    assert_eq!(h["operation"], "deploy prod");
    assert_eq!(h["alive"], true);
    assert_eq!(h["pid"].as_u64().unwrap(), u64::from(holder.id()));
    let list: serde_json::Value =
        serde_json::from_slice(&env.run(&["lock", "list", "--json"]).stdout).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["name"], "team/deploy");
    let table = stdout(&env.run(&["lock", "list"]));
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("team/deploy")
            && table.contains("held (exclusive)")
            && table.contains("deploy prod"),
        "{table}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(waiter.wait().unwrap().success());
}

#[test]
fn a_holder_that_died_is_reported_as_free_last_holder_died() {
    let env = Env::new();
    // A script holds through the background holder, which is then SIGKILLed:
    // the script dies with it (its guardian), and the lock is free.
    let report = env.path("held.json");
    let mut script = common::shell(
        env.tmp.path(),
        &format!(
            "'{baton}' --dir '{dir}' lock acquire crash --json > '{report}.tmp' && mv '{report}.tmp' '{report}'; sleep 300",
            baton = env!("CARGO_BIN_EXE_baton"),
            dir = env.dir.display(),
            report = report.display()
        ),
    )
    .spawn()
    .unwrap();
    let held: serde_json::Value = serde_json::from_str(&wait_for_file(&report)).unwrap();
    let pid = held["holder_pid"].as_i64().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap()
        .success());
    let died = script.wait().unwrap();
    assert!(!died.success(), "the script outlived its killed holder");
    wait_until(Duration::from_secs(10), || {
        env.status("crash")["held"] == false
    });
    let st = env.status("crash");
    assert_eq!(st["last_holder_died"], true, "{st}");
    assert_eq!(st["last_holder"]["token"], held["token"]);
    assert_eq!(st["last_holder"]["alive"], false);
    assert!(stdout(&env.run(&["lock", "status", "crash"])).contains("free, last holder died"));
}

#[test]
fn acquire_prints_a_token_and_release_checks_it() {
    let env = Env::new();
    let out = env.run(&["lock", "acquire", "mem", "--operation", "edit memory"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    assert!(token.parse::<u64>().unwrap() > 0, "{token}");
    // Held by the background holder: others are refused.
    assert_eq!(
        code(&env.run(&["run", "--lock", "mem", "--no-wait", "--", "true"])),
        75
    );
    assert_eq!(code(&env.run(&["lock", "acquire", "mem", "--no-wait"])), 75);
    // A stale token changes nothing.
    let out = env.run(&["lock", "release", "mem", "--token", "7"]);
    assert_eq!(code(&out), 75);
    assert!(stderr(&out).contains("nothing changed"), "{}", stderr(&out));
    assert_eq!(env.status("mem")["held"], true);
    let out = env.run(&["lock", "release", "mem", "--token", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(env.status("mem")["held"], false);
    assert_eq!(
        env.status("mem")["last_holder_died"],
        false,
        "a clean release is not a death"
    );
    // Releasing a free lock says so.
    let out = env.run(&["lock", "release", "mem"]);
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("not held"));
}

#[test]
fn acquired_lock_ends_with_ttl_or_with_the_calling_process() {
    let env = Env::new();
    // The ttl ends the hold while the script still works under the lock:
    // the script is stopped first (TERM), and only then is the lock free.
    let script = ScriptHolding::start(&env, "ttl", "--ttl 300ms");
    script.assert_stopped_while_held();
    env.wait_for_held("ttl", false);

    // The caller (a shell) exits: the holder notices through its pidfd. The
    // shell keeps the lock until told to exit, so the test sees it held.
    let go = env.path("go");
    let script = format!(
        "{} --dir {} lock acquire parent || exit 1; while [ ! -e {g} ]; do sleep 0.01; done",
        env!("CARGO_BIN_EXE_baton"),
        env.dir.display(),
        g = go.display()
    );
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_for_held("parent", true);
    fs::write(&go, "").unwrap();
    assert!(sh.wait().unwrap().success());
    env.wait_for_held("parent", false);
}

/// `T=$(baton lock acquire x || exit 1)` runs acquire in a subshell that
/// exits at once; the lock must live as long as the script's shell.
#[test]
fn acquire_inside_a_command_substitution_watches_the_script_not_the_subshell() {
    let env = Env::new();
    let held_file = env.path("held");
    let shell_pid = env.path("shell-pid");
    // `|| exit 1` makes the shell fork a subshell; a pipe inside `$(...)`
    // makes it run a pipeline whose members' parent is that subshell. The
    // holder must be watching the script's own shell (`$$`): checked from
    // the status, not by waiting for a wrong watch to end the hold.
    let scripts = ["|| exit 1", "--json | cat"].map(|tail| {
        format!(
            "T=$({b} --dir {d} lock acquire subst {tail}); echo $$ > {p}; {b} --dir {d} lock status subst --json > {h}",
            b = env!("CARGO_BIN_EXE_baton"),
            d = env.dir.display(),
            p = shell_pid.display(),
            h = held_file.display()
        )
    });
    for (shell, script) in ["sh", "bash"]
        .into_iter()
        .flat_map(|sh| scripts.iter().map(move |s| (sh, s)))
    {
        let status = Command::new(shell).arg("-c").arg(script).status().unwrap();
        assert!(status.success());
        let st: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&held_file).unwrap()).unwrap();
        let pid: u64 = fs::read_to_string(&shell_pid)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(st["held"], true, "{shell} {script}: {st}");
        assert_eq!(
            st["holder"]["acquired_for"]["pid"], pid,
            "{shell} {script}: held for another process than the script's shell: {st}"
        );
        // And the script's exit ends the hold.
        env.wait_for_held("subst", false);
    }
}

#[test]
fn break_stops_a_live_local_holder_and_its_command() {
    let env = Env::new();
    let marker = env.path("term");
    let ready = env.path("ready");
    let cmd = format!(
        "trap 'echo TERM > {m}; exit 1' TERM; touch {r}; while :; do sleep 0.05; done",
        m = marker.display(),
        r = ready.display()
    );
    let holder = env.spawn(&["run", "--lock", "brk", "--", "sh", "-c", &cmd]);
    wait_for_file(&ready);
    let out = env.run(&["lock", "break", "brk", "--grace", "5s", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["was_held"], true);
    assert_eq!(
        report["stopped"][0]["action"], "exited after TERM",
        "{report}"
    );
    assert_eq!(
        report["stopped"][0]["holder"]["pid"].as_u64().unwrap(),
        u64::from(holder.id())
    );
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 1);
    assert_eq!(
        fs::read_to_string(&marker).unwrap().trim(),
        "TERM",
        "command got TERM"
    );
    assert_eq!(env.status("brk")["held"], false);
    // Breaking a free lock is a no-op.
    let out = env.run(&["lock", "break", "brk"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("not held"));
}

/// Holds the lock's slot byte with an OFD lock from Python, with metadata
/// that names a holder on another host, exactly as a baton on a shared
/// filesystem elsewhere would leave it.
#[test]
fn break_refuses_a_holder_on_another_host() {
    let env = Env::new();
    assert!(env
        .run(&["run", "--lock", "remote", "--", "true"])
        .status
        .success());
    let file = env.dir.join("locks/remote.lock");
    let doc = serde_json::json!({
        "format": 1, "name": "remote", "max": 1, "token": 5,
        "holders": [{"pid": 4242, "start_time": 1, "boot_id": "other-boot", "host": "build-box-7",
                     "owner": "ci@build-box-7", "run_id": "abc", "acquired_at": "2026-01-01T00:00:00Z",
                     "token": 5, "mode": "exclusive", "slot": 0, "kind": "run"}]
    });
    fs::write(&file, doc.to_string()).unwrap();
    let ready = env.path("ready");
    let py = format!(
        "import fcntl, struct, os, sys, time\n\
         fd = os.open({f:?}, os.O_RDWR)\n\
         fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack('hhqqi', fcntl.F_WRLCK, 0, 1 << 41, 1, 0))\n\
         open({r:?}, 'w').close()\n\
         sys.stdin.read()\n",
        f = file.display().to_string(),
        r = ready.display().to_string()
    );
    let mut holder = Command::new("python3")
        .arg("-c")
        .arg(py)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ready);
    let st = env.status("remote");
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["holder"]["host"], "build-box-7");
    let out = env.run(&["lock", "break", "remote"]);
    assert_eq!(code(&out), 125);
    let err = stderr(&out);
    assert!(
        err.contains("build-box-7") && err.contains("this host"),
        "{err}"
    );
    assert_eq!(env.status("remote")["held"], true, "nothing was broken");
    drop(holder.stdin.take());
    holder.wait().unwrap();
}

#[test]
fn an_abandoned_acquire_leaves_the_line() {
    let env = Env::new();
    let mut holder = env.spawn(&["run", "--lock", "line", "--", "sleep", "30"]);
    env.wait_for_held("line", true);
    let mut acquire = env.spawn(&["lock", "acquire", "line"]);
    env.wait_for_waiters("line", 1);
    acquire.kill().unwrap(); // like Ctrl-C or `timeout` on the script
    acquire.wait().unwrap();
    env.wait_for_waiters("line", 0);
    holder.kill().unwrap();
    holder.wait().unwrap();
    env.wait_for_held("line", false);
    let out = env.run(&["run", "--lock", "line", "--no-wait", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn release_without_a_token_never_frees_another_scripts_hold() {
    let env = Env::new();
    let b = env!("CARGO_BIN_EXE_baton");
    let d = env.dir.display().to_string();
    let go = env.path("go");
    // Script A takes the lock and keeps working until told to stop.
    let script_a = format!(
        "T=$({b} --dir {d} lock acquire memory) || exit 1; while [ ! -e {g} ]; do sleep 0.01; done; {b} --dir {d} lock release memory",
        g = go.display()
    );
    let mut a = Command::new("sh").arg("-c").arg(&script_a).spawn().unwrap();
    env.wait_for_held("memory", true);
    // Script B's acquire fails; its EXIT trap releases "its" lock anyway.
    let script_b = format!(
        "trap '{b} --dir {d} lock release memory' EXIT; {b} --dir {d} lock acquire memory --no-wait"
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script_b)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not for this script"),
        "{}",
        stderr(&out)
    );
    assert_eq!(env.status("memory")["held"], true, "B freed A's lock");
    // A releases its own without a token; --force is there for an operator.
    fs::write(&go, "").unwrap();
    assert!(a.wait().unwrap().success());
    env.wait_for_held("memory", false);
    let out = env.run(&["lock", "acquire", "memory"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let other = Command::new("sh")
        .arg("-c")
        .arg(format!("{b} --dir {d} lock release memory --force"))
        .output()
        .unwrap();
    assert!(other.status.success(), "{}", stderr(&other));
    env.wait_for_held("memory", false);
}

#[test]
fn break_of_an_acquired_lock_stops_the_script_before_the_lock_is_free() {
    let env = Env::new();
    let script = ScriptHolding::start(&env, "brk2", "");
    env.wait_for_held("brk2", true);
    let out = env.run(&["lock", "break", "brk2", "--grace", "5s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    script.assert_stopped_while_held();
    assert_eq!(env.status("brk2")["held"], false);
}

/// A shell script that holds `name` through `lock acquire` and works until
/// it is stopped; on TERM it records the lock's status and exits 3. The trap
/// is set before `acquire`, so however late the script runs after it, a
/// TERM (from a short `--ttl`, say) always finds it in place.
struct ScriptHolding {
    child: std::process::Child,
    at_term: std::path::PathBuf,
}

impl ScriptHolding {
    fn start(env: &Env, name: &str, acquire_args: &str) -> ScriptHolding {
        let at_term = env.path(&format!("{name}-at-term"));
        let script = format!(
            "trap '{b} --dir {d} lock status {name} --json > {t}; exit 3' TERM; {b} --dir {d} lock acquire {name} {acquire_args} >/dev/null || exit 1; while :; do sleep 0.05; done",
            b = env!("CARGO_BIN_EXE_baton"),
            d = env.dir.display(),
            t = at_term.display()
        );
        let child = Command::new("sh").arg("-c").arg(&script).spawn().unwrap();
        ScriptHolding { child, at_term }
    }

    /// The script was stopped by TERM while the lock was still held.
    fn assert_stopped_while_held(mut self) {
        let code = self.child.wait().unwrap().code();
        assert_eq!(code, Some(3), "the script was not stopped");
        let st: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&self.at_term).unwrap()).unwrap();
        assert_eq!(
            st["held"], true,
            "released before its caller was stopped: {st}"
        );
    }
}

#[test]
fn a_semaphore_waiter_still_waits_when_inotify_instances_are_used_up() {
    use std::os::unix::fs::{chown, PermissionsExt};
    // A user of our own (a numeric uid: /etc is not touched) whose inotify
    // instances (max_user_instances) are all taken by another process.
    let uid = 47_000 + (std::process::id() % 1000);
    let env = Env::new();
    fs::set_permissions(env.tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let work = env.path("work");
    fs::create_dir(&work).unwrap();
    chown(&work, Some(uid), Some(uid)).unwrap();
    let dir = work.join("baton");
    let as_user = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            env!("CARGO_BIN_EXE_baton"),
            "--dir",
            dir.to_str().unwrap(),
        ])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&work);
        c
    };
    let limit: usize = fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hog_code = format!(
        "import ctypes,sys,time\nlibc=ctypes.CDLL(None,use_errno=True)\nn=0\nwhile n<{limit} and libc.inotify_init1(0)>=0: n+=1\nprint(n,flush=True)\ntime.sleep(60)"
    );
    let mut hog = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            // Debian's Python: one under root's home is not open to that user.
            "/usr/bin/python3",
            "-c",
            &hog_code,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(hog.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(
        line.trim().parse::<usize>().unwrap() > 0,
        "the hog took no instance"
    );
    // Both slots taken; a third run must wait, not fail.
    let go = work.join("go");
    let hold = format!("while [ ! -e {} ]; do sleep 0.01; done", go.display());
    let holders: Vec<_> = (0..2)
        .map(|_| {
            as_user(&[
                "run", "--lock", "sem", "--max", "2", "--", "sh", "-c", &hold,
            ])
            .spawn()
            .unwrap()
        })
        .collect();
    let st = || {
        let out = as_user(&["lock", "status", "sem", "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    wait_until(Duration::from_secs(20), || {
        st()["holders"].as_array().is_some_and(|h| h.len() == 2)
    });
    let waiter = as_user(&[
        "run", "--lock", "sem", "--max", "2", "--wait", "30s", "--", "echo", "got",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_until(Duration::from_secs(20), || st()["waiters"] == 1);
    fs::write(&go, "").unwrap();
    let out = waiter.wait_with_output().unwrap();
    let _ = hog.kill();
    let _ = hog.wait();
    for mut h in holders {
        assert!(h.wait().unwrap().success());
    }
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "got");
}

/// `lock acquire` fails the way `run --lock` does, in the same words: the
/// background holder is an implementation detail, not part of the message.
#[test]
fn acquire_fails_with_the_same_message_and_code_as_run() {
    let env = Env::new();
    let mut holder = env.spawn(&["run", "--lock", "x", "--", "sleep", "30"]);
    env.wait_for_held("x", true);
    fs::create_dir_all(env.dir.join("locks/dir.lock")).unwrap();
    for (flags, want) in [
        (&["x", "--no-wait"][..], 75),
        (&["x", "--max", "2", "--no-wait"], 125),
        (&["dir"], 125),
    ] {
        let mut run_args = vec!["run", "--lock"];
        run_args.extend_from_slice(flags);
        run_args.extend_from_slice(&["--", "true"]);
        let by_run = env.run(&run_args);
        let mut acquire_args = vec!["lock", "acquire"];
        acquire_args.extend_from_slice(flags);
        let by_acquire = env.run(&acquire_args);
        assert_eq!(code(&by_run), want, "{flags:?}: {}", stderr(&by_run));
        assert_eq!(code(&by_acquire), want, "{flags:?}");
        // Only the time actually waited ("gave up after 0s" / "1ms") may differ.
        let words = |t: String| {
            t.split("gave up after")
                .next()
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(
            words(stderr(&by_acquire)),
            words(stderr(&by_run)),
            "{flags:?}"
        );
    }
    // A wait that elapsed: only the time actually waited may differ.
    let err = stderr(&env.run(&["lock", "acquire", "x", "--wait", "100ms"]));
    assert!(
        err.starts_with("baton: lock 'x' is busy (held by pid")
            && err.contains("gave up after")
            && err.ends_with("(waiting at most 100ms)\n"),
        "{err}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// A fault of the holder itself says what failed: here it is killed while it
/// waits in line, before it could report.
#[test]
fn a_holder_that_dies_before_reporting_is_named_in_plain_words() {
    let env = Env::new();
    let mut holder = env.spawn(&["run", "--lock", "x", "--", "sleep", "30"]);
    env.wait_for_held("x", true);
    let acquire = env.spawn(&["lock", "acquire", "x"]);
    env.wait_for_waiters("x", 1);
    // The one waiter is the background holder that `acquire` started.
    let children = format!("/proc/{0}/task/{0}/children", acquire.id());
    let hold_pid = fs::read_to_string(children).unwrap();
    let hold_pid = hold_pid.trim();
    assert!(hold_pid.parse::<u32>().is_ok(), "one child: {hold_pid:?}");
    assert!(Command::new("kill")
        .args(["-KILL", hold_pid])
        .status()
        .unwrap()
        .success());
    let out = acquire.wait_with_output().unwrap();
    assert_eq!(code(&out), 125);
    assert_eq!(
        stderr(&out),
        format!("baton: lock 'x' was not acquired: its background holder (pid {hold_pid}) was killed by signal 9 before reporting whether it got the lock\n")
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}
