//! Concurrency groups on PostgreSQL: the same modes as in a baton dir
//! (queue, supersede, coalesce, skip), for runs on every machine.
//!
//! A group's live runs are rows of `baton_group_runs`; its slot is a lock
//! of kind `group` (a semaphore of `max` slots), taken on the run's own
//! session like any lock, so a run whose machine dies leaves the group when
//! its session ends. Arrival is one transaction under the key's
//! transaction-level advisory lock: ended runs are removed, the mode is
//! checked, skip and `--max-pending` applied, and the runs this one
//! supersedes are marked. Then each marked run is told: a waiting one by
//! `pg_cancel_backend` (its wait in the server ends; it reads its mark and
//! leaves), a running one by `NOTIFY baton_group` (its session is idle, so
//! the notification arrives at once; it reads its mark and stops its
//! command). A run that obtains the slot starts only if unmarked, in the
//! same statement that records it running.
//!
//! Ordering keys (`--order`): the newest key of each group is a row of
//! `baton_group_order`, read and moved in the arrival transaction, and
//! kept after the group's runs end; a run whose key is older never joins
//! ([`Joined::Outdated`]). The rules are the baton dir's (see
//! `baton-run`'s `group` module).

use std::sync::Arc;
use std::time::Instant;

use baton_lock::{CancelToken, CommandGroup, LockError, LockName, LockRequest, Mode, WaitPolicy};

use crate::acquire::{acquire_one, Waiting};
use crate::error::PgError;
use crate::holds::{Grant, Holds};
use crate::session::{Database, Reconnect, Session};

/// The channel superseding runs announce themselves on (payload: the key).
const GROUP_CHANNEL: &str = "baton_group";
/// First key of a group's arrival lock ("bg"); the second is the key's hash.
const ARRIVAL_CLASS: i32 = 0x6267_0000;

/// What a run asks of its group.
#[derive(Clone, Debug)]
pub struct GroupJoin {
    /// The group key.
    pub key: LockName,
    /// `queue`, `supersede`, `coalesce` or `skip`.
    pub mode: &'static str,
    /// Runs executing at once (queue mode); 1 otherwise.
    pub max: u32,
    /// Queue mode: refuse an arrival beyond this many waiting runs.
    pub max_pending: Option<u32>,
    /// How long to wait for the slot.
    pub wait: WaitPolicy,
    /// The run id.
    pub run_id: String,
    /// The command line, for status.
    pub command: String,
    /// The run's ordering key (modes supersede and coalesce).
    pub order: Option<GroupOrder>,
}

/// An ordering key as the database keeps it (`baton_group_order`): the
/// group's newest is compared with a new run's on arrival.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupOrder {
    /// `integer` or `time`; keys of another kind than the group's newest
    /// are refused ([`Joined::OrderMismatch`]).
    pub kind: String,
    /// The integer, or the time in microseconds since the Unix epoch.
    pub value: i64,
    /// The key as given, for messages.
    pub label: String,
}

/// How joining a group ended.
#[derive(Debug)]
pub enum Joined {
    /// Holding the group's slot, recorded as running.
    Running(GroupSlot),
    /// Marked superseded (by this run id) before it could start.
    Superseded(String),
    /// Not admitted (skip while busy, `--max-pending`): the reason.
    Refused(String),
    /// Runs of the key use another mode or slot count.
    ModeMismatch {
        /// What the live runs use.
        existing: String,
    },
    /// `cancel` fired before the run started.
    Cancelled,
    /// Its ordering key is older than the group's newest: it never joined.
    Outdated {
        /// The run that brought the newest key.
        by: String,
        /// That key, as given.
        newest: String,
    },
    /// Its ordering key is of another kind than the group's newest.
    OrderMismatch {
        /// The newest key's kind and label.
        newest: GroupOrder,
    },
}

/// A run holding its group's slot.
#[derive(Debug)]
pub struct GroupSlot {
    holds: Box<Holds>,
}

impl GroupSlot {
    /// The slot's fencing token.
    pub fn token(&self) -> u64 {
        self.holds.grants().first().map_or(0, |g| g.token)
    }

    /// The holder of the slot before this run, when its session ended
    /// without releasing (its `baton run` died).
    pub fn previous_holder_died(&self) -> Option<&baton_lock::HolderRecord> {
        self.holds
            .grants()
            .first()
            .and_then(|g| g.previous.as_deref())
    }

    /// See [`Holds::on_lost`].
    pub fn on_lost(&self, f: impl Fn() + Send + 'static) {
        self.holds.on_lost(f);
    }

    /// Whether the session ended.
    pub fn is_lost(&self) -> bool {
        self.holds.is_lost()
    }

    /// See [`Holds::on_alive`].
    pub fn on_alive(&self, f: impl Fn(std::time::Instant) + Send + 'static) {
        self.holds.on_alive(f);
    }

    /// See [`Holds::set_command_group`].
    ///
    /// # Errors
    ///
    /// As [`Holds::set_command_group`].
    pub fn set_command_group(&self, group: CommandGroup) -> Result<(), PgError> {
        self.holds.set_command_group(group)
    }

    /// Leaves the group (its row is removed) and releases the slot.
    ///
    /// # Errors
    ///
    /// As [`Holds::release`].
    pub fn leave(self) -> Result<(), PgError> {
        self.holds.release()
    }

    /// How the holder of the slot before this run ended (see
    /// [`Grant::previous_outcome`]).
    pub fn previous_outcome(&self) -> Option<&baton_lock::HolderOutcome> {
        self.holds
            .grants()
            .first()
            .and_then(|g| g.previous_outcome.as_ref())
    }

    /// [`GroupSlot::leave`], leaving `outcome` for the next run
    /// ([`Holds::release_with`]; a group's slot is released even for
    /// `died`); `None`: the run did nothing, the next learns what it learned.
    ///
    /// # Errors
    ///
    /// As [`Holds::release`].
    pub fn leave_with(self, outcome: Option<baton_lock::HolderOutcome>) -> Result<(), PgError> {
        match outcome {
            Some(o) => self.holds.release_with(o),
            None => self.holds.release_unused(),
        }
    }
}

impl Database {
    /// Joins a group: arrives, marks the runs it supersedes and tells them,
    /// waits for the slot, and starts unless marked meanwhile. While
    /// running, `on_superseded(by)` runs once if a newer run supersedes it.
    ///
    /// # Errors
    ///
    /// [`PgError`] when the database cannot be used; a wait that ends is
    /// [`LockError::Busy`] inside [`PgError::Lock`].
    ///
    /// A run waiting for the slot whose session is lost after it connected
    /// (a server restart, a broken connection) joins again on a new session,
    /// with backoff, within the same deadline; [`Database::on_notice`] is
    /// told once.
    pub fn join_group(
        &self,
        req: &GroupJoin,
        cancel: &CancelToken,
        on_superseded: impl Fn(String) + Send + Sync + 'static,
    ) -> Result<Joined, PgError> {
        let on_superseded = Arc::new(on_superseded);
        let deadline = req.wait.deadline_from(Instant::now());
        let mut req = req.clone();
        if let Some(d) = deadline {
            req.wait = WaitPolicy::Until(d);
        }
        let waits = req.mode != "skip" && !matches!(req.wait, WaitPolicy::Immediately);
        let mut reconnect = Reconnect::default();
        loop {
            let mut connected = false;
            let f = Arc::clone(&on_superseded);
            match self.join_group_once(&req, cancel, move |by| f(by), &mut connected) {
                Err(e) if e.is_transient() && connected && waits && !cancel.is_cancelled() => {
                    if !self.pause_to_reconnect(
                        &mut reconnect,
                        &e,
                        deadline,
                        &format!(" for group '{}'", req.key),
                        "lost the database session while waiting for the group; reconnecting",
                    ) {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// One try of [`Database::join_group`]; `connected` becomes true once a
    /// session was made.
    fn join_group_once(
        &self,
        req: &GroupJoin,
        cancel: &CancelToken,
        on_superseded: impl Fn(String) + Send + Sync + 'static,
        connected: &mut bool,
    ) -> Result<Joined, PgError> {
        let mut session = self.connect()?;
        *connected = true;
        crate::schema::migrate(&session)?;
        match join_in(&mut session, req, cancel) {
            Ok(grant) => {
                // Like any holder: a session whose server stops answering
                // counts as lost, and the run stops its command in time.
                session.start_heartbeat();
                let session = watch_for_newer(session, req, on_superseded)?;
                let holds = Holds::new(session, vec![grant])
                    .in_group(req.key.to_string(), req.run_id.clone());
                Ok(Joined::Running(GroupSlot {
                    holds: Box::new(holds),
                }))
            }
            Err(outcome) => {
                // Leave no row behind (an ended session's row would be
                // pruned by the next arrival anyway).
                let c = Arc::clone(&session.client);
                let (key, run) = (req.key.to_string(), req.run_id.clone());
                let _ = session.run("leave the group", |_| async move {
                    c.execute(
                        "DELETE FROM baton_group_runs WHERE key = $1 AND run_id = $2",
                        &[&key, &run],
                    )
                    .await
                });
                session.close();
                match outcome {
                    Outcome::Joined(j) => Ok(j),
                    Outcome::Failed(e) => Err(e),
                }
            }
        }
    }
}

/// `join_in` ended without a slot: how.
enum Outcome {
    Joined(Joined),
    Failed(PgError),
}

impl From<PgError> for Outcome {
    fn from(e: PgError) -> Outcome {
        Outcome::Failed(e)
    }
}

fn join_in(session: &mut Session, req: &GroupJoin, cancel: &CancelToken) -> Result<Grant, Outcome> {
    let marked = arrive(session, req)?;
    // A newer run may mark this one meanwhile, and its `pg_cancel_backend`
    // may land on any statement of ours, not only on the wait: every such
    // interruption is answered by reading the mark. The runs we marked must
    // be told even so (nobody else will: a mark is made once).
    let mut attempts = 0;
    while let Err(e) = tell(session, &req.key, &marked) {
        attempts += 1;
        if !interrupted(&e) || attempts >= 3 {
            return Err(e.into());
        }
    }
    let slots = if req.mode == "queue" {
        req.max.max(1)
    } else {
        1
    };
    let mut lock_req = LockRequest::new(req.key.clone())
        .mode(Mode::Semaphore(slots).normalized())
        .wait(if req.mode == "skip" {
            WaitPolicy::Immediately
        } else {
            req.wait
        })
        .run_id(req.run_id.clone())
        .kind(baton_lock::HolderKind::Run)
        .cancel(cancel.clone());
    lock_req.operation = Some(format!("group {}: {}", req.key, req.command));
    let start = Instant::now();
    let deadline = lock_req.wait.deadline_from(start);
    let wait = match lock_req.wait {
        WaitPolicy::Immediately => None,
        _ => Some(deadline),
    };
    let mut ctx = Waiting {
        timeout_ms: 0,
        start,
    };
    loop {
        let got = acquire_one(session, &mut ctx, "group", &lock_req, wait)
            .and_then(|grant| Ok((grant, start_run(session, req)?)));
        match got {
            Ok((grant, None)) => return Ok(grant),
            Ok((_, Some(by))) => return Err(Outcome::Joined(Joined::Superseded(by))),
            Err(PgError::Lock(LockError::Busy { .. })) if req.mode == "skip" => {
                return Err(Outcome::Joined(Joined::Refused(format!(
                    "group '{}' is busy; mode skip",
                    req.key
                ))));
            }
            Err(e) if interrupted(&e) => {
                if let Some(by) = mark_after_interrupt(session, req)? {
                    return Err(Outcome::Joined(Joined::Superseded(by)));
                }
                if cancel.is_cancelled() {
                    return Err(Outcome::Joined(Joined::Cancelled));
                }
                // Interrupted in the wait by a run that marked another:
                // wait on. Anywhere else the state is unknown: give up.
                if !matches!(e, PgError::Lock(LockError::Cancelled { .. })) {
                    return Err(e.into());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `e` is a statement cancelled on the server (ours, or a newer
/// run's `pg_cancel_backend`), wherever it landed.
fn interrupted(e: &PgError) -> bool {
    match e {
        PgError::Lock(LockError::Cancelled { .. }) => true,
        PgError::Database { message, .. } => message.ends_with("(57014)"),
        _ => false,
    }
}

/// [`mark_of`], read again if the cancel request lands on it too.
fn mark_after_interrupt(session: &Session, req: &GroupJoin) -> Result<Option<String>, PgError> {
    let mut attempts = 0;
    loop {
        match mark_of(session, req) {
            Err(e) if interrupted(&e) && attempts < 3 => attempts += 1,
            other => return other,
        }
    }
}

/// Registers the run; returns the (session pid, state) of runs it marked.
fn arrive(session: &Session, req: &GroupJoin) -> Result<Vec<(i32, String)>, Outcome> {
    let c = Arc::clone(&session.client);
    let r = req.clone();
    let slots = i32::try_from(if req.mode == "queue" {
        req.max.max(1)
    } else {
        1
    })
    .unwrap_or(1);
    let me = baton_lock::ProcessIdentity::current();
    let process = serde_json::to_value(&me).map_err(|e| PgError::Database {
        op: "join the group",
        message: e.to_string(),
    })?;
    let result = session.run("join the group", |_| async move {
        c.batch_execute("BEGIN").await?;
        let body = async {
            let key = r.key.to_string();
            c.execute(
                "SELECT pg_advisory_xact_lock($1::int4, hashtext($2))",
                &[&ARRIVAL_CLASS, &key],
            )
            .await?;
            c.execute(
                "DELETE FROM baton_group_runs g WHERE key = $1 \
                 AND NOT baton_session_live(g.session_pid, g.session_start)",
                &[&key],
            )
            .await?;
            let live = c
                .query(
                    "SELECT mode, slots, state FROM baton_group_runs WHERE key = $1",
                    &[&key],
                )
                .await?;
            // A skip run that finds the group busy never joins it: refused
            // as skipped whatever mode the group's runs use.
            let busy_skip = r.mode == "skip" && !live.is_empty();
            if let Some(other) = live.iter().filter(|_| !busy_skip).find(|row| {
                row.get::<_, String>(0) != r.mode || row.get::<_, i32>(1) != slots
            }) {
                let existing = format!(
                    "mode {} with --max {}",
                    other.get::<_, String>(0),
                    other.get::<_, i32>(1)
                );
                return Ok(Err(Joined::ModeMismatch { existing }));
            }
            // Runs that a free slot awaits (arrived, not yet started) are
            // not pending: only those beyond the free slots are.
            let waiting = live
                .iter()
                .filter(|row| row.get::<_, String>(2) == "waiting")
                .count();
            let free = usize::try_from(slots)
                .unwrap_or(1)
                .saturating_sub(live.len() - waiting);
            let waiting = waiting.saturating_sub(free);
            let refusal = match (r.mode, r.max_pending) {
                ("skip", _) if !live.is_empty() => Some(format!(
                    "group '{key}' is busy ({} running or waiting); mode skip",
                    live.len()
                )),
                ("queue", Some(cap)) if waiting >= cap as usize => Some(format!(
                    "group '{key}' already has {waiting} waiting run(s), --max-pending {cap}"
                )),
                _ => None,
            };
            if let Some(why) = refusal {
                return Ok(Err(Joined::Refused(why)));
            }
            if let Some(order) = &r.order {
                // Under the key's arrival lock: no other arrival of the key
                // reads or moves the newest key meanwhile.
                let newest = c
                    .query_opt(
                        "SELECT kind, value, label, run_id FROM baton_group_order WHERE key = $1",
                        &[&key],
                    )
                    .await?;
                if let Some(row) = newest {
                    let newest = GroupOrder {
                        kind: row.get(0),
                        value: row.get(1),
                        label: row.get(2),
                    };
                    if newest.kind != order.kind {
                        return Ok(Err(Joined::OrderMismatch { newest }));
                    }
                    // Equal keys count as newer: the later arrival wins.
                    if order.value < newest.value {
                        return Ok(Err(Joined::Outdated {
                            by: row.get(3),
                            newest: newest.label,
                        }));
                    }
                }
                c.execute(
                    "INSERT INTO baton_group_order (key, kind, value, label, run_id) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) DO UPDATE SET \
                     kind = EXCLUDED.kind, value = EXCLUDED.value, label = EXCLUDED.label, \
                     run_id = EXCLUDED.run_id, updated_at = now()",
                    &[&key, &order.kind, &order.value, &order.label, &r.run_id],
                )
                .await?;
            }
            let marked = match r.mode {
                "supersede" | "coalesce" => c
                    .query(
                        "UPDATE baton_group_runs SET superseded_by = $2 WHERE key = $1 \
                         AND superseded_by IS NULL AND ($3 = 'supersede' OR state = 'waiting') \
                         RETURNING session_pid, state",
                        &[&key, &r.run_id, &r.mode],
                    )
                    .await?
                    .into_iter()
                    .map(|row| (row.get::<_, i32>(0), row.get::<_, String>(1)))
                    .collect(),
                _ => Vec::new(),
            };
            c.execute(
                "INSERT INTO baton_group_runs (key, run_id, mode, slots, session_pid, session_start, \
                 host, pid, command, process) SELECT $1, $2, $3, $4, pg_backend_pid(), \
                 (SELECT backend_start FROM pg_stat_get_activity(pg_backend_pid())), $5, $6, $7, $8",
                &[&key, &r.run_id, &r.mode, &slots, &me.host, &me.pid, &r.command, &process],
            )
            .await?;
            Ok(Ok(marked))
        }
        .await;
        match body {
            Ok(Ok(marked)) => {
                c.batch_execute("COMMIT").await?;
                Ok(Ok(marked))
            }
            other => {
                let _ = c.batch_execute("ROLLBACK").await;
                other
            }
        }
    })?;
    result.map_err(Outcome::Joined)
}

/// Tells the marked runs: waiting ones lose their wait, running ones get a NOTIFY.
fn tell(session: &Session, key: &LockName, marked: &[(i32, String)]) -> Result<(), PgError> {
    if marked.is_empty() {
        return Ok(());
    }
    let waiting: Vec<i32> = marked
        .iter()
        .filter(|(_, s)| s == "waiting")
        .map(|(p, _)| *p)
        .collect();
    let c = Arc::clone(&session.client);
    let key = key.to_string();
    session.run("tell the superseded runs", |_| async move {
        c.execute(
            "SELECT pg_cancel_backend(p) FROM unnest($1::int4[]) p",
            &[&waiting],
        )
        .await?;
        c.execute("SELECT pg_notify($1, $2)", &[&GROUP_CHANNEL, &key])
            .await
            .map(|_| ())
    })
}

/// Holding the slot: start unless marked. `Some(by)` when marked.
fn start_run(session: &Session, req: &GroupJoin) -> Result<Option<String>, PgError> {
    let c = Arc::clone(&session.client);
    let (key, run) = (req.key.to_string(), req.run_id.clone());
    let started = session.run("start the run", |_| async move {
        c.query_opt(
            "UPDATE baton_group_runs SET state = 'running', started_at = now() \
             WHERE key = $1 AND run_id = $2 AND superseded_by IS NULL RETURNING 1",
            &[&key, &run],
        )
        .await
        .map(|r| r.is_some())
    })?;
    if started {
        return Ok(None);
    }
    Ok(Some(mark_of(session, req)?.unwrap_or_else(|| {
        "unknown (the group record of this run was lost)".into()
    })))
}

/// Who marked this run superseded, if anyone.
fn mark_of(session: &Session, req: &GroupJoin) -> Result<Option<String>, PgError> {
    let c = Arc::clone(&session.client);
    let (key, run) = (req.key.to_string(), req.run_id.clone());
    session.run("read the run's mark", |_| async move {
        let row = c
            .query_opt(
                "SELECT superseded_by FROM baton_group_runs WHERE key = $1 AND run_id = $2",
                &[&key, &run],
            )
            .await?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
    })
}

/// Listens for supersede announcements of the key while the run runs.
fn watch_for_newer(
    mut session: Session,
    req: &GroupJoin,
    on_superseded: impl Fn(String) + Send + Sync + 'static,
) -> Result<Session, PgError> {
    let listen = format!("LISTEN {GROUP_CHANNEL}");
    session.run("listen for newer runs", |c| async move {
        c.batch_execute(&listen).await
    })?;
    let (_, mut notes) = tokio::sync::mpsc::unbounded_channel();
    std::mem::swap(&mut notes, &mut session.notes);
    let c = Arc::clone(&session.client);
    let (key, run) = (req.key.to_string(), req.run_id.clone());
    let on_superseded = Arc::new(on_superseded);
    // A mark made between the start and the LISTEN is caught by a first look.
    let check = move |c: Arc<tokio_postgres::Client>, key: String, run: String| async move {
        c.query_opt(
            "SELECT superseded_by FROM baton_group_runs WHERE key = $1 AND run_id = $2",
            &[&key, &run],
        )
        .await
        .ok()
        .flatten()
        .and_then(|r| r.get::<_, Option<String>>(0))
    };
    session.rt.spawn(async move {
        let mut first = true;
        loop {
            if !first {
                match notes.recv().await {
                    Some(k) if k == key => {}
                    Some(_) => continue,
                    None => return,
                }
            }
            first = false;
            if let Some(by) = check(Arc::clone(&c), key.clone(), run.clone()).await {
                on_superseded(by);
                return;
            }
        }
    });
    Ok(session)
}

/// One live run of a group, as `group status` shows it.
#[derive(Clone, Debug)]
pub struct GroupRunRow {
    /// The group key.
    pub key: String,
    /// Its mode.
    pub mode: String,
    /// Its slots.
    pub slots: u32,
    /// The run id.
    pub run_id: String,
    /// The supervising process (`baton run`), on its machine.
    pub process: baton_lock::ProcessIdentity,
    /// Arrival order.
    pub seq: u64,
    /// Whether it runs (else it waits).
    pub running: bool,
    /// When it arrived (RFC 3339).
    pub queued_at: String,
    /// When it started (RFC 3339).
    pub started_at: Option<String>,
    /// The command line.
    pub command: String,
    /// The run that superseded it, once marked.
    pub superseded_by: Option<String>,
}

impl Database {
    /// The live runs of group `key` (or of every group), in arrival order;
    /// runs whose session has ended are left out.
    ///
    /// # Errors
    ///
    /// [`PgError`] when the database cannot be read.
    pub fn group_runs(&self, key: Option<&LockName>) -> Result<Vec<GroupRunRow>, PgError> {
        let session = self.connect()?;
        let c = Arc::clone(&session.client);
        let key = key.map(ToString::to_string);
        let rows = session.run("read the groups", |_| async move {
            let sql = "SELECT key, mode, slots, run_id, process, seq, state, \
                 to_char(queued_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), \
                 to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), \
                 command, superseded_by FROM baton_group_runs g \
                 WHERE ($1::text IS NULL OR key = $1) AND baton_session_live(g.session_pid, g.session_start) ORDER BY key, seq";
            match c.query(sql, &[&key]).await {
                Ok(rows) => Ok(rows),
                Err(e) if crate::error::sqlstate(&e) == Some("42P01") => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        });
        session.close();
        Ok(rows?
            .into_iter()
            .filter_map(|r| {
                Some(GroupRunRow {
                    key: r.get(0),
                    mode: r.get(1),
                    slots: u32::try_from(r.get::<_, i32>(2)).unwrap_or(1),
                    run_id: r.get(3),
                    process: serde_json::from_value(r.get(4)).ok()?,
                    seq: u64::try_from(r.get::<_, i64>(5)).unwrap_or(0),
                    running: r.get::<_, String>(6) == "running",
                    queued_at: r.get(7),
                    started_at: r.get(8),
                    command: r.get(9),
                    superseded_by: r.get(10),
                })
            })
            .collect())
    }
}
