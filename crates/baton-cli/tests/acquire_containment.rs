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

/// Which process the test SIGKILLs.
#[derive(Clone, Copy, PartialEq)]
enum Victim {
    /// The script that ran `lock acquire`.
    Script,
    /// The background holder that holds the lock for it: the script and
    /// what it started must die with it, as a command dies with its killed
    /// `baton run` (its guardian stops them, and keeps the lock until then).
    Holder,
    /// The guardian first (the holder starts another), then the holder.
    GuardianThenHolder,
}

/// The pids of the guardians the holder `holder` runs now.
fn guardians_of(holder: i32) -> Vec<i32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "baton-guard")
                && baton_proc::procfs::stat(*pid).is_some_and(|st| st.ppid == holder && !st.exited)
        })
        .collect()
}

/// The script `body` acquires lock `c`, starts its writers and sleeps; the
/// `victim` is SIGKILLed once `writers` writers run and a waiter is in line.
/// The waiter must find none of them (nor the script) running when it gets
/// the lock, and no line may be written after that.
fn killed_script_hands_over_only_after_its_writers(launch: Launch, body: &str, writers: usize) {
    killed_hands_over_only_after_the_writers(Victim::Script, launch, body, writers);
}

fn killed_hands_over_only_after_the_writers(
    victim: Victim,
    launch: Launch,
    body: &str,
    writers: usize,
) {
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
    let mut writer_pids: Vec<String> = fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let holder = holder_pid(&env, "c");
    if victim != Victim::Script {
        // The script must be gone too when the next holder starts.
        writer_pids.push(root.to_string());
    }
    // The next holder: at the grant, which writers run, and how many lines
    // there are; then again a little later.
    let check = format!(
        "for p in {all}; do if [ -e /proc/$p ] && ! grep -q ') [ZX]' /proc/$p/stat; then echo alive $p; fi; done; \
         wc -l < {out}; sleep 1; wc -l < {out}; echo died=$BATON_PREVIOUS_HOLDER_DIED",
        all = writer_pids.join(" "),
        out = out.display()
    );
    let waiter = env.spawn(&["run", "--lock", "c", "--", "sh", "-c", &check]);
    env.wait_for_waiters("c", 1);
    // SIGKILL: the victim has no chance to act.
    let target = match victim {
        Victim::Script => root,
        Victim::Holder => holder,
        Victim::GuardianThenHolder => {
            let first = guardians_of(holder);
            assert_eq!(first.len(), 1, "one guardian: {first:?}");
            let pid = rustix::process::Pid::from_raw(first[0]).unwrap();
            rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
            wait_until(Duration::from_secs(30), || {
                let now = guardians_of(holder);
                now.len() == 1 && now[0] != first[0]
            });
            holder
        }
    };
    let target = rustix::process::Pid::from_raw(target).unwrap();
    rustix::process::kill_process(target, rustix::process::Signal::KILL).unwrap();
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
    assert!(
        text.contains("died=1"),
        "the next holder was not told that the previous one died: {text}"
    );
    // Nothing is left running either way.
    for p in &writer_pids {
        let pid: i32 = p.parse().unwrap();
        assert!(baton_proc::procfs::stat(pid).is_none_or(|st| st.exited));
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

/// The pid of the background holder of lock `name`.
fn holder_pid(env: &Env, name: &str) -> i32 {
    let out = env.run(&["lock", "status", name, "--json"]);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    doc["holders"][0]["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or_else(|| panic!("no holder in {doc}"))
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

/// The background holder is SIGKILLed, not the script: the script and what
/// it started (a child, a double fork) die with it, and the lock is not
/// handed over before they are gone. Before the holder had a guardian, the
/// next holder got the lock at once while the script and its writers ran on.
#[test]
fn a_killed_holder_takes_its_script_and_what_it_started_with_it() {
    killed_hands_over_only_after_the_writers(
        Victim::Holder,
        Launch::OwnGroup,
        "WRITER &\n( WRITER & )\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}

/// The same with a script that shares its parent's group (an agent that did
/// not give it one): only the script's own tree is stopped, followed by the
/// guardian from the script.
#[test]
fn a_killed_holder_of_a_script_in_its_parents_group_takes_the_scripts_tree_with_it() {
    killed_hands_over_only_after_the_writers(
        Victim::Holder,
        Launch::ParentsGroup,
        "WRITER &\nsh -c 'WRITER & wait' &\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}

/// The pid of the guardian that the background holder `holder` started.
fn guardian_of(holder: i32) -> i32 {
    let mut found = None;
    wait_until(Duration::from_secs(30), || {
        found = fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: i32 = stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()?;
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (ppid == holder && String::from_utf8_lossy(&cmdline).contains("__baton-guard"))
                .then_some(pid)
        });
        found.is_some()
    });
    found.unwrap()
}

/// The lines of `/proc/locks` on the file with inode `ino`.
fn kernel_locks_on(ino: u64) -> Vec<String> {
    fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .any(|f| f.rsplit(':').next() == Some(&ino.to_string()) && f.contains(':'))
        })
        .map(str::to_string)
        .collect()
}

/// After `lock release`, the guardian's duplicate of the lock file's
/// descriptor keeps nothing locked, even while the guardian has not exited
/// yet (here it is stopped, under a child subreaper that keeps it stopped;
/// under load it may simply not have started). It used to keep the
/// borrowers' byte write-locked and the name's marker: the next holder's
/// `lock release` then waited for that guardian, and gave up after 10 s
/// ("did not let go within 10 s"), its holder stuck for a minute.
#[test]
fn a_released_hold_leaves_nothing_locked_in_its_guardians_duplicate() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    let (held, go, done) = (env.path("held.json"), env.path("go"), env.path("done"));
    let baton = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.display();
    let script = format!(
        "{baton} --dir {dir} lock acquire c --json > {held}.tmp || exit 1\nmv {held}.tmp {held}\n\
         while [ ! -e {go} ]; do sleep 0.02; done\n\
         {baton} --dir {dir} lock release c > {done}.tmp 2>&1; echo \"rc=$?\" >> {done}.tmp; mv {done}.tmp {done}\n",
        held = held.display(),
        go = go.display(),
        done = done.display(),
    );
    let mut launcher = Command::new("python3")
        .arg("-c")
        .arg(LAUNCHER)
        .args(["1", "0"])
        .arg(env.path("rootpid"))
        .arg(&script)
        .current_dir(env.tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&common::wait_for_file(&held)).unwrap();
    let holder = i32::try_from(doc["holder_pid"].as_i64().unwrap()).unwrap();
    let guardian = guardian_of(holder);
    let _kill = KillOnDrop(guardian);
    let g = rustix::process::Pid::from_raw(guardian).unwrap();
    rustix::process::kill_process(g, rustix::process::Signal::STOP).unwrap();
    wait_until(Duration::from_secs(30), || {
        fs::read_to_string(format!("/proc/{guardian}/stat"))
            .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('T')))
    });
    fs::write(&go, "").unwrap();
    let released = common::wait_for_file(&done);
    assert!(released.contains("rc=0"), "{released}");

    // Named as what it is wherever processes are listed (not "exe").
    assert_eq!(
        fs::read_to_string(format!("/proc/{guardian}/comm"))
            .unwrap()
            .trim(),
        "baton-guard"
    );
    let ino = fs::metadata(env.dir.join("locks/c.lock")).unwrap().ino();
    let left = kernel_locks_on(ino);
    assert!(
        left.is_empty(),
        "the released lock's file is still locked (by the guardian's duplicate): {left:?}"
    );
    // The next holder takes the lock and lets go of it as usual.
    let next = common::shell(
        env.tmp.path(),
        &format!(
            "T=$({baton} --dir {dir} lock acquire c) || exit 1\n{baton} --dir {dir} lock release c"
        ),
    )
    .output()
    .unwrap();
    assert!(next.status.success(), "{}", stderr(&next));

    rustix::process::kill_process(g, rustix::process::Signal::KILL).unwrap();
    launcher.wait().unwrap();
}

/// Someone kills the guardian: the holder starts another at once, so that
/// when the holder is killed next, the script and what it started still die
/// with it. Before, a killed guardian went unnoticed and they ran on.
#[test]
fn a_killed_guardian_is_replaced_and_the_script_still_dies_with_its_holder() {
    killed_hands_over_only_after_the_writers(
        Victim::GuardianThenHolder,
        Launch::OwnGroup,
        "WRITER &\n( WRITER & )\nwhile [ $(wc -l < PIDS) -lt 2 ]; do sleep 0.02; done",
        2,
    );
}
