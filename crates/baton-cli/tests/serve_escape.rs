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
    assert!(
        log.contains("left 1 process(es) running") && log.contains(&format!("pid {pid} (sleep")),
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
