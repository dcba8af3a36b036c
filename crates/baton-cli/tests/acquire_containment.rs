#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
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

/// Who starts the script, and how.
#[derive(Clone, Copy, PartialEq)]
enum Launch {
    /// The test, in the test's process group.
    ParentsGroup,
    /// The test, with the script leading its own group.
    OwnGroup,
    /// A launcher that is a child subreaper (as a CI runner, `systemd
    /// --user` or a container's init are) in another group of the same
    /// session: the script leads its own group, and a double-forked process
    /// is re-parented to the launcher, not to init.
    OwnGroupUnderSubreaper,
    /// A shell with job control running `script | sleep`: the script leads
    /// the group and the other side of the pipe (`sleep`) is a member of it
    /// that is not the script's and must not be stopped.
    OwnGroupWithPipeSibling,
}

/// The launcher for [`Launch::OwnGroupUnderSubreaper`] and
/// [`Launch::OwnGroupWithPipeSibling`]: starts `sh -c SCRIPT` leading its own
/// group (and, with a sibling, `sleep 300` in that group, as a job-control
/// shell starts a pipeline), writes the script's pid and the sibling's to
/// `ROOTPID`, then reaps children until none is left.
const LAUNCHER: &str = r#"
import ctypes, os, sys
subreaper, sibling, pidfile, script = sys.argv[1] == "1", sys.argv[2] == "1", sys.argv[3], sys.argv[4]
if subreaper:
    assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
root = os.fork()
if root == 0:
    os.setpgid(0, 0)
    os.execvp("sh", ["sh", "-c", script])
try:
    os.setpgid(root, root)  # as a job-control shell does, against the race
except PermissionError:
    pass  # the child has already run `exec`, so it has already set it
pids = [str(root)]
if sibling:
    other = os.fork()
    if other == 0:
        os.setpgid(0, root)
        os.execvp("sleep", ["sleep", "300"])
    pids.append(str(other))
with open(pidfile + ".tmp", "w") as f:
    f.write(" ".join(pids))
os.rename(pidfile + ".tmp", pidfile)
try:
    while True:
        os.wait()
except ChildProcessError:
    pass
"#;

fn lines(path: &std::path::Path) -> usize {
    fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The script `body` acquires lock `c`, starts its writers and sleeps; it is
/// SIGKILLed once `writers` writers run and a waiter is in line. The waiter
/// must find none of them running when it gets the lock, and no line may be
/// written after that.
fn killed_script_hands_over_only_after_its_writers(launch: Launch, body: &str, writers: usize) {
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
    let rootpid = env.path("rootpid");
    let mut cmd = match launch {
        Launch::ParentsGroup | Launch::OwnGroup => {
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(&script);
            if launch == Launch::OwnGroup {
                cmd.process_group(0);
            }
            cmd
        }
        Launch::OwnGroupUnderSubreaper | Launch::OwnGroupWithPipeSibling => {
            let mut cmd = Command::new("python3");
            let subreaper = launch == Launch::OwnGroupUnderSubreaper;
            cmd.arg("-c")
                .arg(LAUNCHER)
                .arg(if subreaper { "1" } else { "0" })
                .arg(if subreaper { "0" } else { "1" })
                .arg(&rootpid)
                .arg(&script);
            cmd
        }
    };
    cmd.current_dir(env.tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _cleanup = KillWriters(pids.clone());
    let mut launcher = cmd.spawn().unwrap();
    // The script (to kill), and the pipe's other side (to find alive).
    let (root, sibling) = if matches!(launch, Launch::ParentsGroup | Launch::OwnGroup) {
        (launcher.id() as i32, None)
    } else {
        wait_until(Duration::from_secs(30), || rootpid.exists());
        let text = fs::read_to_string(&rootpid).unwrap();
        let mut it = text.split_whitespace().map(|p| p.parse::<i32>().unwrap());
        (it.next().unwrap(), it.next())
    };
    let _sibling = sibling.map(KillOnDrop);
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
    // SIGKILL: the script has no chance to act.
    let root = rustix::process::Pid::from_raw(root).unwrap();
    rustix::process::kill_process(root, rustix::process::Signal::KILL).unwrap();
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
    // The other side of the pipe was not the script's: it still runs.
    if let Some(sibling) = sibling {
        assert!(
            baton_proc::procfs::stat(sibling).is_some_and(|st| !st.exited),
            "the pipe's other side (pid {sibling}, not started by the script) was stopped"
        );
    }
    // Not yet reaped, so its pid is still its own: a safe kill.
    let _ = launcher.kill(); // a launcher waits for the pipe's other side
    launcher.wait().unwrap();
}

/// Kills the pipe's other side when the test ends.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The script leads its own process group (started from a terminal, by
/// `setsid`, by an agent that gives each command a group): a background
/// child and a double-forked grandchild (re-parented away at once) are both
/// stopped before the next waiter gets the lock.
#[test]
fn a_killed_script_in_its_own_group_hands_over_only_after_its_children_and_a_double_fork() {
    killed_script_hands_over_only_after_its_writers(
        Launch::OwnGroup,
        "WRITER &\n( WRITER & )\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}

/// As above, started by a child subreaper of the same session (a CI runner,
/// `systemd --user`, a container's init): the double-forked grandchild is
/// re-parented to that launcher, not to init, and is still stopped. This
/// failed in CI, where the runner is such a subreaper: the grandchild's new
/// parent was taken for the other side of a pipe.
#[test]
fn a_killed_script_under_a_subreaper_hands_over_only_after_its_double_fork() {
    killed_script_hands_over_only_after_its_writers(
        Launch::OwnGroupUnderSubreaper,
        "WRITER &\n( WRITER & )\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}

/// The script is the first command of a pipeline that a job-control shell
/// started as one group (`./s | sleep 300`): what the script started is
/// stopped, the other side of the pipe is not (the shell's, not the
/// script's).
#[test]
fn a_killed_script_in_a_pipeline_stops_its_own_processes_not_the_pipes_other_side() {
    killed_script_hands_over_only_after_its_writers(
        Launch::OwnGroupWithPipeSibling,
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
        Launch::ParentsGroup,
        "WRITER &\nsh -c 'WRITER & wait' &\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}
