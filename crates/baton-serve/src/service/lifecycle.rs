//! The service's lifecycle: running, draining (no new job accepted or
//! claimed; the queued jobs callers wait for are cancelled; running jobs
//! may finish until `drain_timeout`, then are cancelled), drained (answers
//! that follow a job end; the background tasks stop, so that nothing of the
//! service outlives [`crate::server::launch`] but what its caller holds).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::lives::Live;
use super::Service;

/// Where the service is in its life, shared by its parts.
pub(crate) struct Lifecycle {
    draining: AtomicBool,
    /// Set when the drain cancels running jobs (a cancel then reads
    /// "shutdown"); the run of each job reads it.
    pub(crate) shutting_down: Arc<AtomicBool>,
    // Becomes true when the drain is over.
    drained: watch::Sender<bool>,
    // The scheduler, rescuer, cleaner, event follower and recovery:
    // stopped once drained.
    background: Mutex<Vec<JoinHandle<()>>>,
}

impl Lifecycle {
    pub(crate) fn new() -> Lifecycle {
        Lifecycle {
            draining: AtomicBool::new(false),
            shutting_down: Arc::new(AtomicBool::new(false)),
            drained: watch::channel(false).0,
            background: Mutex::new(Vec::new()),
        }
    }

    /// Whether the service is draining (no new jobs accepted or claimed).
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Runs `task` until the drain is over.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = tokio::spawn(task);
        self.background
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(handle);
    }

    /// The drain is over: answers that follow a job end, and the
    /// background tasks are stopped (returns once they are gone).
    async fn drained(&self) {
        self.drained.send_replace(true);
        let tasks = std::mem::take(
            &mut *self
                .background
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Service {
    /// Becomes true once the drain is over and the service is about to
    /// stop: an answer that follows a job (a log, a stream) ends then, so
    /// its client gets a complete answer rather than a cut connection.
    pub fn drain_over(&self) -> watch::Receiver<bool> {
        self.lifecycle.drained.subscribe()
    }

    /// Whether the service is draining (no new jobs accepted).
    pub fn is_draining(&self) -> bool {
        self.lifecycle.is_draining()
    }

    /// Stops accepting jobs, cancels the queued jobs callers wait for (they
    /// are answered 503: see `waiters`), lets running ones finish for up to
    /// `drain_timeout`, then cancels them; other queued jobs stay for the
    /// next start.
    pub async fn drain(&self) {
        self.lifecycle.draining.store(true, Ordering::SeqCst);
        self.wake();
        self.cancel_waiting().await;
        let deadline = tokio::time::Instant::now() + self.config.drain_timeout;
        tracing::info!(
            running = self.active(),
            "draining: waiting for running jobs"
        );
        while self.active() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if self.active() > 0 {
            self.lifecycle.shutting_down.store(true, Ordering::SeqCst);
            let lives: Vec<Live> = self.lives.running().values().cloned().collect();
            tracing::warn!(
                running = lives.len(),
                "drain timeout: cancelling running jobs"
            );
            for l in &lives {
                l.control.cancel();
            }
            for l in lives {
                let mut done = l.done.clone();
                let _ = tokio::time::timeout(
                    self.config.grace + Duration::from_secs(5),
                    done.wait_for(|d| *d),
                )
                .await;
            }
        }
        self.lifecycle.drained().await;
    }
}
