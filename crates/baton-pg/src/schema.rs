//! The backend's tables and their migration. The schema belongs to this
//! crate: it is created or upgraded on first use (and by `baton db
//! migrate`), inside one transaction under an advisory lock, so two first
//! users at the same instant do not race and a failure leaves nothing half
//! created.

use crate::error::{sqlstate, PgError};
use crate::session::Session;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = 5;

/// Transaction-level advisory lock held while migrating ("btmg").
const MIGRATE_LOCK: i64 = 0x6274_6d67;

const V1: &str = "
CREATE TABLE baton_locks (
    id          serial PRIMARY KEY,
    kind        text NOT NULL DEFAULT 'lock',
    name        text NOT NULL,
    slots       integer NOT NULL DEFAULT 1,
    token       bigint NOT NULL DEFAULT 0,
    UNIQUE (kind, name)
);
CREATE TABLE baton_lock_holders (
    lock_id       integer NOT NULL REFERENCES baton_locks(id),
    token         bigint NOT NULL,
    slot          integer NOT NULL,
    mode          text NOT NULL,
    slots         integer NOT NULL,
    session_pid   integer NOT NULL,
    session_start timestamptz NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    owner         text NOT NULL,
    operation     text,
    run_id        text NOT NULL,
    acquired_at   timestamptz NOT NULL DEFAULT now(),
    record        jsonb NOT NULL,
    PRIMARY KEY (lock_id, token)
);
CREATE TABLE baton_group_runs (
    key           text NOT NULL,
    run_id        text NOT NULL,
    seq           bigserial,
    mode          text NOT NULL,
    slots         integer NOT NULL,
    state         text NOT NULL DEFAULT 'waiting',
    session_pid   integer NOT NULL,
    session_start timestamptz NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    command       text NOT NULL,
    process       jsonb NOT NULL,
    queued_at     timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    superseded_by text,
    PRIMARY KEY (key, run_id)
);
CREATE INDEX baton_group_runs_order ON baton_group_runs (key, seq);
-- Whether a session still runs. A role without pg_read_all_stats sees
-- other roles' sessions with a NULL start: then the pid alone tells.
CREATE FUNCTION baton_session_live(p integer, s timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_stat_get_activity(p) a
                   WHERE a.backend_start = s OR a.backend_start IS NULL)
$$;
-- baton_grant: created by V2 (with the holder's liveness as V2 judges it).
";

/// Version 2: a holder row's session counts as live only while it still
/// holds an advisory lock. An ending backend releases its locks before it
/// leaves `pg_stat_activity`: a waiter woken by that release must see the
/// row as an ended session's, and wait for its command to be stopped
/// (found by a hostile review, with a backend held in that window).
const V2: &str = "
CREATE OR REPLACE FUNCTION baton_holder_live(p integer, s timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT baton_session_live(p, s)
       AND EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.pid = p AND l.locktype = 'advisory' AND l.granted)
$$;
-- A grant, in one call. Under the lock row's lock (grants of one lock go
-- one at a time, and each statement below sees the ones before it): no
-- grant while a conflicting row of an ended session remains (dead > 0:
-- settle it first), none beside a live holder using another slot count
-- (other_slots), else the next token and the holder's row.
CREATE OR REPLACE FUNCTION baton_grant(p_lock integer, p_slots integer, p_slot integer, p_mode text,
    p_host text, p_pid integer, p_owner text, p_operation text, p_run text, p_record jsonb,
    p_shared boolean)
RETURNS TABLE (token bigint, dead bigint, other_slots integer)
LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
    d bigint;
    o integer;
BEGIN
    PERFORM 1 FROM baton_locks l WHERE l.id = p_lock FOR UPDATE;
    SELECT count(*) INTO d FROM baton_lock_holders h
     WHERE h.lock_id = p_lock AND h.slot = p_slot AND NOT (p_shared AND h.mode = 'shared')
       AND NOT baton_holder_live(h.session_pid, h.session_start);
    IF d > 0 THEN
        RETURN QUERY SELECT NULL::bigint, d, NULL::integer;
        RETURN;
    END IF;
    SELECT h.slots INTO o FROM baton_lock_holders h
     WHERE h.lock_id = p_lock AND h.slots <> p_slots
       AND baton_holder_live(h.session_pid, h.session_start) LIMIT 1;
    IF o IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, 0::bigint, o;
        RETURN;
    END IF;
    UPDATE baton_locks l SET token = l.token + 1, slots = p_slots WHERE l.id = p_lock
        RETURNING l.token INTO t;
    INSERT INTO baton_lock_holders (lock_id, token, slot, mode, slots, session_pid,
        session_start, host, pid, owner, operation, run_id, record)
    VALUES (p_lock, t, p_slot, p_mode, p_slots, pg_backend_pid(),
        (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a),
        p_host, p_pid, p_owner, p_operation, p_run, p_record);
    RETURN QUERY SELECT t, 0::bigint, NULL::integer;
END
$$;
";

/// Version 3: the newest ordering key each group has seen (`--order`),
/// kept after its runs end, so that a late older event is refused.
const V3: &str = "
CREATE TABLE IF NOT EXISTS baton_group_order (
    key         text PRIMARY KEY,
    kind        text NOT NULL,
    value       bigint NOT NULL,
    label       text NOT NULL,
    run_id      text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
";

/// Version 4: how each slot's last releasing holder ended
/// (`baton_lock_outcomes`, written in the release's own statement batch,
/// before the unlock), and a grant that returns what the next holder learns
/// (`previous_outcome`: `died` when it settled a dead holder, else the
/// slot's outcome, else `released` unless the lock was never granted) and
/// records it in the holder's row. Older binaries refuse a version 4
/// database (`SchemaTooNew`), so none of them releases without leaving an
/// outcome or reads a grant's result of another shape.
const V4: &str = "
CREATE TABLE IF NOT EXISTS baton_lock_outcomes (
    lock_id     integer NOT NULL REFERENCES baton_locks(id),
    slot        integer NOT NULL,
    token       bigint NOT NULL,
    outcome     text NOT NULL,
    PRIMARY KEY (lock_id, slot)
);
DROP FUNCTION IF EXISTS baton_grant(integer, integer, integer, text, text, integer, text, text,
    text, jsonb, boolean);
CREATE FUNCTION baton_grant(p_lock integer, p_slots integer, p_slot integer, p_mode text,
    p_host text, p_pid integer, p_owner text, p_operation text, p_run text, p_record jsonb,
    p_shared boolean)
RETURNS TABLE (token bigint, dead bigint, other_slots integer, previous_outcome text)
LANGUAGE plpgsql AS $$
DECLARE
    t bigint;
    d bigint;
    o integer;
    po text;
BEGIN
    PERFORM 1 FROM baton_locks l WHERE l.id = p_lock FOR UPDATE;
    SELECT count(*) INTO d FROM baton_lock_holders h
     WHERE h.lock_id = p_lock AND h.slot = p_slot AND NOT (p_shared AND h.mode = 'shared')
       AND NOT baton_holder_live(h.session_pid, h.session_start);
    IF d > 0 THEN
        RETURN QUERY SELECT NULL::bigint, d, NULL::integer, NULL::text;
        RETURN;
    END IF;
    SELECT h.slots INTO o FROM baton_lock_holders h
     WHERE h.lock_id = p_lock AND h.slots <> p_slots
       AND baton_holder_live(h.session_pid, h.session_start) LIMIT 1;
    IF o IS NOT NULL THEN
        RETURN QUERY SELECT NULL::bigint, 0::bigint, o, NULL::text;
        RETURN;
    END IF;
    UPDATE baton_locks l SET token = l.token + 1, slots = p_slots WHERE l.id = p_lock
        RETURNING l.token INTO t;
    IF p_record ? 'previous_holder' THEN
        po := 'died';
    ELSE
        SELECT x.outcome INTO po FROM baton_lock_outcomes x
         WHERE x.lock_id = p_lock AND x.slot = p_slot;
        IF po IS NULL AND t > 1 THEN
            po := 'released';
        END IF;
    END IF;
    INSERT INTO baton_lock_holders (lock_id, token, slot, mode, slots, session_pid,
        session_start, host, pid, owner, operation, run_id, record)
    VALUES (p_lock, t, p_slot, p_mode, p_slots, pg_backend_pid(),
        (SELECT a.backend_start FROM pg_stat_get_activity(pg_backend_pid()) a),
        p_host, p_pid, p_owner, p_operation, p_run,
        CASE WHEN po IS NULL THEN p_record
             ELSE p_record || jsonb_build_object('previous_outcome', po) END);
    RETURN QUERY SELECT t, 0::bigint, NULL::integer, po;
END
$$;
";

/// Version 5: path reservations (`crate::reserve`). A space per repository
/// (its fencing token, the granted rows whose holder died), one row per
/// request, and whether a row's holder still
/// holds its liveness lock: the session advisory lock on the one bigint key
/// `RESERVATION_KEY + ticket`, held by the session that made the row.
const V5: &str = "
CREATE TABLE IF NOT EXISTS baton_reservation_spaces (
    space       text PRIMARY KEY,
    token       bigint NOT NULL DEFAULT 0,
    died        jsonb NOT NULL DEFAULT '[]'
);
CREATE SEQUENCE IF NOT EXISTS baton_reservation_tickets;
CREATE TABLE IF NOT EXISTS baton_reservations (
    ticket      bigint PRIMARY KEY,
    space       text NOT NULL REFERENCES baton_reservation_spaces(space),
    token       bigint,
    granted     boolean NOT NULL DEFAULT false,
    session_pid integer NOT NULL,
    record      jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS baton_reservations_space ON baton_reservations (space, ticket);
CREATE OR REPLACE FUNCTION baton_reservation_live(p integer, k bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.granted AND l.pid = p
                     AND l.objsubid = 1 AND l.mode = 'ExclusiveLock'
                     AND l.classid = (k >> 32)::oid AND l.objid = (k & 4294967295)::oid)
$$;
";

/// Creates or upgrades the tables; returns the version now in place.
pub(crate) fn migrate(session: &Session) -> Result<i32, PgError> {
    // The common case, one round trip: already there.
    match current(session) {
        Ok(Some(v)) if v == SCHEMA_VERSION => return Ok(v),
        Ok(Some(v)) if v > SCHEMA_VERSION => {
            return Err(PgError::SchemaTooNew {
                found: v,
                known: SCHEMA_VERSION,
            })
        }
        _ => {}
    }
    let found = session.run("create baton's tables", |c| async move {
        c.batch_execute("BEGIN").await?;
        let result = async {
            c.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
                .await?;
            c.batch_execute(
                "CREATE TABLE IF NOT EXISTS baton_lock_schema (version integer NOT NULL)",
            )
            .await?;
            let v: Option<i32> = c
                .query_opt("SELECT version FROM baton_lock_schema", &[])
                .await?
                .map(|r| r.get(0));
            match v {
                None => {
                    c.batch_execute(V1).await?;
                    c.batch_execute(V2).await?;
                    c.batch_execute(V3).await?;
                    c.batch_execute(V4).await?;
                    c.batch_execute(V5).await?;
                    c.execute(
                        "INSERT INTO baton_lock_schema (version) VALUES ($1)",
                        &[&SCHEMA_VERSION],
                    )
                    .await?;
                }
                Some(v @ 1..=4) => {
                    if v < 2 {
                        c.batch_execute(V2).await?;
                    }
                    if v < 3 {
                        c.batch_execute(V3).await?;
                    }
                    if v < 4 {
                        c.batch_execute(V4).await?;
                    }
                    c.batch_execute(V5).await?;
                    c.execute(
                        "UPDATE baton_lock_schema SET version = $1",
                        &[&SCHEMA_VERSION],
                    )
                    .await?;
                }
                Some(_) => {}
            }
            Ok::<_, tokio_postgres::Error>(v.map_or(SCHEMA_VERSION, |v| v.max(SCHEMA_VERSION)))
        }
        .await;
        match result {
            Ok(v) => {
                c.batch_execute("COMMIT").await?;
                Ok(v)
            }
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK").await;
                Err(e)
            }
        }
    })?;
    if found > SCHEMA_VERSION {
        return Err(PgError::SchemaTooNew {
            found,
            known: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

/// The version in place, `None` when the tables do not exist yet.
fn current(session: &Session) -> Result<Option<i32>, PgError> {
    let c = std::sync::Arc::clone(&session.client);
    match session.rt.block_on(async move {
        c.query_opt("SELECT version FROM baton_lock_schema", &[])
            .await
    }) {
        Ok(row) => Ok(row.map(|r| r.get(0))),
        Err(e) if sqlstate(&e) == Some("42P01") => Ok(None),
        Err(e) => Err(session.error("read baton's schema version", &e)),
    }
}
