#![cfg(unix)] // sh, signals or Unix-only paths: Windows runs windows.rs
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! The SQLite store's files removed or made unwritable under a running
//! service (issue 21): the service notices (health 503 `degraded` with the
//! reason, 503 on submit), never crashes, and never acknowledges a job it
//! cannot keep. A real `baton serve`, real files, real `chattr`.

use crate::serve_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{alive, sh_config, Mounted, Server};

/// Files made immutable (`chattr +i`) for as long as it lives.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    /// Makes `files` immutable; the test fails if `chattr` cannot (it must
    /// run as root on a file system with the attribute).
    fn new(files: &[PathBuf]) -> Immutable {
        for f in files {
            assert!(f.exists(), "{} does not exist", f.display());
            let out = Command::new("chattr")
                .arg("+i")
                .arg(f)
                .output()
                .expect("chattr");
            assert!(
                out.status.success(),
                "chattr +i {}: {}",
                f.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The fault is real: the file cannot be opened for writing.
        let probe = std::fs::OpenOptions::new().append(true).open(&files[0]);
        assert!(probe.is_err(), "{} is still writable", files[0].display());
        Immutable(files.to_vec())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(f).status();
        }
    }
}

/// Polls `/health` until it answers `code` (at most 30 s).
fn wait_health(s: &Server, code: u16) -> Value {
    let start = Instant::now();
    loop {
        let (c, h) = s.get("/health");
        if c == code {
            return h;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "health stays {c}: {h}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn store_files(dir: &Path) -> Vec<PathBuf> {
    ["serve.db", "serve.db-wal", "serve.db-shm"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.exists())
        .collect()
}

#[test]
fn a_removed_wal_file_makes_the_service_degraded_and_refuse_jobs() {
    let s = Server::start(&sh_config(""), &[]);
    let id = s.submit(json!({"prompt": "echo before"}));
    s.wait_final(&id);
    let wal = s.dir.join("serve.db-wal");
    std::fs::remove_file(&wal).expect("the store's -wal file exists while the service runs");

    let h = wait_health(&s, 503);
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(
        h["error"].as_str().unwrap_or("").contains("serve.db-wal"),
        "{h}"
    );
    let (code, v) = s.post("/v1/jobs", &json!({"prompt": "echo lost"}));
    assert_eq!(code, 503, "a job acknowledged into a removed WAL: {v}");
    assert_eq!(v["error"]["code"], "store_unavailable", "{v}");
}

#[test]
fn an_immutable_store_neither_crashes_the_service_nor_passes_for_healthy() {
    let s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let id = s.submit(json!({"prompt": "echo before"}));
    s.wait_final(&id);
    // A job running while the store becomes unwritable: its end cannot be
    // stored.
    let running = s.submit(json!({
        "prompt": format!("echo x > {t}/started; while [ ! -e {t}/go ]; do sleep 0.02; done")
    }));
    serve_common::wait_for_file(Path::new(&format!("{t}/started")));
    let frozen = Immutable::new(&store_files(&s.dir));

    let (code, v) = s.post("/v1/jobs", &json!({"prompt": "echo lost"}));
    assert_eq!(
        code, 503,
        "a job acknowledged into an unwritable store: {v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("serve.db"),
        "{v}"
    );
    std::fs::write(format!("{t}/go"), "").unwrap();
    let h = wait_health(&s, 503);
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(
        h["error"].as_str().unwrap_or("").contains("serve.db"),
        "{h}"
    );
    assert!(alive(s.pid()), "the service died");

    // Writable again: the job's end is stored, the service is healthy.
    drop(frozen);
    wait_health(&s, 200);
    let j = s.wait_final(&running);
    assert_eq!(j["status"], "succeeded", "{j}");
    assert!(alive(s.pid()), "the service died");
}

/// A burst of submissions onto a full disk: they share one commit (group
/// commit), which fails: none is acknowledged, none is stored, and
/// `/health` reports the failed write, not the submissions whose job an
/// earlier batch took (they wrote nothing). Space again: all works.
#[test]
fn a_burst_of_jobs_onto_a_full_disk_is_refused_and_health_reports_it() {
    let disk = tempfile::tempdir().unwrap();
    let small = disk.path().join("store");
    let _mounted = Mounted::tmpfs(&small, "2m");
    let store = format!("sqlite://{}", small.join("serve.db").display());
    let s = Server::start(&sh_config("max_queue_depth = 10000"), &["--store", &store]);
    let before = s.submit(json!({"prompt": "true"}));
    s.wait_final(&before);
    // The disk full to the last block.
    let filler = small.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        while f.write_all(&[0u8; 4096]).is_ok() {}
    }

    // 60 KiB prompts: no commit of one fits in what the -wal file has.
    let prompt = format!("true # {}", "x".repeat(60 * 1024));
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..32)
            .map(|_| scope.spawn(|| s.post("/v1/jobs", &json!({ "prompt": prompt }))))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (code, v) in &answers {
        assert_eq!(*code, 503, "a job acknowledged onto a full disk: {v}");
    }
    let (code, h) = s.get("/health");
    assert_eq!(code, 503, "a failed write hidden from /health: {h}");
    assert!(h["error"].as_str().unwrap_or("").contains("full"), "{h}");

    std::fs::remove_file(&filler).unwrap();
    let after = s.submit(json!({ "prompt": prompt }));
    wait_health(&s, 200);
    s.wait_final(&after);
    let (code, list) = s.get("/v1/jobs?limit=100");
    assert_eq!(code, 200, "{list}");
    let ids: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, [after.as_str(), before.as_str()], "{list}");
}

/// The store alone on a 4 MiB disk, 1000 trivial jobs (a few hundred KiB
/// of rows): every one is acknowledged, runs and ends. The write-ahead log
/// must not take the disk: it grew by some 20 KiB a job, checkpointed only
/// after 2500 commits, so at about 270 jobs it filled the disk, and from
/// then on no claim and no job's end could be stored, nor the checkpoint
/// that would have given the space back: jobs stayed `running` and
/// `queued` for good (found by the review of issue 24).
#[test]
fn a_store_on_a_small_disk_runs_every_job_it_acknowledged_to_its_end() {
    let disk = tempfile::tempdir().unwrap();
    let small = disk.path().join("store");
    let _mounted = Mounted::tmpfs(&small, "4m");
    let store = format!("sqlite://{}", small.join("serve.db").display());
    let s = Server::start(
        &sh_config("max_queue_depth = 10000\n[templates.t]\ncommand = [\"true\"]"),
        &["--store", &store],
    );
    let ids: Vec<String> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..250)
                        .map(|_| s.submit(json!({"template": "t"})))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let start = Instant::now();
    loop {
        let (_, h) = s.get("/health");
        if h["active"] == 0 && h["queued"] == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "jobs stay unfinished: {h}; the store's disk: {:?}",
            store_files(&small)
                .iter()
                .map(|f| (f.display().to_string(), f.metadata().map(|m| m.len()).ok()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in &ids {
        let j = s.job(id);
        assert_eq!(j["status"], "succeeded", "{j}");
    }
}

/// Submits 3 jobs that wait for `{tmp}/go` (one runs, two wait: one slot),
/// removes `remove` (relative to the baton dir) while the service runs,
/// waits until `/health` reports it degraded, kills the service (`kill
/// -9`), lets the jobs go and starts it again: the 3 jobs answered 202 are
/// there, and each runs to an end.
fn acknowledged_jobs_survive(remove: &[&str]) {
    let mut s = Server::start(&sh_config(""), &["--max-concurrency", "1"]);
    let t = s.tmp();
    let ids: Vec<String> = (0..3)
        .map(|i| {
            s.submit(json!({
                "prompt": format!("echo {i} >> {t}/runs; while [ ! -e {t}/go ]; do sleep 0.02; done")
            }))
        })
        .collect();
    serve_common::wait_for_file(Path::new(&format!("{t}/runs")));
    for f in remove {
        std::fs::remove_file(s.dir.join(f))
            .unwrap_or_else(|e| panic!("{f} exists while the service runs: {e}"));
    }
    let h = wait_health(&s, 503);
    assert_eq!(h["status"], "degraded", "{h}");
    eprintln!("degraded: {}", h["error"]);
    let (code, v) = s.post("/v1/jobs", &json!({"prompt": "echo lost"}));
    assert_eq!(code, 503, "a job acknowledged into a removed file: {v}");

    s.kill9();
    std::fs::write(format!("{t}/go"), "").unwrap();
    s.spawn();
    for id in &ids {
        let (code, j) = s.get(&format!("/v1/jobs/{id}"));
        assert_eq!(code, 200, "job {id}, answered 202, is gone: {j}");
        let j = s.wait_final(id);
        // The one that ran when the service was killed is reported
        // interrupted; the others run now.
        assert!(
            matches!(j["status"].as_str(), Some("succeeded" | "interrupted")),
            "{j}"
        );
    }
    let (code, h) = s.get("/health");
    assert_eq!(code, 200, "{h}");
}

/// Issue 37, item 4: the jobs acknowledged before the store's `-wal` file
/// was removed were only in that WAL, which the service still had open:
/// gone after a `kill -9` and a restart. Now the service copies the open
/// WAL into the store file (a checkpoint) when it notices, before it
/// refuses anything.
#[test]
fn jobs_acknowledged_before_the_wal_was_removed_survive_a_kill_and_a_restart() {
    acknowledged_jobs_survive(&["serve.db-wal"]);
}

/// The same with the store file and its `-wal` file removed: the service
/// writes out the store it still has open (`VACUUM INTO` a new file, put
/// in place).
#[test]
fn jobs_acknowledged_before_the_store_file_was_removed_survive_a_kill_and_a_restart() {
    acknowledged_jobs_survive(&["serve.db", "serve.db-wal"]);
}
