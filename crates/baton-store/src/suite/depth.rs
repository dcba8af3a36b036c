//! The queue's depth (running + queued jobs) that the depth cap and the
//! counts read: exact after every kind of change, when several nodes
//! submit at once, and in a database written before the store kept it.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{Counts, GroupMode, JobStatus, ListFilter, Submitted};
use crate::{CancelQueued, Settle, Store};

use super::{always, claim, claim_here, ended, in_group, job, submit, t, Ctx, MANY};

/// The running and queued jobs as the job list shows them.
async fn listed(s: &dyn Store) -> Counts {
    let count = |status| async move {
        let filter = ListFilter {
            status: Some(status),
            group: None,
            limit: 10_000,
            before_seq: None,
        };
        s.list(&filter).await.unwrap().len() as u64
    };
    Counts {
        running: count(JobStatus::Running).await,
        queued: count(JobStatus::Queued).await,
    }
}

/// The store's counts are the listed ones, and are `(running, queued)`.
pub async fn counts_are(s: &dyn Store, running: u64, queued: u64, after: &str) {
    let counts = s.counts().await.unwrap();
    assert_eq!(counts, listed(s).await, "after {after}");
    assert_eq!(
        (counts.running, counts.queued),
        (running, queued),
        "after {after}"
    );
}

/// Each change a job goes through, and the counts after it.
pub async fn the_counts_stay_exact_through_every_change(ctx: Ctx) {
    let s = &*ctx.store;
    let me = s.node().to_string();
    for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        submit(s, job(id, i as i64)).await;
    }
    counts_are(s, 0, 5, "submissions").await;
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("a"));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("b"));
    counts_are(s, 2, 3, "claims").await;
    assert!(s
        .finish("a", &ended(JobStatus::Succeeded, t(10)))
        .await
        .unwrap());
    counts_are(s, 1, 3, "an end").await;
    // Interrupted, and its template retries: queued again.
    assert!(s
        .finish("b", &ended(JobStatus::Queued, t(11)))
        .await
        .unwrap());
    counts_are(s, 0, 4, "a return to the queue").await;
    assert!(matches!(
        s.cancel_queued("e", t(12)).await.unwrap(),
        CancelQueued::Cancelled(_)
    ));
    counts_are(s, 0, 3, "a cancel").await;
    submit(s, in_group("g1", 20, "g", GroupMode::Queue)).await;
    submit(s, in_group("g2", 21, "g", GroupMode::Queue)).await;
    match submit(s, in_group("g3", 22, "g", GroupMode::Supersede)).await {
        Submitted::Queued { superseded, .. } => assert_eq!(superseded.len(), 2),
        full => panic!("refused: {full:?}"),
    }
    counts_are(s, 0, 4, "a supersede").await;
    // b (queued again, first in line), c: running here; d: on a dead node.
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("b"));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("c"));
    assert_eq!(claim(s, "ghost", MANY).await.as_deref(), Some("d"));
    counts_are(s, 3, 1, "more claims").await;
    let recovered = s
        .recover(&me, &["b".to_string(), "c".to_string()], &always, t(30))
        .await
        .unwrap();
    assert_eq!(recovered.len(), 2);
    // b ran twice: interrupted; c queued again.
    counts_are(s, 1, 2, "a recovery").await;
    let reaped = s
        .reap(&always, Settle::uniform(Duration::ZERO), t(40))
        .await
        .unwrap();
    if ctx.shared() {
        assert_eq!(reaped.len(), 1);
        counts_are(s, 0, 3, "a takeover").await;
    } else {
        counts_are(s, 1, 2, "a takeover (none: one node)").await;
    }
    let evicted = s.evict(t(1_000_000)).await.unwrap();
    assert!(!evicted.is_empty());
    let after = s.counts().await.unwrap();
    assert_eq!(after, listed(s).await, "after an eviction");
}

/// Two nodes submit at once against one depth cap: exactly the cap is
/// stored, and the counts say so.
pub async fn two_nodes_submitting_at_once_stop_at_the_depth_cap(ctx: Ctx) {
    const DEPTH: u64 = 30;
    const EACH: usize = 40;
    let other_dir = tempfile::tempdir().unwrap();
    let other: Arc<dyn Store> = if ctx.shared() {
        Arc::from(ctx.open(other_dir.path()).await.unwrap())
    } else {
        // One node: its own submissions at once.
        Arc::clone(&ctx.store)
    };
    let mut tasks = Vec::new();
    for (n, s) in [Arc::clone(&ctx.store), other].into_iter().enumerate() {
        for i in 0..EACH {
            let s = Arc::clone(&s);
            tasks.push(tokio::spawn(async move {
                let id = format!("n{n}-{i}");
                s.submit(job(&id, i as i64), DEPTH).await.unwrap()
            }));
        }
    }
    let mut stored = 0;
    for task in tasks {
        if let Submitted::Queued { .. } = task.await.unwrap() {
            stored += 1;
        }
    }
    assert_eq!(stored, DEPTH);
    counts_are(&*ctx.store, 0, DEPTH, "submissions at once").await;
}
