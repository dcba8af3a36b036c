//! What is held, by whom, and breaking a hold: the holder rows joined with
//! what the server says is held. A row whose session has ended is never
//! shown as a holder: on a free lock it is "last holder died".

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_lock::{Content, HolderInfo, HolderRecord, Liveness, LockName, LockStatus};

use crate::acquire::{LOCK_KIND, QUEUE_CLASS, SLOT_CLASS};
use crate::error::{sqlstate, PgError};
use crate::session::{Database, Session};

/// One holder `break` acted on.
#[derive(Clone, Debug)]
pub struct Terminated {
    /// Who held it.
    pub holder: HolderInfo,
    /// Whether the server terminated its session (false: it had already ended).
    pub terminated: bool,
}

struct Row {
    token: i64,
    slot: i32,
    mode: String,
    record: serde_json::Value,
    session_pid: i32,
    live: bool,
}

impl Database {
    /// The status of lock `name`, the same shape as on the local backend
    /// (its `path` is the database URL, password hidden).
    ///
    /// # Errors
    ///
    /// [`PgError`] when the database cannot be read.
    pub fn status(&self, name: &LockName) -> Result<LockStatus, PgError> {
        let session = self.connect()?;
        let st = status_in(&session, name.as_str());
        session.close();
        st
    }

    /// The status of every lock in the database, sorted by name.
    ///
    /// # Errors
    ///
    /// [`PgError`] when the database cannot be read.
    pub fn list(&self) -> Result<Vec<LockStatus>, PgError> {
        let session = self.connect()?;
        let c = Arc::clone(&session.client);
        let names = session.run("list the locks", |_| async move {
            match c
                .query(
                    "SELECT name FROM baton_locks WHERE kind = $1 ORDER BY name",
                    &[&LOCK_KIND],
                )
                .await
            {
                Ok(rows) => Ok(rows.into_iter().map(|r| r.get::<_, String>(0)).collect()),
                Err(e) if sqlstate(&e) == Some("42P01") => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        });
        let out = names
            .and_then(|names: Vec<String>| names.iter().map(|n| status_in(&session, n)).collect());
        session.close();
        out
    }

    /// Ends every current holder's session (`pg_terminate_backend`): the
    /// server frees the lock at once, and each holder's supervisor stops its
    /// command (a new holder waits until it has). Returns what it did.
    ///
    /// # Errors
    ///
    /// [`PgError::Permission`] when the user may not terminate the holder's
    /// session (it needs to be the same role, a superuser, or a member of
    /// `pg_signal_backend`).
    pub fn break_lock(&self, name: &LockName) -> Result<(Vec<Terminated>, bool), PgError> {
        let session = self.connect()?;
        let out = break_in(&session, name);
        session.close();
        out
    }
}

fn break_in(session: &Session, name: &LockName) -> Result<(Vec<Terminated>, bool), PgError> {
    let (st, sessions) = status_with_sessions(session, name.as_str())?;
    let mut done = Vec::new();
    for (h, &pid) in st.holders.iter().zip(&sessions) {
        let c = Arc::clone(&session.client);
        let terminated = session
            .rt
            .block_on(async move {
                c.query_one("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .map(|r| r.get::<_, bool>(0))
            })
            .map_err(|e| {
                if sqlstate(&e) == Some("42501") {
                    PgError::Permission {
                        url: session.db.url().to_string(),
                        op: "end the holder's session",
                        reason: format!(
                            "{} (run `baton lock break` as the holder's database user, a superuser, or a member of pg_signal_backend)",
                            crate::error::one_line(&e)
                        ),
                    }
                } else {
                    session.error("end the holder's session", &e)
                }
            })?;
        done.push(Terminated {
            holder: h.clone(),
            terminated,
        });
    }
    // The server ends a terminated session asynchronously: wait a moment.
    let until = Instant::now() + Duration::from_secs(2);
    let free = loop {
        let held = status_in(session, name.as_str())?.held;
        if !held || Instant::now() >= until {
            break !held;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok((done, free))
}

fn status_in(session: &Session, name: &str) -> Result<LockStatus, PgError> {
    status_with_sessions(session, name).map(|(st, _)| st)
}

/// The status, and the database session of each of its holders.
fn status_with_sessions(session: &Session, name: &str) -> Result<(LockStatus, Vec<i32>), PgError> {
    let mut sessions = Vec::new();
    let mut st = LockStatus::unused(name, session.db.url().into());
    let c = Arc::clone(&session.client);
    let n = name.to_string();
    let found = session.run("read the lock", |_| async move {
        match c
            .query_opt(
                "SELECT id, token, slots FROM baton_locks WHERE kind = $2 AND name = $1",
                &[&n, &LOCK_KIND],
            )
            .await
        {
            Ok(r) => Ok(r.map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1), r.get::<_, i32>(2)))),
            Err(e) if sqlstate(&e) == Some("42P01") => Ok(None),
            Err(e) => Err(e),
        }
    })?;
    let Some((id, token, slots)) = found else {
        return Ok((st, sessions));
    };
    st.content = Content::Ok;
    st.last_token = u64::try_from(token).unwrap_or(0);
    st.max = u32::try_from(slots).unwrap_or(1).max(1);
    let c = Arc::clone(&session.client);
    let (rows, locks, outcome) = session.run("read the lock's holders", |_| async move {
        let rows = c
            .query(
                "SELECT token, slot, mode, record, session_pid, \
                 baton_holder_live(h.session_pid, h.session_start) FROM baton_lock_holders h WHERE lock_id = $1 ORDER BY token",
                &[&id],
            )
            .await?;
        // Tables of version 3 (no grant by this version yet): none.
        let outcome = match c
            .query_opt(
                "SELECT outcome FROM baton_lock_outcomes WHERE lock_id = $1 AND slot = 0",
                &[&id],
            )
            .await
        {
            Ok(row) => row.map(|r| r.get::<_, String>(0)),
            Err(e) if sqlstate(&e) == Some("42P01") => None,
            Err(e) => return Err(e),
        };
        let locks = c
            .query(
                "SELECT classid::int8, mode, granted, pid FROM pg_locks WHERE locktype = 'advisory' \
                 AND objid::int8 = $1::int8 AND objsubid = 2 \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[&i64::from(id)],
            )
            .await?;
        Ok((rows, locks, outcome))
    })?;
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| Row {
            token: r.get(0),
            slot: r.get(1),
            mode: r.get(2),
            record: r.get(3),
            session_pid: r.get(4),
            live: r.get(5),
        })
        .collect();
    // (slot, shared, pid) of each granted slot lock; pids waiting.
    let mut held: Vec<(i64, bool, i32)> = Vec::new();
    let mut waiting: Vec<i32> = Vec::new();
    for l in &locks {
        let (class, mode, granted, pid): (i64, String, bool, Option<i32>) =
            (l.get(0), l.get(1), l.get(2), l.get(3));
        let pid = pid.unwrap_or(0);
        let slot = class - i64::from(SLOT_CLASS);
        if class == i64::from(QUEUE_CLASS) || !granted {
            if !waiting.contains(&pid) {
                waiting.push(pid);
            }
        } else if (0..i64::from(slots.max(1))).contains(&slot) {
            held.push((slot, mode == "ShareLock", pid));
        }
    }
    waiting.retain(|p| !held.iter().any(|(_, _, h)| h == p) || st.max > 1);
    st.waiters = waiting.len();
    st.held = !held.is_empty();
    if st.held {
        st.mode = Some(
            if st.max > 1 {
                "semaphore"
            } else if held.iter().any(|(_, shared, _)| *shared) {
                "shared"
            } else {
                "exclusive"
            }
            .into(),
        );
    }
    for row in &rows {
        let holds = row.live
            && held
                .iter()
                .any(|(s, _, p)| *s == i64::from(row.slot) && *p == row.session_pid);
        if holds {
            if st.holders.is_empty() {
                let record = serde_json::from_value::<HolderRecord>(row.record.clone()).ok();
                st.previous_outcome = record.as_ref().and_then(|r| r.previous_outcome.clone());
                if let Some(prev) = record.and_then(|r| r.previous) {
                    st.previous_holder_died = true;
                    st.previous_holder = Some(HolderInfo::from_record(&prev));
                }
            }
            if let Some(mut info) = info_of(row) {
                info.alive = true;
                info.liveness = Liveness::Alive;
                st.holders.push(info);
                sessions.push(row.session_pid);
            }
        }
    }
    st.holder = st.holders.first().cloned();
    if !st.held {
        if let Some(last) = rows.iter().rev().find(|r| !r.live) {
            st.last_holder_died = true;
            st.last_holder = info_of(last).map(|mut i| {
                i.alive = false;
                i.liveness = Liveness::Dead;
                i
            });
            st.previous_holder_died = true;
            st.previous_holder = st.last_holder.clone();
        }
        // What the next grant of the first slot would learn (as the
        // grant decides it, `baton_grant`).
        st.previous_outcome = if st.last_holder_died {
            Some(baton_lock::HolderOutcome::Died)
        } else {
            match outcome.and_then(|o| o.parse().ok()) {
                Some(o) => Some(o),
                None => (st.last_token > 0).then_some(baton_lock::HolderOutcome::Released),
            }
        };
    }
    Ok((st, sessions))
}

fn info_of(row: &Row) -> Option<HolderInfo> {
    let mut rec: HolderRecord = serde_json::from_value(row.record.clone()).ok()?;
    rec.token = u64::try_from(row.token).unwrap_or(0);
    rec.mode.clone_from(&row.mode);
    Some(HolderInfo::from_record(&rec))
}
