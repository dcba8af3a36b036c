//! A supersede job stops the older jobs of its group running on this node,
//! whatever their mode. The run library supersedes only runs of its own
//! mode, and refuses to join a group whose runs use another (all runs of a
//! key agree, as `baton run` requires); in the service each job has its
//! own mode, so without this a supersede job meeting a running queue job
//! ended failed (125) instead of superseding it (issue 21, item 17). A job
//! of another mode on another node of a PostgreSQL store, or a `baton run`
//! of another mode outside the service, still makes it fail with the
//! library's one-line message: those are not this node's to stop.

use std::time::Duration;

use super::{Live, Service};

impl Service {
    /// Supersedes this node's running jobs of `group` older than job `by`
    /// (FIFO `seq` below `by_seq`), and waits until they have ended (at
    /// most grace + 5 s each), so that `by` then joins an idle group.
    pub(crate) async fn supersede_older(&self, by: &str, by_seq: i64, group: &str) {
        let older: Vec<Live> = self
            .lives()
            .iter()
            .filter(|(id, l)| *id != by && l.seq < by_seq && l.group.as_deref() == Some(group))
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
    }
}
