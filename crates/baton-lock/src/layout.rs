//! Which bytes of a lock file mean what (see `docs/src/design/locking.md`).
//!
//! Byte-range locks are advisory and independent of the file's content, so
//! they can sit far beyond its end without using any disk.

use std::fs::File;
use std::io;

use crate::ofd::{self, Kind};

/// Guards reads and writes of the JSON document and ticket allocation.
pub(crate) const META: u64 = 1 << 40;
/// Users of an ancestor's hold of slot `i` lock byte `BORROW_BASE + i`
/// among themselves (see `LockRequest::use_ancestor_hold`).
pub(crate) const BORROW_BASE: u64 = (1 << 40) + (1 << 32);
/// Slot `i` of the lock is byte `SLOT_BASE + i`; exclusive and shared locks use slot 0.
pub(crate) const SLOT_BASE: u64 = 1 << 41;
/// Waiter ticket `t` is byte `TICKET_BASE + t`, write-locked while the waiter waits.
pub(crate) const TICKET_BASE: u64 = 1 << 42;
/// End (exclusive) of the ticket range.
pub(crate) const TICKET_END: u64 = 1 << 62;

/// The greatest live waiter ticket below `limit`, if any.
///
/// The kernel reports one conflicting lock per query, not necessarily the
/// greatest, so we narrow the range from below until nothing is left. A
/// read-lock query only sees write locks, i.e. waiters' tickets, never the
/// transient read locks waiters take on a predecessor's byte.
pub(crate) fn greatest_ticket_below(fd: &File, limit: u64) -> io::Result<Option<u64>> {
    let mut lo = TICKET_BASE;
    let mut best = None;
    while lo < limit {
        match ofd::find_conflict(fd, Kind::Read, lo, limit - lo)? {
            None => break,
            Some(c) => {
                best = Some(c.start.max(lo));
                lo = c.start.max(lo) + c.len.max(1);
            }
        }
    }
    Ok(best)
}

/// How many waiters are in line.
pub(crate) fn count_tickets(fd: &File) -> io::Result<usize> {
    Ok(all_locks(fd, Kind::Read, TICKET_BASE, TICKET_END)?.len())
}

/// Slots `0..max` currently held by others, with the kind of lock seen.
pub(crate) fn held_slots(fd: &File, max: u32) -> io::Result<Vec<(u32, Kind)>> {
    let end = SLOT_BASE + u64::from(max);
    let mut slots: Vec<(u32, Kind)> = all_locks(fd, Kind::Write, SLOT_BASE, end)?
        .into_iter()
        .map(|(at, kind)| ((at - SLOT_BASE) as u32, kind))
        .collect();
    slots.sort_by_key(|s| s.0);
    Ok(slots)
}

/// Every single byte in `[lo, hi)` on which another holder has a lock that
/// conflicts with `probe`. The kernel reports one conflict per query, in no
/// particular order, so each answer splits the range in two.
pub(crate) fn all_locks(fd: &File, probe: Kind, lo: u64, hi: u64) -> io::Result<Vec<(u64, Kind)>> {
    let mut found = Vec::new();
    let mut todo = vec![(lo, hi)];
    while let Some((lo, hi)) = todo.pop() {
        if lo >= hi {
            continue;
        }
        if let Some(c) = ofd::find_conflict(fd, probe, lo, hi - lo)? {
            let first = c.start.max(lo);
            let end = if c.len == 0 {
                hi
            } else {
                (c.start + c.len).min(hi)
            };
            found.push((first, c.kind));
            todo.push((lo, first));
            todo.push((end.max(first + 1), hi));
        }
    }
    Ok(found)
}
