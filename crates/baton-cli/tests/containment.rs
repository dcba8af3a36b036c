#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Containment (docs/src/design/architecture.md, decisions 11 and 12): a run's processes never
//! outlive its hold, and a deleted lock file never admits a second holder.
//! Real `baton` binary, real process groups, real SIGKILL.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{code, stderr, stdout, wait_until, Env};

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    baton_proc::procfs::stat(pid).is_some_and(|st| !st.exited)
}

fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Waits until `path` holds `n` pids, one per line.
fn wait_for_pids(path: &std::path::Path, n: usize) -> Vec<i32> {
    let mut got = Vec::new();
    wait_until(Duration::from_secs(20), || {
        got = fs::read_to_string(path)
            .map(|t| pids(&t))
            .unwrap_or_default();
        got.len() >= n
    });
    got
}

/// Waits until the holder of `lock_file` has recorded its command's process
/// group (it always has once the command runs; this checks the record is
/// where the next holder will look).
fn wait_recorded(lock_file: &std::path::Path) {
    wait_until(Duration::from_secs(20), || {
        fs::read_to_string(lock_file)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t.lines().next()?).ok())
            .is_some_and(|doc| {
                doc["holders"]
                    .as_array()
                    .is_some_and(|h| h.iter().any(|h| h.get("command_group").is_some()))
            })
    });
}

/// A shell command that reports which of `pids` still run, on stdout.
fn report_alive(pids: &[i32]) -> String {
    pids.iter()
        .map(|p| {
            format!("if [ -e /proc/{p} ] && ! grep -q ') [ZX]' /proc/{p}/stat; then echo alive {p}; fi;")
        })
        .collect()
}

#[test]
fn background_children_of_a_killed_supervisor_are_gone_before_the_next_group_run_starts() {
    let env = Env::new();
    let pidfile = env.path("pids");
    let cmd = format!(
        "sleep 300 & echo $! >> {f}; sleep 301 & echo $! >> {f}; wait",
        f = pidfile.display()
    );
    let mut first = env.spawn(&["run", "--group", "k", "--", "sh", "-c", &cmd]);
    // Killed as soon as the command has started its children: the command
    // runs only after its group was recorded (the start handshake), so there
    // is no window in which a kill leaves them unrecorded.
    let kids = wait_for_pids(&pidfile, 2);
    first.kill().unwrap(); // SIGKILL: the supervisor has no chance to act
    first.wait().unwrap();
    assert!(
        kids.iter().all(|p| running(*p)),
        "the fault: the sleeps outlive their supervisor"
    );
    let out = env.run(&[
        "run",
        "--group",
        "k",
        "--",
        "sh",
        "-c",
        &report_alive(&kids),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "left running beside the next run");
}

#[test]
fn leftovers_of_a_killed_lock_holder_that_ignore_term_are_killed_after_the_grace() {
    let env = Env::new();
    let pidfile = env.path("pids");
    // TERM is ignored by the shell and so by the sleep it starts.
    let cmd = format!(
        "trap '' TERM; sleep 300 & echo $! >> {f}; wait",
        f = pidfile.display()
    );
    let mut first = env.spawn(&[
        "run", "--lock", "L", "--grace", "200ms", "--", "sh", "-c", &cmd,
    ]);
    let kids = wait_for_pids(&pidfile, 1);
    wait_recorded(&env.dir.join("locks/L.lock"));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(running(kids[0]));
    let out = env.run(&["run", "--lock", "L", "--", "sh", "-c", &report_alive(&kids)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
}

/// A bounded wait (`--no-wait`, `--wait 1s`) returns within its bound while
/// a dead holder's leftovers are being stopped (busy, 75, naming them),
/// instead of waiting out their grace; the grace runs from the first TERM,
/// whoever sent it, and an unbounded acquirer KILLs them once it is over,
/// before its command runs. Fails before: each bounded wait blocked the full
/// 20 s grace, then ran (issue 37, item 6).
#[test]
fn a_bounded_wait_gives_up_while_a_dead_holders_leftovers_are_being_stopped() {
    let env = Env::new();
    let pidfile = env.path("pids");
    let cmd = format!(
        "trap '' TERM; sleep 300 & echo $! >> {f}; wait",
        f = pidfile.display()
    );
    let mut first = env.spawn(&[
        "run", "--lock", "L", "--grace", "20s", "--", "sh", "-c", &cmd,
    ]);
    let kids = wait_for_pids(&pidfile, 1);
    wait_recorded(&env.dir.join("locks/L.lock"));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(running(kids[0]));
    let ran = env.path("ran");
    let mark = format!("echo ran >> {}", ran.display());
    for bound in [&["--no-wait"][..], &["--wait", "1s"][..]] {
        let mut args = vec!["run", "--lock", "L"];
        args.extend_from_slice(bound);
        args.extend_from_slice(&["--", "sh", "-c", &mark]);
        let t = std::time::Instant::now();
        let out = env.run(&args);
        let took = t.elapsed();
        let err = stderr(&out);
        assert_eq!(code(&out), 75, "{bound:?}: {err}");
        assert!(
            took < Duration::from_secs(10),
            "{bound:?} waited {took:?}: its bound was not kept"
        );
        assert!(err.contains("is being stopped"), "{bound:?}: {err}");
        assert!(err.contains(&kids[0].to_string()), "{bound:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            !ran.exists(),
            "{bound:?}: the command ran beside the leftover"
        );
        assert!(running(kids[0]), "killed before its grace was over");
    }
    let out = env.run(&["run", "--lock", "L", "--", "sh", "-c", &report_alive(&kids)]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "left running beside the next run");
}

#[test]
fn a_lock_acquired_from_a_script_waits_for_a_dead_runs_leftovers() {
    // Not only `baton run`: every acquirer finishes off a dead holder's group.
    let env = Env::new();
    let pidfile = env.path("pids");
    let cmd = format!("sleep 300 & echo $! >> {f}; wait", f = pidfile.display());
    let mut first = env.spawn(&["run", "--lock", "m", "--", "sh", "-c", &cmd]);
    let kids = wait_for_pids(&pidfile, 1);
    wait_recorded(&env.dir.join("locks/m.lock"));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(running(kids[0]));
    let out = env.run(&["lock", "acquire", "m"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !running(kids[0]),
        "the leftover still runs beside the new holder"
    );
    let token = stdout(&out).trim().to_string();
    let out = env.run(&["lock", "release", "m", "--token", &token]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn processes_left_by_a_command_that_exited_are_terminated_before_release() {
    let env = Env::new();
    let pidfile = env.path("pids");
    let cmd = format!(
        // The second child has left the group (setsid) before the command
        // exits: it writes its pid only after setsid, and the command waits
        // for that line.
        "sleep 300 & echo $! >> {f}; setsid sh -c 'echo $$ >> {f}; exec sleep 301' & \
         while [ $(wc -l < {f}) -lt 2 ]; do sleep 0.01; done",
        f = pidfile.display()
    );
    let out = env.run(&["run", "--lock", "L", "--", "sh", "-c", &cmd]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let kids = pids(&fs::read_to_string(&pidfile).unwrap());
    assert_eq!(kids.len(), 2);
    for p in &kids {
        assert!(!running(*p), "pid {p} outlived its run");
    }
    let err = stderr(&out);
    assert!(err.contains("left 2 process(es) running"), "{err}");
    assert!(err.contains("(sleep)"), "{err}");
    assert!(err.contains("had left the process group"), "{err}");
}

#[test]
fn leave_leftovers_lets_a_command_start_a_daemon_on_purpose() {
    let env = Env::new();
    let pidfile = env.path("pids");
    let cmd = format!(
        "sleep 300 >/dev/null 2>&1 & echo $! >> {f}",
        f = pidfile.display()
    );
    let out = env.run(&[
        "run",
        "--lock",
        "L",
        "--leave-leftovers",
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let kids = pids(&fs::read_to_string(&pidfile).unwrap());
    assert!(running(kids[0]));
    assert_eq!(stderr(&out), "");
    let _ = Command::new("kill").arg(kids[0].to_string()).status();
}

#[test]
fn a_reused_process_group_id_of_a_dead_holder_is_not_signalled() {
    let env = Env::new();
    // Take and release the lock once so its file and document exist.
    assert!(env
        .run(&["run", "--lock", "r", "--", "true"])
        .status
        .success());
    // An unrelated process leading its own group, and a dead holder.
    let mut unrelated = Command::new("setsid")
        .args(["sleep", "300"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let victim = unrelated.id() as i32;
    wait_until(Duration::from_secs(10), || {
        fs::read_to_string(format!("/proc/{victim}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id() as i32;
    dead.wait().unwrap();
    let victim_start = baton_proc::procfs::stat(victim).unwrap().start_time;
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let lock = env.dir.join("locks/r.lock");
    let write_dead_holder = |leader_start: u64, session: i32| {
        let mut doc: serde_json::Value =
            serde_json::from_str(fs::read_to_string(&lock).unwrap().lines().next().unwrap())
                .unwrap();
        doc["holders"] = serde_json::json!([{
            "pid": dead_pid, "start_time": 1, "boot_id": boot.trim(), "host": host.trim(),
            "owner": "x", "run_id": "0000000000000000", "acquired_at": "2026-01-01T00:00:00Z",
            "token": doc["token"], "mode": "exclusive", "slot": 0, "kind": "run",
            "command_group": {"pgid": victim, "leader_start_time": leader_start, "grace_ms": 100, "session": session}
        }]);
        fs::write(&lock, format!("{doc}\n")).unwrap();
    };
    // The recorded group id now names another group (its leader started at
    // another time): not ours to touch.
    write_dead_holder(victim_start + 1, victim);
    assert!(env
        .run(&["run", "--lock", "r", "--", "true"])
        .status
        .success());
    assert!(running(victim), "an unrelated process was signalled");
    // The id is now another session's (a daemon's setsid): not ours either.
    write_dead_holder(victim_start, std::process::id() as i32);
    assert!(env
        .run(&["run", "--lock", "r", "--", "true"])
        .status
        .success());
    assert!(
        running(victim),
        "a process of another session was signalled"
    );
    write_dead_holder(victim_start, victim);
    assert!(env
        .run(&["run", "--lock", "r", "--", "true"])
        .status
        .success());
    wait_until(Duration::from_secs(10), || !running(victim));
    let _ = unrelated.wait();
}

/// Modes to hold a lock in while its file is deleted: (holder args, second acquirer args).
const MODES: &[(&[&str], &[&str])] = &[
    (&[], &[]),
    (&["--shared"], &[]),
    (&["--max", "2"], &["--max", "2"]),
];

#[test]
fn deleting_a_held_lock_file_never_admits_a_second_holder() {
    // With few locks on the machine /proc/locks is read in one piece; with
    // many (a busy machine, this test suite) it comes in several, which must
    // not hide a holder: run once each way.
    for crowd in [false, true] {
        let hog = crowd.then(many_locks);
        deleting_with_every_mode();
        if let Some(mut hog) = hog {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// A process holding 300 OFD locks, so that /proc/locks spans several pages,
/// and taking and dropping 60 more all the time (entries that come and go
/// are what makes a reader in several pieces skip others).
fn many_locks() -> std::process::Child {
    let tmp = std::env::temp_dir().join(format!("baton-many-locks-{}", std::process::id()));
    let code = format!(
        "import fcntl,os,struct,sys,time\nf=os.open('{p}',os.O_RDWR|os.O_CREAT)\nos.unlink('{p}')\nfor i in range(300): fcntl.fcntl(f,37,struct.pack('hhqqi4x',fcntl.F_RDLCK,0,2*i,1,0))\nprint('ready',flush=True)\ng=os.open('{p}2',os.O_RDWR|os.O_CREAT)\nos.unlink('{p}2')\nend=time.time()+120\nwhile time.time()<end:\n  for i in range(60): fcntl.fcntl(g,37,struct.pack('hhqqi4x',fcntl.F_WRLCK,0,2*i,1,0))\n  fcntl.fcntl(g,37,struct.pack('hhqqi4x',fcntl.F_UNLCK,0,0,0,0))",
        p = tmp.display()
    );
    let mut child = Command::new("python3")
        .args(["-c", &code])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    let locks = fs::read_to_string("/proc/locks").unwrap();
    assert!(locks.len() > 8192, "/proc/locks is still small");
    child
}

fn deleting_with_every_mode() {
    for (holder, second) in MODES {
        for remove in ["file", "dir"] {
            let env = Env::new();
            let go = env.path("go");
            let started = env.path("started");
            let tokens = env.path("tokens");
            let cmd = format!(
                "echo $BATON_FENCING_TOKEN >> {t}; touch {s}; while [ ! -e {g} ]; do sleep 0.01; done; echo done >> {t}",
                t = tokens.display(),
                s = started.display(),
                g = go.display()
            );
            let holders = if holder.contains(&"--max") { 2 } else { 1 };
            let mut first = Vec::new();
            for i in 0..holders {
                let mut args = vec!["run", "--lock", "L"];
                args.extend_from_slice(holder);
                args.extend_from_slice(&["--", "sh", "-c", &cmd]);
                first.push(env.spawn(&args));
                wait_until(Duration::from_secs(20), || {
                    fs::read_to_string(&tokens).is_ok_and(|t| t.lines().count() > i)
                });
            }
            match remove {
                "file" => fs::remove_file(env.dir.join("locks/L.lock")).unwrap(),
                _ => fs::remove_dir_all(&env.dir).unwrap(),
            }
            let st = env.status("L");
            assert_eq!(st["held"], true, "{holder:?} {remove}: {st}");
            assert!(!st["held_through_replaced_file"]
                .as_array()
                .unwrap()
                .is_empty());

            let mut args = vec!["run", "--lock", "L", "--wait", "300ms"];
            args.extend_from_slice(second);
            args.extend_from_slice(&["--", "sh", "-c", "echo ran"]);
            let out = env.run(&args);
            assert_eq!(code(&out), 75, "{holder:?} {remove}: {}", stderr(&out));
            assert_eq!(stdout(&out), "");

            // A patient acquirer runs only after every first holder is done.
            let mut args = vec!["run", "--lock", "L"];
            args.extend_from_slice(second);
            let after = format!("echo second $BATON_FENCING_TOKEN >> {}", tokens.display());
            args.extend_from_slice(&["--", "sh", "-c", &after]);
            let patient = env.spawn(&args);
            fs::write(&go, "").unwrap();
            assert!(patient.wait_with_output().unwrap().status.success());
            for mut f in first {
                assert!(f.wait().unwrap().success());
            }
            let log = fs::read_to_string(&tokens).unwrap();
            let lines: Vec<&str> = log.lines().collect();
            let last = lines.last().unwrap();
            assert!(last.starts_with("second "), "{holder:?} {remove}: {log}");
            assert_eq!(
                lines.iter().filter(|l| **l == "done").count(),
                holders,
                "{log}"
            );
            let firsts: Vec<u64> = lines[..holders]
                .iter()
                .map(|l| l.parse().unwrap())
                .collect();
            let second_token: u64 = last["second ".len()..].parse().unwrap();
            assert!(
                firsts.iter().all(|t| second_token > *t),
                "fencing tokens went backwards across the deletion: {log}"
            );
        }
    }
}

#[test]
fn a_leader_that_lost_its_parent_death_signal_is_stopped_by_the_next_holder() {
    // The kernel clears the parent-death signal when the command executes a
    // setuid program (`su`, `sudo`); clearing it with prctl does the same.
    let env = Env::new();
    let pidfile = env.path("pid");
    let script = format!(
        "import ctypes,os,time\nctypes.CDLL(None).prctl(1,0,0,0,0)\nopen('{p}.tmp','w').write(str(os.getpid()))\nos.rename('{p}.tmp','{p}')\ntime.sleep(300)",
        p = pidfile.display()
    );
    let mut first = env.spawn(&["run", "--lock", "p", "--", "python3", "-c", &script]);
    let leader: i32 = common::wait_for_file(&pidfile).trim().parse().unwrap();
    wait_recorded(&env.dir.join("locks/p.lock"));
    let supervisor = first.id().to_string();
    first.kill().unwrap();
    first.wait().unwrap();
    // The fault: with no death signal the leader outlives its supervisor
    // (wait until it has been re-parented).
    wait_until(Duration::from_secs(10), || {
        baton_proc::procfs::stat(leader).is_none_or(|st| st.ppid.to_string() != supervisor)
    });
    assert!(
        running(leader),
        "the leader died with its supervisor: nothing tested"
    );
    let out = env.run(&["run", "--lock", "p", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !running(leader),
        "the leader still runs beside the next holder"
    );
}
