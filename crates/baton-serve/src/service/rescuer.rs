//! The rescuer (a store several nodes share): every few seconds, the jobs
//! of nodes that died are queued again or marked interrupted, by whichever
//! node looks first. Its timing is what keeps one job from running twice:
//! see `docs/src/design/service.md`, "The rescuer".

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::model::now_ms;
use crate::store::{Settle, Store};

use super::lifecycle::Lifecycle;

/// How often a node looks for the jobs of dead nodes.
pub(crate) const REAP_EVERY: Duration = Duration::from_secs(3);

/// Takes over the jobs of dead nodes.
pub(crate) struct Rescuer {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: Arc<Config>,
    pub(crate) lifecycle: Arc<Lifecycle>,
}

impl Rescuer {
    /// How long after a node's last answered heartbeat its jobs are taken
    /// over. A node whose session ended: by then their guardians have
    /// killed their commands (the fence after its last heartbeat), and the
    /// node itself, alive but cut off, has stopped what escaped them (it
    /// notices within the fence, then TERM, grace, KILL). A node whose
    /// session still holds its lock (a stopped process): its guardians
    /// killed its commands at the fence, and it stops nothing itself while
    /// stopped, so its grace is not waited for. Never two runs of one job's
    /// command at once.
    pub(crate) fn settle(config: &Config) -> Settle {
        Settle {
            dead: crate::store::FENCE + config.grace + Duration::from_secs(1),
            stopped: crate::store::FENCE + Duration::from_secs(1),
        }
    }

    /// Looks every [`REAP_EVERY`] while this node is live and not draining.
    pub(crate) async fn run(self) {
        loop {
            tokio::time::sleep(REAP_EVERY).await;
            if self.lifecycle.is_draining() || !self.store.is_live() {
                continue;
            }
            self.reap_once().await;
        }
    }

    async fn reap_once(&self) {
        let config = Arc::clone(&self.config);
        let retry = move |template: &str| config.retries_interrupted(template);
        let settle = Rescuer::settle(&self.config);
        match self.store.reap(&retry, settle, now_ms()).await {
            Ok(reaped) => {
                for r in reaped {
                    tracing::warn!(job = %r.job.spec.id, node = ?r.job.node, requeued = r.requeued, "job of a dead node taken over");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot look for dead nodes' jobs"),
        }
    }
}
