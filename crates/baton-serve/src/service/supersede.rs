//! A supersede job stops the older jobs of its group, whatever their mode
//! and wherever they run. The run library supersedes only runs of its own
//! mode, and refuses to join a group whose runs use another (all runs of a
//! key agree, as `baton run` requires); in the service each job has its
//! own mode, so:
//!
//! - this node's older jobs of the group are superseded here, whatever
//!   their mode (without this a supersede job meeting a running queue job
//!   ended failed, 125, instead of superseding it: issue 21, item 17);
//! - on a shared store, the other nodes stop theirs when the job is
//!   submitted (the store's `Supersede` event), and the job waits until
//!   the store shows no older job of its group running anywhere before it
//!   joins the group (else it could meet the other node's job, in another
//!   mode, still stopping, and fail with the library's mode mismatch).
//!
//! Ordering keys (a job's `order`, as `baton run --order`): "older" is
//! older by arrival (`seq`) *and* outranked by the newer job's key
//! ([`outranks`]): a job whose key is older than a running job's does not
//! stop it (it joins the group after it and is refused there, superseded,
//! without running).
//!
//! Bounded: each wait lasts at most grace + 5 s (a stop takes at most the
//! grace, then KILL). Not covered: a `baton run` of another mode outside
//! the service is not the service's to stop; the job then fails with the
//! library's one-line message.

use std::time::{Duration, Instant};

use crate::model::{outranks, JobStatus, ListFilter};

use super::lives::Live;
use super::scheduler::Scheduler;
use super::Service;

impl Service {
    /// Stops this node's jobs of `group` older than job `by` (FIFO `seq`
    /// below `by_seq`) that run now, at once: when `by` is submitted, not
    /// when it starts, which may be much later when every slot is taken
    /// (the newest request wins, as with `baton run --mode supersede`).
    /// On a shared store every node does this on the store's `Supersede`
    /// event; a single node does it at the submit. Stopping twice is
    /// harmless.
    pub(crate) fn supersede_running(
        &self,
        by: &str,
        by_seq: i64,
        by_order: Option<&str>,
        group: &str,
    ) {
        let older = self.lives.snapshot().into_iter().filter(|(id, l)| {
            id != by
                && l.group.as_deref() == Some(group)
                && l.seq < by_seq
                && outranks(by_order, l.order.as_deref())
        });
        for (id, live) in older {
            tracing::info!(job = %id, by = %by, "superseded by a newer job of its group");
            live.control.supersede(by.to_string());
        }
    }
}

impl Scheduler {
    /// Supersedes this node's running jobs of `group` older than job `by`
    /// (FIFO `seq` below `by_seq`), and waits until they, and those of
    /// other nodes, have ended (at most grace + 5 s each wait), so that
    /// `by` then joins an idle group.
    pub(crate) async fn supersede_older(
        &self,
        by: &str,
        by_seq: i64,
        by_order: Option<&str>,
        group: &str,
    ) {
        let older: Vec<Live> = self
            .lives
            .running()
            .iter()
            .filter(|(id, l)| {
                *id != by
                    && l.seq < by_seq
                    && l.group.as_deref() == Some(group)
                    && outranks(by_order, l.order.as_deref())
            })
            .map(|(_, l)| l.clone())
            .collect();
        for l in &older {
            l.control.supersede(by);
        }
        let wait = self.config.grace + Duration::from_secs(5);
        for l in older {
            let mut done = l.done.clone();
            let _ = tokio::time::timeout(wait, done.wait_for(|d| *d)).await;
        }
        if self.store.events().is_some() {
            self.wait_older_ended_elsewhere(by_seq, by_order, group, wait)
                .await;
        }
    }

    /// Polls the store until no job of `group` older than `by_seq` (and
    /// outranked by `by_order`) runs (on any node), at most `limit`. A
    /// store error ends the wait: the join then decides.
    async fn wait_older_ended_elsewhere(
        &self,
        by_seq: i64,
        by_order: Option<&str>,
        group: &str,
        limit: Duration,
    ) {
        let filter = ListFilter {
            status: Some(JobStatus::Running),
            group: Some(group.to_string()),
            // Without a key, any older job will do; with one, those with a
            // newer key are not waited for.
            limit: if by_order.is_some() { 100 } else { 1 },
            before_seq: Some(by_seq),
        };
        let deadline = Instant::now() + limit;
        loop {
            match self.store.list(&filter).await {
                Ok(older)
                    if !older
                        .iter()
                        .any(|j| outranks(by_order, j.spec.order.as_deref())) =>
                {
                    return
                }
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(_) => {
                    tracing::warn!(
                        group,
                        "older jobs of the group still run after the grace; joining anyway"
                    );
                    return;
                }
                Err(e) => {
                    tracing::warn!(group, error = %e, "cannot see whether older jobs of the group still run");
                    return;
                }
            }
        }
    }
}
