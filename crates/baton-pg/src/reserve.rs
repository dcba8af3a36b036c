//! Path reservations on PostgreSQL, for agents on many machines: the same
//! rules as in the baton dir (`baton_lock::reserve::rules`: overlap of
//! paths and globs, first come first served among overlapping requests,
//! all or none, shared and exclusive), with the table in the database.
//!
//! A space (one repository, keyed by its identity) is a row of
//! `baton_reservation_spaces` (its last fencing token, the granted rows
//! whose holder died); a request is a row of `baton_reservations` (ticket
//! from one sequence, so ticket order is arrival order, token once granted,
//! the record). Every read-modify-write of a space's rows happens in one
//! transaction under its space row's lock (`FOR UPDATE`), the META lock of
//! the local engine.
//!
//! Liveness is the server's: a request's own session takes the session
//! advisory lock on the bigint key `RESERVATION_KEY + ticket` before its
//! row is visible, and keeps it for as long as the row lives. A row whose
//! session no longer holds its key (`baton_reservation_live`) belongs to a
//! holder that died, whose process or machine or connection ended: it is
//! pruned by the next request, and a granted one is remembered so the next
//! grant over its paths learns `previous_holder_died`. No TTL. A waiter
//! waits in the server's lock queue for a shared lock on the key of the
//! first row in its way (no polling), at most half a second at a time, so
//! that it also notices a row broken by an operator.
//!
//! A holder whose session ends while it runs is told
//! ([`HeldReservation::on_lost`]; `baton reserve -- CMD` stops its command).
//! Not here (yet): a wait that loses its session fails instead of
//! reconnecting as lock waits do; and nothing like the fence of locks
//! (`crate::settle`) keeps the next holder from starting in the moments
//! before the old holder noticed and stopped its command.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_lock::reserve::{
    rules, Conflict, HeldReservation, Pattern, ReservationRecord, ReservationStore, ReserveError,
    ReserveRequest, Space,
};
use baton_lock::{CancelToken, Mode};
use tokio_postgres::types::Type;

use crate::error::{sqlstate, PgError};
use crate::session::{Database, Session, RELEASE_LIMIT};

/// The advisory key of ticket 0 ("br" in the top bytes: apart from every
/// other bigint key a program may use, and from the two-int4 keys of
/// locks, which PostgreSQL keeps apart anyway).
pub const RESERVATION_KEY: i64 = 0x6272_0000_0000_0000;

/// How often a waiter re-reads the table while the row it waits on lives.
const RECHECK: Duration = Duration::from_millis(500);

/// How many dead granted rows a space remembers for `previous_holder_died`.
const MAX_DIED: usize = 64;

/// Reservations kept in a PostgreSQL database.
#[derive(Clone, Debug)]
pub struct PgReservations {
    db: Database,
}

impl PgReservations {
    /// The reservations of database `db`.
    pub fn new(db: Database) -> PgReservations {
        PgReservations { db }
    }

    /// A session with the tables in place (created or upgraded on first
    /// use; refused when newer than this build).
    fn session(&self) -> Result<Session, ReserveError> {
        let session = self.db.connect().map_err(store)?;
        crate::schema::migrate(&session).map_err(store)?;
        Ok(session)
    }
}

/// Runs `f` where it may block on this crate's own runtime: on this thread,
/// or, when this thread is inside a tokio runtime (a caller's async code:
/// `baton mcp`'s handlers), on a thread of its own, waited for. Every
/// entry point of this module goes through it.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// A backend error as a reservation error.
fn store(e: PgError) -> ReserveError {
    ReserveError::Store(Box::new(e))
}

/// What went wrong inside a transaction.
enum TxError {
    Pg(tokio_postgres::Error),
    Data(String),
}

impl From<tokio_postgres::Error> for TxError {
    fn from(e: tokio_postgres::Error) -> TxError {
        TxError::Pg(e)
    }
}

impl TxError {
    fn into_reserve(self, session: &Session, op: &'static str) -> ReserveError {
        match self {
            TxError::Pg(e) => store(session.error(op, &e)),
            TxError::Data(message) => store(PgError::Database { op, message }),
        }
    }
}

/// Runs `body` in one transaction on `session`: committed when it returns
/// `Ok`, rolled back otherwise.
fn transaction<T, F, Fut>(session: &Session, op: &'static str, body: F) -> Result<T, ReserveError>
where
    F: FnOnce(Arc<tokio_postgres::Client>) -> Fut,
    Fut: std::future::Future<Output = Result<T, TxError>>,
{
    let c = Arc::clone(&session.client);
    let result = session.rt.block_on(async move {
        c.batch_execute("BEGIN").await?;
        match body(Arc::clone(&c)).await {
            Ok(v) => {
                c.batch_execute("COMMIT").await?;
                Ok(v)
            }
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK").await;
                Err(e)
            }
        }
    });
    result.map_err(|e| e.into_reserve(session, op))
}

/// A row of `baton_reservations` as a record (the columns override what
/// the record says of ticket, token and granted).
fn decode(row: &tokio_postgres::Row) -> Result<ReservationRecord, TxError> {
    let ticket: i64 = row.get(0);
    let token: Option<i64> = row.get(1);
    let granted: bool = row.get(2);
    let value: serde_json::Value = row.get(3);
    let mut record: ReservationRecord = serde_json::from_value(value)
        .map_err(|e| TxError::Data(format!("a reservation row is damaged: {e}")))?;
    record.ticket = u64::try_from(ticket).unwrap_or(0);
    record.token = token.and_then(|t| u64::try_from(t).ok());
    record.granted = granted;
    Ok(record)
}

fn encode(record: &ReservationRecord) -> Result<serde_json::Value, TxError> {
    serde_json::to_value(record).map_err(|e| TxError::Data(e.to_string()))
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The live rows of `space` in ticket order (read once, no lock).
const LIVE_ROWS: &str = "SELECT ticket, token, granted, record FROM baton_reservations \
     WHERE space = $1 AND baton_reservation_live(session_pid, $2 + ticket) ORDER BY ticket";

/// What one look at the table decided.
enum Step {
    Granted(Box<(ReservationRecord, Option<ReservationRecord>)>),
    Busy(Vec<Conflict>),
    /// Queued (or still queued) as `ticket`; wait on the row `on`.
    Wait {
        ticket: u64,
        on: u64,
    },
}

/// One look at `space`'s rows for `req`, in one transaction: prune the
/// dead, find what stands in the way (`rules::blockers`), then grant,
/// report busy (`expired`), or queue.
fn step(
    session: &Session,
    key: &str,
    req: &ReserveRequest,
    mode: Mode,
    ticket: Option<u64>,
    expired: bool,
) -> Result<Step, ReserveError> {
    transaction(session, "reserve the paths", |c| async move {
        let space = c
            .query_one(
                "INSERT INTO baton_reservation_spaces (space) VALUES ($1) \
                 ON CONFLICT (space) DO UPDATE SET space = EXCLUDED.space RETURNING token, died",
                &[&key],
            )
            .await?;
        let mut token: i64 = space.get(0);
        let died: serde_json::Value = space.get(1);
        let mut died: Vec<ReservationRecord> = serde_json::from_value(died).unwrap_or_default();
        let found = c
            .query(
                "SELECT ticket, token, granted, record, \
                 baton_reservation_live(session_pid, $2 + ticket) \
                 FROM baton_reservations WHERE space = $1 ORDER BY ticket",
                &[&key, &RESERVATION_KEY],
            )
            .await?;
        let mut rows = Vec::with_capacity(found.len());
        let mut dead: Vec<i64> = Vec::new();
        for r in &found {
            let record = decode(r)?;
            if r.get::<_, bool>(4) {
                rows.push(record);
            } else {
                dead.push(int(record.ticket));
                if record.granted {
                    died.push(record);
                }
            }
        }
        let mut died_changed = !dead.is_empty();
        if !dead.is_empty() {
            c.execute(
                "DELETE FROM baton_reservations WHERE ticket = ANY($1)",
                &[&dead],
            )
            .await?;
        }
        let mut ticket = ticket;
        if let Some(mine) = ticket {
            if !rows.iter().any(|r| r.ticket == mine) {
                // Our row is gone (deleted by hand): queue again.
                ticket = None;
            }
        }
        let blocking = rules::blockers(
            &rows,
            &rules::Asking {
                patterns: &req.patterns,
                mode,
                session: &req.holder.session,
                ticket,
            },
        );
        let outcome = if blocking.is_empty() || !expired {
            let mine = match ticket {
                Some(t) => t,
                None => {
                    let row = c
                        .query_one(
                            "SELECT t, pg_try_advisory_lock($1 + t) \
                             FROM nextval('baton_reservation_tickets') t",
                            &[&RESERVATION_KEY],
                        )
                        .await?;
                    let t: i64 = row.get(0);
                    if !row.get::<_, bool>(1) {
                        return Err(TxError::Data(format!(
                            "the liveness lock of ticket {t} is held by another session"
                        )));
                    }
                    let t = u64::try_from(t).unwrap_or(0);
                    let record = waiting(req, mode, t);
                    c.execute(
                        "INSERT INTO baton_reservations \
                         (ticket, space, granted, session_pid, record) \
                         VALUES ($1, $2, false, pg_backend_pid(), $3)",
                        &[&int(t), &key, &encode(&record)?],
                    )
                    .await?;
                    t
                }
            };
            if blocking.is_empty() {
                token += 1;
                let (previous, kept) = rules::take_died(std::mem::take(&mut died), &req.patterns);
                died_changed |= previous.is_some();
                died = kept;
                let mut record = waiting(req, mode, mine);
                record.granted = true;
                record.token = u64::try_from(token).ok();
                c.execute(
                    "UPDATE baton_reservations SET granted = true, token = $2, record = $3 \
                     WHERE ticket = $1",
                    &[&int(mine), &token, &encode(&record)?],
                )
                .await?;
                c.execute(
                    "UPDATE baton_reservation_spaces SET token = $2 WHERE space = $1",
                    &[&key, &token],
                )
                .await?;
                Step::Granted(Box::new((record, previous)))
            } else {
                Step::Wait {
                    ticket: mine,
                    on: blocking[0].0,
                }
            }
        } else {
            Step::Busy(blocking.into_iter().map(|(_, c)| c).collect())
        };
        if died_changed {
            if died.len() > MAX_DIED {
                let extra = died.len() - MAX_DIED;
                died.drain(..extra);
            }
            let value = serde_json::to_value(&died).map_err(|e| TxError::Data(e.to_string()))?;
            c.execute(
                "UPDATE baton_reservation_spaces SET died = $2 WHERE space = $1",
                &[&key, &value],
            )
            .await?;
        }
        Ok(outcome)
    })
}

/// The row of a request, waiting, with `since` now.
fn waiting(req: &ReserveRequest, mode: Mode, ticket: u64) -> ReservationRecord {
    let mut holder = req.holder.clone();
    holder.since = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    ReservationRecord {
        ticket,
        token: None,
        patterns: req.patterns.clone(),
        mode,
        granted: false,
        holder,
    }
}

/// Waits, in the server's lock queue, until row `on`'s session lets go of
/// its liveness lock, or `until`; false when `until` came first.
fn wait_for(
    session: &Session,
    on: u64,
    until: Instant,
    cancel: Option<&CancelToken>,
) -> Result<(), ReserveError> {
    let ms = until
        .saturating_duration_since(Instant::now())
        .as_millis()
        .max(1);
    let set = format!("SET lock_timeout = {ms}");
    let c = Arc::clone(&session.client);
    session
        .rt
        .block_on(async move { c.batch_execute(&set).await })
        .map_err(|e| store(session.error("wait for a reservation", &e)))?;
    let key = RESERVATION_KEY + int(on);
    let waited = crate::acquire::blocking(
        session,
        cancel,
        "SELECT pg_advisory_lock_shared($1::int8)",
        &[(&key, Type::INT8)],
    );
    let after = match &waited {
        Ok(()) => format!("SELECT pg_advisory_unlock_shared({key}); SET lock_timeout = 0"),
        Err(_) => "SET lock_timeout = 0".to_string(),
    };
    let c = Arc::clone(&session.client);
    let reset = session
        .rt
        .block_on(async move { c.batch_execute(&after).await });
    match waited {
        Ok(()) => {}
        // The wait elapsed, or a deadlock the server broke: look again.
        Err(e) if matches!(sqlstate(&e), Some("55P03" | "40P01")) => {}
        Err(_) if cancel.is_some_and(CancelToken::is_cancelled) => {
            return Err(ReserveError::Cancelled)
        }
        Err(e) => return Err(store(session.error("wait for a reservation", &e))),
    }
    reset.map_err(|e| store(session.error("wait for a reservation", &e)))
}

/// Removes row `ticket` (best effort: a row left behind is found dead).
fn remove_row(session: &Session, ticket: u64) -> Result<(), PgError> {
    let c = Arc::clone(&session.client);
    let t = int(ticket);
    session.run_within("remove the reservation", RELEASE_LIMIT, |_| async move {
        c.execute("DELETE FROM baton_reservations WHERE ticket = $1", &[&t])
            .await?;
        c.execute(
            "SELECT pg_advisory_unlock($1 + $2::int8)",
            &[&RESERVATION_KEY, &t],
        )
        .await
        .map(|_| ())
    })
}

impl ReservationStore for PgReservations {
    fn reserve(
        &self,
        space: &Space,
        req: &ReserveRequest,
    ) -> Result<Box<dyn HeldReservation>, ReserveError> {
        off_runtime(|| self.reserve_here(space, req))
    }

    fn reservations(
        &self,
        space: &Space,
        filter: Option<&Pattern>,
    ) -> Result<Vec<ReservationRecord>, ReserveError> {
        let mut rows = off_runtime(|| self.live_rows(space))?;
        if let Some(f) = filter {
            rows.retain(|r| r.patterns.iter().any(|p| p.overlaps(f)));
        }
        Ok(rows)
    }

    fn check(
        &self,
        space: &Space,
        patterns: &[Pattern],
        mode: Mode,
        session: Option<&str>,
    ) -> Result<Vec<Conflict>, ReserveError> {
        let rows = off_runtime(|| self.live_rows(space))?;
        Ok(rules::conflicts(
            &rows,
            patterns,
            mode,
            rules::own_rows(session),
        ))
    }

    fn check_files(
        &self,
        space: &Space,
        files: &[String],
        session: Option<&str>,
    ) -> Result<Vec<(String, Conflict)>, ReserveError> {
        let rows = off_runtime(|| self.live_rows(space))?;
        Ok(rules::covered_files(&rows, files, rules::own_rows(session)))
    }

    fn break_reservation(
        &self,
        space: &Space,
        token: u64,
    ) -> Result<ReservationRecord, ReserveError> {
        off_runtime(|| self.break_here(space, token))
    }

    fn place(&self) -> String {
        self.db.url().to_string()
    }
}

impl PgReservations {
    fn reserve_here(
        &self,
        space: &Space,
        req: &ReserveRequest,
    ) -> Result<Box<dyn HeldReservation>, ReserveError> {
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
        let session = self.session()?;
        let mode = match req.mode {
            Mode::Shared => Mode::Shared,
            _ => Mode::Exclusive,
        };
        let deadline = req.wait.deadline_from(Instant::now());
        let mut ticket = None;
        let outcome = loop {
            if cancel.is_some_and(CancelToken::is_cancelled) {
                break Err(ReserveError::Cancelled);
            }
            let expired = deadline.is_some_and(|d| Instant::now() >= d);
            match step(&session, space.key(), req, mode, ticket, expired) {
                Ok(Step::Granted(granted)) => break Ok(*granted),
                Ok(Step::Busy(conflicts)) => break Err(ReserveError::Busy { conflicts }),
                Ok(Step::Wait { ticket: mine, on }) => {
                    ticket = Some(mine);
                    let until = Instant::now() + RECHECK;
                    let until = deadline.map_or(until, |d| d.min(until));
                    if let Err(e) = wait_for(&session, on, until, cancel) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        match outcome {
            Ok((record, previous)) => {
                session.start_heartbeat();
                Ok(Box::new(PgReservation {
                    session: Some(session),
                    db: self.db.clone(),
                    record,
                    previous,
                }))
            }
            Err(e) => {
                if let Some(mine) = ticket {
                    let _ = remove_row(&session, mine);
                }
                session.close();
                Err(e)
            }
        }
    }

    fn break_here(&self, space: &Space, token: u64) -> Result<ReservationRecord, ReserveError> {
        let session = self.session()?;
        let key = space.key().to_string();
        let t = int(token);
        let found = transaction(&session, "break the reservation", |c| async move {
            let row = c
                .query_opt(
                    "DELETE FROM baton_reservations WHERE space = $1 AND token = $2 \
                     AND baton_reservation_live(session_pid, $3 + ticket) \
                     RETURNING ticket, token, granted, record",
                    &[&key, &t, &RESERVATION_KEY],
                )
                .await?;
            row.as_ref().map(decode).transpose()
        });
        session.close();
        found?.ok_or(ReserveError::NotFound { token })
    }

    fn live_rows(&self, space: &Space) -> Result<Vec<ReservationRecord>, ReserveError> {
        let session = self.session()?;
        let key = space.key().to_string();
        let c = Arc::clone(&session.client);
        let found = session
            .rt
            .block_on(async move { c.query(LIVE_ROWS, &[&key, &RESERVATION_KEY]).await });
        let result = match found {
            Ok(rows) => rows
                .iter()
                .map(decode)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.into_reserve(&session, "list the reservations")),
            Err(e) => Err(store(session.error("list the reservations", &e))),
        };
        session.close();
        result
    }
}

/// A reservation granted on PostgreSQL: its session holds the row's
/// liveness lock.
struct PgReservation {
    session: Option<Session>,
    db: Database,
    record: ReservationRecord,
    previous: Option<ReservationRecord>,
}

impl std::fmt::Debug for PgReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgReservation")
            .field("record", &self.record)
            .finish()
    }
}

impl PgReservation {
    fn release_inner(&mut self) -> Result<(), ReserveError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let ticket = self.record.ticket;
        let db = &self.db;
        off_runtime(|| release(db, session, ticket))
    }
}

/// Removes row `ticket` on its own `session`, which is then closed (or,
/// when that fails, on a new one).
fn release(db: &Database, session: Session, ticket: u64) -> Result<(), ReserveError> {
    let done = if session.lost.is_lost() {
        Err(PgError::Database {
            op: "remove the reservation",
            message: "the session had ended".into(),
        })
    } else {
        remove_row(&session, ticket)
    };
    session.close();
    if done.is_ok() {
        return Ok(());
    }
    // The session ended (or failed): the lock is free; the row goes on a
    // new session, so the next holder is not told this one died.
    let fresh = db.connect().map_err(store)?;
    let result = remove_row(&fresh, ticket).map_err(store);
    fresh.close();
    result
}

impl HeldReservation for PgReservation {
    fn record(&self) -> &ReservationRecord {
        &self.record
    }

    fn previous_holder_died(&self) -> Option<&ReservationRecord> {
        self.previous.as_ref()
    }

    fn is_broken(&self) -> Result<bool, ReserveError> {
        let Some(session) = &self.session else {
            return Ok(false);
        };
        let c = Arc::clone(&session.client);
        let t = int(self.record.ticket);
        let gone = off_runtime(|| {
            session.rt.block_on(async move {
                c.query_one(
                    "SELECT NOT EXISTS (SELECT 1 FROM baton_reservations WHERE ticket = $1)",
                    &[&t],
                )
                .await
            })
        });
        gone.map(|r| r.get(0))
            .map_err(|e| store(session.error("look up the reservation", &e)))
    }

    fn is_lost(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.lost.is_lost())
    }

    fn on_lost(&self, f: Box<dyn Fn() + Send>) {
        if let Some(s) = &self.session {
            s.lost.on_lost(f);
        }
    }

    fn release(mut self: Box<Self>) -> Result<(), ReserveError> {
        self.release_inner()
    }

    fn abandon(mut self: Box<Self>) {
        // The row stays; closing the session frees its liveness lock, so the
        // next grant over its paths finds it dead.
        if let Some(session) = self.session.take() {
            off_runtime(|| session.close());
        }
    }
}

impl Drop for PgReservation {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            tracing::warn!(error = %e, "releasing a reservation on PostgreSQL");
        }
    }
}
