//! A PostgreSQL store made by an older schema opens, migrated, with its
//! jobs (SQLite's: the `baton` binary's tests, `serve_reset_branch`).

use std::time::Duration;

use baton_store::suite::{job, MANY};
use baton_store::{GroupMode, NewJob, StoreUrl};
use baton_testkit::pg::TestDb;

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
        let s = crate::open(&url, tmp.path()).await.unwrap();
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
            mode: GroupMode::Supersede,
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
