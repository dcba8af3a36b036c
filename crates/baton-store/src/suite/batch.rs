//! Many callers at once: what a store that stores them together (one
//! transaction for what arrives while the last one commits) must keep
//! exactly as one at a time would, in arrival order. A submission arrives
//! when its call is first polled; here the calls are first polled one
//! after the other in a known order, all before any is answered.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::model::{GroupMode, JobStatus, NewJob, Submitted};
use crate::{Store, StoreError};

use super::{claim_here, ended, in_group, job, status, submit, t, Ctx, MANY};

type Answer = Result<Submitted, StoreError>;

/// Submits `jobs` (each against `depth`) at once: each call is polled
/// once in order (it has arrived), then all are awaited. Their answers,
/// in that order. A call may already be answered at its first poll (the
/// flusher took it alone while this thread was descheduled between queueing
/// it and looking for its answer, as under wine on a loaded machine); it
/// arrived before the next ones all the same, and its answer is kept.
async fn at_once(store: &dyn Store, jobs: Vec<NewJob>, depth: u64) -> Vec<Answer> {
    let mut calls: Vec<Pin<Box<dyn Future<Output = Answer> + Send + '_>>> =
        jobs.into_iter().map(|j| store.submit(j, depth)).collect();
    let mut early: Vec<Option<Answer>> = Vec::with_capacity(calls.len());
    for call in calls.iter_mut() {
        match futures_util::poll!(call.as_mut()) {
            std::task::Poll::Ready(answer) => early.push(Some(answer)),
            std::task::Poll::Pending => early.push(None),
        }
    }
    let rest = calls
        .into_iter()
        .zip(early)
        .map(|(call, early)| async move {
            match early {
                Some(answer) => answer,
                None => call.await,
            }
        });
    futures_util::future::join_all(rest).await
}

fn queued(answer: &Answer) -> Option<(u64, &[String])> {
    match answer {
        Ok(Submitted::Queued {
            position,
            superseded,
            ..
        }) => Some((*position, superseded)),
        _ => None,
    }
}

/// 60 submissions at once against a depth of 25, with 5 jobs already in
/// (2 of them running): exactly the first 20 to arrive are stored, at
/// places 4 to 23 in their order, and the queue gives them out in that
/// order; the other 40 are refused and not stored.
pub async fn concurrent_submissions_against_the_depth_cap_admit_the_first_to_arrive(ctx: Ctx) {
    let s = &*ctx.store;
    for i in 0..5 {
        submit(s, job(&format!("before{i}"), i)).await;
    }
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("before0"));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("before1"));
    let jobs = (0..60).map(|i| job(&format!("n{i:02}"), 100 + i)).collect();
    let answers = at_once(s, jobs, 25).await;
    for (i, answer) in answers.iter().enumerate() {
        if i < 20 {
            let place = queued(answer).map(|(p, _)| p);
            assert_eq!(place, Some(i as u64 + 4), "n{i:02}: {answer:?}");
        } else {
            match answer {
                Ok(Submitted::Full { counts }) => {
                    assert_eq!(counts.running + counts.queued, 25, "n{i:02}")
                }
                other => panic!("n{i:02} past the cap: {other:?}"),
            }
            assert_eq!(status(s, &format!("n{i:02}")).await, None);
        }
    }
    let counts = s.counts().await.unwrap();
    assert_eq!((counts.running, counts.queued), (2, 23));
    let order: Vec<String> = s
        .claim_many(s.node(), MANY, MANY, t(5_000))
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.spec.id)
        .collect();
    let mut expected: Vec<String> = (2..5).map(|i| format!("before{i}")).collect();
    expected.extend((0..20).map(|i| format!("n{i:02}")));
    assert_eq!(order, expected, "the queue's order is the answers' order");
}

/// Submissions at once that meet each other: the same id (only the first
/// to arrive is stored), and jobs of one group in modes coalesce and
/// supersede (each marks the one before it, as one at a time would).
pub async fn concurrent_submissions_of_one_id_or_group_act_one_at_a_time(ctx: Ctx) {
    let s = &*ctx.store;
    let same: Vec<NewJob> = (0..8)
        .map(|i| NewJob {
            prompt: Some(format!("copy {i}")),
            ..job("same", i)
        })
        .collect();
    let answers = at_once(s, same, MANY).await;
    assert_eq!(queued(&answers[0]).map(|(p, _)| p), Some(1), "{answers:?}");
    assert!(answers[1..].iter().all(Result::is_err), "{answers:?}");
    let stored = s.get("same").await.unwrap().unwrap();
    assert_eq!(stored.spec.prompt.as_deref(), Some("copy 0"));

    // A group with one job queued and one running, then 10 at once:
    // coalesce and supersede alternating, a plain job between each.
    submit(s, in_group("running", 1, "g", GroupMode::Queue)).await;
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("same"));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("running"));
    submit(s, in_group("waiting", 2, "g", GroupMode::Queue)).await;
    let mut jobs = Vec::new();
    for i in 0..10 {
        let mode = [GroupMode::Coalesce, GroupMode::Supersede][i % 2];
        jobs.push(in_group(&format!("c{i}"), 10 + i as i64, "g", mode));
        jobs.push(job(&format!("p{i}"), 10 + i as i64));
    }
    let answers = at_once(s, jobs, MANY).await;
    for i in 0..10 {
        let (place, superseded) = queued(&answers[2 * i]).expect("c stored");
        let before = match i {
            0 => "waiting".to_string(),
            _ => format!("c{}", i - 1),
        };
        assert_eq!(superseded, std::slice::from_ref(&before), "c{i}");
        // The queue: p0..p(i-1) and this one (the one before it left).
        assert_eq!(place, i as u64 + 1, "c{i}");
        let (place, superseded) = queued(&answers[2 * i + 1]).expect("p stored");
        assert!(superseded.is_empty());
        assert_eq!(place, i as u64 + 2, "p{i}");
        let marked = s.get(&before).await.unwrap().unwrap();
        assert_eq!(marked.status, JobStatus::Superseded, "{before}");
        assert_eq!(marked.superseded_by, Some(format!("c{i}")), "{before}");
    }
    assert_eq!(status(s, "c9").await, Some(JobStatus::Queued));
    assert_eq!(status(s, "running").await, Some(JobStatus::Running));
    let counts = s.counts().await.unwrap();
    assert_eq!((counts.running, counts.queued), (2, 11));
}

/// Two nodes claim at once, several claims each, while jobs end: never
/// more than the cap run (in the store's count and in the claims' answers),
/// and no job is claimed twice. On a shared store the second node is a
/// second store on the same database; on a store one node owns, a second
/// node name on the same store.
pub async fn concurrent_claims_of_two_nodes_never_pass_the_cap(ctx: Ctx) {
    const CAP: u64 = 7;
    let first = Arc::clone(&ctx.store);
    let other = tempfile::tempdir().unwrap();
    let second: Arc<dyn Store> = match ctx.shared() {
        true => Arc::from(ctx.open(other.path()).await.unwrap()),
        false => Arc::clone(&ctx.store),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !second.is_live() {
        assert!(tokio::time::Instant::now() < deadline, "never live");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let nodes = [
        (first, first_node(&ctx)),
        (second, format!("{}-second", first_node(&ctx))),
    ];
    for i in 0..60 {
        submit(&*ctx.store, job(&format!("j{i:02}"), i)).await;
    }
    let mut seen = std::collections::HashSet::new();
    // Each node's running jobs (a job ends through the node that runs it).
    let mut running: [Vec<String>; 2] = Default::default();
    let now = t(5_000);
    for round in 0..6 {
        let claims: Vec<_> = (0..6)
            .map(|k| {
                let (store, node) = &nodes[k % 2];
                let (store, node) = (Arc::clone(store), node.clone());
                let node = match ctx.shared() {
                    true => store.node().to_string(),
                    false => node,
                };
                tokio::spawn(async move { (k % 2, store.claim_many(&node, CAP, 3, now).await) })
            })
            .collect();
        for claim in claims {
            let (k, jobs) = claim.await.unwrap();
            for job in jobs.unwrap() {
                assert!(seen.insert(job.spec.id.clone()), "{} twice", job.spec.id);
                running[k].push(job.spec.id);
            }
        }
        let total = (running[0].len() + running[1].len()) as u64;
        assert_eq!(total, CAP, "round {round}: {running:?}");
        assert_eq!(ctx.store.counts().await.unwrap().running, CAP);
        // Three end (through their node) before the next round.
        for _ in 0..3 {
            let k = usize::from(running[0].is_empty());
            let id = running[k].remove(0);
            let store = &nodes[k].0;
            let end = ended(JobStatus::Succeeded, t(6_000));
            assert!(store.finish(&id, &end).await.unwrap(), "{id}");
        }
    }
    assert_eq!(seen.len() as u64, CAP + 5 * 3);
}

fn first_node(ctx: &Ctx) -> String {
    ctx.store.node().to_string()
}

/// A submission the server refuses (PostgreSQL keeps no NUL in text) fails
/// alone: the others that arrived with it get their own places, in order,
/// and are stored.
pub async fn a_submission_the_store_refuses_fails_alone(ctx: Ctx) {
    let s = &*ctx.store;
    let mut jobs: Vec<NewJob> = (0..10).map(|i| job(&format!("k{i}"), i)).collect();
    jobs[4].prompt = Some("a NUL \0 in a prompt".into());
    let answers = at_once(s, jobs, MANY).await;
    if ctx.shared() {
        assert!(answers[4].is_err(), "{:?}", answers[4]);
    }
    let mut place = 0;
    for (i, answer) in answers.iter().enumerate() {
        if i == 4 && answer.is_err() {
            assert_eq!(status(s, "k4").await, None);
            continue;
        }
        place += 1;
        assert_eq!(queued(answer).map(|(p, _)| p), Some(place), "k{i}");
        assert_eq!(status(s, &format!("k{i}")).await, Some(JobStatus::Queued));
    }
}
