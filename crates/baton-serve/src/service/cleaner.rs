//! The cleaner: finished jobs older than `job_ttl` leave the store, then
//! their files go; the start journal keeps only the lines of jobs still
//! running here (or being stopped after a restart).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::journal::StartJournal;
use crate::model::now_ms;
use crate::output::JobFiles;
use crate::store::Store;

use super::lives::Lives;

/// Evicts finished jobs and compacts the start journal.
pub(crate) struct Cleaner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) job_ttl: Duration,
    /// `<baton dir>/serve/jobs`.
    pub(crate) jobs_root: PathBuf,
    pub(crate) journal: Arc<StartJournal>,
    pub(crate) lives: Arc<Lives>,
}

impl Cleaner {
    /// Removes finished jobs older than `job_ttl`, and their files.
    pub(crate) async fn evict(&self) {
        let ttl = i64::try_from(self.job_ttl.as_millis()).unwrap_or(i64::MAX);
        match self.store.evict(now_ms().saturating_sub(ttl)).await {
            Ok(ids) => {
                for id in ids {
                    if let Err(e) = JobFiles::new(&self.jobs_root, &id).remove() {
                        tracing::warn!(job = %id, error = %e, "cannot remove an evicted job's files");
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot evict finished jobs"),
        }
    }

    /// Every tenth of `job_ttl` (between 100 ms and 60 s): evicts, then
    /// compacts the journal.
    pub(crate) async fn run(self: Arc<Cleaner>) {
        let every = (self.job_ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(60));
        loop {
            tokio::time::sleep(every).await;
            self.evict().await;
            let cleaner = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || {
                let live = |id: &str| cleaner.lives.holds(id);
                if let Err(e) = cleaner.journal.compact(&live, false) {
                    tracing::warn!(error = %e, "cannot compact the start journal");
                }
            })
            .await;
        }
    }
}
