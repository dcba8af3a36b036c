//! Process-wide tables that a forked child can always use.
//!
//! `fork()` copies only the calling thread. A mutex that another thread held
//! at that instant is copied held, and nobody in the child will ever release
//! it: a child that takes it hangs, before running any code of its own when
//! a fork hook needs it (Python's `register_at_fork`, multiprocessing's fork
//! start method). A [`ForkSafe`] table cannot be copied into that state:
//!
//! - its lock word names the process whose thread holds it, and the fork
//!   generation in which it was taken; a word from another process or an
//!   earlier generation was copied from a parent, whose holding thread does
//!   not exist here, so the child takes the lock over;
//! - the table it guards belongs to the process (and generation) that last
//!   used it; the first use in a child starts a new, empty table and leaks
//!   the parent's copy, which may have been copied half-changed. The child
//!   holds nothing its parent's threads held, which is what the entries say.
//!
//! The generation is raised in the child by a `pthread_atfork` handler
//! (registered on first use), so a child is told apart from its parent even
//! when its pid is one its parent's ancestor once had; a child made without
//! libc's `fork` (no handlers run) still has another pid.
//!
//! Critical sections are a few instructions on a small table: contention
//! between threads of one process spins briefly, then yields.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Raised in every child by the fork handler.
static GENERATION: AtomicU32 = AtomicU32::new(0);
static HANDLER_REGISTERED: AtomicBool = AtomicBool::new(false);

/// Run in a forked child, by the handler `me` registers (async-signal-safe:
/// one atomic add). Windows has no fork.
#[cfg(unix)]
pub(crate) fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// This process and fork generation, as a lock word (never 0: no process
/// has pid 0).
fn me() -> u64 {
    if !HANDLER_REGISTERED.swap(true, Ordering::SeqCst) {
        crate::sys::call_after_fork_in_child();
    }
    let generation = u64::from(GENERATION.load(Ordering::SeqCst));
    (generation << 32) | u64::from(std::process::id())
}

/// A value guarded by a lock that a forked child never finds held, and that
/// a child sees as `T::default()` on first use (see the module docs).
pub(crate) struct ForkSafe<T> {
    /// 0 when free; else `me()` of the holder.
    word: AtomicU64,
    /// `me()` of the process whose value `value` is; 0 before first use.
    owner: UnsafeCell<u64>,
    value: UnsafeCell<T>,
}

// SAFETY: `owner` and `value` are only touched by the thread that holds the
// lock word (see `lock`), which gives them the exclusion a Mutex would; the
// value moves between threads with the lock, so T must be Send.
unsafe impl<T: Send> Sync for ForkSafe<T> {}

impl<T: Default> ForkSafe<T> {
    /// A table holding `empty`, which must equal `T::default()`.
    pub(crate) const fn new(empty: T) -> ForkSafe<T> {
        ForkSafe {
            word: AtomicU64::new(0),
            owner: UnsafeCell::new(0),
            value: UnsafeCell::new(empty),
        }
    }

    /// Takes the lock (see the module docs for a word copied by a fork).
    pub(crate) fn lock(&self) -> ForkSafeGuard<'_, T> {
        let me = me();
        let mut spins = 0u32;
        loop {
            match self
                .word
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(held) if held != 0 && held != me => {
                    // Taken in a parent before this process was forked (or in
                    // an earlier generation): its holder is not here.
                    if self
                        .word
                        .compare_exchange(held, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
                Err(_) => {
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
        // SAFETY: this thread holds the lock word, so no other thread of this
        // process touches `owner` or `value` until it is stored back to 0.
        let (owner, value) = unsafe { (&mut *self.owner.get(), &mut *self.value.get()) };
        if *owner != me {
            // A parent's value (or none yet): possibly copied half-changed,
            // so never read or dropped; the child starts empty.
            std::mem::forget(std::mem::take(value));
            *owner = me;
        }
        ForkSafeGuard { table: self }
    }
}

/// Holds a [`ForkSafe`] lock; releases it on drop.
pub(crate) struct ForkSafeGuard<'a, T> {
    table: &'a ForkSafe<T>,
}

impl<T> std::ops::Deref for ForkSafeGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock word.
        unsafe { &*self.table.value.get() }
    }
}

impl<T> std::ops::DerefMut for ForkSafeGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the lock word, and `&mut self` makes this
        // the only reference through it.
        unsafe { &mut *self.table.value.get() }
    }
}

impl<T> Drop for ForkSafeGuard<'_, T> {
    fn drop(&mut self) {
        self.table.word.store(0, Ordering::Release);
    }
}
