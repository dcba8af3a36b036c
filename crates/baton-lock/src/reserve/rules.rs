//! The rules of reservations, apart from where the rows are kept: who
//! conflicts with whom, whom a request waits for (first come, first served
//! among overlapping requests), what is the caller's own, and what a grant
//! learns of holders that died. One implementation, used by the engine of
//! the baton dir (`engine.rs`) and by the PostgreSQL backend (`baton-pg`),
//! so both decide alike (`docs/src/design/reservations.md`, "Requesting").

use super::{effective, Conflict, Pattern, ReservationRecord};
use crate::identity::ProcessIdentity;
use crate::request::Mode;

/// A request, as far as finding what stands in its way goes.
#[derive(Clone, Copy, Debug)]
pub struct Asking<'a> {
    /// What it asks for.
    pub patterns: &'a [Pattern],
    /// Its mode (a semaphore mode counts as exclusive).
    pub mode: Mode,
    /// Its session: rows of the same session never conflict with it.
    pub session: &'a str,
    /// Its ticket once queued; `None` before (every waiter is earlier).
    pub ticket: Option<u64>,
}

/// Whether two modes exclude each other.
pub fn exclusive_pair(a: Mode, b: Mode) -> bool {
    effective(a) == Mode::Exclusive || effective(b) == Mode::Exclusive
}

/// The first of `row`'s patterns that overlaps one of `patterns`.
pub fn overlapping<'r>(row: &'r ReservationRecord, patterns: &[Pattern]) -> Option<&'r Pattern> {
    row.patterns
        .iter()
        .find(|p| patterns.iter().any(|q| p.overlaps(q)))
}

/// Whether two rows exclude each other.
fn rows_conflict(a: &ReservationRecord, b: &ReservationRecord) -> bool {
    exclusive_pair(a.mode, b.mode) && overlapping(a, &b.patterns).is_some()
}

/// The rows (of `rows`, the live ones) that `me` must wait for, with their
/// tickets, granted ones first: live rows of another session that overlap
/// it where one of the two is exclusive, and that are granted, or waiting
/// with a smaller ticket and not themselves blocked by a granted row of
/// `me`'s session (which would make the session wait for itself).
pub fn blockers(rows: &[ReservationRecord], me: &Asking<'_>) -> Vec<(u64, Conflict)> {
    let mut out = Vec::new();
    for row in rows {
        if Some(row.ticket) == me.ticket || row.holder.session == me.session {
            continue;
        }
        if !exclusive_pair(row.mode, me.mode) {
            continue;
        }
        let Some(pattern) = overlapping(row, me.patterns) else {
            continue;
        };
        let counts = row.granted
            || (me.ticket.is_none_or(|t| row.ticket < t)
                && !rows.iter().any(|g| {
                    g.granted
                        && g.holder.session == me.session
                        && g.ticket != row.ticket
                        && rows_conflict(g, row)
                }));
        if counts {
            out.push((
                row.ticket,
                Conflict {
                    pattern: pattern.clone(),
                    mode: row.mode,
                    holder: row.holder.clone(),
                    granted: row.granted,
                },
            ));
        }
    }
    // Granted rows first: they are what the line waits for.
    out.sort_by_key(|(_, c)| !c.granted);
    out
}

/// Splits `died` (granted rows whose holder died) into those a grant of
/// `patterns` follows, the last of which is its `previous_holder_died`,
/// and those it leaves for later grants.
pub fn take_died(
    died: Vec<ReservationRecord>,
    patterns: &[Pattern],
) -> (Option<ReservationRecord>, Vec<ReservationRecord>) {
    let (taken, kept): (Vec<_>, Vec<_>) = died
        .into_iter()
        .partition(|d| overlapping(d, patterns).is_some());
    (taken.into_iter().last(), kept)
}

/// Whether a row is the calling process's own: its session is `session`,
/// or its principal is this process or one of its ancestors (on this host,
/// in this PID namespace).
pub fn own_rows(session: Option<&str>) -> impl Fn(&ReservationRecord) -> bool + '_ {
    let me = ProcessIdentity::current();
    let mut lineage = vec![(me.pid, me.start_time)];
    lineage.extend(crate::identity::ancestors());
    move |r: &ReservationRecord| {
        session.is_some_and(|s| s == r.holder.session)
            || r.holder.principal.as_ref().is_some_and(|p| {
                p.is_local() && p.in_my_pid_ns() && lineage.contains(&(p.pid, p.start_time))
            })
    }
}

/// Of `rows` (live), the granted ones that conflict with `patterns` taken
/// in `mode`, leaving out those `own` says are the caller's: `check`'s
/// answer.
pub fn conflicts(
    rows: &[ReservationRecord],
    patterns: &[Pattern],
    mode: Mode,
    own: impl Fn(&ReservationRecord) -> bool,
) -> Vec<Conflict> {
    let mut out = Vec::new();
    for row in rows {
        if !row.granted || own(row) || !exclusive_pair(row.mode, mode) {
            continue;
        }
        if let Some(pattern) = overlapping(row, patterns) {
            out.push(Conflict {
                pattern: pattern.clone(),
                mode: row.mode,
                holder: row.holder.clone(),
                granted: true,
            });
        }
    }
    out
}

/// Of `files` (repo-relative, what a commit touches), those a live granted
/// exclusive row of `rows` covers, each with that row, leaving out the
/// caller's own: `check_files`'s answer (the pre-commit guard's question).
pub fn covered_files(
    rows: &[ReservationRecord],
    files: &[String],
    own: impl Fn(&ReservationRecord) -> bool,
) -> Vec<(String, Conflict)> {
    let rows: Vec<&ReservationRecord> = rows
        .iter()
        .filter(|r| r.granted && effective(r.mode) == Mode::Exclusive && !own(r))
        .collect();
    let mut out = Vec::new();
    for file in files {
        let hit = rows
            .iter()
            .find_map(|r| r.patterns.iter().find(|p| p.covers(file)).map(|p| (r, p)));
        if let Some((row, pattern)) = hit {
            out.push((
                file.clone(),
                Conflict {
                    pattern: pattern.clone(),
                    mode: row.mode,
                    holder: row.holder.clone(),
                    granted: true,
                },
            ));
        }
    }
    out
}
