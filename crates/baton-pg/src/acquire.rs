//! Acquiring locks: the server's own lock queue does the waiting.
//!
//! Slot `s` of lock `id` is the session advisory lock `(SLOT_CLASS + s,
//! id)`: exclusive and shared locks use slot 0 in the matching advisory
//! mode, and the server queues waiters in order, so the line is FIFO and
//! nobody polls. A semaphore's waiters first line up on `(QUEUE_CLASS,
//! id)`; the head of that line takes the first free slot, woken by a
//! NOTIFY from each release (and, for a holder that died, by a slow poll).
//!
//! A grant is one statement: the lock's token counter is incremented and
//! the holder row inserted in the same transaction. Before it, rows left by
//! sessions that ended without releasing are settled: their command must
//! not run beside ours (see [`crate::settle`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_lock::{
    default_owner, new_run_id, CancelToken, HolderRecord, LockError, LockRequest, Mode,
    ProcessIdentity, WaitPolicy,
};
use tokio_postgres::types::Type;

use crate::error::{sqlstate, PgError};
use crate::holds::{Grant, Holds, FREE_CHANNEL};
use crate::schema;
use crate::session::{Database, Reconnect, Session};

/// First advisory key of slot `s`: `SLOT_CLASS + s` ("bt", then the slot).
pub(crate) const SLOT_CLASS: i32 = 0x6274_0000;
/// First advisory key of a semaphore's line ("bq").
pub(crate) const QUEUE_CLASS: i32 = 0x6271_0000;
/// The most slots a semaphore may have here.
pub const MAX_SLOTS: u32 = 0xffff;
/// How often the head of a semaphore's line looks for a slot freed by a
/// holder that died (a clean release wakes it at once).
const SLOT_POLL: Duration = Duration::from_millis(200);

impl Database {
    /// Creates or upgrades baton's tables; returns the schema version.
    ///
    /// # Errors
    ///
    /// [`PgError`]: no connection, no permission to create tables.
    pub fn migrate(&self) -> Result<i32, PgError> {
        let session = self.connect()?;
        let v = schema::migrate(&session);
        session.close();
        v
    }

    /// Acquires every lock in `reqs` on one new session, in name order
    /// (a name given twice is taken once), within one deadline: the
    /// earliest of the requests' wait policies. The locks are held until
    /// [`Holds::release`] or until the session ends.
    ///
    /// # Errors
    ///
    /// [`PgError::Lock`] with [`LockError::Busy`] when the wait ends,
    /// [`LockError::Cancelled`] when a request's cancel token fires,
    /// [`LockError::ModeMismatch`] when holders disagree on the mode;
    /// other variants when the database cannot be used. Nothing stays held.
    ///
    /// A wait (any policy but `Immediately`) whose session is lost after it
    /// connected (a server restart, a broken connection) goes on, on a new
    /// session, with backoff (0.1 s doubling to 2 s), within the same
    /// deadline; [`Database::on_notice`] is told once.
    pub fn acquire_all(&self, reqs: &[LockRequest]) -> Result<Holds, PgError> {
        let start = Instant::now();
        let (sorted, policy) = baton_lock::plan_all(reqs, start);
        let wait = match policy {
            WaitPolicy::Immediately => None,
            WaitPolicy::Until(d) => Some(Some(d)),
            _ => Some(None),
        };
        for r in &sorted {
            if let Mode::Semaphore(n) = r.mode {
                if n > MAX_SLOTS {
                    return Err(LockError::Refused {
                        name: r.name.to_string(),
                        reason: format!("at most {MAX_SLOTS} slots on PostgreSQL"),
                    }
                    .into());
                }
            }
        }
        let mut connected = false;
        let mut reconnect = Reconnect::default();
        loop {
            let cancelled = sorted
                .iter()
                .any(|r| r.cancel.as_ref().is_some_and(CancelToken::is_cancelled));
            match self.acquire_sorted(&sorted, start, wait, &mut connected) {
                Err(e) if e.is_transient() && connected && wait.is_some() && !cancelled => {
                    if !self.pause_to_reconnect(
                        &mut reconnect,
                        &e,
                        wait.flatten(),
                        "",
                        "lost the database session while waiting; reconnecting",
                    ) {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// One try of [`Database::acquire_all`] on a new session; `connected`
    /// becomes true once a session was made.
    fn acquire_sorted(
        &self,
        sorted: &[&LockRequest],
        start: Instant,
        wait: Option<Option<Instant>>,
        connected: &mut bool,
    ) -> Result<Holds, PgError> {
        let mut session = self.connect()?;
        *connected = true;
        let mut ctx = Waiting {
            timeout_ms: 0,
            start,
        };
        let mut grants = Vec::with_capacity(sorted.len());
        for req in sorted {
            let mut req = (*req).clone();
            req.mode = req.mode.normalized();
            let ours = || req.cancel.as_ref().is_some_and(CancelToken::is_cancelled);
            let got = loop {
                match acquire_one(&mut session, &mut ctx, LOCK_KIND, &req, wait) {
                    // A wait cancelled from outside (`pg_cancel_backend`), not
                    // by our token: wait on.
                    Err(PgError::Lock(LockError::Cancelled { .. })) if !ours() => continue,
                    other => break other,
                }
            };
            match got {
                Ok(g) => grants.push(g),
                Err(e) => {
                    // The rows of the locks taken so far go too: left behind,
                    // they would read as a holder that died without
                    // releasing, and a waiter here would wait for this
                    // process to end before taking them.
                    let (ids, tokens) = grants
                        .iter()
                        .map(|g: &Grant| (g.lock_id, i64::try_from(g.token).unwrap_or(i64::MAX)))
                        .unzip();
                    // They did no work: each slot keeps telling what its
                    // holder before them left.
                    let kept = crate::holds::outcome_sql(
                        grants
                            .iter()
                            .filter_map(|g| g.previous_outcome.as_ref().map(|o| (g, o))),
                    );
                    if let Err(e) = crate::holds::remove_rows(&session, kept, ids, tokens, None) {
                        tracing::debug!(error = %e, "removing the rows of a failed acquisition");
                    }
                    session.close(); // the server lets go of what we took
                    return Err(e);
                }
            }
        }
        session.start_heartbeat();
        Ok(Holds::new(session, grants))
    }
}

/// The `kind` of the locks of `lock` and `run --lock` (group slots are `group`).
pub(crate) const LOCK_KIND: &str = "lock";

/// State of one acquisition across its locks.
pub(crate) struct Waiting {
    /// The `lock_timeout` now set on the session (0: none).
    pub(crate) timeout_ms: u64,
    pub(crate) start: Instant,
}

/// Takes one lock of `kind` (`lock`, or `group` for a group's slot).
/// `wait`: `None` = do not wait; `Some(None)` = forever; `Some(Some(t))` = until t.
pub(crate) fn acquire_one(
    session: &mut Session,
    ctx: &mut Waiting,
    kind: &str,
    req: &LockRequest,
    wait: Option<Option<Instant>>,
) -> Result<Grant, PgError> {
    let name = req.name.to_string();
    let slots = req.mode.slots();
    let id = lock_id(session, kind, &name, slots)?;
    let slot = match req.mode {
        Mode::Semaphore(n) if n > 1 => take_any_slot(session, ctx, req, id, n, wait)?,
        _ => {
            let fun = if req.mode == Mode::Shared {
                SHARED
            } else {
                EXCLUSIVE
            };
            if !take(session, ctx, req, fun, SLOT_CLASS, id, wait)? {
                return Err(busy(session, req, ctx, id));
            }
            0
        }
    };
    // The grant is refused while a conflicting row of an ended session
    // remains (one round trip in the usual case, where none does). The
    // latest such holder is the one this grant follows: it is told.
    let mut previous: Option<HolderRecord> = None;
    loop {
        match grant(session, req, id, slot, previous.as_ref())? {
            Granted::Yes(mut g) => {
                g.previous = previous.map(Box::new);
                return Ok(g);
            }
            Granted::Dead => {
                let settled = crate::settle::dead_holders(
                    session,
                    req,
                    id,
                    slot,
                    wait.flatten(),
                    kind == "group",
                )?;
                if settled.as_ref().map(|r| r.token) > previous.as_ref().map(|r| r.token) {
                    previous = settled;
                }
            }
            Granted::OtherSlots(existing) => {
                let describe = |n: i64| {
                    if n <= 1 {
                        "an exclusive/shared lock (--max 1)".to_string()
                    } else {
                        format!("a semaphore with --max {n}")
                    }
                };
                return Err(LockError::ModeMismatch {
                    name: req.name.to_string(),
                    existing: describe(i64::from(existing)),
                    requested: describe(i64::from(req.mode.slots())),
                }
                .into());
            }
        }
    }
}

/// The lock's row id, created on first use (with the tables, on first use
/// of the database).
fn lock_id(session: &Session, kind: &str, name: &str, slots: u32) -> Result<i32, PgError> {
    const SQL: &str = "WITH s AS (SELECT id FROM baton_locks WHERE kind = $3 AND name = $1), \
         i AS (INSERT INTO baton_locks (kind, name, slots) SELECT $3, $1, $2 \
               WHERE NOT EXISTS (SELECT 1 FROM s) ON CONFLICT (kind, name) DO NOTHING RETURNING id) \
         SELECT id, (SELECT version FROM baton_lock_schema) FROM s \
         UNION ALL SELECT id, (SELECT version FROM baton_lock_schema) FROM i";
    let slots = i32::try_from(slots).unwrap_or(i32::MAX);
    for attempt in 0..3 {
        let (n, k) = (name.to_string(), kind.to_string());
        let c = Arc::clone(&session.client);
        let row = session.rt.block_on(async move {
            c.query_typed_opt(
                SQL,
                &[(&n, Type::TEXT), (&slots, Type::INT4), (&k, Type::TEXT)],
            )
            .await
        });
        match row {
            Ok(Some(r)) => {
                // Tables of an older version (a database an older baton
                // made): upgrade them first, in the same round trip's
                // answer as the lock's id.
                let version = r.get::<_, Option<i32>>(1).unwrap_or(0);
                if version < schema::SCHEMA_VERSION {
                    schema::migrate(session)?;
                }
                // Tables a newer baton made: what a row means may have
                // changed, so taking locks on them could admit two holders
                // in a mixed-version fleet. Refused, as `db migrate` does.
                if version > schema::SCHEMA_VERSION {
                    return Err(PgError::SchemaTooNew {
                        found: version,
                        known: schema::SCHEMA_VERSION,
                    });
                }
                return Ok(r.get(0));
            }
            // Inserted by another session after our snapshot: look again.
            Ok(None) => continue,
            Err(e) if sqlstate(&e) == Some("42P01") && attempt == 0 => {
                schema::migrate(session)?;
            }
            Err(e) => return Err(session.error("register the lock", &e)),
        }
    }
    Err(PgError::Database {
        op: "register the lock",
        message: format!("lock '{name}' could not be registered (retried 3 times)"),
    })
}

/// The server functions that take an advisory lock: (waiting, trying).
type LockFns = (&'static str, &'static str);
const EXCLUSIVE: LockFns = ("pg_advisory_lock", "pg_try_advisory_lock");
const SHARED: LockFns = ("pg_advisory_lock_shared", "pg_try_advisory_lock_shared");

/// Takes one advisory lock, waiting per `wait`; false when busy.
fn take(
    session: &Session,
    ctx: &mut Waiting,
    req: &LockRequest,
    (fun, try_fun): LockFns,
    key: i32,
    id: i32,
    wait: Option<Option<Instant>>,
) -> Result<bool, PgError> {
    let Some(deadline) = wait else {
        let sql = format!("SELECT {try_fun}($1::int4, $2::int4)");
        let c = Arc::clone(&session.client);
        return session.run("try the lock", |_| async move {
            Ok(
                c.query_typed_one(&sql, &[(&key, Type::INT4), (&id, Type::INT4)])
                    .await?
                    .get::<_, bool>(0),
            )
        });
    };
    let ms = match deadline {
        None => 0,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1)
        }
    };
    if ms != ctx.timeout_ms {
        let set = format!("SET lock_timeout = {ms}");
        session.run(
            "set the wait",
            |c| async move { c.batch_execute(&set).await },
        )?;
        ctx.timeout_ms = ms;
    }
    let sql = format!("SELECT {fun}($1::int4, $2::int4)");
    match blocking(
        session,
        req.cancel.as_ref(),
        &sql,
        &[(&key, Type::INT4), (&id, Type::INT4)],
    ) {
        Ok(()) => Ok(true),
        Err(e) if sqlstate(&e) == Some("55P03") => Ok(false),
        // Cancelled by our token, or from outside (`pg_cancel_backend` by a
        // run that superseded ours): the caller tells which.
        Err(e) if sqlstate(&e) == Some("57014") => Err(LockError::Cancelled {
            name: req.name.to_string(),
        }
        .into()),
        Err(e) => Err(session.error("wait for the lock", &e)),
    }
}

/// Runs a statement that may wait in the server, cancelling it on the
/// server when `cancel` fires. The cancel request is repeated until the
/// statement ends, so one that reaches the server before the statement
/// does is not lost.
pub(crate) fn blocking(
    session: &Session,
    cancel: Option<&CancelToken>,
    sql: &str,
    params: &[(&(dyn tokio_postgres::types::ToSql + Sync), Type)],
) -> Result<(), tokio_postgres::Error> {
    let notify = Arc::new(tokio::sync::Notify::new());
    if let Some(token) = cancel {
        let n = Arc::clone(&notify);
        if token.on_cancel(Box::new(move || n.notify_one())) {
            notify.notify_one();
        }
    }
    let c = Arc::clone(&session.client);
    let canceller = session.client.cancel_token();
    let tls = session.db.tls.clone();
    let result = session.rt.block_on(async move {
        let query = c.query_typed_one(sql, params);
        tokio::pin!(query);
        let cancelling = async {
            notify.notified().await;
            loop {
                let _ = canceller.cancel_query(tls.clone()).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::select! {
            r = &mut query => r.map(|_| ()),
            () = cancelling => Ok(()),
        }
    });
    if let Some(token) = cancel {
        token.forget();
    }
    result
}

/// The head of a semaphore's line takes the first free slot.
fn take_any_slot(
    session: &mut Session,
    ctx: &mut Waiting,
    req: &LockRequest,
    id: i32,
    n: u32,
    wait: Option<Option<Instant>>,
) -> Result<u32, PgError> {
    if !take(session, ctx, req, EXCLUSIVE, QUEUE_CLASS, id, wait)? {
        return Err(busy(session, req, ctx, id));
    }
    let listen = format!("LISTEN {FREE_CHANNEL}");
    session.run("listen for released slots", |c| async move {
        c.batch_execute(&listen).await
    })?;
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let found = loop {
        let c = Arc::clone(&session.client);
        let free: Option<i32> = session.run("look for a free slot", |_| async move {
            let row = c
                .query_opt(
                    "SELECT s FROM generate_series(0, $2::int4 - 1) s \
                     WHERE pg_try_advisory_lock($3::int4 + s, $1::int4) LIMIT 1",
                    &[&id, &n, &SLOT_CLASS],
                )
                .await?;
            Ok(row.map(|r| r.get(0)))
        })?;
        if let Some(s) = free {
            break Ok(u32::try_from(s).unwrap_or(0));
        }
        if req.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            break Err(LockError::Cancelled {
                name: req.name.to_string(),
            }
            .into());
        }
        let limit = match wait {
            None => break Err(busy(session, req, ctx, id)),
            Some(None) => SLOT_POLL,
            Some(Some(d)) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(busy(session, req, ctx, id));
                }
                left.min(SLOT_POLL)
            }
        };
        let notes = &mut session.notes;
        let _ = session
            .rt
            .block_on(async { tokio::time::timeout(limit, notes.recv()).await });
    };
    let unlisten =
        format!("UNLISTEN {FREE_CHANNEL}; SELECT pg_advisory_unlock({QUEUE_CLASS}, {id})");
    session.run("leave the line", |c| async move {
        c.batch_execute(&unlisten).await
    })?;
    found
}

/// What [`grant`] found.
enum Granted {
    Yes(Grant),
    /// A conflicting row of a session that has ended remains: settle it.
    Dead,
    /// A live holder uses this slot count (holders must agree).
    OtherSlots(i32),
}

/// Records the grant (`baton_grant`, one call): the next token and the
/// holder row, unless a conflicting row of an ended session remains or a
/// live holder uses another slot count. An exclusive or shared holder
/// keeps only slot 0, so a `--max 2` runner's slot 1 would not wait for
/// it: disagreeing holders must never be granted side by side.
fn grant(
    session: &Session,
    req: &LockRequest,
    id: i32,
    slot: u32,
    previous: Option<&HolderRecord>,
) -> Result<Granted, PgError> {
    const SQL: &str =
        "SELECT token, dead, other_slots, previous_outcome FROM baton_grant($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";
    let run_id = req.run_id.clone().unwrap_or_else(new_run_id);
    let owner = req
        .owner
        .clone()
        .unwrap_or_else(|| default_owner().to_string());
    let me = ProcessIdentity::current();
    let record = HolderRecord {
        process: me.clone(),
        owner: owner.clone(),
        operation: req.operation.clone(),
        run_id: run_id.clone(),
        acquired_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        token: 0,
        mode: req.mode.as_str().into(),
        slot,
        kind: req.kind,
        command_group: None,
        acquired_for: req.acquired_for.clone(),
        abandoned: false,
        previous: previous.cloned().map(Box::new),
        caller_thread: req
            .acquired_for
            .as_ref()
            .and_then(|f| baton_lock::thread_of_ancestor(f.pid)),
        previous_outcome: None,
    };
    let record = serde_json::to_value(&record).map_err(|e| PgError::Database {
        op: "record the holder",
        message: e.to_string(),
    })?;
    let slots = i32::try_from(req.mode.slots()).unwrap_or(i32::MAX);
    let slot_i = i32::try_from(slot).unwrap_or(0);
    let mode = req.mode.as_str().to_string();
    let (host, pid, operation, run) = (me.host, me.pid, req.operation.clone(), run_id.clone());
    let shared = req.mode == Mode::Shared;
    let (token, dead, other, outcome): (Option<i64>, i64, Option<i32>, Option<String>) = session
        .run("record the grant", |c| async move {
            let row = c
                .query_typed_one(
                    SQL,
                    &[
                        (&id, Type::INT4),
                        (&slots, Type::INT4),
                        (&slot_i, Type::INT4),
                        (&mode, Type::TEXT),
                        (&host, Type::TEXT),
                        (&pid, Type::INT4),
                        (&owner, Type::TEXT),
                        (&operation, Type::TEXT),
                        (&run, Type::TEXT),
                        (&record, Type::JSONB),
                        (&shared, Type::BOOL),
                    ],
                )
                .await?;
            Ok((row.get(0), row.get(1), row.get(2), row.get(3)))
        })?;
    // Written by this schema's own grant: a value it cannot have written
    // reads as none.
    let previous_outcome = outcome.and_then(|o| o.parse().ok());
    Ok(match (token, dead, other) {
        (Some(token), _, _) => Granted::Yes(Grant {
            name: req.name.clone(),
            token: u64::try_from(token).unwrap_or(0),
            run_id,
            slot,
            mode: req.mode,
            lock_id: id,
            previous: None,
            previous_outcome,
        }),
        (None, _, Some(o)) => Granted::OtherSlots(o),
        (None, _, None) => Granted::Dead,
    })
}

/// The error for a wait that ended without the lock, naming a live holder.
fn busy(session: &Session, req: &LockRequest, ctx: &Waiting, id: i32) -> PgError {
    let c = Arc::clone(&session.client);
    let holder = session
        .rt
        .block_on(async move {
            c.query_opt(
                "SELECT pid, host, owner, operation FROM baton_lock_holders h WHERE lock_id = $1 \
                 AND baton_holder_live(h.session_pid, h.session_start) ORDER BY token DESC LIMIT 1",
                &[&id],
            )
            .await
        })
        .ok()
        .flatten()
        .map(|r| {
            let (pid, host, owner, op): (i32, String, String, Option<String>) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            match op {
                Some(op) => format!("pid {pid} on {host}, {owner}: {op}"),
                None => format!("pid {pid} on {host}, {owner}"),
            }
        });
    LockError::Busy {
        name: req.name.to_string(),
        path: std::path::PathBuf::from(session.db.url()),
        holder,
        waited: ctx.start.elapsed(),
        policy: req.wait,
    }
    .into()
}
