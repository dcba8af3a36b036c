#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `baton run`: the real binary, real children, real signals.

use crate::common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{code, stderr, stdout, wait_for_file, wait_for_line, Env};

#[test]
fn command_gets_its_environment_and_exit_code_passes_through() {
    let env = Env::new();
    let out = env.run(&[
        "run",
        "--lock",
        "build",
        "--",
        "sh",
        "-c",
        "echo \"$BATON_LOCK|$BATON_FENCING_TOKEN|$BATON_RUN_ID|$BATON_DIR\"; exit 7",
    ]);
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let line = stdout(&out);
    let parts: Vec<&str> = line.trim().split('|').collect();
    assert_eq!(parts[0], "build");
    let first: u64 = parts[1].parse().unwrap();
    assert_eq!(parts[2].len(), 16);
    assert_eq!(parts[3], env.dir.to_str().unwrap());
    let out = env.run(&[
        "run",
        "--lock",
        "build",
        "--",
        "sh",
        "-c",
        "echo $BATON_FENCING_TOKEN",
    ]);
    let second: u64 = stdout(&out).trim().parse().unwrap();
    assert!(second > first, "tokens increase: {second} after {first}");
}

#[test]
fn exit_codes_follow_the_table() {
    let env = Env::new();
    let r = |args: &[&str]| code(&env.run(args));
    assert_eq!(
        r(&["run", "--lock", "x", "--", "sh", "-c", "kill -TERM $$"]),
        143
    );
    assert_eq!(
        r(&["run", "--lock", "x", "--", "/nonexistent/command"]),
        127
    );
    let script = env.path("noexec.sh");
    fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    assert_eq!(
        r(&["run", "--lock", "x", "--", script.to_str().unwrap()]),
        126
    );
    // TERM, then (--grace later) KILL, for a command that set its TERM trap
    // in time: the timeout cannot wait for that, so an attempt whose command
    // was not ready (no "ready" file: the TERM came first) proves nothing
    // and is repeated with a longer timeout.
    let marker = env.path("got-term");
    let ready = env.path("ready");
    let timed_out = |trap: &str, timeout_ms: u64, grace: &str| {
        let _ = fs::remove_file(&ready);
        let cmd = format!("{trap}; touch {}; sleep 30 & wait", ready.display());
        let start = Instant::now();
        let timeout = format!("{timeout_ms}ms");
        let out = env.run(&[
            "run",
            "--lock",
            "x",
            "--timeout",
            &timeout,
            "--grace",
            grace,
            "--",
            "sh",
            "-c",
            &cmd,
        ]);
        assert_eq!(code(&out), 124, "{}", stderr(&out));
        ready.exists().then(|| {
            start
                .elapsed()
                .saturating_sub(Duration::from_millis(timeout_ms))
        })
    };
    let trap = format!("trap 'echo term > {}; exit 1' TERM", marker.display());
    let after_timeout = [300, 1_000, 5_000, 20_000]
        .into_iter()
        .find_map(|ms| timed_out(&trap, ms, "5s"))
        .expect("the command was never ready before its timeout");
    assert!(
        after_timeout < Duration::from_secs(5),
        "ended by its TERM trap"
    );
    assert_eq!(
        fs::read_to_string(&marker).unwrap().trim(),
        "term",
        "TERM before KILL"
    );
    let after_timeout = [200, 1_000, 5_000, 20_000]
        .into_iter()
        .find_map(|ms| timed_out("trap '' TERM", ms, "300ms"))
        .expect("the command was never ready before its timeout");
    assert!(
        after_timeout >= Duration::from_millis(300) && after_timeout < Duration::from_secs(10),
        "KILL after grace: {after_timeout:?}"
    );
}

#[test]
fn busy_lock_gives_75_with_no_wait_and_after_wait() {
    let env = Env::new();
    let mut holder = env.spawn(&[
        "run",
        "--lock",
        "busy",
        "--operation",
        "long job",
        "--",
        "sleep",
        "30",
    ]);
    env.wait_for_held("busy", true);
    let out = env.run(&["run", "--lock", "busy", "--no-wait", "--", "true"]);
    assert_eq!(code(&out), 75);
    let err = stderr(&out);
    assert!(
        err.contains("'busy'") && err.contains("long job") && err.contains("no waiting"),
        "{err}"
    );
    let start = Instant::now();
    let out = env.run(&["run", "--lock", "busy", "--wait", "300ms", "--", "true"]);
    assert_eq!(code(&out), 75);
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(stderr(&out).contains("at most 300ms"), "{}", stderr(&out));
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn eight_processes_times_200_increments_lose_nothing() {
    let env = Env::new();
    let counter = env.path("counter");
    fs::write(&counter, "0\n").unwrap();
    // The first grant in a new lock file starts from the clock; count from it.
    let out = env.run(&["run", "--lock", "counter", "--", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let base = env.status("counter")["last_token"].as_u64().unwrap();
    let script = format!(
        "for i in $(seq 200); do {} --dir {} run --lock counter -- sh -c 'n=$(cat {c}); echo $((n+1)) > {c}'; done",
        env!("CARGO_BIN_EXE_baton"),
        env.dir.display(),
        c = counter.display()
    );
    let kids: Vec<_> = (0..8)
        .map(|_| Command::new("sh").arg("-c").arg(&script).spawn().unwrap())
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    assert_eq!(fs::read_to_string(&counter).unwrap().trim(), "1600");
    let last = env.status("counter")["last_token"].as_u64().unwrap();
    assert!(last >= base + 1600, "at least one more per grant");
}

#[test]
fn sigkilled_holder_hands_the_lock_to_the_next_waiter_at_once() {
    let env = Env::new();
    let mut holder = env.spawn(&["run", "--lock", "k", "--", "sleep", "30"]);
    env.wait_for_held("k", true);
    let t1 = env.status("k")["holder"]["token"].as_u64().unwrap();
    let started = env.path("started");
    let waiter = env.spawn(&[
        "run",
        "--lock",
        "k",
        "--",
        "sh",
        "-c",
        &format!(
            "echo $BATON_FENCING_TOKEN > {}.tmp; mv {0}.tmp {0}",
            started.display()
        ),
    ]);
    env.wait_for_waiters("k", 1);
    // Kill the supervising baton process itself mid-critical-section.
    let killed_at = Instant::now();
    holder.kill().unwrap();
    let t2: u64 = wait_for_line(&started).trim().parse().unwrap();
    let handoff = killed_at.elapsed();
    assert!(t2 > t1, "token {t2} after {t1}");
    // The bar (10 ms) is measured by the benchmark; here only a sanity bound.
    assert!(handoff < Duration::from_secs(3), "{handoff:?}");
    assert!(waiter.wait_with_output().unwrap().status.success());
    holder.wait().unwrap();
}

#[test]
fn the_lock_is_not_inherited_by_a_daemon_the_command_leaves_behind() {
    let env = Env::new();
    let pidfile = env.path("daemon.pid");
    let cmd = format!(
        "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    let out = env.run(&[
        "run",
        "--lock",
        "d",
        "--leave-leftovers",
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pid = wait_for_line(&pidfile).trim().to_string();
    assert!(fs::metadata(format!("/proc/{pid}")).is_ok(), "daemon runs");
    let st = env.status("d");
    assert_eq!(st["held"], false, "{st}");
    let fds: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .collect();
    assert!(!fds.iter().any(|p| p.ends_with(".lock")), "{fds:?}");
    let _ = Command::new("kill").arg(&pid).status();
}

#[test]
fn locks_named_in_different_orders_do_not_deadlock() {
    let env = Env::new();
    let bin = env!("CARGO_BIN_EXE_baton");
    let mk = |a: &str, b: &str| {
        let s = format!(
            "for i in $(seq 40); do {bin} --dir {} run --lock {a} --lock {b} -- true || exit 1; done",
            env.dir.display()
        );
        Command::new("sh").arg("-c").arg(s).spawn().unwrap()
    };
    let kids = vec![mk("a", "b"), mk("b", "a"), mk("a", "b"), mk("b", "a")];
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    let out = env.run(&[
        "run",
        "--lock",
        "b",
        "--lock",
        "a",
        "--",
        "sh",
        "-c",
        "echo $BATON_LOCK",
    ]);
    assert_eq!(stdout(&out).trim(), "a,b", "canonical order");
}

#[test]
fn waiters_run_in_arrival_order() {
    let env = Env::new();
    let order = env.path("order");
    let mut holder = env.spawn(&["run", "--lock", "fifo", "--", "sleep", "30"]);
    env.wait_for_held("fifo", true);
    let mut kids = Vec::new();
    for i in 0..5 {
        kids.push(env.spawn(&[
            "run",
            "--lock",
            "fifo",
            "--",
            "sh",
            "-c",
            &format!("echo {i} >> {}", order.display()),
        ]));
        env.wait_for_waiters("fifo", i + 1);
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
    for k in kids {
        assert!(k.wait_with_output().unwrap().status.success());
    }
    assert_eq!(fs::read_to_string(&order).unwrap(), "0\n1\n2\n3\n4\n");
}

#[test]
fn shared_holders_overlap_and_semaphores_cap_concurrency() {
    let env = Env::new();
    // Two shared holders at once: each waits (30 s or more: a deadline that a
    // loaded machine does not reach) for the other's marker.
    let a = env.path("a");
    let b = env.path("b");
    let wait_other = |me: &std::path::Path, other: &std::path::Path| {
        format!(
            "touch {}; for i in $(seq 3000); do test -e {} && exit 0; sleep 0.01; done; exit 1",
            me.display(),
            other.display()
        )
    };
    let ka = env.spawn(&[
        "run",
        "--lock",
        "rw",
        "--shared",
        "--",
        "sh",
        "-c",
        &wait_other(&a, &b),
    ]);
    let kb = env.spawn(&[
        "run",
        "--lock",
        "rw",
        "--shared",
        "--",
        "sh",
        "-c",
        &wait_other(&b, &a),
    ]);
    assert!(
        ka.wait_with_output().unwrap().status.success(),
        "readers overlapped"
    );
    assert!(kb.wait_with_output().unwrap().status.success());

    // --max 2: track the peak number of concurrent holders. The first
    // holders wait (30 s or more) until two hold at once, so that "two ran at
    // once" does not depend on how fast the second one starts.
    let dir = env.path("running");
    fs::create_dir(&dir).unwrap();
    let peak = env.path("peak");
    let met = env.path("met");
    let body = format!(
        "touch {d}/$$; n=$(ls {d} | wc -l); echo $n >> {p}; \
         i=0; while [ ! -e {m} ]; do \
           [ \"$(ls {d} | wc -l)\" -ge 2 ] && touch {m}; \
           i=$((i+1)); [ $i -le 1500 ] || exit 1; sleep 0.02; \
         done; sleep 0.2; rm {d}/$$",
        d = dir.display(),
        p = peak.display(),
        m = met.display()
    );
    let kids: Vec<_> = (0..6)
        .map(|_| {
            env.spawn(&[
                "run", "--lock", "sem", "--max", "2", "--", "sh", "-c", &body,
            ])
        })
        .collect();
    for k in kids {
        assert!(k.wait_with_output().unwrap().status.success());
    }
    let counts: Vec<u32> = fs::read_to_string(&peak)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 6);
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");
    assert!(counts.contains(&2), "two ran at once: {counts:?}");
    // Disagreeing --max while in use is an error.
    let mut hold = env.spawn(&["run", "--lock", "sem", "--max", "2", "--", "sleep", "30"]);
    env.wait_for_held("sem", true);
    let out = env.run(&["run", "--lock", "sem", "--max", "3", "--", "true"]);
    assert_eq!(code(&out), 125);
    assert!(stderr(&out).contains("--max 2"), "{}", stderr(&out));
    hold.kill().unwrap();
    hold.wait().unwrap();
}

#[test]
fn signals_to_baton_are_forwarded_to_the_command() {
    let env = Env::new();
    let marker = env.path("got");
    let ready = env.path("ready");
    let cmd = format!(
        "trap 'echo INT > {m}; exit 9' INT; touch {r}; while :; do sleep 0.05; done",
        m = marker.display(),
        r = ready.display()
    );
    let child = env.spawn(&["run", "--lock", "sig", "--", "sh", "-c", &cmd]);
    wait_for_file(&ready);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 9, "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&marker).unwrap().trim(), "INT");
    assert_eq!(env.status("sig")["held"], false);
    let _ = Stdio::null();
}

#[test]
fn a_command_taking_its_own_lock_again_is_refused_not_deadlocked() {
    let env = Env::new();
    let bin = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.to_str().unwrap();
    let start = Instant::now();
    let out = env.run(&[
        "run", "--lock", "nest", "--", bin, "--dir", dir, "run", "--lock", "nest", "--", "true",
    ]);
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    assert!(stderr(&out).contains("ancestor"), "{}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(5));
    // Other locks still nest fine.
    let out = env.run(&[
        "run", "--lock", "outer", "--", bin, "--dir", dir, "run", "--lock", "inner", "--", "true",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// On a terminal, the command is the foreground job: it can read the
/// terminal (instead of being stopped by SIGTTIN) and gets Ctrl-C once.
/// `script` (util-linux) provides the pseudo-terminal.
#[test]
fn an_interactive_command_owns_the_terminal_while_it_runs() {
    use std::io::Write;
    let have_script = Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    // No silent skip: a test that passes without running cannot fail.
    assert!(
        have_script,
        "util-linux `script` (package bsdutils) is needed for this test"
    );
    let env = Env::new();
    let bin = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.display().to_string();
    // Runs `inner` under baton in a pseudo-terminal; `input` is typed once
    // `ready` exists (if given).
    let run_in_pty = |inner: &str, input: &[u8], ready: Option<&std::path::Path>| {
        let cmd = format!("{bin} --dir {dir} run --lock tty -- {inner}; echo baton-rc=$?");
        let mut child = Command::new("timeout")
            .args(["20", "script", "-qec", &cmd, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(ready) = ready {
            wait_for_file(ready);
        }
        stdin.write_all(input).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        stdout(&out)
    };
    // Typed-ahead input waits in the terminal until the command reads it.
    let out = run_in_pty("sh -c 'read line; echo got:$line'", b"hello\n", None);
    assert!(
        out.contains("got:hello") && out.contains("baton-rc=0"),
        "{out}"
    );
    let ready = env.path("trap-set");
    let inner = format!(
        "sh -c 'trap \"echo got-INT; exit 5\" INT; touch {}; while :; do sleep 0.05; done'",
        ready.display()
    );
    let out = run_in_pty(&inner, b"\x03", Some(&ready));
    assert_eq!(out.matches("got-INT").count(), 1, "{out}");
    assert!(out.contains("baton-rc=5"), "{out}");
}

#[test]
fn a_nested_run_keeps_the_outer_run_id_in_baton_parent_run_id() {
    let env = Env::new();
    let inner = format!(
        "echo outer=$BATON_RUN_ID; {} --dir {} run --lock inner -- sh -c 'echo inner=$BATON_RUN_ID parent=$BATON_PARENT_RUN_ID'",
        env!("CARGO_BIN_EXE_baton"),
        env.dir.display()
    );
    let out = env.run(&["run", "--lock", "outer", "--", "sh", "-c", &inner]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let outer = text.lines().next().unwrap().strip_prefix("outer=").unwrap();
    assert_eq!(outer.len(), 16, "{text}");
    let inner_line = text.lines().nth(1).unwrap();
    assert!(inner_line.ends_with(&format!("parent={outer}")), "{text}");
    assert!(!inner_line.starts_with(&format!("inner={outer}")), "{text}");
}

#[test]
fn ctrl_z_fg_and_bg_work_on_baton_run_as_on_the_command_itself() {
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let env = Env::new();
    let pidfile = env.path("pid");
    let tick = env.path("tick");
    // The command never forks: a Ctrl-Z that lands while a shell is in
    // vfork() (dash starts `sleep` that way) stops the vfork child before
    // its exec and leaves the shell waiting for it in the kernel, unstopped,
    // with or without baton, and the job never reads as stopped.
    let script = env.path("ticker.py");
    fs::write(
        &script,
        format!(
            "import os, time\nopen({p:?}, 'w').write(str(os.getpid()) + '\\n')\ni = 0\n\
             while True:\n    i += 1\n    open({t:?}, 'w').write(str(i))\n    time.sleep(0.02)\n",
            p = pidfile.display().to_string(),
            t = tick.display().to_string()
        ),
    )
    .unwrap();
    // An interactive bash in a pseudo-terminal, typed at through `script`.
    let mut shell = Command::new("timeout")
        .args([
            "60",
            "script",
            "-qec",
            "bash --norc --noprofile -i",
            "/dev/null",
        ])
        .env("PS1", "$ ")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut keys = shell.stdin.take().unwrap();
    let screen = Arc::new(Mutex::new(String::new()));
    let mut out = shell.stdout.take().unwrap();
    let s = screen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            s.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut type_in = |text: &str| {
        keys.write_all(text.as_bytes()).unwrap();
        keys.flush().unwrap();
    };
    let state_of = |pid: &str| -> char {
        pid.parse()
            .ok()
            .and_then(baton_proc::procfs::stat)
            .map_or('?', |st| st.state)
    };
    let ticks = || -> u64 {
        fs::read_to_string(&tick)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    };
    let seen = |what: &str| screen.lock().unwrap().matches(what).count();
    let limit = Duration::from_secs(20);

    type_in(&format!(
        "{} --dir {} run --lock jc -- python3 {}\n",
        env!("CARGO_BIN_EXE_baton"),
        env.dir.display(),
        script.display()
    ));
    let mut pid = String::new();
    common::wait_until(limit, || {
        pid = fs::read_to_string(&pidfile).unwrap_or_default();
        pid.ends_with('\n') && ticks() > 0
    });
    let pid = pid.trim().to_string();

    // Ctrl-Z: the shell sees the job stopped and gets its prompt back.
    type_in("\x1a");
    common::wait_until(limit, || seen("Stopped") >= 1);
    common::wait_until(limit, || state_of(&pid) == 'T');
    // fg: the command runs again, in the foreground.
    type_in("fg\n");
    common::wait_until(limit, || state_of(&pid) != 'T');
    let before = ticks();
    common::wait_until(limit, || ticks() > before + 2);
    // Ctrl-Z, then bg: it runs on while the shell takes commands.
    type_in("\x1a");
    common::wait_until(limit, || seen("Stopped") >= 2);
    type_in("bg\n");
    common::wait_until(limit, || state_of(&pid) != 'T');
    type_in("echo shell-is-free\n");
    common::wait_until(limit, || seen("shell-is-free") >= 2); // the echo of the line, then its output
    let before = ticks();
    common::wait_until(limit, || ticks() > before + 2);
    // kill %1 reaches baton, which stops the command.
    type_in("kill %1; wait; exit\n");
    let status = shell.wait().unwrap();
    assert!(status.success(), "{}", screen.lock().unwrap());
    common::wait_until(limit, || matches!(state_of(&pid), '?' | 'Z'));
}

/// Write-locks the lock file's META byte (2^40, docs/src/design/locking.md) the way a grant,
/// a release or a `status` reader elsewhere holds it for a moment.
fn hold_meta(env: &Env, name: &str) -> fs::File {
    use std::os::fd::AsRawFd;
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(env.dir.join("locks").join(format!("{name}.lock")))
        .unwrap();
    // SAFETY: a zeroed flock filled in below; the descriptor is open.
    let rc = unsafe {
        let mut fl: libc::flock = std::mem::zeroed();
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = 1 << 40;
        fl.l_len = 1;
        libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl)
    };
    assert_eq!(rc, 0, "lock META: {}", std::io::Error::last_os_error());
    file
}

#[test]
fn no_wait_on_a_free_lock_is_not_fooled_by_a_metadata_section_in_progress() {
    let env = Env::new();
    assert!(env
        .run(&["run", "--lock", "m", "--", "true"])
        .status
        .success());
    // META held for a moment (less than the 200 ms any wait for it gets):
    // the lock is free, so --no-wait must run the command, not report busy.
    let meta = hold_meta(&env, "m");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        drop(meta);
    });
    let start = Instant::now();
    let out = env.run(&["run", "--lock", "m", "--no-wait", "--", "true"]);
    let took = start.elapsed();
    release.join().unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        took >= Duration::from_millis(30),
        "the run did not meet the META section it is about ({took:?})"
    );
    // Held for longer (a process stopped in its section): --no-wait gives up,
    // and says why, after those 200 ms rather than hanging.
    let meta = hold_meta(&env, "m");
    let start = Instant::now();
    let out = env.run(&["run", "--lock", "m", "--no-wait", "--", "true"]);
    let took = start.elapsed();
    drop(meta);
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(stderr(&out).contains("metadata"), "{}", stderr(&out));
    assert!(took >= Duration::from_millis(200), "{took:?}");
}

/// baton starts without Rust's runtime start-up (main.rs): it must still
/// give a command started with stdin, stdout or stderr closed /dev/null in
/// their place, never one of its own files (a lock file as the command's
/// stdout would be written over by its output).
#[test]
fn closed_standard_descriptors_become_dev_null_not_a_lock_file() {
    let env = Env::new();
    let report = env.path("fds");
    let script = format!(
        "r=; for fd in 0 1 2; do r=\"$r $(readlink /proc/$$/fd/$fd)\"; done; echo $r > {}",
        report.display()
    );
    // `exec 0<&- 1>&- 2>&-` closes them for baton itself (Stdio::null would
    // give it /dev/null already).
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec \"$0\" --dir \"$1\" run --lock fds -- sh -c '{script}' 0<&- 1>&- 2>&-"
        ))
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg(&env.dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let fds = fs::read_to_string(&report).unwrap();
    assert_eq!(
        fds.split_whitespace().collect::<Vec<_>>(),
        ["/dev/null", "/dev/null", "/dev/null"],
        "the command's standard descriptors"
    );
    // And baton's own lock file was not written through one of them.
    let status = env.status("fds");
    assert_eq!(status["held"], false, "{status}");
}

/// A script whose `#!` interpreter is missing fails as in a shell (127), but
/// the message names the interpreter instead of calling the script itself
/// "not found" (execve says ENOENT for both).
#[test]
fn a_missing_interpreter_is_named() {
    let env = Env::new();
    let script = env.path("s.sh");
    fs::write(&script, "#!/nonexistent/interp -x\necho hi\n").unwrap();
    fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = env.run(&["run", "--lock", "x", "--", script.to_str().unwrap()]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("interpreter '/nonexistent/interp'"),
        "{}",
        stderr(&out)
    );
    // Windows line endings: the kernel looks for "/bin/sh\r"; say so.
    let crlf = env.path("crlf.sh");
    fs::write(&crlf, "#!/bin/sh\r\necho hi\r\n").unwrap();
    fs::set_permissions(&crlf, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = env.run(&["run", "--lock", "x", "--", crlf.to_str().unwrap()]);
    assert_eq!(code(&out), 127, "{}", stderr(&out));
    assert!(stderr(&out).contains("'/bin/sh\\r'"), "{}", stderr(&out));
    assert!(stderr(&out).contains("CRLF"), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim_end().lines().count(), 1);
    // A program that is really not there keeps its message.
    let out = env.run(&["run", "--lock", "x", "--", "no-such-program-anywhere"]);
    assert_eq!(code(&out), 127);
    assert!(
        stderr(&out).contains("command not found"),
        "{}",
        stderr(&out)
    );
}
