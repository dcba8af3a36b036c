//! Callers waiting for their job's result (a chat completion): nobody else
//! knows such a job's id, so it is worth running only while its caller
//! waits.
//!
//! Guaranteed: when the service drains, every such job still queued is
//! cancelled (durably) before the drain goes on, and its caller is answered
//! 503 `draining` with `Retry-After` (it may retry: the job never ran); a job
//! whose caller went away is cancelled too. So a prompt runs at most once
//! across a drain, a restart and the client's retries.
//!
//! After `kill -9` of the service (or a crash), a waiting caller's job is
//! known as such by the next start (the store keeps its `waiter`, this
//! node): queued, it is cancelled; running, it is marked interrupted and
//! never queued again, whatever `retry_on_interrupt` says.
//!
//! On a store several nodes share, a node that dies for good (never
//! restarts): the rescuer of another node, once it finds it dead (the same
//! bound as for its running jobs, `docs/src/design/service.md` "The rescuer"), cancels its
//! callers' jobs still queued. Not guaranteed: one that a free slot of
//! another node claimed between the death and then runs.

use std::sync::{Arc, PoisonError};

use crate::model::now_ms;
use crate::store::CancelQueued;

use super::Service;

/// What the service knows of the jobs callers wait for.
#[derive(Default)]
pub(super) struct Waiters {
    /// Jobs a caller waits for (or whose caller went away and whose cancel
    /// is under way).
    waiting: std::collections::HashSet<String>,
    /// Jobs the drain cancelled before they ran.
    drained: std::collections::HashSet<String>,
}

/// A caller waiting for job `id`'s result, registered for as long as it
/// lives: dropped without [`Waiting::disarm`] (the caller went away before
/// its answer), it cancels the job.
pub struct Waiting {
    service: Arc<Service>,
    id: String,
    armed: bool,
}

impl Waiting {
    /// Registers a caller of job `id` (before the job is stored: a caller
    /// that goes away while it is stored must not leave it to run).
    pub fn new(service: Arc<Service>, id: String) -> Waiting {
        service.wait_for(&id);
        Waiting {
            service,
            id,
            armed: true,
        }
    }

    /// The caller got its answer (or the job was never stored).
    pub fn disarm(mut self) {
        self.armed = false;
        self.service.waited(&self.id);
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.armed {
            self.service.abandon(&self.id);
        }
    }
}

impl Service {
    fn waiters(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that a caller waits for job `id`. The caller calls
    /// [`Service::cancel_if_draining`] once the job is stored: a drain that
    /// began meanwhile may not have seen it.
    fn wait_for(&self, id: &str) {
        self.waiters().waiting.insert(id.to_string());
    }

    /// The caller of job `id` got its answer.
    fn waited(&self, id: &str) {
        self.waiters().waiting.remove(id);
    }

    /// The caller of job `id` went away: the job is cancelled (in the
    /// background; the drain does it too if it comes first).
    fn abandon(self: &Arc<Service>, id: &str) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let service = Arc::clone(self);
        let id = id.to_string();
        tracing::info!(job = %id, "the caller went away: cancelling its job");
        handle.spawn(async move {
            // The caller may have gone while its job was being stored: an
            // unknown job is looked for again a few times.
            for _ in 0..10 {
                match service.cancel(&id).await {
                    Ok(super::Cancelled::Unknown) => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(job = %id, error = %e, "cannot cancel an abandoned job");
                        break;
                    }
                }
            }
            service.waited(&id);
        });
    }

    /// Whether the drain cancelled job `id` before it ran.
    pub fn was_drained(&self, id: &str) -> bool {
        self.waiters().drained.contains(id)
    }

    /// When draining: cancels job `id` if it is still queued. Returns
    /// whether the drain has cancelled it (now or before).
    pub async fn cancel_if_draining(&self, id: &str) -> bool {
        if !self.is_draining() {
            return false;
        }
        self.cancel_drained(id).await;
        self.was_drained(id)
    }

    /// Cancels every waited-for job still queued (the drain's first step:
    /// queued jobs do not run during a drain, and these would run after the
    /// restart for nobody).
    pub(super) async fn cancel_waiting(&self) {
        let ids: Vec<String> = self.waiters().waiting.iter().cloned().collect();
        for id in ids {
            self.cancel_drained(&id).await;
        }
    }

    async fn cancel_drained(&self, id: &str) {
        // Marked first: its caller may see the job cancelled as soon as the
        // store has it, before this call returns.
        let first = self.waiters().drained.insert(id.to_string());
        match self.store.cancel_queued(id, now_ms()).await {
            Ok(CancelQueued::Cancelled(_)) => {
                tracing::info!(job = %id, "draining: cancelled a queued job its caller waited for");
                self.metrics
                    .finished(0, 0, crate::model::JobStatus::Cancelled);
            }
            other => {
                if let Err(e) = other {
                    tracing::warn!(job = %id, error = %e, "draining: cannot cancel a queued job its caller waits for");
                }
                // Not cancelled by this call (running, ended, or cancelled
                // by the drain before).
                if first {
                    self.waiters().drained.remove(id);
                }
            }
        }
    }
}
