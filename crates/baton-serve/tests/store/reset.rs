//! A job that starts its branch over (`reset_branch`): the field is stored
//! with the job, so a job queued again after a restart still resets, and
//! where its reset kept the branch's old tip (`abandoned_ref`) is recorded
//! with its workspace; a PostgreSQL store made by the schema before these
//! columns opens, migrated, with its jobs (SQLite's: the `baton` binary's
//! tests, `serve_reset_branch`). Also a job's ordering key (`order`,
//! schema 4 of SQLite, 7 of PostgreSQL), stored and heeded when queued
//! jobs are marked superseded.

use std::time::Duration;

use baton_serve::model::{JobMode, JobStatus, NewJob, Submitted};
use baton_serve::store::{self, StoreUrl};

use super::{always, claim_here, job, status, submit, t, Ctx, MANY};
use crate::common::pg::TestDb;

const KEPT: &str = "refs/baton/abandoned/agent/x/20260101T000000Z-reset";

pub(super) async fn a_jobs_reset_branch_and_abandoned_ref_are_stored(ctx: Ctx) {
    let s = &*ctx.store;
    let reset = NewJob {
        branch: Some("agent/x".into()),
        reset_branch: true,
        ..job("reset", 1)
    };
    submit(s, reset).await;
    submit(s, job("plain", 2)).await;
    let stored = s.get("reset").await.unwrap().unwrap();
    assert!(stored.spec.reset_branch);
    assert_eq!(stored.abandoned_ref, None);
    assert!(!s.get("plain").await.unwrap().unwrap().spec.reset_branch);

    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("reset"));
    s.set_workspace("reset", "/tmp/ws", Some(KEPT))
        .await
        .unwrap();
    let running = s.get("reset").await.unwrap().unwrap();
    assert_eq!(running.workspace.as_deref(), Some("/tmp/ws"));
    assert_eq!(running.abandoned_ref.as_deref(), Some(KEPT));

    // Queued again after a restart: still a reset, and the first attempt's
    // kept tip stays named when the next one drops nothing.
    let back = s
        .recover(s.node(), &["reset".to_string()], &always, t(100))
        .await
        .unwrap();
    assert!(back[0].requeued, "{back:?}");
    assert_eq!(status(s, "reset").await, Some(JobStatus::Queued));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("reset"));
    let again = s.get("reset").await.unwrap().unwrap();
    assert!(again.spec.reset_branch);
    s.set_workspace("reset", "/tmp/ws2", None).await.unwrap();
    let again = s.get("reset").await.unwrap().unwrap();
    assert_eq!(again.workspace.as_deref(), Some("/tmp/ws2"));
    assert_eq!(again.abandoned_ref.as_deref(), Some(KEPT));
}

/// Schema 2 of the PostgreSQL store, as the service before `reset_branch`
/// made it.
const PG_SCHEMA_2: &str = "
CREATE TABLE baton_serve_schema (version INTEGER NOT NULL);
INSERT INTO baton_serve_schema (version) VALUES (1), (2);
CREATE TABLE baton_jobs (
    seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, template TEXT NOT NULL, prompt TEXT,
    grp TEXT, mode TEXT NOT NULL, timeout_ms BIGINT NOT NULL, branch TEXT, command TEXT,
    created_at BIGINT NOT NULL, status TEXT NOT NULL, exit_code INTEGER, error TEXT,
    started_at BIGINT, finished_at BIGINT, workspace TEXT, superseded_by TEXT, node TEXT,
    attempts INTEGER NOT NULL DEFAULT 0, pgroup TEXT, priority INTEGER NOT NULL DEFAULT 0,
    waiter TEXT
);
CREATE INDEX baton_jobs_queue ON baton_jobs(status, priority DESC, seq);
CREATE INDEX baton_jobs_finished ON baton_jobs(finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX baton_jobs_group ON baton_jobs(grp, status);
CREATE INDEX baton_jobs_node ON baton_jobs(node, status);
CREATE TABLE baton_nodes (
    num SERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, host TEXT, pid INTEGER,
    started_at TIMESTAMPTZ, heartbeat_at TIMESTAMPTZ
);
INSERT INTO baton_jobs (id, template, prompt, mode, timeout_ms, created_at, status)
    VALUES ('old', 't', 'from schema 2', 'queue', 60000, 1, 'queued');
";

#[test]
fn a_postgres_store_of_schema_2_opens_migrated_with_its_jobs() {
    let db = TestDb::new();
    db.query(PG_SCHEMA_2);
    let tmp = tempfile::tempdir().unwrap();
    let url = StoreUrl::Postgres(db.url());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = store::open(&url, tmp.path()).await.unwrap();
        let old = s.get("old").await.unwrap().unwrap();
        assert_eq!(old.spec.prompt.as_deref(), Some("from schema 2"));
        assert!(!old.spec.reset_branch);
        assert_eq!(old.abandoned_ref, None);
        let new = NewJob {
            branch: Some("agent/x".into()),
            reset_branch: true,
            ..job("new", 2)
        };
        s.submit(new, MANY).await.unwrap();
        assert!(s.get("new").await.unwrap().unwrap().spec.reset_branch);
        // Schema 7's column: a job's ordering key.
        assert_eq!(old.spec.order, None);
        let keyed = NewJob {
            group: Some("g".into()),
            mode: JobMode::Supersede,
            order: Some("42".into()),
            ..job("keyed", 3)
        };
        s.submit(keyed, MANY).await.unwrap();
        let keyed = s.get("keyed").await.unwrap().unwrap();
        assert_eq!(keyed.spec.order.as_deref(), Some("42"));
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    assert_eq!(
        db.scalar("SELECT max(version) FROM baton_serve_schema")
            .as_deref(),
        Some("7")
    );
}

/// A job's ordering key is stored, and a supersede or coalesce job marks
/// only the queued jobs of its group it outranks: not one whose key is
/// newer than its own (equal keys and jobs without one go by arrival).
pub(super) async fn a_queued_job_with_a_newer_order_is_not_marked(ctx: Ctx) {
    let s = &*ctx.store;
    let keyed = |id: &str, at: i64, mode: JobMode, order: Option<&str>| NewJob {
        group: Some("g".into()),
        mode,
        order: order.map(String::from),
        ..job(id, at)
    };
    submit(s, keyed("k5", 1, JobMode::Supersede, Some("5"))).await;
    submit(s, keyed("none", 2, JobMode::Queue, None)).await;
    match submit(s, keyed("k3", 3, JobMode::Supersede, Some("3"))).await {
        Submitted::Queued { superseded, .. } => assert_eq!(superseded, ["none"]),
        full => panic!("refused: {full:?}"),
    }
    assert_eq!(status(s, "k5").await, Some(JobStatus::Queued));
    assert_eq!(
        s.get("k5").await.unwrap().unwrap().spec.order.as_deref(),
        Some("5")
    );
    // An equal key outranks (the later arrival wins), and so does a job
    // without a key.
    match submit(s, keyed("k5b", 4, JobMode::Coalesce, Some("5"))).await {
        Submitted::Queued { superseded, .. } => {
            let mut superseded = superseded;
            superseded.sort_unstable();
            assert_eq!(superseded, ["k3", "k5"]);
        }
        full => panic!("refused: {full:?}"),
    }
    match submit(s, keyed("plain", 5, JobMode::Supersede, None)).await {
        Submitted::Queued { superseded, .. } => assert_eq!(superseded, ["k5b"]),
        full => panic!("refused: {full:?}"),
    }
}
