#![cfg(target_os = "linux")] // setsid, /proc, the child subreaper
//! A job of the service never leaves behind a process that left its
//! command's process group (`setsid`, a new session): the service is a
//! child subreaper, attributes each orphan to its job (its `BATON_RUN_ID`),
//! terminates a job's orphans before the job's slot, group and locks are
//! released, never another running job's, and reaps those that exit by
//! themselves (found by a hostile review: a service job's `setsid`
//! process kept running after the job ended, and a group's next job
//! started beside it).

use serde_json::json;

use crate::serve_common::{alive, sh_config, wait_for_file, Server};

/// A script that starts `setsid sleep 300` (which records its pid in
/// `{t}/{name}.pid`, its output going nowhere) and waits until it runs.
fn escape(t: &str, name: &str) -> String {
    format!(
        "setsid sh -c 'echo $$ > {t}/{name}.tmp; mv {t}/{name}.tmp {t}/{name}.pid; exec sleep 300' \
         </dev/null >/dev/null 2>&1 & while [ ! -s {t}/{name}.pid ]; do sleep 0.01; done"
    )
}

fn pid_in(path: &str) -> i32 {
    wait_for_file(std::path::Path::new(path))
        .trim()
        .parse()
        .unwrap()
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
fn ppid(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Children of `parent` that have exited and were not reaped.
fn zombies_of(parent: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let mut f = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = f.next().unwrap_or("");
        let pp: i32 = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if pp == parent && state == "Z" {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_jobs_setsid_process_is_terminated_when_the_job_ends() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let id = s.submit(json!({"prompt": escape(&t, "esc")}));
    let j = s.wait_final(&id);
    assert_eq!(j["status"], "succeeded", "{j}");
    let pid = pid_in(&format!("{t}/esc.pid"));
    assert!(
        !alive(pid),
        "the job's setsid process {pid} still runs after the job ended: {j}"
    );
    let (code, log) = s.get_text(&format!("/v1/jobs/{id}/log?stream=stderr"));
    assert_eq!(code, 200, "{log}");
    // Named as it was when stopped: `sh` if its `exec sleep` had not run
    // yet (the job ends once the pid is written).
    let named = ["sleep", "sh"]
        .iter()
        .any(|c| log.contains(&format!("pid {pid} ({c},")));
    assert!(
        log.contains("left 1 process(es) running") && named,
        "the job's log does not name its leftover: {log:?}"
    );
}

#[test]
fn a_groups_next_job_never_starts_beside_a_setsid_process_of_the_previous_one() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let first = s.submit(json!({"prompt": escape(&t, "g1"), "group": "g"}));
    let check = format!(
        "p=$(cat {t}/g1.pid); if [ -e /proc/$p ] && ! grep -q ') Z' /proc/$p/stat; \
         then echo alive; else echo gone; fi"
    );
    let second = s.submit(json!({"prompt": check, "group": "g"}));
    let j1 = s.wait_final(&first);
    assert_eq!(j1["status"], "succeeded", "{j1}");
    let j2 = s.wait_final(&second);
    assert_eq!(j2["status"], "succeeded", "{j2}");
    assert_eq!(
        j2["output"], "gone\n",
        "the group's next job ran beside the previous job's setsid process: {j2}"
    );
    assert!(!alive(pid_in(&format!("{t}/g1.pid"))));
}

#[test]
fn a_job_ending_never_stops_an_orphan_of_another_running_job() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    // B's child starts a setsid grandchild and exits at once: the
    // grandchild is re-parented to the service while B runs on.
    std::fs::write(format!("{t}/child.sh"), escape(&t, "b")).unwrap();
    let b = s.submit(json!({"prompt": format!(
        "sh {t}/child.sh; echo ready > {t}/b.ready; while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    let grandchild = pid_in(&format!("{t}/b.pid"));
    wait_for_file(std::path::Path::new(&format!("{t}/b.ready")));
    assert_eq!(
        ppid(grandchild),
        s.pid(),
        "B's grandchild was not re-parented to the service"
    );
    let a = s.submit(json!({"prompt": escape(&t, "a")}));
    let ja = s.wait_final(&a);
    assert_eq!(ja["status"], "succeeded", "{ja}");
    assert!(
        !alive(pid_in(&format!("{t}/a.pid"))),
        "A's own orphan runs on"
    );
    assert!(
        alive(grandchild),
        "A's end stopped B's orphan {grandchild} while B still runs"
    );
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    let jb = s.wait_final(&b);
    assert_eq!(jb["status"], "succeeded", "{jb}");
    assert!(
        !alive(grandchild),
        "B's orphan {grandchild} still runs after B ended"
    );
}

#[test]
fn orphans_that_exit_by_themselves_are_reaped() {
    let s = Server::start(&sh_config(""), &[]);
    let ids: Vec<String> = (0..200)
        .map(|i| {
            let prompt = match i % 2 {
                0 => "setsid sh -c 'exit 0' </dev/null >/dev/null 2>&1 &".to_string(),
                _ => "setsid sleep 0.01 </dev/null >/dev/null 2>&1 & sleep 0.05".to_string(),
            };
            s.submit(json!({ "prompt": prompt }))
        })
        .collect();
    for id in &ids {
        let j = s.wait_final(id);
        assert_eq!(j["status"], "succeeded", "{j}");
    }
    // Each orphan was stopped, or had exited, by its job's end, and was
    // reaped then: none is left.
    let zombies = zombies_of(s.pid());
    assert!(
        zombies.is_empty(),
        "the service left {} orphans unreaped: {zombies:?}",
        zombies.len()
    );
}

/// An orphan without a mark (`env -i`) cannot be attributed by its
/// environment: it is stopped at a job's end only when no other running job
/// started before it (it could be theirs), else at the end of the last such
/// job, never while one that could own it runs.
#[test]
fn an_orphan_without_a_mark_is_stopped_once_no_running_job_could_own_it() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let unmarked = |name: &str| escape(&t, name).replacen("setsid sh", "env -i setsid sh", 1);
    // Alone: stopped at its own job's end.
    let a = s.submit(json!({ "prompt": unmarked("alone") }));
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
    assert!(!alive(pid_in(&format!("{t}/alone.pid"))));
    // B runs from before C's orphan started: C's end leaves it to B's.
    let b = s.submit(json!({"prompt": format!(
        "echo up > {t}/b.up; while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    wait_for_file(std::path::Path::new(&format!("{t}/b.up")));
    let c = s.submit(json!({ "prompt": unmarked("c") }));
    assert_eq!(s.wait_final(&c)["status"], "succeeded");
    let orphan = pid_in(&format!("{t}/c.pid"));
    assert!(alive(orphan), "C's end stopped an orphan that could be B's");
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
    assert!(
        !alive(orphan),
        "no running job could own {orphan}: it runs on"
    );
}

/// An orphan whose mark names no registered run is not thereby a run's
/// that has ended: a job's process that runs with a `BATON_RUN_ID` of its
/// own (exported by the job, a tool, a nested run killed before it could
/// stop its orphans) is attributed as one without a mark, never stopped by
/// another job's end while the job that started it runs (found by a
/// hostile review: any job's end stopped it).
#[test]
fn a_jobs_end_never_stops_an_orphan_of_a_running_job_that_carries_an_unknown_mark() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let forged = escape(&t, "b").replacen("setsid sh", "env BATON_RUN_ID=not-a-job setsid sh", 1);
    std::fs::write(format!("{t}/child.sh"), forged).unwrap();
    let b = s.submit(json!({"prompt": format!(
        "sh {t}/child.sh; echo ready > {t}/b.ready; while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    let orphan = pid_in(&format!("{t}/b.pid"));
    wait_for_file(std::path::Path::new(&format!("{t}/b.ready")));
    assert_eq!(
        ppid(orphan),
        s.pid(),
        "B's orphan was not re-parented to the service"
    );
    let a = s.submit(json!({ "prompt": "true" }));
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
    assert!(
        alive(orphan),
        "A's end stopped B's orphan {orphan} (an unknown BATON_RUN_ID) while B still runs"
    );
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
    assert!(
        !alive(orphan),
        "no running job could own {orphan}: it runs on"
    );
}

/// An orphan carrying the mark of a job that has ended (one that forked
/// while its job's end stopped it) is stopped by the next job end that
/// finds it, even while an older job runs that could own an unmarked one.
#[test]
fn an_orphan_of_a_job_that_ended_is_stopped_by_the_next_end() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let b = s.submit(json!({"prompt": format!(
        "echo up > {t}/b.up; while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    wait_for_file(std::path::Path::new(&format!("{t}/b.up")));
    let a = s.submit(json!({ "prompt": "true" }));
    assert_eq!(s.wait_final(&a)["status"], "succeeded");
    // C leaves a process marked as A's, as a late leftover of A would be.
    let late =
        escape(&t, "late").replacen("setsid sh", &format!("env BATON_RUN_ID={a} setsid sh"), 1);
    let c = s.submit(json!({ "prompt": late }));
    assert_eq!(s.wait_final(&c)["status"], "succeeded");
    let orphan = pid_in(&format!("{t}/late.pid"));
    assert!(
        !alive(orphan),
        "{orphan}, marked as ended job {a}'s, runs on after C's end"
    );
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
}

/// Field `n` (1-based, as in proc(5)) of `/proc/<pid>/stat`.
fn stat_field(pid: i32, n: usize) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after
        .split_whitespace()
        .nth(n - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// Kills a process a failed test would leave running.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if alive(self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &self.0.to_string()])
                .status();
        }
    }
}

/// A job's process cannot hide in the service's own process group (its
/// helpers', which the attribution of orphans never touches): each job runs
/// in a session of its own, so `setpgid` into the service's group is
/// refused, and a process that tried is stopped at its job's end (found by
/// a review: it joined the group, and ran on after its job ended).
#[test]
fn a_jobs_process_cannot_hide_in_the_services_process_group() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let service_pgid = stat_field(s.pid(), 5);
    std::fs::write(
        format!("{t}/hide.py"),
        format!(
            "import os, sys\n\
             try:\n    os.setpgid(0, int(sys.argv[1]))\nexcept OSError:\n    pass\n\
             open('{t}/hide.tmp', 'w').write(str(os.getpid()))\n\
             os.rename('{t}/hide.tmp', '{t}/hide.pid')\n\
             os.execv('/bin/sleep', ['sleep', '300'])\n"
        ),
    )
    .unwrap();
    let id = s.submit(json!({"prompt": format!(
        "echo $$ $(cut -d' ' -f6 /proc/$$/stat) > {t}/session.tmp; mv {t}/session.tmp {t}/session; \
         python3 {t}/hide.py {service_pgid} </dev/null >/dev/null 2>&1 & \
         while [ ! -s {t}/hide.pid ]; do sleep 0.01; done"
    )}));
    let j = s.wait_final(&id);
    let pid = pid_in(&format!("{t}/hide.pid"));
    let _cleanup = KillOnDrop(pid);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert!(
        !alive(pid),
        "the job's process {pid} (process group {}, the service's is {service_pgid}) \
         runs on after the job ended",
        stat_field(pid, 5)
    );
    // The job's shell led its own session.
    let session = wait_for_file(std::path::Path::new(&format!("{t}/session")));
    let (shell, sid) = session.trim().split_once(' ').unwrap();
    assert_eq!(shell, sid, "the job did not run in a session of its own");
}

/// An orphan in a running job's session is that job's, even without a
/// mark (`env -i`): one that left its job's process group but not its
/// session (`setpgid(0, 0)`) is stopped at its job's end although an older
/// job still runs (which, by start time alone, could own it).
#[test]
fn an_orphan_in_a_jobs_session_is_stopped_at_its_end_without_a_mark() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    std::fs::write(
        format!("{t}/leave.py"),
        format!(
            "import os\n\
             os.setpgid(0, 0)\n\
             open('{t}/leave.tmp', 'w').write(str(os.getpid()))\n\
             os.rename('{t}/leave.tmp', '{t}/leave.pid')\n\
             os.execv('/bin/sleep', ['sleep', '300'])\n"
        ),
    )
    .unwrap();
    let b = s.submit(json!({"prompt": format!(
        "echo up > {t}/b.up; while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    wait_for_file(std::path::Path::new(&format!("{t}/b.up")));
    let c = s.submit(json!({"prompt": format!(
        "env -i \"$(command -v python3)\" {t}/leave.py </dev/null >/dev/null 2>&1 & \
         while [ ! -s {t}/leave.pid ]; do sleep 0.01; done"
    )}));
    let jc = s.wait_final(&c);
    let orphan = pid_in(&format!("{t}/leave.pid"));
    let _cleanup = KillOnDrop(orphan);
    assert_eq!(jc["status"], "succeeded", "{jc}");
    let stopped = !alive(orphan);
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
    assert!(
        stopped,
        "C's orphan {orphan} (in C's session, no mark) ran on after C ended, while B ran"
    );
}

/// An orphan of a running job that exits by itself is reaped while its job
/// still runs, even after the service has seen it (what an orphan is is
/// kept once seen, and other jobs' ends do not read it again but for a
/// sweep at most once a second, which reaps it).
#[test]
fn an_orphan_seen_before_that_exits_is_reaped_while_its_job_runs() {
    let s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let b = s.submit(json!({"prompt": format!(
        "(setsid sh -c 'echo $$ > {t}/z.tmp; mv {t}/z.tmp {t}/z.pid; \
         while [ ! -e {t}/z.go ]; do sleep 0.02; done' </dev/null >/dev/null 2>&1 &); \
         while [ ! -e {t}/b.go ]; do sleep 0.02; done"
    )}));
    let orphan = pid_in(&format!("{t}/z.pid"));
    let _cleanup = KillOnDrop(orphan);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ppid(orphan) != s.pid() {
        assert!(std::time::Instant::now() < deadline, "not re-parented");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Another job's end sees it (B's, left alone).
    assert_eq!(
        s.wait_final(&s.submit(json!({"prompt": "true"})))["status"],
        "succeeded"
    );
    assert!(alive(orphan), "another job's end stopped B's orphan");
    std::fs::write(format!("{t}/z.go"), "").unwrap();
    while alive(orphan) {
        assert!(
            std::time::Instant::now() < deadline,
            "{orphan} did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    while zombies_of(s.pid()).contains(&orphan) {
        assert!(
            std::time::Instant::now() < deadline,
            "B's orphan {orphan} exited and stays a zombie of the service while B runs"
        );
        let a = s.submit(json!({"prompt": "true"}));
        assert_eq!(s.wait_final(&a)["status"], "succeeded");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::fs::write(format!("{t}/b.go"), "").unwrap();
    assert_eq!(s.wait_final(&b)["status"], "succeeded");
}
