//! Helpers for tests that make PID namespaces (containers, sandboxes).

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{stderr, wait_until, Env};

/// Whether PID namespaces can be made here; panics under CI when not.
pub fn namespaces_available() -> bool {
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stdin(Stdio::null())
        .output();
    let why = match probe {
        Ok(out) if out.status.success() => return true,
        Ok(out) => stderr(&out),
        Err(e) => e.to_string(),
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "the kernel refused a PID namespace (`unshare --pid --fork --mount-proc true`: {why}); CI must run these tests as root on a kernel that allows it"
    );
    eprintln!("\n!!! SKIPPED: cannot create a PID namespace here ({why}); run as root to test containers !!!\n");
    false
}

/// `unshare --pid --fork --mount-proc baton --dir DIR ARGS`: baton is pid 1
/// of a new PID namespace with its own /proc, like a container's entrypoint.
pub fn in_new_ns(env: &Env, args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.tmp.path())
        .current_dir(env.tmp.path())
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            env!("CARGO_BIN_EXE_baton"),
        ])
        .arg("--dir")
        .arg(&env.dir)
        .args(args)
        .stdin(Stdio::null());
    c
}

/// The pid (here) of the process that `unshare` (pid `unshare`) forked.
pub fn forked_child(unshare: u32) -> i32 {
    let mut child = 0;
    wait_until(Duration::from_secs(20), || {
        let text = fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
            .unwrap_or_default();
        child = text
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        child != 0
    });
    child
}

/// Kills pid 1 of a namespace (and so all of it) when dropped, so a failed
/// test leaves nothing running.
pub struct NsGuard(pub i32);

impl Drop for NsGuard {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.0) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

pub fn pid_ns_of(pid: i32) -> u64 {
    baton_proc::pidns::pid_ns_of(pid).expect("namespace of a live process")
}

/// The pid here of the process that is `inner` in namespace `ns`.
pub fn pid_here(ns: u64, inner: i32) -> i32 {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|p| {
            baton_proc::pidns::pid_ns_of(*p) == Some(ns)
                && baton_proc::pidns::NsIds::of(*p).and_then(|ids| ids.inner_pid()) == Some(inner)
        })
        .unwrap_or_else(|| panic!("no pid {inner} in namespace {ns}"))
}

pub fn running(pid: i32) -> bool {
    baton_proc::procfs::stat(pid).is_some_and(|st| !st.exited)
}

pub fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let mut status = None;
    wait_until(Duration::from_secs(60), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap()
}

pub fn lock_doc(path: &Path) -> serde_json::Value {
    let text = fs::read_to_string(path).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}
