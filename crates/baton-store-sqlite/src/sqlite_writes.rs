//! Group commit of the service's bookkeeping (a claim, a job's process
//! group or workspace, a job's end): the writes that arrive while the
//! connection is busy share the next transaction, each in a savepoint of
//! its own, with one commit (`synchronous=NORMAL`, as each had alone). A
//! writer is answered only once its batch has committed, so a job's end is
//! stored before anyone learns of it (its waiters, the scheduler's count of
//! free slots). Under a burst of short jobs the claims of one scheduler
//! tick and the ends that came meanwhile take one transaction instead of
//! one each (bench/README.md, "Where the time goes").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

/// What a write says once it ran in its savepoint: whether to keep it, and
/// whom to tell how its batch's commit went.
pub(super) struct Ran {
    keep: bool,
    tell: Box<dyn FnOnce(Result<(), String>) + Send>,
}

/// One write waiting for its batch.
pub(super) type Write = Box<dyn FnOnce(&Connection) -> Ran + Send>;

/// The writes waiting for the connection, and whether a flusher takes them.
#[derive(Default)]
pub(super) struct Writes {
    queue: Mutex<Vec<Write>>,
    flushing: AtomicBool,
}

impl Writes {
    /// Queues `write`; true when the caller must start a flusher (none runs).
    pub(super) fn push(&self, write: Write) -> bool {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(write);
        !self.flushing.swap(true, Ordering::SeqCst)
    }

    /// What waits now (empty if nothing).
    pub(super) fn take(&self) -> Vec<Write> {
        take_batch(&mut self.queue.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Ends the flusher if nothing waits (true); a write queued after this
    /// starts a new one.
    pub(super) fn stop_if_empty(&self) -> bool {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.is_empty() {
            self.flushing.store(false, Ordering::SeqCst);
            return true;
        }
        false
    }
}

/// The next batch of what waits in `queue`: all of it, or only the oldest
/// with `BATON_NO_GROUP_COMMIT=1` (read once), the off-switch with which
/// `bench/devices_bench.py` measures what group commit buys
/// (`docs/src/design/service.md`, "Speed devices").
pub(super) fn take_batch<T>(queue: &mut Vec<T>) -> Vec<T> {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let off =
        *OFF.get_or_init(|| std::env::var_os("BATON_NO_GROUP_COMMIT").is_some_and(|v| v == "1"));
    match off && queue.len() > 1 {
        true => vec![queue.remove(0)],
        false => std::mem::take(queue),
    }
}

/// `f` as a write, and where its answer comes once its batch committed
/// (`Err`: `f` failed, or the batch did not commit; `f`'s change is then
/// not stored).
pub(super) fn write<T: Send + 'static>(
    f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
) -> (Write, oneshot::Receiver<Result<T, String>>) {
    let (answer, rx) = oneshot::channel();
    let write: Write = Box::new(move |conn| {
        let done = f(conn);
        Ran {
            keep: done.is_ok(),
            tell: Box::new(move |committed| {
                let _ = answer.send(match (done, committed) {
                    (Ok(v), Ok(())) => Ok(v),
                    (Err(e), _) => Err(e.to_string()),
                    (Ok(_), Err(e)) => Err(e),
                });
            }),
        }
    });
    (write, rx)
}

/// Runs `batch` in one transaction, each write in its own savepoint (one
/// that fails leaves the others), commits, then tells each writer. A
/// failure of the transaction itself fails every write of the batch.
pub(super) fn run_batch(conn: &mut Connection, batch: Vec<Write>) -> rusqlite::Result<()> {
    let mut tells = Vec::with_capacity(batch.len());
    let committed = (|| {
        let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for write in batch {
            let savepoint = tx.savepoint()?;
            let ran = write(&savepoint);
            match ran.keep {
                true => savepoint.commit()?,
                false => savepoint.finish()?, // rolled back
            }
            tells.push(ran.tell);
        }
        tx.commit()
    })();
    let outcome = committed.as_ref().map(drop).map_err(ToString::to_string);
    for tell in tells {
        tell(outcome.clone());
    }
    committed
}
