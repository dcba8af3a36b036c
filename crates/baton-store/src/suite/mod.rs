//! The store's contract, written once and run on every driver (as River's
//! `riverdrivertest` runs one exercise over every driver): each exercise
//! below is one `async fn` on an open store, and each driver crate's tests
//! make a test of each with [`store_suite!`](crate::store_suite), on a fresh
//! store of that driver ([`Driver::fresh`]: a new file, a new database).
//!
//! Where the stores differ by design (one node or several), the exercise
//! says so by asking [`Ctx::shared`], never by naming the engine. What only
//! one engine has (PostgreSQL's sessions, its schema history) is exercised
//! by that driver's own tests, with the helpers here.
//!
//! Feature `suite`; the exercises panic on a failure, as tests do.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed unwrap is a failed test

mod batch;
mod depth;
mod reset;
pub use batch::{
    a_submission_the_store_refuses_fails_alone, concurrent_claims_of_two_nodes_never_pass_the_cap,
    concurrent_submissions_against_the_depth_cap_admit_the_first_to_arrive,
    concurrent_submissions_of_one_id_or_group_act_one_at_a_time,
};
pub use depth::{
    counts_are, the_counts_stay_exact_through_every_change,
    two_nodes_submitting_at_once_stop_at_the_depth_cap,
};
pub use reset::{
    a_jobs_reset_branch_and_abandoned_ref_are_stored, a_queued_job_with_a_newer_order_is_not_marked,
};

use std::any::Any;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::model::{Finish, GroupMode, JobStatus, ListFilter, NewJob, Submitted};
use crate::{CancelQueued, RemoveFinished, Settle, Store, StoreError, StoreUrl};

/// A store being opened.
pub type Opening<'a> =
    Pin<Box<dyn Future<Output = Result<Box<dyn Store>, StoreError>> + Send + 'a>>;

/// A driver under test.
pub trait Driver: Sync + 'static {
    /// A fresh, empty store: its URL (its files, if any, in `tmp`, which
    /// outlives the exercise), and what must live as long as it (a test
    /// database, dropped after the store, and with it the database).
    /// Called outside any async runtime.
    fn fresh(&self, tmp: &Path) -> (StoreUrl, Box<dyn Any>);

    /// Opens the store `url` names as the node of `baton_dir`.
    fn open<'a>(&'a self, url: &'a StoreUrl, baton_dir: &'a Path) -> Opening<'a>;
}

/// What an exercise gets: the store, and where it lives (to open it again).
pub struct Ctx {
    /// The store, open.
    pub store: Arc<dyn Store>,
    /// Its URL.
    pub url: StoreUrl,
    /// The baton dir it was opened from (its node's).
    pub baton_dir: PathBuf,
    driver: &'static dyn Driver,
}

impl Ctx {
    /// Whether several nodes share this store.
    pub fn shared(&self) -> bool {
        self.url.is_shared()
    }

    /// Opens the store again, as the node of `baton_dir`.
    ///
    /// # Errors
    ///
    /// As the driver's open.
    pub async fn open(&self, baton_dir: &Path) -> Result<Box<dyn Store>, StoreError> {
        self.driver.open(&self.url, baton_dir).await
    }
}

/// One exercise: an `async fn(Ctx)`, boxed.
pub type Exercise = fn(Ctx) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Opens a fresh store of `driver`, runs `exercise` on it, then drops the
/// store (its runtime first) and its database or files.
pub fn run(driver: &'static dyn Driver, exercise: Exercise) {
    let tmp = tempfile::tempdir().unwrap();
    let baton_dir = tmp.path().join("baton");
    std::fs::create_dir_all(&baton_dir).unwrap();
    let (url, keep) = driver.fresh(tmp.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    BASE.with(|b| b.set(Some(crate::model::now_ms())));
    rt.block_on(async {
        let store: Arc<dyn Store> = Arc::from(driver.open(&url, &baton_dir).await.unwrap());
        let ctx = Ctx {
            store,
            url: url.clone(),
            baton_dir: baton_dir.clone(),
            driver,
        };
        tokio::time::timeout(Duration::from_secs(90), exercise(ctx))
            .await
            .expect("the exercise did not end within 90 s");
    });
    // The store's session tasks end with their runtime, before the
    // database is dropped.
    rt.shutdown_timeout(Duration::from_secs(5));
    drop(keep);
}

/// One test per exercise of the suite, on `$driver` (a `&'static dyn`
/// [`suite::Driver`](crate::suite::Driver)); in a driver crate's tests.
#[macro_export]
macro_rules! store_suite {
    ($driver:expr) => {
        $crate::store_suite!(@each $driver;
            claims_are_strictly_fifo,
            submissions_stop_at_the_depth_cap,
            concurrent_submissions_each_get_their_own_answer,
            claims_stop_at_the_concurrency_cap,
            a_queue_job_whose_group_runs_is_passed_over_and_keeps_its_place,
            cancel_takes_only_queued_jobs,
            recover_marks_a_nodes_running_jobs_or_queues_them_first,
            recover_never_queues_again_a_job_whose_caller_waited,
            reap_takes_over_only_the_jobs_of_dead_nodes,
            evict_removes_only_jobs_finished_before_the_cutoff,
            remove_finished_removes_only_a_job_that_has_ended,
            supersede_and_coalesce_mark_the_queued_jobs_of_their_group,
            a_finish_ends_only_a_running_job,
            the_store_has_one_owner,
            a_claim_of_many_takes_the_oldest_up_to_the_cap,
            concurrent_ends_and_claims_each_get_their_own_answer,
            concurrent_submissions_against_the_depth_cap_admit_the_first_to_arrive,
            concurrent_submissions_of_one_id_or_group_act_one_at_a_time,
            concurrent_claims_of_two_nodes_never_pass_the_cap,
            a_submission_the_store_refuses_fails_alone,
            the_counts_stay_exact_through_every_change,
            two_nodes_submitting_at_once_stop_at_the_depth_cap,
            a_jobs_reset_branch_and_abandoned_ref_are_stored,
            a_queued_job_with_a_newer_order_is_not_marked,
        );
    };
    (@each $driver:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::suite::run($driver, |ctx| Box::pin($crate::suite::$name(ctx)));
            }
        )*
    };
}

/// A depth and a cap no exercise reaches.
pub const MANY: u64 = 1_000;

thread_local! {
    /// When this thread's exercise began (set by [`run`]).
    static BASE: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// `ms` after the exercise began (a store may not take times before its
/// clock's: PostgreSQL claims at the latest of the given time and its own).
/// Per exercise, not per process: where the tests share one process (cargo
/// test, as under wine), one begun long after another must not be given
/// times in its past. Called on the exercise's own thread.
pub fn t(ms: i64) -> i64 {
    BASE.with(|b| b.get())
        .expect("t() outside an exercise's thread")
        + ms
}

/// A job `id` of template `t`, in no group, submitted at `created_at`.
pub fn job(id: &str, created_at: i64) -> NewJob {
    NewJob {
        id: id.to_string(),
        template: "t".to_string(),
        prompt: Some(format!("prompt of {id}")),
        group: None,
        mode: GroupMode::Queue,
        order: None,
        timeout_ms: 60_000,
        branch: None,
        reset_branch: false,
        command: Some(vec!["true".to_string()]),
        created_at,
        waiter: None,
    }
}

/// [`job`] in `group`, joined in `mode`.
pub fn in_group(id: &str, created_at: i64, group: &str, mode: GroupMode) -> NewJob {
    NewJob {
        group: Some(group.to_string()),
        mode,
        ..job(id, created_at)
    }
}

/// An end with `status` (exit code 0) at `at`.
pub fn ended(status: JobStatus, at: i64) -> Finish {
    Finish {
        status,
        exit_code: Some(0),
        error: None,
        superseded_by: None,
        finished_at: at,
    }
}

/// Submits `job` below [`MANY`]; the answer.
pub async fn submit(store: &dyn Store, job: NewJob) -> Submitted {
    store.submit(job, MANY).await.unwrap()
}

/// The id of the job the next claim on `node` takes, if any.
pub async fn claim(store: &dyn Store, node: &str, cap: u64) -> Option<String> {
    store
        .claim_next(node, cap, t(5_000))
        .await
        .unwrap()
        .map(|j| j.spec.id)
}

/// The id of the job the next claim on the store's own node takes (a job
/// only its own node may end), if any.
pub async fn claim_here(store: &dyn Store, cap: u64) -> Option<String> {
    claim(store, store.node(), cap).await
}

/// The status of job `id`, if stored.
pub async fn status(store: &dyn Store, id: &str) -> Option<JobStatus> {
    store.get(id).await.unwrap().map(|j| j.status)
}

/// A retry policy: no template is retried.
pub fn never(_: &str) -> bool {
    false
}

/// A retry policy: every template is retried.
pub fn always(_: &str) -> bool {
    true
}

/// Exercise: claims are strictly fifo.
pub async fn claims_are_strictly_fifo(ctx: Ctx) {
    let s = &*ctx.store;
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        match submit(s, job(id, 1_000 + i as i64)).await {
            Submitted::Queued { position, job, .. } => {
                assert_eq!(position, i as u64 + 1);
                assert_eq!(job.status, JobStatus::Queued);
            }
            full => panic!("refused: {full:?}"),
        }
    }
    let mut order = Vec::new();
    while let Some(id) = claim_here(s, MANY).await {
        order.push(id);
    }
    assert_eq!(order, ["a", "b", "c", "d"]);
    let a = s.get("a").await.unwrap().unwrap();
    assert_eq!(a.status, JobStatus::Running);
    assert_eq!(a.node.as_deref(), Some(s.node()));
    assert_eq!(a.attempts, 1);
    assert_eq!(a.started_at, Some(t(5_000)));
    // The list is newest first.
    let listed: Vec<String> = s
        .list(&ListFilter {
            limit: 10,
            ..ListFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.spec.id)
        .collect();
    assert_eq!(listed, ["d", "c", "b", "a"]);
}

/// Exercise: submissions stop at the depth cap.
pub async fn submissions_stop_at_the_depth_cap(ctx: Ctx) {
    let s = &*ctx.store;
    assert!(matches!(
        s.submit(job("a", 1), 2).await.unwrap(),
        Submitted::Queued { .. }
    ));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("a"));
    assert!(matches!(
        s.submit(job("b", 2), 2).await.unwrap(),
        Submitted::Queued { .. }
    ));
    // Running + queued = 2: the third is refused, and not stored.
    match s.submit(job("c", 3), 2).await.unwrap() {
        Submitted::Full { counts } => {
            assert_eq!((counts.running, counts.queued), (1, 1));
        }
        queued => panic!("stored beyond the depth cap: {queued:?}"),
    }
    assert_eq!(status(s, "c").await, None);
    // A job's end makes room.
    assert!(s
        .finish("a", &ended(JobStatus::Succeeded, t(10)))
        .await
        .unwrap());
    assert!(matches!(
        s.submit(job("c", 3), 2).await.unwrap(),
        Submitted::Queued { .. }
    ));
    let counts = s.counts().await.unwrap();
    assert_eq!((counts.running, counts.queued), (0, 2));
}

/// Submissions at once (which SQLite stores as one batch, one commit):
/// one that the store refuses (a duplicate id) fails alone, each gets its
/// own place, and the depth cap holds within a batch.
pub async fn concurrent_submissions_each_get_their_own_answer(ctx: Ctx) {
    let at_once = |ids: Vec<String>, depth: u64| {
        let tasks: Vec<_> = ids
            .into_iter()
            .enumerate()
            .map(|(i, id)| {
                let s = Arc::clone(&ctx.store);
                let new = job(&id, t(i as i64));
                tokio::spawn(async move { s.submit(new, depth).await })
            })
            .collect();
        async move {
            let (mut positions, mut full, mut refused) = (Vec::new(), 0, 0);
            for task in tasks {
                match task.await.unwrap() {
                    Ok(Submitted::Queued { position, .. }) => positions.push(position),
                    Ok(Submitted::Full { .. }) => full += 1,
                    Err(_) => refused += 1,
                }
            }
            positions.sort_unstable();
            (positions, full, refused)
        }
    };
    // 30 at once, one of them a second "a0".
    let ids = (0..30)
        .map(|i| format!("a{}", if i == 15 { 0 } else { i }))
        .collect();
    let (positions, full, refused) = at_once(ids, MANY).await;
    assert_eq!((refused, full), (1, 0), "only the second a0 is refused");
    assert_eq!(positions, (1..=29).collect::<Vec<u64>>());
    // 20 more at once against a depth of 40: 11 fit.
    let ids = (0..20).map(|i| format!("b{i}")).collect();
    let (positions, full, refused) = at_once(ids, 40).await;
    assert_eq!((refused, full), (0, 9));
    assert_eq!(positions, (30..=40).collect::<Vec<u64>>());
    let counts = ctx.store.counts().await.unwrap();
    assert_eq!((counts.running, counts.queued), (0, 40));
}

/// Exercise: claims stop at the concurrency cap.
pub async fn claims_stop_at_the_concurrency_cap(ctx: Ctx) {
    let s = &*ctx.store;
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        submit(s, job(id, i as i64)).await;
    }
    // The cap counts the store's running jobs, whichever node runs them.
    assert_eq!(claim(s, "node-b", 2).await.as_deref(), Some("a"));
    assert_eq!(claim_here(s, 2).await.as_deref(), Some("b"));
    assert_eq!(claim_here(s, 2).await, None);
    assert_eq!(claim(s, "node-b", 2).await, None);
    assert_eq!(status(s, "c").await, Some(JobStatus::Queued));
    assert!(s
        .finish("b", &ended(JobStatus::Failed, t(10)))
        .await
        .unwrap());
    assert_eq!(claim_here(s, 2).await.as_deref(), Some("c"));
    let by_status = s.status_counts().await.unwrap();
    let count = |st| {
        by_status
            .iter()
            .find(|(s, _)| *s == st)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(count(JobStatus::Running), 2);
    assert_eq!(count(JobStatus::Failed), 1);
}

/// Exercise: a queue job whose group runs is passed over and keeps its place.
pub async fn a_queue_job_whose_group_runs_is_passed_over_and_keeps_its_place(ctx: Ctx) {
    let s = &*ctx.store;
    submit(s, in_group("g1", 1, "g", GroupMode::Queue)).await;
    submit(s, in_group("g2", 2, "g", GroupMode::Queue)).await;
    submit(s, job("free", 3)).await;
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("g1"));
    // g2 would only wait for its group while holding a slot.
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("free"));
    assert_eq!(claim_here(s, MANY).await, None);
    assert!(s
        .finish("g1", &ended(JobStatus::Succeeded, t(10)))
        .await
        .unwrap());
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("g2"));
}

/// Exercise: cancel takes only queued jobs.
pub async fn cancel_takes_only_queued_jobs(ctx: Ctx) {
    let s = &*ctx.store;
    submit(s, job("a", 1)).await;
    submit(s, job("b", 2)).await;
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("a"));
    match s.cancel_queued("b", t(50)).await.unwrap() {
        CancelQueued::Cancelled(job) => {
            assert_eq!(job.spec.id, "b");
            assert_eq!(job.status, JobStatus::Cancelled);
        }
        other => panic!("not cancelled: {other:?}"),
    }
    let b = s.get("b").await.unwrap().unwrap();
    assert_eq!(b.status, JobStatus::Cancelled);
    assert_eq!(b.finished_at, Some(t(50)));
    assert_eq!(
        s.cancel_queued("a", 60).await.unwrap(),
        CancelQueued::NotQueued(JobStatus::Running)
    );
    assert_eq!(
        s.cancel_queued("b", 60).await.unwrap(),
        CancelQueued::NotQueued(JobStatus::Cancelled)
    );
    assert_eq!(
        s.cancel_queued("nope", 60).await.unwrap(),
        CancelQueued::Unknown
    );
    // A cancelled job is never claimed.
    assert_eq!(claim_here(s, MANY).await, None);
}

/// Exercise: recover marks a nodes running jobs or queues them first.
pub async fn recover_marks_a_nodes_running_jobs_or_queues_them_first(ctx: Ctx) {
    let s = &*ctx.store;
    for (i, id) in ["a", "b", "other", "later"].iter().enumerate() {
        submit(s, job(id, i as i64)).await;
    }
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("a"));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("b"));
    assert_eq!(claim(s, "node-b", MANY).await.as_deref(), Some("other"));

    // Only the named jobs still running on the named node.
    let ids = ["a".to_string(), "other".to_string()];
    let recovered = s.recover(s.node(), &ids, &never, t(100)).await.unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0].job.spec.id, "a");
    assert!(!recovered[0].requeued);
    let a = s.get("a").await.unwrap().unwrap();
    assert_eq!(a.status, JobStatus::Interrupted);
    assert_eq!(status(s, "other").await, Some(JobStatus::Running));
    assert_eq!(status(s, "b").await, Some(JobStatus::Running));

    // Queued again, it comes before older queued jobs; once only.
    let recovered = s
        .recover(s.node(), &["b".to_string()], &always, t(110))
        .await
        .unwrap();
    assert!(recovered[0].requeued, "{recovered:?}");
    assert_eq!(status(s, "b").await, Some(JobStatus::Queued));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("b"));
    let b = s.get("b").await.unwrap().unwrap();
    assert_eq!(b.attempts, 2);
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("later"));
    // Recovering what is no longer running changes nothing.
    let again = s.recover(s.node(), &ids, &always, t(120)).await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(status(s, "a").await, Some(JobStatus::Interrupted));
}

/// Exercise: recover never queues again a job whose caller waited.
pub async fn recover_never_queues_again_a_job_whose_caller_waited(ctx: Ctx) {
    let s = &*ctx.store;
    let waited = NewJob {
        waiter: Some(s.node().to_string()),
        ..job("chat", 1)
    };
    submit(s, waited).await;
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("chat"));
    let stored = s.get("chat").await.unwrap().unwrap();
    assert_eq!(stored.spec.waiter.as_deref(), Some(s.node()));
    let recovered = s
        .recover(s.node(), &["chat".to_string()], &always, t(100))
        .await
        .unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert!(!recovered[0].requeued, "{recovered:?}");
    assert_eq!(status(s, "chat").await, Some(JobStatus::Interrupted));
}

/// Exercise: reap takes over only the jobs of dead nodes.
pub async fn reap_takes_over_only_the_jobs_of_dead_nodes(ctx: Ctx) {
    let s = &*ctx.store;
    submit(s, job("mine", 1)).await;
    submit(s, job("ghosts", 2)).await;
    submit(s, job("ghosts-again", 3)).await;
    assert_eq!(s.node() == "local", !ctx.shared());
    let me = s.node().to_string();
    assert_eq!(claim(s, &me, MANY).await.as_deref(), Some("mine"));
    // A node that never kept a session: dead.
    assert_eq!(claim(s, "ghost", MANY).await.as_deref(), Some("ghosts"));
    assert_eq!(
        claim(s, "ghost", MANY).await.as_deref(),
        Some("ghosts-again")
    );
    let retry = |template: &str| template == "never-retried";
    let reaped = s
        .reap(&retry, Settle::uniform(Duration::ZERO), t(200))
        .await
        .unwrap();
    if !ctx.shared() {
        // One node uses this store: no other node's jobs to take over.
        assert!(reaped.is_empty(), "{reaped:?}");
        assert_eq!(status(s, "ghosts").await, Some(JobStatus::Running));
        return;
    }
    let mut ids: Vec<&str> = reaped.iter().map(|r| r.job.spec.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["ghosts", "ghosts-again"]);
    assert!(reaped.iter().all(|r| !r.requeued));
    assert_eq!(status(s, "ghosts").await, Some(JobStatus::Interrupted));
    // This node is live: its job stays.
    assert_eq!(status(s, "mine").await, Some(JobStatus::Running));
}

/// Exercise: evict removes only jobs finished before the cutoff.
pub async fn evict_removes_only_jobs_finished_before_the_cutoff(ctx: Ctx) {
    let s = &*ctx.store;
    for (i, id) in ["old", "new", "running", "queued"].iter().enumerate() {
        submit(s, job(id, i as i64)).await;
    }
    for _ in 0..3 {
        claim_here(s, MANY).await.unwrap();
    }
    assert!(s
        .finish("old", &ended(JobStatus::Succeeded, t(1_000)))
        .await
        .unwrap());
    assert!(s
        .finish("new", &ended(JobStatus::Failed, t(3_000)))
        .await
        .unwrap());
    let evicted = s.evict(t(2_000)).await.unwrap();
    assert_eq!(evicted, ["old"]);
    assert_eq!(status(s, "old").await, None);
    assert_eq!(status(s, "new").await, Some(JobStatus::Failed));
    assert_eq!(status(s, "running").await, Some(JobStatus::Running));
    assert_eq!(status(s, "queued").await, Some(JobStatus::Queued));
    assert!(s.evict(t(2_000)).await.unwrap().is_empty());
}

/// Exercise: remove finished removes only a job that has ended.
pub async fn remove_finished_removes_only_a_job_that_has_ended(ctx: Ctx) {
    let s = &*ctx.store;
    for (i, id) in ["done", "running", "queued"].iter().enumerate() {
        submit(s, job(id, i as i64)).await;
    }
    for _ in 0..2 {
        claim_here(s, MANY).await.unwrap();
    }
    assert!(s
        .finish("done", &ended(JobStatus::Succeeded, t(1_000)))
        .await
        .unwrap());
    assert_eq!(
        s.remove_finished("running").await.unwrap(),
        RemoveFinished::Active(JobStatus::Running)
    );
    assert_eq!(
        s.remove_finished("queued").await.unwrap(),
        RemoveFinished::Active(JobStatus::Queued)
    );
    assert_eq!(
        s.remove_finished("done").await.unwrap(),
        RemoveFinished::Removed
    );
    assert_eq!(status(s, "done").await, None);
    assert_eq!(
        s.remove_finished("done").await.unwrap(),
        RemoveFinished::Unknown
    );
    assert_eq!(status(s, "running").await, Some(JobStatus::Running));
    assert_eq!(status(s, "queued").await, Some(JobStatus::Queued));
}

/// Exercise: supersede and coalesce mark the queued jobs of their group.
pub async fn supersede_and_coalesce_mark_the_queued_jobs_of_their_group(ctx: Ctx) {
    let s = &*ctx.store;
    submit(s, in_group("running", 1, "g", GroupMode::Supersede)).await;
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("running"));
    submit(s, in_group("q1", 2, "g", GroupMode::Queue)).await;
    submit(s, in_group("q2", 3, "g", GroupMode::Queue)).await;
    submit(s, in_group("elsewhere", 4, "h", GroupMode::Queue)).await;
    match submit(s, in_group("newest", 5, "g", GroupMode::Supersede)).await {
        Submitted::Queued { superseded, .. } => {
            let mut superseded = superseded;
            superseded.sort_unstable();
            assert_eq!(superseded, ["q1", "q2"]);
        }
        full => panic!("refused: {full:?}"),
    }
    let q1 = s.get("q1").await.unwrap().unwrap();
    assert_eq!(q1.status, JobStatus::Superseded);
    assert_eq!(q1.superseded_by.as_deref(), Some("newest"));
    assert!(q1.finished_at.is_some());
    // The running job is the scheduler's to stop, not the store's.
    assert_eq!(status(s, "running").await, Some(JobStatus::Running));
    assert_eq!(status(s, "elsewhere").await, Some(JobStatus::Queued));
    // Coalesce marks the same way; queue and skip mark nothing.
    match submit(s, in_group("coalesced", 6, "g", GroupMode::Coalesce)).await {
        Submitted::Queued { superseded, .. } => assert_eq!(superseded, ["newest"]),
        full => panic!("refused: {full:?}"),
    }
    for (id, mode) in [("queued", GroupMode::Queue), ("skipping", GroupMode::Skip)] {
        match submit(s, in_group(id, 7, "g", mode)).await {
            Submitted::Queued { superseded, .. } => assert!(superseded.is_empty(), "{id}"),
            full => panic!("refused: {full:?}"),
        }
    }
    assert_eq!(status(s, "coalesced").await, Some(JobStatus::Queued));
}

/// Exercise: a finish ends only a running job.
pub async fn a_finish_ends_only_a_running_job(ctx: Ctx) {
    let s = &*ctx.store;
    submit(s, job("a", 1)).await;
    assert!(!s
        .finish("a", &ended(JobStatus::Succeeded, t(10)))
        .await
        .unwrap());
    assert_eq!(status(s, "a").await, Some(JobStatus::Queued));
    assert_eq!(claim_here(s, MANY).await.as_deref(), Some("a"));
    let group = crate::model::RecordedGroup {
        pgid: 4242,
        leader_start_time: 7,
        session: 4242,
        grace_ms: 100,
    };
    s.set_process_group("a", group).await.unwrap();
    s.set_workspace("a", "/tmp/ws", None).await.unwrap();
    let running = s.get("a").await.unwrap().unwrap();
    assert_eq!(running.process_group, Some(group));
    assert_eq!(running.workspace.as_deref(), Some("/tmp/ws"));
    let finish = Finish {
        status: JobStatus::TimedOut,
        exit_code: Some(124),
        error: Some("timed out".into()),
        superseded_by: None,
        finished_at: t(20),
    };
    assert!(s.finish("a", &finish).await.unwrap());
    let a = s.get("a").await.unwrap().unwrap();
    assert_eq!(
        (a.status, a.exit_code, a.error.as_deref(), a.finished_at),
        (
            JobStatus::TimedOut,
            Some(124),
            Some("timed out"),
            Some(t(20))
        )
    );
    assert!(!s.finish("a", &finish).await.unwrap(), "ended twice");
}

/// Exercise: the store has one owner.
pub async fn the_store_has_one_owner(ctx: Ctx) {
    if ctx.shared() {
        // Several nodes share it, each its own node id: a second node opens
        // it beside the first...
        let other = tempfile::tempdir().unwrap();
        let second = ctx.open(other.path()).await.unwrap();
        assert_ne!(second.node(), ctx.store.node());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !second.is_live() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second node never became live"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // ...but a node id has one owner (the liveness lock, waited for
        // 30 s in case the server has not ended an old session yet).
        let refused = ctx.open(&ctx.baton_dir).await;
        match refused {
            Err(StoreError::Open { message, .. }) => {
                assert!(message.contains("liveness lock"), "{message}")
            }
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a second owner of the node id was let in"),
        }
    } else {
        let refused = ctx.open(&ctx.baton_dir).await;
        match refused {
            Err(StoreError::Open { message, .. }) => {
                assert!(message.contains("in use"), "{message}")
            }
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a second owner of the store was let in"),
        }
    }
    // The first owner goes on.
    submit(&*ctx.store, job("after", 1)).await;
    assert_eq!(status(&*ctx.store, "after").await, Some(JobStatus::Queued));
}

/// Exercise: a claim of many takes the oldest up to the cap.
pub async fn a_claim_of_many_takes_the_oldest_up_to_the_cap(ctx: Ctx) {
    let s = &*ctx.store;
    for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        submit(s, job(id, i as i64)).await;
    }
    submit(s, in_group("g1", 10, "g", GroupMode::Queue)).await;
    submit(s, in_group("g2", 11, "g", GroupMode::Queue)).await;
    let ids = |jobs: Vec<crate::model::Job>| -> Vec<String> {
        jobs.into_iter().map(|j| j.spec.id).collect()
    };
    // Fewer than asked when the cap runs out: 4 running at most.
    let first = s.claim_many(s.node(), 4, 3, t(5_000)).await.unwrap();
    assert!(first.iter().all(|j| j.status == JobStatus::Running));
    assert_eq!(ids(first), ["a", "b", "c"]);
    assert_eq!(
        ids(s.claim_many(s.node(), 4, 3, t(5_000)).await.unwrap()),
        ["d"]
    );
    assert!(s
        .claim_many(s.node(), 4, 3, t(5_000))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(status(s, "e").await, Some(JobStatus::Queued));
    // Fewer when the queue runs out; a queue job whose group has a job
    // claimed in the same step waits (as with claims one by one).
    let got = s.claim_many(s.node(), MANY, 5, t(5_000)).await.unwrap();
    assert_eq!(ids(got), ["e", "g1"]);
    assert_eq!(status(s, "g2").await, Some(JobStatus::Queued));
}

/// Ends, process groups and claims made at the same moment (which a store
/// may commit together) each get their own answer, and each is stored.
pub async fn concurrent_ends_and_claims_each_get_their_own_answer(ctx: Ctx) {
    let s = Arc::clone(&ctx.store);
    for i in 0..40 {
        submit(&*s, job(&format!("j{i:02}"), i)).await;
    }
    let running = s.claim_many(s.node(), MANY, 20, t(5_000)).await.unwrap();
    assert_eq!(running.len(), 20);
    let mut tasks = Vec::new();
    // The times are the exercise's (see `t`), read here, on its thread.
    let (end_at, claim_at) = (t(6_000), t(7_000));
    for (i, job) in running.into_iter().enumerate() {
        let s = Arc::clone(&s);
        tasks.push(tokio::spawn(async move {
            let id = job.spec.id;
            let group = crate::model::RecordedGroup {
                pgid: 1000 + i as i32,
                leader_start_time: 1,
                session: 1,
                grace_ms: 100,
            };
            s.set_process_group(&id, group).await.unwrap();
            assert!(s
                .finish(&id, &ended(JobStatus::Succeeded, end_at))
                .await
                .unwrap());
            // Its end is stored once answered.
            assert_eq!(status(&*s, &id).await, Some(JobStatus::Succeeded));
            s.claim_many(s.node(), MANY, 1, claim_at)
                .await
                .unwrap()
                .len()
        }));
    }
    let mut claimed = 0;
    for t in tasks {
        claimed += t.await.unwrap();
    }
    assert_eq!(claimed, 20, "each of the other 20 jobs claimed once");
    let counts = s.counts().await.unwrap();
    assert_eq!((counts.running, counts.queued), (20, 0));
    // An end that finds its job no longer running says so.
    assert!(!s
        .finish("j00", &ended(JobStatus::Failed, t(8_000)))
        .await
        .unwrap());
}
