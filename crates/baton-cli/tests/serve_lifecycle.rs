#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The job service's lifecycle, as a hostile user sees it: `kill -9` with
//! jobs queued and running, restart recovery (with and without
//! `retry_on_interrupt`), durability of acknowledged jobs, graceful drain
//! (and its timeout), and eviction — a real `baton serve` on 127.0.0.1
//! running real commands.

use crate::serve_common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{alive, lingering, pids, sh_config, wait_for_file, Server};

fn status(j: &Value) -> &str {
    j["status"].as_str().unwrap_or("")
}

/// Sends SIGTERM to the service without waiting.
fn sigterm(s: &Server) {
    let pid = rustix::process::Pid::from_raw(s.pid()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
}

/// Waits (at most 60 s) for the service to exit; returns its exit code.
fn wait_exit(s: &mut Server) -> Option<i32> {
    let mut child = s.child.take().expect("running");
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "baton serve did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill9_with_running_and_queued_jobs_accounts_for_every_job_after_restart() {
    let mut s = Server::start(&sh_config(""), &["--max-concurrency", "2"]);
    let t = s.tmp();
    let a = s.submit(json!({"prompt": lingering(&t, "a", false)}));
    let b = s.submit(json!({"prompt": lingering(&t, "b", false)}));
    let mut old = pids(&t, "a");
    old.extend(pids(&t, "b"));
    let queued: Vec<String> = ["c", "d", "e"]
        .iter()
        .map(|n| s.submit(json!({"prompt": format!("echo {n} >> {t}/order")})))
        .collect();
    for id in &queued {
        assert_eq!(status(&s.job(id)), "queued");
    }
    s.kill9();
    eprintln!(
        "after kill -9, alive: {:?}",
        old.iter().map(|p| (*p, alive(*p))).collect::<Vec<_>>()
    );

    // One slot: the queued jobs then run one after the other.
    s.extra = vec!["--max-concurrency".into(), "1".into()];
    s.spawn();
    // Recovery stops the leftovers in the background, then marks the jobs.
    for p in &old {
        serve_common::wait_until_gone(*p);
    }
    for id in [&a, &b] {
        let j = s.wait_final(id);
        assert_eq!(status(&j), "interrupted", "{j}");
        assert!(!j["error"].as_str().unwrap_or("").is_empty(), "{j}");
        assert!(!j["finished_at"].is_null(), "{j}");
    }
    for id in &queued {
        let j = s.wait_final(id);
        assert_eq!(status(&j), "succeeded", "{j}");
    }
    assert_eq!(
        std::fs::read_to_string(format!("{t}/order")).unwrap(),
        "c\nd\ne\n"
    );
    let (_, h) = s.get("/health");
    assert_eq!(h["active"], 0, "{h}");
    assert_eq!(h["queued"], 0, "{h}");
}

#[test]
fn retry_on_interrupt_queues_the_job_again_first_and_only_once() {
    let config = r#"
default_template = "sh"
grace = "1s"
[templates.sh]
command = ["sh", "-c", "{prompt}"]
[templates.retry]
command = ["sh", "-c", "{prompt}"]
retry_on_interrupt = true
"#;
    let mut s = Server::start(config, &["--max-concurrency", "1"]);
    let t = s.tmp();
    // Each run records itself and its pids in `r<N>.pid` / `r<N>.bg`.
    let script = format!(
        "echo run >> {t}/r.runs; n=$(grep -c run {t}/r.runs); \
         echo $$ > {t}/r$n.pid; sleep 300 & echo $! > {t}/r$n.bg; wait"
    );
    let r = s.submit(json!({"template": "retry", "prompt": script}));
    let first = pids(&t, "r1");
    let q = s.submit(json!({"prompt": format!("echo q >> {t}/order")}));
    s.kill9();

    s.spawn();
    for p in &first {
        serve_common::wait_until_gone(*p);
    }
    // Queued again, ahead of q: it runs a second time while q waits.
    let second = pids(&t, "r2");
    let j = s.wait_job(&r, Duration::from_secs(30), |j| status(j) == "running");
    assert_eq!(
        j["error"].as_str().unwrap_or(""),
        "interrupted by a restart; queued again",
        "{j}"
    );
    assert_eq!(status(&s.job(&q)), "queued");
    s.kill9();

    // Interrupted again: no third run.
    s.spawn();
    for p in &second {
        serve_common::wait_until_gone(*p);
    }
    let j = s.wait_final(&r);
    assert_eq!(status(&j), "interrupted", "{j}");
    let j = s.wait_final(&q);
    assert_eq!(status(&j), "succeeded", "{j}");
    assert_eq!(
        std::fs::read_to_string(format!("{t}/r.runs")).unwrap(),
        "run\nrun\n"
    );
    assert!(!Path::new(&format!("{t}/r3.pid")).exists());
}

#[test]
fn every_acknowledged_job_survives_kill9_right_after_its_202() {
    let mut s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let ids: Vec<String> = (0..30)
        .map(|i| s.submit(json!({"prompt": format!("echo {i} >> {t}/done")})))
        .collect();
    s.kill9();
    s.spawn();
    let mut succeeded = 0;
    for id in &ids {
        let (code, j) = s.get(&format!("/v1/jobs/{id}"));
        assert_eq!(code, 200, "acknowledged job {id} was lost: {j}");
        let j = s.wait_final(id);
        match status(&j) {
            "succeeded" => succeeded += 1,
            "interrupted" => {}
            other => panic!("job {id} ended {other}: {j}"),
        }
    }
    // At most one job ran at the kill.
    assert!(
        succeeded >= ids.len() - 1,
        "{succeeded} of {} succeeded",
        ids.len()
    );
}

#[test]
fn sigterm_drains_running_jobs_refuses_new_ones_and_keeps_the_queue() {
    let mut s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let running = s.submit(json!({
        "prompt": format!("echo x > {t}/r.started; while [ ! -e {t}/go ]; do sleep 0.02; done; echo finished")
    }));
    wait_for_file(Path::new(&format!("{t}/r.started")));
    // Fails unless it runs after the restart.
    let queued = s.submit(json!({"prompt": format!("test -e {t}/restarted")}));
    sigterm(&s);

    let start = Instant::now();
    loop {
        let (code, h) = s.get("/health");
        if h["status"] == "draining" {
            assert_eq!(code, 503, "{h}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never draining: {h}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, v) = s.post("/v1/jobs", &json!({"prompt": "true"}));
    assert_eq!(code, 503, "{v}");
    assert_eq!(status(&s.job(&running)), "running");
    std::fs::write(format!("{t}/go"), "").unwrap();
    assert_eq!(wait_exit(&mut s), Some(0));

    std::fs::write(format!("{t}/restarted"), "").unwrap();
    s.spawn();
    let j = s.job(&running);
    assert_eq!(status(&j), "succeeded", "{j}");
    assert_eq!(j["output"], "finished\n", "{j}");
    let j = s.wait_final(&queued);
    assert_eq!(
        status(&j),
        "succeeded",
        "the queued job ran during the drain: {j}"
    );
}

#[test]
fn drain_timeout_cancels_a_long_job_and_leaves_nothing_running() {
    let config = sh_config("drain_timeout = \"1s\"");
    let mut s = Server::start(&config, &[]);
    let t = s.tmp();
    let long = s.submit(json!({"prompt": lingering(&t, "l", false)}));
    let ids = pids(&t, "l");
    sigterm(&s);
    assert_eq!(wait_exit(&mut s), Some(0));
    for p in &ids {
        assert!(
            !alive(*p),
            "process {p} of the cancelled job is still running"
        );
    }
    s.spawn();
    let j = s.job(&long);
    assert_eq!(status(&j), "cancelled", "{j}");
    assert!(
        j["error"].as_str().unwrap_or("").contains("shut down"),
        "{j}"
    );
}

#[test]
fn finished_jobs_are_evicted_after_job_ttl_with_their_files_but_running_ones_never() {
    let s = Server::start(
        &sh_config(""),
        &["--job-ttl", "1s", "--max-concurrency", "2"],
    );
    let t = s.tmp();
    let jobs_dir = |id: &str| s.dir.join("serve").join("jobs").join(id);
    let long = s.submit(json!({
        "prompt": format!("echo running; echo x > {t}/long.started; while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    wait_for_file(Path::new(&format!("{t}/long.started")));
    // Output files are made with the first byte: `long` has printed one line.
    wait_for_file(&jobs_dir(&long).join("stdout"));
    let quick = s.submit(json!({"prompt": "echo hi"}));
    let j = s.wait_final(&quick);
    assert_eq!(status(&j), "succeeded", "{j}");
    assert!(jobs_dir(&quick).join("stdout").exists());

    let gone = |id: &str| {
        let start = Instant::now();
        loop {
            let (code, v) = s.get(&format!("/v1/jobs/{id}"));
            if code == 404 {
                return;
            }
            assert_eq!(code, 200, "{v}");
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "job {id} never evicted: {v}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    gone(&quick);
    assert!(
        !jobs_dir(&quick).exists(),
        "the evicted job's files are still there"
    );
    let (code, _) = s.get_text(&format!("/v1/jobs/{quick}/log"));
    assert_eq!(code, 404);
    // `long` started before `quick` ended: it has run longer than job_ttl.
    let j = s.job(&long);
    assert_eq!(status(&j), "running", "{j}");
    assert!(jobs_dir(&long).exists());

    std::fs::write(format!("{t}/go"), "").unwrap();
    assert_eq!(status(&s.wait_final(&long)), "succeeded");
    gone(&long);
    assert!(!jobs_dir(&long).exists());
}

#[test]
fn the_timeout_counts_from_the_start_of_execution_not_from_queue_wait() {
    let s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let blocker = s.submit(json!({
        "prompt": format!("echo x > {t}/b.started; while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    wait_for_file(Path::new(&format!("{t}/b.started")));
    let waited = s.submit(json!({"prompt": "sleep 1; echo ok", "timeout": "2s"}));
    // Queued for longer than its timeout.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status(&s.job(&waited)), "queued");
    std::fs::write(format!("{t}/go"), "").unwrap();
    assert_eq!(status(&s.wait_final(&blocker)), "succeeded");
    let j = s.wait_final(&waited);
    assert_eq!(status(&j), "succeeded", "{j}");
    assert!(j["queue_wait_ms"].as_u64().unwrap() >= 2500, "{j}");

    let slow = s.submit(json!({"prompt": lingering(&t, "slow", false), "timeout": "1s"}));
    let ids = pids(&t, "slow");
    let j = s.wait_final(&slow);
    assert_eq!(status(&j), "timed_out", "{j}");
    assert_eq!(j["exit_code"], 124, "{j}");
    for p in &ids {
        assert!(
            !alive(*p),
            "process {p} of the timed-out job is still running"
        );
    }
}

/// A plain job's command is cloned by the service's spawner thread, which
/// lives as long as the service: when the service is killed outright, the
/// kernel kills the command (its parent-death signal) at once, before any
/// restart could stop it.
#[test]
fn a_running_jobs_command_dies_with_a_killed_service() {
    let mut s = Server::start(&sh_config(""), &[]);
    let t = s.tmp();
    let id = s.submit(
        json!({"prompt": format!("echo $$ > {t}/pid.tmp; mv {t}/pid.tmp {t}/pid; exec sleep 60")}),
    );
    let pid: i32 = wait_for_file(&Path::new(&t).join("pid"))
        .trim()
        .parse()
        .expect("a pid");
    assert_eq!(status(&s.job(&id)), "running");
    assert!(alive(pid));
    s.kill9();
    serve_common::wait_until_gone(pid);
}
