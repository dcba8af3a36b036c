#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! Containers and sandboxes: holders in PID namespaces (README "Containers
//! and sandboxes"). Real namespaces made with `unshare --pid --fork
//! --mount-proc` (as root), the real `baton` binary, real signals.
//!
//! Where the kernel refuses to create a PID namespace the tests say so loudly
//! and pass, except under CI (env `CI` set), where that is a failure.

use crate::common;

use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::ns::{
    forked_child, in_new_ns, lock_doc, namespaces_available, pid_here, pid_ns_of, running,
    wait_exit, NsGuard,
};
use common::{code, stderr, stdout, wait_until, Env};

#[test]
fn a_holder_in_a_pid_namespace_is_alive_from_the_host_and_broken_there_but_not_from_a_sibling() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    let mut holder = in_new_ns(&env, &["run", "--lock", "c", "--", "sleep", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let baton_here = forked_child(holder.id());
    let _guard = NsGuard(baton_here);
    env.wait_for_held("c", true);
    let st = env.status("c");
    let h = &st["holder"];
    // Recorded from inside: pid 1 of its namespace, which is not ours.
    assert_eq!(h["pid"], 1, "{st}");
    assert_eq!(h["pid_ns"], pid_ns_of(baton_here), "{st}");
    assert_ne!(pid_ns_of(baton_here), pid_ns_of(std::process::id() as i32));
    // Seen from the host: alive, and the real process named.
    assert_eq!(h["liveness"], "alive", "{st}");
    assert_eq!(h["alive"], true, "{st}");
    assert_eq!(h["local_pid"], baton_here, "{st}");
    let text = stdout(&env.run(&["lock", "status", "c"]));
    assert!(
        text.contains(&format!("pid {baton_here} here")) && text.contains("(alive)"),
        "{text}"
    );
    assert!(!text.contains("dead"), "{text}");

    // A sibling namespace cannot see it: not "dead", and no break.
    let out = in_new_ns(&env, &["lock", "status", "c", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["holder"]["liveness"], "not_visible", "{seen}");
    assert_eq!(seen["holder"]["alive"], true, "{seen}");
    let out = in_new_ns(&env, &["lock", "break", "c", "--grace", "5s"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 125, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("not visible from here") && err.contains("on the host"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(running(baton_here), "the sibling's break must not stop it");
    assert_eq!(env.status("c")["held"], true);

    // The host breaks it: its supervisor and command stop, the lock is free.
    let out = env.run(&["lock", "break", "c", "--grace", "20s", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["free_now"], true, "{report}");
    assert_eq!(report["stopped"][0]["holder"]["local_pid"], baton_here);
    let status = wait_exit(&mut holder);
    assert!(!status.success(), "the run was stopped: {status:?}");
    assert!(!running(baton_here));
    assert_eq!(env.status("c")["held"], false);
}

#[test]
fn two_pid_namespaces_each_led_by_pid_1_contend_without_a_lost_update() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    fs::write(env.path("counter"), "0\n").unwrap();
    let baton = env!("CARGO_BIN_EXE_baton");
    let dir = env.dir.display();
    // pid 1 of each namespace is this shell; 4 workers each, 50 runs each.
    let script = format!(
        r#"[ $$ = 1 ] || {{ echo "not pid 1: $$" >> failures; exit 1; }}
for w in 1 2 3 4; do
  (i=0; while [ $i -lt 50 ]; do
     {baton} --dir {dir} run --lock c -- sh -c 'n=$(cat counter); echo $((n + 1)) > counter; echo "$BATON_FENCING_TOKEN" >> tokens' || echo "run failed: $?" >> failures
     i=$((i + 1))
   done) &
done
wait"#
    );
    let spawn = || {
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
            .current_dir(env.tmp.path())
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (mut a, mut b) = (spawn(), spawn());
    let (pa, pb) = (forked_child(a.id()), forked_child(b.id()));
    let _guards = (NsGuard(pa), NsGuard(pb));
    assert_ne!(pid_ns_of(pa), pid_ns_of(pb), "two namespaces");
    let done = |c: &mut Child| {
        let mut status = None;
        wait_until(Duration::from_secs(110), || {
            status = c.try_wait().unwrap();
            status.is_some()
        });
        status.unwrap()
    };
    let (sa, sb) = (done(&mut a), done(&mut b));
    let failures = fs::read_to_string(env.path("failures")).unwrap_or_default();
    assert!(
        sa.success() && sb.success() && failures.is_empty(),
        "{failures}"
    );
    assert_eq!(
        fs::read_to_string(env.path("counter")).unwrap().trim(),
        "400"
    );
    let tokens: Vec<u64> = fs::read_to_string(env.path("tokens"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 400);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase in grant order"
    );
}

/// Restarted container, persistent baton dir: the dead holder was pid 1 of
/// namespace A with its command as group G. In the new incarnation B, pid 1
/// is a new process, and a process of B happens to have G's pid, group,
/// session and start time (the record below says so, as a restart within one
/// clock tick would). Neither B nor the host may take it for the dead
/// holder's leftover.
#[test]
fn a_restarted_namespace_reusing_the_dead_holders_ids_is_not_signalled_nor_shown_as_holder() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    // Incarnation A: baton as pid 1 holds `c`; then the container dies.
    let mut a = in_new_ns(&env, &["run", "--lock", "c", "--", "sleep", "300"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let a_baton = forked_child(a.id());
    let _guard_a = NsGuard(a_baton);
    let lock_file = env.dir.join("locks/c.lock");
    wait_until(Duration::from_secs(20), || {
        fs::read_to_string(&lock_file).is_ok_and(|t| t.contains("command_group"))
    });
    let ns_a = pid_ns_of(a_baton);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(a_baton).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_exit(&mut a);
    env.wait_for_held("c", false);

    // Incarnation B: a shell as pid 1, and a victim leading its own session.
    let victim_file = env.path("victim");
    let mut b = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c"])
        .arg(format!(
            r#"setsid sh -c 'echo $$ $(cut -d" " -f22 /proc/$$/stat) > {v}.tmp; mv {v}.tmp {v}; exec sleep 300' & exec sleep 300"#,
            v = victim_file.display()
        ))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let b_init = forked_child(b.id());
    let _guard_b = NsGuard(b_init);
    // The kernel may give B the inode of A's dead namespace: then only the
    // start time of its pid 1 tells them apart. Either way B is not A.
    let ns_b = pid_ns_of(b_init);
    eprintln!("namespace A {ns_a}, B {ns_b} (reused: {})", ns_a == ns_b);
    let mut victim = String::new();
    wait_until(Duration::from_secs(20), || {
        victim = fs::read_to_string(&victim_file).unwrap_or_default();
        victim.ends_with('\n')
    });
    let v: Vec<u64> = victim
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (v_pid, v_start) = (v[0], v[1]);
    let v_here = pid_here(ns_b, i32::try_from(v_pid).unwrap());
    assert!(running(v_here));

    // The dead holder's record, its command group now naming the victim.
    let mut doc = lock_doc(&lock_file);
    assert_eq!(doc["holders"][0]["pid"], 1);
    assert_eq!(doc["holders"][0]["pid_ns"], ns_a);
    doc["holders"][0]["command_group"]["pgid"] = v_pid.into();
    doc["holders"][0]["command_group"]["session"] = v_pid.into();
    doc["holders"][0]["command_group"]["leader_start_time"] = v_start.into();
    let doctored = format!("{doc}\n");
    fs::write(&lock_file, &doctored).unwrap();

    // Inside B: the dead holder is not B's pid 1, and B's next holder leaves
    // the victim alone.
    let in_b = |args: &[&str]| {
        Command::new("nsenter")
            .args(["--target", &b_init.to_string(), "--pid", "--mount", "--"])
            .arg(env!("CARGO_BIN_EXE_baton"))
            .arg("--dir")
            .arg(&env.dir)
            .args(args)
            .current_dir(env.tmp.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = in_b(&["lock", "status", "c", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["held"], false, "{st}");
    assert!(st["holders"].as_array().unwrap().is_empty(), "{st}");
    assert_ne!(st["last_holder"]["liveness"], "alive", "{st}");
    let out = in_b(&["run", "--lock", "c", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(running(v_here), "B's victim was signalled from inside B");

    // From the host: namespace A is gone, so nothing of it is left to stop,
    // and the victim, in B, is not A's.
    fs::write(&lock_file, &doctored).unwrap();
    let out = env.run(&["run", "--lock", "c", "--", "true"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(running(v_here), "B's victim was signalled from the host");

    // While B's baton holds it, the host sees B's holder, not A's.
    let mut hold = Command::new("nsenter")
        .args(["--target", &b_init.to_string(), "--pid", "--mount", "--"])
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg("--dir")
        .arg(&env.dir)
        .args(["run", "--lock", "c", "--", "sleep", "300"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_for_held("c", true);
    let st = env.status("c");
    assert_eq!(st["holder"]["pid_ns"], ns_b, "{st}");
    assert_eq!(st["holder"]["liveness"], "alive", "{st}");
    assert_eq!(st["holders"].as_array().unwrap().len(), 1, "{st}");
    let out = env.run(&["lock", "break", "c", "--grace", "20s"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    wait_exit(&mut hold);
    assert!(
        running(v_here),
        "breaking B's holder does not touch the victim"
    );
    drop(_guard_b);
    let _ = b.wait();
}

/// A held lock whose recorded holder is gone (the lock file was inherited,
/// or the record is wrong) is never reported "dead": status names the
/// process that holds it according to the kernel, and `break` refuses and
/// names it too.
#[test]
fn a_held_lock_whose_recorded_holder_is_gone_names_the_real_holder() {
    let env = Env::new();
    let ready = env.path("ready");
    let mut holder = env.spawn(&[
        "run",
        "--lock",
        "k",
        "--",
        "sh",
        "-c",
        &format!("touch {}; exec sleep 300", ready.display()),
    ]);
    let lock_file = env.dir.join("locks/k.lock");
    wait_until(Duration::from_secs(20), || {
        ready.exists() && fs::read_to_string(&lock_file).is_ok_and(|t| t.contains("command_group"))
    });
    // The record now names a process that no longer exists.
    let mut doc = lock_doc(&lock_file);
    let start = doc["holders"][0]["start_time"].as_u64().unwrap();
    doc["holders"][0]["start_time"] = (start + 1).into();
    fs::write(&lock_file, format!("{doc}\n")).unwrap();

    let st = env.status("k");
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["holder"]["liveness"], "inherited", "{st}");
    let kernel = st["kernel_holders"].as_array().unwrap();
    assert_eq!(kernel.len(), 1, "{st}");
    assert_eq!(kernel[0]["pid"], holder.id(), "{st}");
    assert_eq!(kernel[0]["slots"], serde_json::json!([0]), "{st}");
    let fields: std::collections::BTreeSet<&str> = kernel[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        baton_contract::json::KERNEL_HOLDER
            .fields
            .iter()
            .copied()
            .collect(),
        "a kernel holder drifted from its contract"
    );
    let text = stdout(&env.run(&["lock", "status", "k"]));
    assert!(!text.contains("dead"), "{text}");
    assert!(
        text.contains(&format!("held by     pid {}", holder.id())),
        "{text}"
    );
    let out = env.run(&["lock", "break", "k"]);
    assert_eq!(code(&out), 125);
    assert!(
        stderr(&out).contains(&format!("pid {} (baton)", holder.id())),
        "{}",
        stderr(&out)
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}

/// `baton doctor` says which PID namespace it runs in, and warns when
/// `/proc` belongs to another one (`unshare --pid` without `--mount-proc`).
#[test]
fn doctor_names_the_pid_namespace_and_warns_when_proc_is_not_its_own() {
    if !namespaces_available() {
        return;
    }
    let env = Env::new();
    let check = |out: &std::process::Output| -> serde_json::Value {
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "pid_namespace")
            .cloned()
            .unwrap()
    };
    let host = check(&env.run(&["doctor", "--json"]));
    assert_eq!(host["status"], "ok", "{host}");
    assert_eq!(host["detail"]["proc_is_own"], true, "{host}");
    let inside = check(&in_new_ns(&env, &["doctor", "--json"]).output().unwrap());
    assert_eq!(inside["status"], "ok", "{inside}");
    assert_eq!(inside["detail"]["initial"], false, "{inside}");
    assert!(
        inside["summary"]
            .as_str()
            .unwrap()
            .contains("not visible from here"),
        "{inside}"
    );
    let out = Command::new("unshare")
        .args(["--pid", "--fork", env!("CARGO_BIN_EXE_baton"), "--dir"])
        .arg(&env.dir)
        .args(["doctor", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let mixed = check(&out);
    assert_eq!(mixed["status"], "warning", "{mixed}");
    assert!(
        mixed["remedy"].as_str().unwrap().contains("--mount-proc"),
        "{mixed}"
    );
}
