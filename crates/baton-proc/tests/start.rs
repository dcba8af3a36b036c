//! How the command starts (`spawn.rs`): it runs only after `on_start` has
//! recorded its process group, never if the supervisor dies first, and it
//! starts with a clean signal state in its own group.

// clippy.toml allows `expect` in `#[test]` functions only; the helpers here panic on failure
// just the same, with a message, which is what a failed test should do.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use baton_proc::{Outcome, Supervisor};
use common::{sh, wait_for_line, PATIENCE};

/// Field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`.
fn stat_field(pid: i32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    after_comm.split(' ').nth(n - 3).map(str::to_owned)
}

#[test]
fn the_command_runs_only_after_on_start_returns_and_leads_its_own_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let mut spec = sh(r#"echo "$$" > "$RAN""#);
    spec.env.push(("RAN".into(), ran.clone().into()));
    let mut seen = None;
    let finished = Supervisor::new(spec)
        .run_with(|started| {
            // The child exists and already leads its group...
            assert_eq!(
                stat_field(started.pgid, 5).as_deref(),
                Some(started.pgid.to_string().as_str()),
                "the recorded group is not the child's own"
            );
            // ...but runs nothing until we return, however long we take.
            std::thread::sleep(Duration::from_millis(300));
            assert!(!ran.exists(), "the command ran before it was recorded");
            seen = Some(started.pgid);
        })
        .expect("run");
    assert_eq!(finished.outcome, Outcome::Exited(0));
    let pid: i32 = wait_for_line(&ran).parse().expect("pid");
    assert_eq!(
        Some(pid),
        seen,
        "the command is the process that was recorded"
    );
}

/// With `new_session` the command leads a session of its own, made before
/// its group is recorded (what `on_start` records is the new session's
/// group), and none of its processes can join a group of this process's
/// session; without it, it stays in this process's session.
#[test]
fn a_command_in_a_session_of_its_own_cannot_join_this_processs_group() {
    let ours = stat_field(std::process::id() as i32, 6).expect("our session");
    let our_group = stat_field(std::process::id() as i32, 5).expect("our group");
    let join = "import os, sys\n\
                try:\n    os.setpgid(0, int(sys.argv[1]))\n\
                except PermissionError:\n    sys.exit(3)\n";
    for new_session in [true, false] {
        let mut spec = baton_proc::RunSpec::new("python3").args(["-c", join, &our_group]);
        spec.new_session = new_session;
        let mut recorded = None;
        let finished = Supervisor::new(spec)
            .run_with(|started| {
                let pgid = started.pgid.to_string();
                recorded = Some((
                    stat_field(started.pgid, 5).expect("group"),
                    stat_field(started.pgid, 6).expect("session"),
                    pgid,
                ));
            })
            .expect("run");
        let (group, session, pgid) = recorded.expect("on_start ran");
        assert_eq!(group, pgid, "the command does not lead its own group");
        match new_session {
            true => {
                assert_eq!(session, pgid, "the session was not made before the record");
                assert_eq!(finished.outcome, Outcome::Exited(3), "it joined our group");
            }
            false => {
                assert_eq!(session, ours, "the command left this process's session");
                assert_eq!(finished.outcome, Outcome::Exited(0));
            }
        }
    }
}

#[test]
fn the_command_starts_with_no_signal_blocked_and_sigpipe_at_its_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("status");
    let mut spec = sh(r#"exec grep -E '^Sig(Blk|Ign):' /proc/self/status > "$OUT""#);
    spec.env.push(("OUT".into(), out.clone().into()));
    // Block a signal in the thread that forks: the child must not keep it blocked.
    // SAFETY: a plain sigset_t, filled by sigemptyset/sigaddset, for this thread only.
    let restore = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    };
    let outcome = Supervisor::new(spec).run();
    // SAFETY: restores this thread's mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &restore, std::ptr::null_mut()) };
    assert_eq!(outcome.expect("run"), Outcome::Exited(0));
    let status = std::fs::read_to_string(&out).expect("read status");
    let mask = |name: &str| {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {status}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "{status}");
    // This test process ignores SIGPIPE (every Rust program does).
    let sigpipe = 1u64 << (libc::SIGPIPE - 1);
    assert_eq!(mask("SigIgn:") & sigpipe, 0, "{status}");
}

/// Run by the test below as a separate process (the supervisor to kill):
/// starts a command that would create `RAN`, and while recording it
/// announces its pid in `RECORDING` and never returns.
#[test]
#[ignore = "a helper process of killed_before_the_record_the_command_never_runs"]
fn helper_supervisor_that_hangs_while_recording() {
    let (Some(ran), Some(recording)) = (
        std::env::var_os("BATON_TEST_RAN"),
        std::env::var_os("BATON_TEST_RECORDING"),
    ) else {
        return;
    };
    let mut spec = sh(r#"echo ran > "$BATON_TEST_RAN"; sleep 30"#);
    spec.env.push(("BATON_TEST_RAN".into(), ran));
    let _ = Supervisor::new(spec).run_with(|started| {
        let tmp = Path::new(&recording).with_extension("tmp");
        std::fs::write(&tmp, format!("{}\n", started.pgid)).unwrap();
        std::fs::rename(&tmp, &recording).unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    });
}

#[test]
fn killed_before_the_record_the_command_never_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let recording = dir.path().join("recording");
    let mut supervisor = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "start::helper_supervisor_that_hangs_while_recording", // its name in tests/main.rs
            "--ignored",
            "--nocapture",
        ])
        .env("BATON_TEST_RAN", &ran)
        .env("BATON_TEST_RECORDING", &recording)
        .spawn()
        .expect("start the helper supervisor");
    let child: i32 = wait_for_line(&recording).parse().expect("pid");
    // The child exists, waiting for the go-ahead.
    assert!(Path::new(&format!("/proc/{child}")).exists());
    supervisor.kill().expect("SIGKILL the supervisor");
    supervisor.wait().expect("reap the supervisor");
    // The child goes with it, without having run anything.
    let start = Instant::now();
    while Path::new(&format!("/proc/{child}")).exists()
        && stat_field(child, 3).as_deref() != Some("Z")
    {
        assert!(
            start.elapsed() < PATIENCE,
            "the child of a killed supervisor is still there"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The child is gone: it can no longer create the file.
    assert!(
        !ran.exists(),
        "the command ran although its supervisor died before recording it"
    );
}

#[test]
fn the_environment_is_inherited_with_each_variable_set_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("env");
    // PATH is inherited by every test process: replacing it must not add a second one.
    let mut spec = sh(r#"exec env > "$OUT""#);
    spec.env.push(("OUT".into(), out.clone().into()));
    spec.env.push(("BATON_TEST_TWICE".into(), "first".into()));
    spec.env.push(("BATON_TEST_TWICE".into(), "second".into()));
    let path = std::env::var_os("PATH").expect("PATH is set");
    spec.env.push(("PATH".into(), path.clone()));
    assert_eq!(
        Supervisor::new(spec).run().expect("run"),
        Outcome::Exited(0)
    );
    let env = std::fs::read_to_string(&out).expect("read env");
    let values = |key: &str| -> Vec<&str> {
        env.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .collect()
    };
    assert_eq!(values("BATON_TEST_TWICE"), ["second"], "{env}");
    assert_eq!(values("PATH"), [path.to_str().unwrap()], "{env}");
    assert_eq!(
        values("HOME").len(),
        usize::from(std::env::var_os("HOME").is_some())
    );
}

#[test]
fn a_term_sent_to_the_group_before_the_exec_ends_the_command_before_it_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let mut spec = sh(r#"echo ran > "$RAN""#);
    spec.env.push(("RAN".into(), ran.clone().into()));
    // With the supervisor's handlers installed, as `baton run` has them.
    spec.forward_signals = true;
    let finished = Supervisor::new(spec)
        .run_with(|started| {
            // SAFETY: signals the child's own new group, which exists (it was
            // made before `on_start`).
            // Pending in the child until it has restored the default
            // action, which is before it waits for the go-ahead.
            unsafe { libc::kill(-started.pgid, libc::SIGTERM) };
        })
        .expect("run");
    assert_eq!(finished.outcome, Outcome::Signaled(libc::SIGTERM));
    assert!(!ran.exists(), "the command ran after a TERM to its group");
}

/// A run that asks for a guardian which cannot be started fails before the
/// command runs: the command never runs unguarded.
#[test]
fn a_guardian_that_cannot_start_means_the_command_never_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let mut spec = sh(r#"touch "$RAN""#);
    spec.env.push(("RAN".into(), ran.clone().into()));
    spec.guard = Some(baton_proc::GuardSpec {
        program: dir.path().join("no-such-guardian"),
        fence: baton_proc::Fence::new(Duration::from_secs(7)),
    });
    let err = Supervisor::new(spec).run().expect_err("the run must fail");
    assert!(err.to_string().contains("guardian"), "{err}");
    assert_eq!(err.exit_code(), baton_proc::EXIT_INTERNAL);
    assert!(!ran.exists(), "the command ran without its guardian");
}

#[test]
fn the_program_is_looked_up_in_the_commands_own_path_as_execvp_does() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let (denied, bin) = (dir.path().join("denied"), dir.path().join("bin"));
    std::fs::create_dir(&denied).expect("mkdir");
    std::fs::create_dir(&bin).expect("mkdir");
    let out = dir.path().join("out");
    // First on the PATH, but not executable: skipped, as execvp does.
    std::fs::write(
        denied.join("baton-test-tool"),
        "#!/bin/sh\necho denied > \"$OUT\"\n",
    )
    .expect("write");
    // No `#!` line: the kernel refuses it (ENOEXEC), execvp runs it with /bin/sh.
    let tool = bin.join("baton-test-tool");
    std::fs::write(&tool, "echo \"ran $1\" > \"$OUT\"\n").expect("write");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Only in the command's PATH, not in this process's.
    let mut spec = baton_proc::RunSpec::new("baton-test-tool").arg("here");
    spec.clear_env = true;
    let path = format!("{}:{}", denied.display(), bin.display());
    spec.env.push(("PATH".into(), path.into()));
    spec.env.push(("OUT".into(), out.clone().into()));
    let outcome = Supervisor::new(spec).run().expect("run");
    assert_eq!(outcome, Outcome::Exited(0));
    assert_eq!(wait_for_line(&out), "ran here");

    // Found nowhere but denied somewhere: not executable (126), as execvp says EACCES.
    let mut spec = baton_proc::RunSpec::new("baton-test-tool");
    spec.clear_env = true;
    spec.env.push(("PATH".into(), denied.into_os_string()));
    let err = Supervisor::new(spec).run().expect_err("denied");
    assert_eq!(err.exit_code(), 126, "{err:?}");
}

#[test]
fn a_panic_while_recording_leaves_no_child_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ran = dir.path().join("ran");
    let mut spec = sh(r#"echo ran > "$RAN""#);
    spec.env.push(("RAN".into(), ran.clone().into()));
    let pid = std::sync::Mutex::new(None);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Supervisor::new(spec).run_with(|started| {
            *pid.lock().unwrap() = Some(started.pgid);
            panic!("the record failed");
        })
    }));
    assert!(panicked.is_err());
    let pid = pid.lock().unwrap().expect("recorded");
    // Killed and reaped before the panic went on: no process, not even a zombie.
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the child {pid} is still there"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(!ran.exists(), "the command ran");
}

/// 4096 arguments to a script without `#!` found on the third `PATH`
/// entry (the first is no directory, the second is relative and empty):
/// all reach it through `/bin/sh`, as execvp passes them.
#[test]
fn four_thousand_arguments_reach_a_script_found_late_on_the_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let (file, bin) = (dir.path().join("file"), dir.path().join("bin"));
    std::fs::write(&file, "").expect("write");
    std::fs::create_dir(&bin).expect("mkdir");
    let out = dir.path().join("out");
    let tool = bin.join("baton-test-count");
    std::fs::write(&tool, "echo \"$# $1 $4096\" > \"$OUT\"\n").expect("write");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut spec = baton_proc::RunSpec::new("baton-test-count");
    spec.args = (1..=4096).map(|i| format!("a{i}").into()).collect();
    spec.clear_env = true;
    let path = format!("{}:relative-dir:{}", file.display(), bin.display());
    spec.env.push(("PATH".into(), path.into()));
    spec.env.push(("OUT".into(), out.clone().into()));
    let outcome = Supervisor::new(spec).run().expect("run");
    assert_eq!(outcome, Outcome::Exited(0));
    assert_eq!(wait_for_line(&out), "4096 a1 a4096");
}
