#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test
//! How the SQLite store makes an acknowledged submission durable: with
//! `fdatasync(2)`, never `fsync(2)`. Both keep a file's contents and size
//! across a power loss; `fsync` also forces a filesystem journal commit for
//! the file's modification time, which under load made each
//! acknowledgement wait several milliseconds longer (the submit p99 of
//! issue 24). The bundled SQLite uses `fsync` unless built with
//! `HAVE_FDATASYNC` (`.cargo/config.toml`).
//!
//! The test runs itself again under `strace` (the real system calls of the
//! real store), in a child that opens a store and stores one job.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use baton_serve::model::{GroupMode, NewJob, Submitted};
use baton_serve::store::{self, StoreUrl};

/// Set in the child: the directory to open the store in.
const CHILD: &str = "BATON_TEST_SYNC_CHILD";

/// The child's part: open a store under `dir`, store one job durably.
fn store_one_job(dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = StoreUrl::Sqlite(dir.join("jobs.db"));
        let store = store::open(&url, dir).await.unwrap();
        let job = NewJob {
            id: "j1".to_string(),
            template: "t".to_string(),
            prompt: None,
            group: None,
            mode: GroupMode::Queue,
            order: None,
            timeout_ms: 60_000,
            branch: None,
            reset_branch: false,
            command: Some(vec!["true".to_string()]),
            created_at: baton_serve::model::now_ms(),
            waiter: None,
        };
        let stored = tokio::time::timeout(Duration::from_secs(60), store.submit(job, 10))
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(stored, Submitted::Queued { .. }));
    });
}

#[test]
fn an_acknowledged_submission_is_synced_with_fdatasync_not_fsync() {
    if let Some(dir) = std::env::var_os(CHILD) {
        store_one_job(Path::new(&dir));
        return;
    }
    baton_testkit::ensure_debian_package("strace", "strace");
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&trace)
        .arg(std::env::current_exe().unwrap())
        .args([
            "sync::an_acknowledged_submission_is_synced_with_fdatasync_not_fsync",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD, tmp.path())
        .status()
        .expect("strace (installed above)");
    assert!(status.success(), "the traced child failed: {status}");
    let calls = std::fs::read_to_string(&trace).unwrap();
    let fsyncs = calls.lines().filter(|l| l.contains(" fsync(")).count();
    let datasyncs = calls.lines().filter(|l| l.contains(" fdatasync(")).count();
    assert!(
        datasyncs > 0 && fsyncs == 0,
        "{fsyncs} fsync and {datasyncs} fdatasync calls:\n{calls}"
    );
}
