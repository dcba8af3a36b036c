//! Held locks: the session that holds them, and how they end.

use std::sync::Arc;

use baton_lock::{CommandGroup, HolderOutcome, LockName, Mode};

use crate::error::PgError;
use crate::session::{Session, RELEASE_LIMIT};

/// The channel releases of semaphore slots are announced on.
pub(crate) const FREE_CHANNEL: &str = "baton_lock_free";

/// One lock granted.
#[derive(Clone, Debug)]
pub struct Grant {
    /// The lock's name.
    pub name: LockName,
    /// Its fencing token: larger than that of every earlier grant of this
    /// lock in this database, issued in the same transaction as the holder row.
    pub token: u64,
    /// The run id recorded.
    pub run_id: String,
    /// The slot held (0 unless a semaphore).
    pub slot: u32,
    /// The mode it is held in.
    pub mode: Mode,
    pub(crate) lock_id: i32,
    /// The holder this grant followed, when its session ended without
    /// releasing (its rows were settled by this grant): its work may be
    /// half done.
    pub previous: Option<Box<baton_lock::HolderRecord>>,
    /// How the holder before this grant ended (`died` when
    /// [`Grant::previous`] is set); `None` for the first grant of a lock.
    pub previous_outcome: Option<HolderOutcome>,
}

/// Locks held on one database session. They stay held until
/// [`Holds::release`] (or drop), or until the session ends: then the
/// server frees them, and [`Holds::on_lost`] callbacks run, so that the
/// holder stops the work it does under them.
#[must_use = "the locks are released as soon as this is dropped"]
pub struct Holds {
    session: Option<Session>,
    db: crate::session::Database,
    grants: Vec<Grant>,
    /// (key, run id) of the group run whose slot these are: its row goes too.
    group: Option<(String, String)>,
    /// What a release leaves for the next holders ([`Holds::release_with`]);
    /// `None`: each lock's previous outcome ([`Holds::release_unused`]).
    outcome: Option<HolderOutcome>,
}

impl std::fmt::Debug for Holds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holds")
            .field("grants", &self.grants)
            .finish()
    }
}

impl Holds {
    pub(crate) fn new(session: Session, grants: Vec<Grant>) -> Holds {
        Holds {
            db: session.db.clone(),
            session: Some(session),
            grants,
            group: None,
            outcome: Some(HolderOutcome::Released),
        }
    }

    /// These are a group run's slot: releasing also removes the run's row.
    pub(crate) fn in_group(mut self, key: String, run_id: String) -> Holds {
        self.group = Some((key, run_id));
        self
    }

    /// The locks held, in name order.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// Runs `f` once, from another thread, if the session ends before
    /// [`Holds::release`]: the server terminated it, restarted, or stopped
    /// answering (heartbeat). Runs it at once if that already happened.
    pub fn on_lost(&self, f: impl Fn() + Send + 'static) {
        if let Some(s) = &self.session {
            s.lost.on_lost(Box::new(f));
        }
    }

    /// Runs `f` (from another thread) after each heartbeat the server
    /// answers while the locks are held, with the instant it was sent: a
    /// proof that the session lived then, for a guardian's fence
    /// (`baton_proc::FenceSource::vouch`).
    pub fn on_alive(&self, f: impl Fn(std::time::Instant) + Send + 'static) {
        if let Some(s) = &self.session {
            s.lost.on_alive(Box::new(f));
        }
    }

    /// Whether the session has ended: the locks are no longer held.
    pub fn is_lost(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.lost.is_lost())
    }

    /// Records the process group of the command run under these locks, so
    /// that a holder on this machine that takes over after this process
    /// died terminates what is left of it first.
    ///
    /// # Errors
    ///
    /// [`PgError::Database`] when the rows cannot be updated.
    pub fn set_command_group(&self, group: CommandGroup) -> Result<(), PgError> {
        let Some(session) = &self.session else {
            return Ok(());
        };
        let value = serde_json::to_value(group).map_err(|e| PgError::Database {
            op: "record the command's process group",
            message: e.to_string(),
        })?;
        let (ids, tokens) = self.keys();
        session.run("record the command's process group", |c| async move {
            c.query_typed(
                "UPDATE baton_lock_holders SET record = jsonb_set(record, '{command_group}', $3) \
                 WHERE (lock_id, token) IN (SELECT * FROM unnest($1::int4[], $2::int8[]))",
                &[
                    (&ids, tokio_postgres::types::Type::INT4_ARRAY),
                    (&tokens, tokio_postgres::types::Type::INT8_ARRAY),
                    (&value, tokio_postgres::types::Type::JSONB),
                ],
            )
            .await
            .map(|_| ())
        })
    }

    fn keys(&self) -> (Vec<i32>, Vec<i64>) {
        self.grants
            .iter()
            .map(|g| (g.lock_id, i64::try_from(g.token).unwrap_or(i64::MAX)))
            .unzip()
    }

    /// Releases every lock: removes the holder rows, then lets go. Call it
    /// only once the work done under the locks has ended. After a lost
    /// session it confirms, on a new session, that the work has ended, so
    /// that the next holder need not wait for that any longer.
    ///
    /// # Errors
    ///
    /// [`PgError`] when the rows cannot be removed; the locks are free
    /// regardless once this returns (the session is closed).
    pub fn release(mut self) -> Result<(), PgError> {
        self.release_inner()
    }

    /// [`Holds::release`], leaving `outcome` for the next holder of each
    /// lock (`previous_outcome`), in the same statements that remove the
    /// rows, before the locks are unlocked. [`HolderOutcome::Died`] lets go
    /// as [`Holds::abandon`] does (a group's slot records it and is released).
    ///
    /// # Errors
    ///
    /// As [`Holds::release`].
    pub fn release_with(mut self, outcome: HolderOutcome) -> Result<(), PgError> {
        if outcome == HolderOutcome::Died && self.group.is_none() {
            return self.abandon();
        }
        self.outcome = Some(outcome);
        self.release_inner()
    }

    /// [`Holds::release`] of locks under which nothing was done: the next
    /// holder of each learns what this one learned, as if this grant had
    /// not happened.
    ///
    /// # Errors
    ///
    /// As [`Holds::release`].
    pub fn release_unused(mut self) -> Result<(), PgError> {
        self.outcome = None;
        self.release_inner()
    }

    /// Lets go of the locks as a holder that died would: they are unlocked
    /// (and semaphore waiters told) but the holder rows stay, so the next
    /// grant settles them and learns that the previous holder ended without
    /// releasing (`previous_holder_died`). For `baton lock acquire`'s
    /// holder whose script ended first. A group's slot is released.
    ///
    /// # Errors
    ///
    /// The server could not be told (the locks are freed anyway: the
    /// session is closed).
    pub fn abandon(mut self) -> Result<(), PgError> {
        if self.group.is_some() {
            return self.release_inner();
        }
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let sql = format!("SELECT pg_advisory_unlock_all(); {}", self.announcements());
        let done = if session.lost.is_lost() {
            Ok(())
        } else {
            after(&session, sql)
        };
        session.close();
        done
    }

    /// The statements that leave this release's outcome on each lock's
    /// slot ([`outcome_sql`]).
    fn outcome_sql(&self) -> String {
        outcome_sql(self.grants.iter().filter_map(|g| {
            self.outcome
                .as_ref()
                .or(g.previous_outcome.as_ref())
                .map(|o| (g, o))
        }))
    }

    /// The `NOTIFY`s that wake semaphore waiters when these locks are let go.
    fn announcements(&self) -> String {
        let notify: Vec<String> = self
            .grants
            .iter()
            .filter(|g| matches!(g.mode, Mode::Semaphore(n) if n > 1))
            .map(|g| format!("NOTIFY {FREE_CHANNEL}, '{}'", g.lock_id))
            .collect();
        notify.join("; ")
    }

    fn release_inner(&mut self) -> Result<(), PgError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let (ids, tokens) = self.keys();
        if ids.is_empty() {
            session.close();
            return Ok(());
        }
        let announce = self.announcements();
        let group = self.group.take();
        if !session.lost.is_lost() {
            // Unlock before announcing, so a woken waiter finds the slot free.
            let then = format!("SELECT pg_advisory_unlock_all(); {announce}");
            let done = match &group {
                // One round trip: the rows, the unlock, the announcements
                // (the values are integers, written into the statement).
                // (one implicit transaction: the outcome and the removal).
                None => after(
                    &session,
                    format!(
                        "{}{}; {then}",
                        self.outcome_sql(),
                        delete_sql(&ids, &tokens)
                    ),
                ),
                Some(_) => remove_rows(
                    &session,
                    self.outcome_sql(),
                    ids.clone(),
                    tokens.clone(),
                    group.clone(),
                )
                .and_then(|()| after(&session, then)),
            };
            session.close();
            match done {
                Ok(()) => return Ok(()),
                // Closing the session freed the locks; the rows go on a new
                // one (the session may have ended during the release).
                Err(e) => {
                    tracing::debug!(error = %e, "release failed; removing the rows on a new session")
                }
            }
        } else {
            session.close();
        }
        let fresh = self.db.connect()?;
        let result = remove_rows(&fresh, self.outcome_sql(), ids, tokens, group)
            .and_then(|()| after(&fresh, announce));
        fresh.close();
        result
    }
}

/// `DELETE` of the holder rows `(ids[i], tokens[i])`, as one statement.
fn delete_sql(ids: &[i32], tokens: &[i64]) -> String {
    let pairs: Vec<String> = ids
        .iter()
        .zip(tokens)
        .map(|(i, t)| format!("({i}, {t})"))
        .collect();
    format!(
        "DELETE FROM baton_lock_holders WHERE (lock_id, token) IN ({})",
        pairs.join(", ")
    )
}

/// Runs `sql` (unlocks, announcements), if any.
fn after(session: &Session, sql: String) -> Result<(), PgError> {
    if sql.is_empty() {
        return Ok(());
    }
    session.run_within("release the locks", RELEASE_LIMIT, |c| async move {
        c.batch_execute(&sql).await
    })
}

/// The statements that leave an outcome on each grant's slot, each ending
/// in `; `, to run in the transaction that removes the rows: the next grant
/// sees both or neither. A shared holder's `released` never replaces
/// another shared holder's failure recorded after its grant (as in a baton
/// dir). The values are an outcome's own text (letters, digits, `:`, `-`)
/// and integers, written into the statement.
pub(crate) fn outcome_sql<'a>(
    grants: impl IntoIterator<Item = (&'a Grant, &'a HolderOutcome)>,
) -> String {
    let mut sql = String::new();
    for (g, outcome) in grants {
        let keep_failure = if g.mode == Mode::Shared && !outcome.is_bad() {
            " WHERE NOT (baton_lock_outcomes.outcome <> 'released' \
             AND baton_lock_outcomes.token > EXCLUDED.token)"
        } else {
            ""
        };
        sql.push_str(&format!(
            "INSERT INTO baton_lock_outcomes (lock_id, slot, token, outcome) \
             VALUES ({}, {}, {}, '{outcome}') ON CONFLICT (lock_id, slot) DO UPDATE \
             SET token = EXCLUDED.token, outcome = EXCLUDED.outcome{keep_failure}; ",
            g.lock_id, g.slot, g.token
        ));
    }
    sql
}

/// Removes the holder rows (and the group run's row), after `outcome_sql`
/// (statements that leave the release's outcome, or empty), all in one
/// transaction.
pub(crate) fn remove_rows(
    session: &Session,
    outcome_sql: String,
    ids: Vec<i32>,
    tokens: Vec<i64>,
    group: Option<(String, String)>,
) -> Result<(), PgError> {
    let c = Arc::clone(&session.client);
    session.run_within("remove the holder rows", RELEASE_LIMIT, |_| async move {
        c.batch_execute(&format!("BEGIN; {outcome_sql}")).await?;
        let done = async {
            if let Some((key, run)) = &group {
                c.execute(
                    "DELETE FROM baton_group_runs WHERE key = $1 AND run_id = $2",
                    &[key, run],
                )
                .await?;
            }
            c.execute(
                "DELETE FROM baton_lock_holders \
                 WHERE (lock_id, token) IN (SELECT * FROM unnest($1::int4[], $2::int8[]))",
                &[&ids, &tokens],
            )
            .await
            .map(|_| ())
        }
        .await;
        match done {
            Ok(()) => c.batch_execute("COMMIT").await,
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK").await;
                Err(e)
            }
        }
    })
}

impl Drop for Holds {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            tracing::warn!(error = %e, "releasing locks on PostgreSQL");
        }
    }
}
