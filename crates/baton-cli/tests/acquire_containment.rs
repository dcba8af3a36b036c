#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! `lock acquire` contains what the script started (issue 26, item 2): a
//! script holding a lock through `T=$(baton lock acquire L)` that is
//! SIGKILLed does not hand the lock over while a process it started still
//! runs. Real `baton` binary, real shell scripts, real SIGKILL.

use crate::common;

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{stderr, stdout, wait_until, Env};

/// A writer script: records its pid in `pids`, then appends to `out` until
/// stopped. Returns the command that runs it.
fn writer(env: &Env, pids: &std::path::Path, out: &std::path::Path) -> String {
    let script = env.path("writer.sh");
    fs::write(
        &script,
        format!(
            "echo $$ >> {pids}\nwhile :; do echo x >> {out}; sleep 0.02; done\n",
            pids = pids.display(),
            out = out.display()
        ),
    )
    .unwrap();
    format!("sh {}", script.display())
}

/// Kills the writers still running when the test ends (a failed test), so
/// that they neither run on nor keep the test's output open.
struct KillWriters(std::path::PathBuf);

impl Drop for KillWriters {
    fn drop(&mut self) {
        for pid in fs::read_to_string(&self.0).unwrap_or_default().lines() {
            // Only a writer: the pid may have been reused since it was written.
            let is_writer = fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("writer.sh"));
            if let Some(pid) = pid
                .parse()
                .ok()
                .filter(|_| is_writer)
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

fn lines(path: &std::path::Path) -> usize {
    fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The script `body` acquires lock `c`, starts its writers and sleeps; it is
/// SIGKILLed once `writers` writers run and a waiter is in line. The waiter
/// must find none of them running when it gets the lock, and no line may be
/// written after that.
fn killed_script_hands_over_only_after_its_writers(own_group: bool, body: &str, writers: usize) {
    let env = Env::new();
    let (pids, out) = (env.path("pids"), env.path("out"));
    let baton = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.display();
    let script = format!(
        "T=$({baton} --dir {dir} lock acquire c) || exit 1\n{body}\nsleep 300\n",
        body = body
            .replace("WRITER", &writer(&env, &pids, &out))
            .replace("PIDS", &pids.display().to_string())
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(env.tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _cleanup = KillWriters(pids.clone());
    if own_group {
        cmd.process_group(0);
    }
    let mut holder = cmd.spawn().unwrap();
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(&pids).is_ok_and(|t| t.lines().count() >= writers)
    });
    let before = lines(&out);
    wait_until(Duration::from_secs(30), || lines(&out) > before + 2);
    let writer_pids: Vec<String> = fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    // The next holder: at the grant, which writers run, and how many lines
    // there are; then again a little later.
    let check = format!(
        "for p in {all}; do if [ -e /proc/$p ] && ! grep -q ') [ZX]' /proc/$p/stat; then echo alive $p; fi; done; \
         wc -l < {out}; sleep 1; wc -l < {out}",
        all = writer_pids.join(" "),
        out = out.display()
    );
    let waiter = env.spawn(&["run", "--lock", "c", "--", "sh", "-c", &check]);
    env.wait_for_waiters("c", 1);
    holder.kill().unwrap(); // SIGKILL: the script has no chance to act
    holder.wait().unwrap();
    let seen = waiter.wait_with_output().unwrap();
    assert!(seen.status.success(), "{}", stderr(&seen));
    let text = stdout(&seen);
    assert!(
        !text.contains("alive"),
        "the next holder got the lock while the script's writers ran:\n{text}"
    );
    let counts: Vec<&str> = text.lines().collect();
    assert_eq!(
        counts.first(),
        counts.get(1),
        "lines were written after the lock was handed over: {text}"
    );
    // Nothing is left running either way.
    for p in &writer_pids {
        let pid: i32 = p.parse().unwrap();
        assert!(baton_proc::procfs::stat(pid).map_or(true, |st| st.exited));
    }
}

/// The script leads its own process group (started from a terminal, by
/// `setsid`, by an agent that gives each command a group): a background
/// child and a double-forked grandchild (re-parented away at once) are both
/// stopped before the next waiter gets the lock.
#[test]
fn a_killed_script_in_its_own_group_hands_over_only_after_its_children_and_a_double_fork() {
    killed_script_hands_over_only_after_its_writers(
        true,
        "WRITER &\n( WRITER & )\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}

/// The script shares its parent's process group (an agent that did not give
/// it one): its background child, and that child's own child, are followed
/// from the script and stopped before the next waiter gets the lock.
#[test]
fn a_killed_script_in_its_parents_group_hands_over_only_after_its_children() {
    killed_script_hands_over_only_after_its_writers(
        false,
        "WRITER &\nsh -c 'WRITER & wait' &\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}
