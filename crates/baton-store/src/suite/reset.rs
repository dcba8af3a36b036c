//! A job that starts its branch over (`reset_branch`): the field is stored
//! with the job, so a job queued again after a restart still resets, and
//! where its reset kept the branch's old tip (`abandoned_ref`) is recorded
//! with its workspace (a store made by the schema before these columns:
//! each driver's own tests). Also a job's ordering key (`order`,
//! schema 4 of SQLite, 7 of PostgreSQL), stored and heeded when queued
//! jobs are marked superseded.

use crate::model::{GroupMode, JobStatus, NewJob, Submitted};

use super::{always, claim_here, job, status, submit, t, Ctx, MANY};

const KEPT: &str = "refs/baton/abandoned/agent/x/20260101T000000Z-reset";

/// A job's `reset_branch` is stored with it, and its `abandoned_ref` with
/// its workspace, kept across attempts.
pub async fn a_jobs_reset_branch_and_abandoned_ref_are_stored(ctx: Ctx) {
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

/// A job's ordering key is stored, and a supersede or coalesce job marks
/// only the queued jobs of its group it outranks: not one whose key is
/// newer than its own (equal keys and jobs without one go by arrival).
pub async fn a_queued_job_with_a_newer_order_is_not_marked(ctx: Ctx) {
    let s = &*ctx.store;
    let keyed = |id: &str, at: i64, mode: GroupMode, order: Option<&str>| NewJob {
        group: Some("g".into()),
        mode,
        order: order.map(String::from),
        ..job(id, at)
    };
    submit(s, keyed("k5", 1, GroupMode::Supersede, Some("5"))).await;
    submit(s, keyed("none", 2, GroupMode::Queue, None)).await;
    match submit(s, keyed("k3", 3, GroupMode::Supersede, Some("3"))).await {
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
    match submit(s, keyed("k5b", 4, GroupMode::Coalesce, Some("5"))).await {
        Submitted::Queued { superseded, .. } => {
            let mut superseded = superseded;
            superseded.sort_unstable();
            assert_eq!(superseded, ["k3", "k5"]);
        }
        full => panic!("refused: {full:?}"),
    }
    match submit(s, keyed("plain", 5, GroupMode::Supersede, None)).await {
        Submitted::Queued { superseded, .. } => assert_eq!(superseded, ["k5b"]),
        full => panic!("refused: {full:?}"),
    }
}
