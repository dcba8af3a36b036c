//! The kept depth of a database (running + queued jobs) after what only
//! PostgreSQL has: a database written before the store kept it, and a
//! `TRUNCATE`, which fires no row trigger.

use baton_store::suite::{claim_here, counts_are, ended, job, submit, t, Ctx, MANY};
use baton_store::{JobStatus, StoreUrl, Submitted};

/// A database written by a baton that did not keep the depth: the first
/// node of this one that opens it counts the depth there is.
pub(crate) async fn a_database_without_the_kept_depth_gets_it_counted(ctx: Ctx) {
    let StoreUrl::Postgres(url) = &ctx.url else {
        // SQLite counts its jobs.
        return;
    };
    let s = &*ctx.store;
    for i in 0..5 {
        submit(s, job(&format!("j{i}"), i)).await;
    }
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("j0"));
    assert!(s
        .finish("j0", &ended(JobStatus::Failed, t(10)))
        .await
        .unwrap());
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("j1"));
    // As schema 3 had it: no kept depth, its triggers gone (the later
    // steps, which do not depend on it, are taken again).
    let (c, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    c.batch_execute(
        "DROP TABLE baton_depth; DROP FUNCTION baton_depth_add() CASCADE; \
         DELETE FROM baton_serve_schema WHERE version >= 4",
    )
    .await
    .unwrap();
    // Changed meanwhile, by a baton that keeps no depth.
    c.batch_execute(
        "UPDATE baton_jobs SET status = 'cancelled' WHERE id = 'j4'; \
         INSERT INTO baton_jobs (id, template, mode, timeout_ms, created_at, status) \
         VALUES ('old', 't', 'queue', 1000, 1, 'queued')",
    )
    .await
    .unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let second = ctx.open(other_dir.path()).await.unwrap();
    // running j1; queued j2, j3, old.
    counts_are(&*second, 1, 3, "the migration").await;
    counts_are(s, 1, 3, "the migration, on the first node").await;
    submit(s, job("new", 20)).await;
    counts_are(&*second, 1, 4, "a submission after the migration").await;
}

/// An operator who empties the table (`TRUNCATE baton_jobs`, which fires
/// no row trigger) leaves no kept depth behind: the counts are zero and
/// the depth cap admits submissions again (found by a hostile review: the
/// depth stayed at what it was, /health listed phantom queued jobs and
/// every submission was refused `queue_full` for good).
pub(crate) async fn a_truncated_queue_leaves_no_depth_behind(ctx: Ctx) {
    let StoreUrl::Postgres(url) = &ctx.url else {
        // SQLite counts its jobs.
        return;
    };
    let s = &*ctx.store;
    for i in 0..5 {
        submit(s, job(&format!("j{i}"), i)).await;
    }
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("j0"));
    counts_are(s, 1, 4, "submissions").await;
    let (c, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    c.batch_execute("TRUNCATE baton_jobs").await.unwrap();
    counts_are(s, 0, 0, "a TRUNCATE").await;
    match s.submit(job("after", 10), 5).await.unwrap() {
        Submitted::Queued { .. } => {}
        full => panic!("refused after the table was emptied: {full:?}"),
    }
    counts_are(s, 0, 1, "a submission after the TRUNCATE").await;
}
