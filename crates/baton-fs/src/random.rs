//! A random `u64` for names and jitter.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys;

/// 64 bits from the system's random source: `getrandom(2)` on Linux,
/// `getentropy(2)` on macOS, `ProcessPrng` on Windows.
///
/// Should the system not answer (a seccomp filter, an exotic kernel), it
/// falls back to the clock, the pid and a per-process counter: distinct
/// between calls and between processes, but predictable. So it is for
/// uniqueness (temp file names, run ids) and jitter, never for secrets.
pub fn random_u64() -> u64 {
    sys::random_u64().unwrap_or_else(fallback)
}

fn fallback() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 40) ^ count.rotate_left(20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_differ_also_on_the_fallback() {
        assert_ne!(random_u64(), random_u64());
        assert_ne!(fallback(), fallback());
    }
}
