//! Cancelling a wait for a lock from another thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A handle that makes an [`acquire`](crate::acquire) waiting in another
/// thread give up with [`LockError::Cancelled`](crate::LockError::Cancelled).
///
/// Give a clone to [`LockRequest::cancel`](crate::LockRequest::cancel); call
/// [`CancelToken::cancel`] from anywhere. The waiting thread is interrupted
/// in the kernel by the same per-thread timer that ends deadline waits
/// (`docs/src/design/locking.md`, "Waiting with a deadline"), fired at once and then every
/// few milliseconds until the waiter has left, so no wake-up is lost. A
/// request whose token is already cancelled does not wait at all.
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    /// Fires the timer of the thread that waits now, if one does.
    waiter: Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.cancelled.load(Ordering::SeqCst))
            .finish()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every wait using this token, now and in the future. Idempotent,
    /// never blocks for longer than a waiter takes to register.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        let waiter = self
            .inner
            .waiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(fire) = waiter.as_ref() {
            fire();
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Calls `fire` when the token is cancelled from now on: how a wait
    /// that is not a kernel lock wait (a query waiting in a database
    /// server, say) is interrupted. Replaces an earlier callback. Returns
    /// whether the token was cancelled already; then `fire` is not called
    /// and the caller must not start waiting. [`CancelToken::forget`]
    /// removes the callback.
    pub fn on_cancel(&self, fire: Box<dyn Fn() + Send>) -> bool {
        self.attach(fire)
    }

    /// Removes the callback given to [`CancelToken::on_cancel`].
    pub fn forget(&self) {
        self.detach();
    }

    /// Registers how to interrupt the waiting thread; returns whether the
    /// token was cancelled already (then the caller must not wait). Either
    /// `cancel` sees the waiter, or this sees the flag.
    pub(crate) fn attach(&self, fire: Box<dyn Fn() + Send>) -> bool {
        *self
            .inner
            .waiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(fire);
        self.is_cancelled()
    }

    /// Forgets the waiter (before its timer is deleted).
    pub(crate) fn detach(&self) {
        *self
            .inner
            .waiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }
}
