//! Requesting, holding, listing, checking and breaking reservations
//! (`docs/src/design/reservations.md`).

use std::fs::File;
use std::time::{Duration, Instant};

use super::table::{self, SpaceFiles};
use super::{
    effective, now_rfc3339, rules, Conflict, Pattern, ReservationRecord, ReserveError,
    ReserveRequest, Space,
};
use crate::cancel::CancelToken;
use crate::dir::BatonDir;
use crate::meta_lock::MetaLock;
use crate::ofd::{self, Kind};
use crate::request::Mode;

/// How often a waiter re-reads the table even if the row it waits on still
/// lives: a row an operator broke, or one that stopped being in the way
/// without ending, no longer blocks anyone, and no kernel lock tells it.
const RECHECK: Duration = Duration::from_millis(500);

/// How long readers (listing, checking) wait for a table being written.
const READ_PATIENCE: Duration = Duration::from_secs(2);

/// A granted reservation; released on drop, on [`Reservation::release`],
/// or by the kernel when the holding process dies.
#[must_use = "the reservation is released as soon as it is dropped"]
#[derive(Debug)]
pub struct Reservation {
    files: SpaceFiles,
    /// The row's own open file description of `space.lock`, holding its
    /// liveness byte: closing it frees the byte.
    row_file: Option<File>,
    record: ReservationRecord,
    previous: Option<ReservationRecord>,
}

impl Reservation {
    /// The fencing token of this grant.
    pub fn token(&self) -> u64 {
        self.record.token.unwrap_or(0)
    }

    /// What it covers.
    pub fn patterns(&self) -> &[Pattern] {
        &self.record.patterns
    }

    /// Exclusive or shared.
    pub fn mode(&self) -> Mode {
        self.record.mode
    }

    /// Its row as written in the table.
    pub fn record(&self) -> &ReservationRecord {
        &self.record
    }

    /// The holder of an overlapping reservation that died holding it (its
    /// row was found with a dead liveness lock), if any, since the last
    /// grant that covered it.
    pub fn previous_holder_died(&self) -> Option<&ReservationRecord> {
        self.previous.as_ref()
    }

    /// Whether an operator broke it ([`break_reservation`]): its row is no
    /// longer in the table. Checked on call.
    pub fn is_broken(&self) -> Result<bool, ReserveError> {
        let Some(file) = &self.row_file else {
            return Ok(false);
        };
        let _meta = MetaLock::read(file, READ_PATIENCE).map_err(|e| {
            ReserveError::io("cannot lock the reservations table", &self.files.lock, e)
        })?;
        let table = self.files.read()?;
        Ok(!table.rows.iter().any(|r| r.ticket == self.record.ticket))
    }

    /// Releases it now: the row is removed, then the liveness byte freed.
    pub fn release(mut self) -> Result<(), ReserveError> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<(), ReserveError> {
        let Some(file) = self.row_file.take() else {
            return Ok(());
        };
        let result = remove_row(&self.files, &file, self.record.ticket);
        // Closing the file frees the byte whatever happened to the table: a
        // row left behind is then seen dead and pruned.
        drop(file);
        result
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}

/// Removes row `ticket` (and its broken mark) under META taken through
/// `file`, the row's own description, and frees its liveness byte before
/// META goes: a byte held without a row would look, to whoever reads the
/// table next, like a holder the table forgot (`table::orphans`).
fn remove_row(files: &SpaceFiles, file: &File, ticket: u64) -> Result<(), ReserveError> {
    let _meta = table::meta_now(files, file)?;
    let result = (|| {
        let mut t = files.read()?;
        let before = (t.rows.len(), t.broken.len());
        t.rows.retain(|r| r.ticket != ticket);
        t.broken.retain(|b| *b != ticket);
        if (t.rows.len(), t.broken.len()) != before {
            files.write(&t)?;
        }
        Ok(())
    })();
    let _ = ofd::unlock(file, table::byte(ticket), 1);
    result
}

/// Reserves `req.patterns` in `space`, waiting as `req.wait` says.
pub fn reserve(
    dir: &BatonDir,
    space: &Space,
    req: &ReserveRequest,
) -> Result<Reservation, ReserveError> {
    if req.patterns.is_empty() {
        return Err(ReserveError::BadPath {
            path: String::new(),
            reason: "no path given".into(),
        });
    }
    let cancel = req.cancel.as_ref();
    if cancel.is_some_and(CancelToken::is_cancelled) {
        return Err(ReserveError::Cancelled);
    }
    let files = SpaceFiles::of(dir, space)?;
    let checker = files.open_lock()?;
    let row_file = files.open_lock()?;
    let mode = effective(req.mode);
    let deadline = req.wait.deadline_from(Instant::now());
    let mut ticket: Option<u64> = None;
    let outcome = (|| loop {
        let Some(meta) = table::meta(&files, &checker, deadline, cancel)? else {
            return Err(ReserveError::Busy {
                conflicts: Vec::new(),
            });
        };
        let mut t = files.read()?;
        let mut changed = t
            .prune(&checker)
            .map_err(|e| ReserveError::io("cannot check reservations in", &files.lock, e))?;
        if let Some(mine) = ticket {
            if !t.rows.iter().any(|r| r.ticket == mine) {
                // Lost with the table (deleted under us): queue again.
                t.rows.push(record(req, mode, mine));
                changed = true;
            }
        }
        let asking = rules::Asking {
            patterns: &req.patterns,
            mode,
            session: &req.holder.session,
            ticket,
        };
        let mut blocking = rules::blockers(&t.rows, &asking);
        // Holders the table forgot (deleted under them) block everyone.
        let lost = table::orphans(&checker, &t, ticket.as_slice())
            .map_err(|e| ReserveError::io("cannot check reservations in", &files.lock, e))?;
        blocking.extend(lost.into_iter().map(|r| {
            (
                r.ticket,
                Conflict {
                    pattern: super::Pattern::whole(),
                    mode: r.mode,
                    holder: r.holder,
                    granted: true,
                },
            )
        }));
        if blocking.is_empty() {
            let mine = match ticket {
                Some(mine) => mine,
                None => {
                    let mine = table::take_ticket(&row_file, t.ticket + 1, &files.lock)?;
                    t.ticket = mine;
                    t.rows.push(record(req, mode, mine));
                    ticket = Some(mine);
                    mine
                }
            };
            let token = t.next_token();
            let (died, kept) = rules::take_died(std::mem::take(&mut t.died), &req.patterns);
            t.died = kept;
            let row = t
                .rows
                .iter_mut()
                .find(|r| r.ticket == mine)
                .ok_or_else(|| {
                    ReserveError::io(
                        "lost the reservation's row in",
                        &files.table,
                        std::io::Error::other("row vanished"),
                    )
                })?;
            row.granted = true;
            row.token = Some(token);
            row.holder.since = now_rfc3339();
            let granted = row.clone();
            files.write(&t)?;
            drop(meta);
            return Ok((granted, died));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ReserveError::Busy {
                conflicts: blocking.into_iter().map(|(_, c)| c).collect(),
            });
        }
        if ticket.is_none() {
            let mine = table::take_ticket(&row_file, t.ticket + 1, &files.lock)?;
            t.ticket = mine;
            t.rows.push(record(req, mode, mine));
            ticket = Some(mine);
            changed = true;
        }
        let wait_on = blocking[0].0;
        if changed {
            files.write(&t)?;
        }
        drop(meta);
        let until = Some(Instant::now() + RECHECK);
        let until = match deadline {
            Some(d) => until.map(|u| u.min(d)),
            None => until,
        };
        let byte = table::byte(wait_on);
        match ofd::lock_wait(&checker, Kind::Read, byte, 1, until, cancel) {
            Ok(true) => {
                let _ = ofd::unlock(&checker, byte, 1);
            }
            Ok(false) => {}
            Err(_) if cancel.is_some_and(CancelToken::is_cancelled) => {
                return Err(ReserveError::Cancelled)
            }
            Err(e) => {
                return Err(ReserveError::io(
                    "cannot wait for a reservation in",
                    &files.lock,
                    e,
                ))
            }
        }
    })();
    match outcome {
        Ok((record, previous)) => Ok(Reservation {
            files,
            row_file: Some(row_file),
            record,
            previous,
        }),
        Err(e) => {
            if let Some(mine) = ticket {
                // Best effort: closing `row_file` frees the byte anyway,
                // and a dead waiting row is pruned by the next reader.
                let _ = remove_row(&files, &row_file, mine);
            }
            Err(e)
        }
    }
}

/// The row of a request, waiting.
fn record(req: &ReserveRequest, mode: Mode, ticket: u64) -> ReservationRecord {
    let mut holder = req.holder.clone();
    holder.since = now_rfc3339();
    ReservationRecord {
        ticket,
        token: None,
        patterns: req.patterns.clone(),
        mode,
        granted: false,
        holder,
    }
}

/// Reads the table's live rows, under a shared META lock when it comes
/// within [`READ_PATIENCE`] (else as it is).
fn live_rows(files: &SpaceFiles) -> Result<Vec<ReservationRecord>, ReserveError> {
    let checker = files.open_lock()?;
    let _meta = MetaLock::read(&checker, READ_PATIENCE)
        .map_err(|e| ReserveError::io("cannot lock the reservations table", &files.lock, e))?;
    let t = files.read()?;
    let check = |e| ReserveError::io("cannot check reservations in", &files.lock, e);
    let mut rows = table::orphans(&checker, &t, &[]).map_err(check)?;
    for row in t.rows {
        if table::is_alive(&checker, row.ticket).map_err(check)? {
            rows.push(row);
        }
    }
    rows.sort_by_key(|r| r.ticket);
    Ok(rows)
}

/// Live rows (granted and waiting), in ticket order; with `filter`, only
/// rows overlapping it.
pub fn reservations(
    dir: &BatonDir,
    space: &Space,
    filter: Option<&Pattern>,
) -> Result<Vec<ReservationRecord>, ReserveError> {
    let files = SpaceFiles::of(dir, space)?;
    let mut rows = live_rows(&files)?;
    if let Some(f) = filter {
        rows.retain(|r| r.patterns.iter().any(|p| p.overlaps(f)));
    }
    Ok(rows)
}

/// Live *granted* rows that conflict with `patterns` taken in `mode` by the
/// calling process. A row whose principal is this process or one of its
/// ancestors, or whose session is `session`, is the caller's own and never
/// conflicts. Empty: free for the caller.
pub fn check(
    dir: &BatonDir,
    space: &Space,
    patterns: &[Pattern],
    mode: Mode,
    session: Option<&str>,
) -> Result<Vec<Conflict>, ReserveError> {
    let files = SpaceFiles::of(dir, space)?;
    let rows = live_rows(&files)?;
    Ok(rules::conflicts(
        &rows,
        patterns,
        mode,
        rules::own_rows(session),
    ))
}

/// The files among `files` (repo-relative, `/`-separated: what a commit
/// touches) that a live granted *exclusive* reservation of another holder
/// covers ([`Pattern::covers`]), each with that reservation; the caller's
/// own rows as for [`check`]. The pre-commit guard's question.
pub fn check_files(
    dir: &BatonDir,
    space: &Space,
    files: &[String],
    session: Option<&str>,
) -> Result<Vec<(String, Conflict)>, ReserveError> {
    let sf = SpaceFiles::of(dir, space)?;
    let rows = live_rows(&sf)?;
    Ok(rules::covered_files(&rows, files, rules::own_rows(session)))
}

/// An operator removes a live reservation by token: its row leaves the
/// table (the holder's [`Reservation::is_broken`] says so, and it no
/// longer blocks anyone; waiters notice within half a second). Returns the
/// record.
pub fn break_reservation(
    dir: &BatonDir,
    space: &Space,
    token: u64,
) -> Result<ReservationRecord, ReserveError> {
    let files = SpaceFiles::of(dir, space)?;
    let checker = files.open_lock()?;
    let _meta = table::meta_now(&files, &checker)?;
    let mut t = files.read()?;
    t.prune(&checker)
        .map_err(|e| ReserveError::io("cannot check reservations in", &files.lock, e))?;
    let Some(at) = t.rows.iter().position(|r| r.token == Some(token)) else {
        return Err(ReserveError::NotFound { token });
    };
    let row = t.rows.remove(at);
    t.mark_broken(row.ticket);
    files.write(&t)?;
    Ok(row)
}
