//! The jobs this node runs now, and the previous instance's jobs still
//! being stopped: what the scheduler counts against this node's cap, what
//! a cancel or a supersede reaches, and what the cleaner keeps in the start
//! journal.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use baton_run::RunControl;
use tokio::sync::watch;

/// A job running on this node.
#[derive(Clone)]
pub struct Live {
    /// Stops it.
    pub control: RunControl,
    /// Bytes of stdout captured so far.
    pub stdout: watch::Receiver<u64>,
    /// Becomes true when it has ended and its end is stored.
    pub done: watch::Receiver<bool>,
    /// Its concurrency group.
    pub group: Option<String>,
    /// Its place in the FIFO order (older jobs have smaller numbers).
    pub seq: i64,
    /// Its ordering key in its group (a job's `order`), if any: a newer
    /// job with an older key does not stop it (`model::outranks`).
    pub order: Option<String>,
    /// On a shared store: this node's session vouching for the job's
    /// guardian (each heartbeat answered extends its fence).
    pub fence: Option<baton_proc::FenceSource>,
}

/// This node's jobs, shared by the service's parts.
#[derive(Default)]
pub(crate) struct Lives {
    running: Mutex<HashMap<String, Live>>,
    // Held from a claim in the store until its job is in `running`: a
    // cancel that finds a job running but not live waits for it, instead
    // of taking it for another node's.
    claiming: tokio::sync::Mutex<()>,
    // Jobs of the previous instance whose leftovers are being stopped:
    // they still hold their slots (see `recovery`).
    recovering: Mutex<HashSet<String>>,
}

impl Lives {
    pub(crate) fn running(&self) -> MutexGuard<'_, HashMap<String, Live>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn recovering(&self) -> MutexGuard<'_, HashSet<String>> {
        self.recovering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The job `id` if it runs on this node.
    pub(crate) fn get(&self, id: &str) -> Option<Live> {
        self.running().get(id).cloned()
    }

    /// The job `id` if it runs on this node, waiting first for a claim
    /// under way (a job claimed a moment ago becomes live then).
    pub(crate) async fn get_after_claim(&self, id: &str) -> Option<Live> {
        if let Some(l) = self.get(id) {
            return Some(l);
        }
        drop(self.claiming.lock().await);
        self.get(id)
    }

    /// Held while a job is claimed and made live.
    pub(crate) async fn claim(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.claiming.lock().await
    }

    /// The jobs running here, each with its id.
    pub(crate) fn snapshot(&self) -> Vec<(String, Live)> {
        self.running()
            .iter()
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect()
    }

    /// How many jobs run on this node.
    pub(crate) fn active(&self) -> u64 {
        self.running().len() as u64
    }

    /// How many of the previous instance's jobs are still being stopped.
    pub(crate) fn recovering_count(&self) -> u64 {
        self.recovering().len() as u64
    }

    /// Whether job `id` runs here or is a previous instance's job still
    /// being stopped (its start journal line is kept).
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.running().contains_key(id) || self.recovering().contains(id)
    }
}
