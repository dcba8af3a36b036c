//! What other nodes (through a shared store) tell this one: wake-ups,
//! cancels and supersedes of jobs running here, this node's session lost
//! or back, and its heartbeats (which vouch for its jobs' guardians).

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::store::StoreEvent;

use super::Service;

impl Service {
    /// Follows the store's events until the store closes them.
    pub(super) async fn follow_events(
        self: Arc<Service>,
        mut events: broadcast::Receiver<StoreEvent>,
    ) {
        loop {
            match events.recv().await {
                Ok(StoreEvent::Wake) | Err(broadcast::error::RecvError::Lagged(_)) => self.wake(),
                Ok(StoreEvent::Cancel(id)) => {
                    // Claimed a moment ago: wait until it is live.
                    if let Some(live) = self.lives.get_after_claim(&id).await {
                        tracing::info!(job = %id, "cancel requested by another node");
                        live.control.cancel();
                    }
                }
                Ok(StoreEvent::Supersede { group, by, seq }) => {
                    // Only when a job of the group runs here with an
                    // ordering key does the newer job's key matter: read it.
                    let keyed = self
                        .lives
                        .snapshot()
                        .iter()
                        .any(|(_, l)| l.group.as_deref() == Some(&group) && l.order.is_some());
                    let order = match keyed {
                        false => None,
                        true => match self.store.get(&by).await {
                            Ok(job) => job.and_then(|j| j.spec.order),
                            Err(e) => {
                                tracing::warn!(job = %by, error = %e, "cannot read the superseding job's ordering key; superseding by arrival");
                                None
                            }
                        },
                    };
                    self.supersede_running(&by, seq, order.as_deref(), &group);
                }
                Ok(StoreEvent::Live(true)) => self.wake(),
                Ok(StoreEvent::Alive(sent)) => {
                    for live in self.lives.running().values() {
                        if let Some(f) = &live.fence {
                            f.vouch(sent);
                        }
                    }
                }
                Ok(StoreEvent::Live(false)) => {
                    for (id, live) in self.lives.snapshot() {
                        tracing::warn!(job = %id, "stopping: this node lost its database session");
                        // Nobody cancelled it: it ends interrupted (and is
                        // queued again if its template says so).
                        live.control.interrupt();
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
