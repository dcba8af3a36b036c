//! `reserve`, `release`, `reservations`: path reservations of the
//! repository, held by the session (baton-lock's `reserve` engine decides;
//! this module translates). And the watch that tells the session when an
//! operator broke one of its reservations.

use std::sync::Arc;
use std::time::Duration;

use baton_lock::reserve::{
    Conflict, Pattern, ReservationHolder, ReservationRecord, ReserveError, ReserveRequest, Space,
};
use baton_lock::Mode;
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};

use crate::session::{Held, Session};
use crate::types::{
    ConflictOut, HolderOut, ReleaseArgs, ReleaseOut, ReservationOut, ReservationsArgs,
    ReservationsOut, ReserveArgs, ReserveMode, ReserveOut,
};
use crate::wait::{blocking, wait_policy};
use crate::{Outcome, ToolError};

/// How often the session's reservations are checked for an operator's break.
const BROKEN_POLL: Duration = Duration::from_secs(1);

pub(crate) fn space(session: &Session) -> Space {
    Space::new(
        session.config.repo_key.clone(),
        session.repo().to_path_buf(),
    )
}

fn mode_out(mode: Mode) -> ReserveMode {
    match mode {
        Mode::Shared => ReserveMode::Shared,
        _ => ReserveMode::Exclusive,
    }
}

fn holder_out(h: &ReservationHolder) -> HolderOut {
    HolderOut {
        agent: h.agent.clone(),
        pid: h.pid,
        client_pid: h.client_pid,
        host: h.host.clone(),
        since: h.since.clone(),
        reason: h.reason.clone(),
    }
}

fn conflict_out(c: &Conflict) -> ConflictOut {
    ConflictOut {
        path: c.pattern.to_string(),
        mode: mode_out(c.mode),
        granted: c.granted,
        holder: holder_out(&c.holder),
    }
}

fn patterns(space: &Space, raw: &[String]) -> Result<Vec<Pattern>, ToolError> {
    raw.iter()
        .map(|p| space.pattern(p).map_err(ToolError::from))
        .collect()
}

fn joined(patterns: &[Pattern]) -> String {
    patterns
        .iter()
        .map(|p| format!("'{p}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `reserve`.
pub(crate) async fn reserve(
    session: &Arc<Session>,
    args: ReserveArgs,
    ctx: &RequestContext<RoleServer>,
) -> Outcome<ReserveOut> {
    if args.paths.is_empty() {
        return Err(ToolError::Invalid(
            "reserve: no path given (paths is empty)".to_string(),
        ));
    }
    let space = space(session);
    let pats = patterns(&space, &args.paths)?;
    let wait = wait_policy(args.wait_seconds, &format!("reserve {}", joined(&pats)))?;
    let mut holder = ReservationHolder::current(session.agent(), session.identity.session.clone());
    holder.client_pid = session.identity.client_pid;
    holder.principal = session.identity.principal.clone();
    holder.reason = args.reason.clone().filter(|r| !r.is_empty());
    let cancel = session.wait_token();
    let req = ReserveRequest {
        patterns: pats.clone(),
        mode: match args.mode {
            ReserveMode::Exclusive => Mode::Exclusive,
            ReserveMode::Shared => Mode::Shared,
        },
        wait,
        holder,
        cancel: Some(cancel.clone()),
    };
    let store = session.config.reservations.clone();
    let total = (args.wait_seconds > 0.0).then_some(args.wait_seconds);
    let what = format!("waiting to reserve {}", joined(&pats));
    let got = blocking(ctx, cancel, total, what, move || {
        store.reserve(&space, &req)
    })
    .await
    .ok_or_else(|| {
        ToolError::Engine(format!(
            "reserve {}: the waiting thread failed",
            joined(&pats)
        ))
    })?;
    let paths: Vec<String> = pats.iter().map(ToString::to_string).collect();
    let reservation = match got {
        Ok(r) => r,
        Err(ReserveError::Busy { conflicts }) => {
            let first = conflicts
                .first()
                .map(Conflict::describe)
                .unwrap_or_else(|| "busy".to_string());
            let summary = format!("not granted: {first}");
            return Ok((
                ReserveOut {
                    granted: false,
                    token: None,
                    paths,
                    conflicts: conflicts.iter().map(conflict_out).collect(),
                    previous_holder_died: false,
                    previous_holder: None,
                },
                summary,
            ));
        }
        Err(ReserveError::Cancelled) => {
            return Err(ToolError::Cancelled(format!(
                "reserve {}: the wait was cancelled",
                joined(&pats)
            )))
        }
        Err(e) => return Err(e.into()),
    };
    let previous = reservation
        .previous_holder_died()
        .map(|r| holder_out(&r.holder));
    let out = ReserveOut {
        granted: true,
        token: Some(reservation.token()),
        paths: reservation
            .patterns()
            .iter()
            .map(ToString::to_string)
            .collect(),
        conflicts: Vec::new(),
        previous_holder_died: previous.is_some(),
        previous_holder: previous,
    };
    {
        let mut held = session.reservations();
        if session.is_closed() {
            drop(held);
            Held(reservation).release_quietly();
            return Err(ToolError::Cancelled(format!(
                "reserve {}: the session ended while it was granted; released",
                joined(&pats)
            )));
        }
        held.insert(reservation.token(), Held(reservation));
    }
    let died = match &out.previous_holder {
        Some(h) => format!(
            "; its previous holder {} (pid {}) died holding it: its work may be half done",
            h.agent, h.pid
        ),
        None => String::new(),
    };
    let summary = format!(
        "reserved {} ({}, token {}){died}",
        joined(&pats),
        match args.mode {
            ReserveMode::Exclusive => "exclusive",
            ReserveMode::Shared => "shared",
        },
        out.token.unwrap_or(0)
    );
    Ok((out, summary))
}

/// `release`.
pub(crate) fn release(session: &Arc<Session>, args: ReleaseArgs) -> Outcome<ReleaseOut> {
    let wanted = match &args.paths {
        Some(raw) => Some(patterns(&space(session), raw)?),
        None => None,
    };
    let taken: Vec<Held> = {
        let mut held = session.reservations();
        let tokens: Vec<u64> = match &wanted {
            None => held.keys().copied().collect(),
            Some(want) => {
                if let Some(missing) = want
                    .iter()
                    .find(|w| !held.values().any(|h| h.0.patterns().contains(w)))
                {
                    return Err(ToolError::NotFound(format!(
                        "release: '{missing}' is not reserved by this session"
                    )));
                }
                held.iter()
                    .filter(|(_, h)| h.0.patterns().iter().any(|p| want.contains(p)))
                    .map(|(t, _)| *t)
                    .collect()
            }
        };
        tokens.iter().filter_map(|t| held.remove(t)).collect()
    };
    let mut released = Vec::new();
    let mut failed = None;
    for h in taken {
        let paths: Vec<String> = h.0.patterns().iter().map(ToString::to_string).collect();
        match h.0.release() {
            Ok(()) => released.extend(paths),
            // The liveness lock is freed anyway: the row is dead to others.
            Err(e) => {
                released.extend(paths);
                failed = Some(baton_lock::one_line(&e));
            }
        }
    }
    if let Some(e) = failed {
        tracing::warn!("release: {e}");
    }
    let summary = if released.is_empty() {
        "nothing was reserved by this session".to_string()
    } else {
        format!(
            "released {}",
            released
                .iter()
                .map(|p| format!("'{p}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    Ok((ReleaseOut { released }, summary))
}

/// One entry per path of each row (only those overlapping `filter`).
fn rows_out(
    session: &Session,
    rows: &[ReservationRecord],
    filter: Option<&Pattern>,
) -> Vec<ReservationOut> {
    let mut out = Vec::new();
    for r in rows {
        for p in &r.patterns {
            if filter.is_some_and(|f| !p.overlaps(f)) {
                continue;
            }
            out.push(ReservationOut {
                path: p.to_string(),
                mode: mode_out(r.mode),
                granted: r.granted,
                agent: r.holder.agent.clone(),
                pid: r.holder.pid,
                client_pid: r.holder.client_pid,
                host: r.holder.host.clone(),
                since: r.holder.since.clone(),
                reason: r.holder.reason.clone(),
                token: r.token,
                this_session: r.holder.session == session.identity.session,
            });
        }
    }
    out
}

/// `reservations`.
pub(crate) fn list(session: &Arc<Session>, args: ReservationsArgs) -> Outcome<ReservationsOut> {
    let space = space(session);
    let filter = match &args.path {
        Some(p) => Some(space.pattern(p)?),
        None => None,
    };
    let rows = session
        .config
        .reservations
        .reservations(&space, filter.as_ref())?;
    let reservations = rows_out(session, &rows, filter.as_ref());
    let mine = reservations.iter().filter(|r| r.this_session).count();
    let summary = format!(
        "{} reserved path(s), {mine} of them this session's",
        reservations.len()
    );
    Ok((ReservationsOut { reservations }, summary))
}

/// Checks, about once a second while the session holds reservations,
/// whether an operator broke one; if so, lets it go and tells the client
/// with a logging notification (level warning).
pub(crate) fn watch_broken(
    session: Arc<Session>,
    peer: Peer<RoleServer>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(BROKEN_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if session.is_closed() {
                return;
            }
            let s = session.clone();
            let broken = tokio::task::spawn_blocking(move || take_broken(&s))
                .await
                .unwrap_or_default();
            for (token, paths, lost) in broken {
                let how = if lost {
                    "was lost with its database session (the server or the network to it failed)"
                } else {
                    "was broken by an operator"
                };
                let text = format!(
                    "reservation {token} of {} {how}: this session no longer holds it",
                    paths
                        .iter()
                        .map(|p| format!("'{p}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                #[allow(deprecated)] // logging: see BatonServer::get_info
                let param = rmcp::model::LoggingMessageNotificationParam::new(
                    rmcp::model::LoggingLevel::Warning,
                    serde_json::json!({
                        "message": text,
                        "event": if lost { "reservation_lost" } else { "reservation_broken" },
                        "token": token,
                        "paths": paths,
                    }),
                )
                .with_logger("baton");
                #[allow(deprecated)]
                if let Err(e) = peer.notify_logging_message(param).await {
                    tracing::debug!("logging notification not sent: {e}");
                }
            }
        }
    })
}

/// Takes the broken reservations, and those lost with their database
/// session, out of the session: (token, paths, lost) of each.
fn take_broken(session: &Session) -> Vec<(u64, Vec<String>, bool)> {
    let found: Vec<(u64, bool)> = {
        let held = session.reservations();
        held.iter()
            .filter_map(|(t, h)| {
                if h.0.is_lost() {
                    Some((*t, true))
                } else {
                    h.0.is_broken().unwrap_or(false).then_some((*t, false))
                }
            })
            .collect()
    };
    let mut out = Vec::new();
    for (t, lost) in found {
        let removed = session.reservations().remove(&t);
        if let Some(h) = removed {
            let paths = h.0.patterns().iter().map(ToString::to_string).collect();
            // Its row is gone already; this frees its liveness lock.
            h.release_quietly();
            out.push((t, paths, lost));
        }
    }
    out
}
