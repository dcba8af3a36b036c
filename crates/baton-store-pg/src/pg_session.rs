//! A PostgreSQL node's session: one dedicated connection that holds the
//! node's liveness lock (a session-level advisory lock on its number in
//! `baton_nodes`), LISTENs for wake-ups and cancels, and heartbeats. While
//! it is up the node is live; when it drops (database restart, network
//! loss) the node is told at once, and the session is re-established in
//! the background.
//!
//! Both ends are configured to notice a dead peer, and the heartbeat keeps
//! baton-pg's cadence and limit, so each answered heartbeat vouches for the
//! node's jobs within `baton_pg::FENCE`: all three come from
//! `baton_pg::liveness`, the one definition.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc};
use tokio_postgres::AsyncMessage;

use baton_pg::one_line;

use baton_store::StoreEvent;

/// The advisory lock class (first key) of node liveness locks.
pub(super) const NODE_CLASS: i32 = 0x6261_746e; // "batn"

/// How long to wait for the liveness lock of this node id (held by a
/// previous session of the same node the server has not ended yet).
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The state shared by the store and its session task.
pub(super) struct Shared {
    /// Whether the session (and so the liveness lock) is held now.
    pub live: AtomicBool,
    /// This node's number (the liveness lock's second key); 0 before the
    /// first session.
    pub num: AtomicI32,
    /// The backend pid of the session that holds the liveness lock (read
    /// when a session is established, again at each re-establishment); 0
    /// before the first. The lock granted to any other backend is not this
    /// node's.
    pub backend: AtomicI32,
    /// Events for the service.
    pub events: broadcast::Sender<StoreEvent>,
}

/// An established session.
struct Connected {
    client: tokio_postgres::Client,
    notes: mpsc::UnboundedReceiver<(String, String)>,
}

/// The `application_name` of node `node`'s connections: `baton serve `
/// and the node id's last 48 bytes (the server keeps 63; the id's random
/// part is at its end).
pub(super) fn application_name(node: &str) -> String {
    let mut start = node.len().saturating_sub(48);
    while !node.is_char_boundary(start) {
        start += 1;
    }
    format!("baton serve {}", &node[start..])
}

/// This baton dir's node id (`<host>-<random>`), made once and kept in
/// `<baton dir>/serve/node-id` so that a restart recovers its own jobs.
pub fn node_id(baton_dir: &Path) -> Result<String, String> {
    let path = baton_dir.join("serve").join("node-id");
    if let Ok(s) = std::fs::read_to_string(&path) {
        let s = s.trim();
        if !s.is_empty() {
            return Ok(s.to_string());
        }
    }
    let host = baton_lock::hostname().to_string();
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_i64(baton_store::now_ms());
    let id = format!("{host}-{:08x}", h.finish() & 0xffff_ffff);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create '{}': {e}", parent.display()))?;
    }
    std::fs::write(&path, format!("{id}\n"))
        .map_err(|e| format!("cannot write '{}': {e}", path.display()))?;
    Ok(id)
}

/// Establishes the first session (an error if it cannot), then keeps it up
/// in the background for the life of the process.
pub(super) async fn start(
    cfg: tokio_postgres::Config,
    tls: baton_pg::Tls,
    node: String,
    shared: Arc<Shared>,
) -> Result<(), String> {
    let first = connect(&cfg, &tls, &node, &shared).await?;
    tokio::spawn(async move {
        let mut session = first;
        loop {
            hold(session, &node, &shared).await;
            session = loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match connect(&cfg, &tls, &node, &shared).await {
                    Ok(s) => break s,
                    Err(e) => {
                        tracing::warn!(target: "baton_serve::store", error = %e, "cannot re-establish the database session; retrying")
                    }
                }
            };
            tracing::info!(target: "baton_serve::store", node = %node, "database session re-established");
        }
    });
    Ok(())
}

/// Connects, LISTENs, registers the node and takes its liveness lock.
async fn connect(
    cfg: &tokio_postgres::Config,
    tls: &baton_pg::Tls,
    node: &str,
    shared: &Shared,
) -> Result<Connected, String> {
    let (client, mut conn) = cfg.connect(tls.clone()).await.map_err(|e| one_line(&e))?;
    let (tx, notes) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "baton_serve::store", error = %one_line(&e), "the database session ended");
                    break;
                }
            }
        }
    });
    for setting in baton_pg::liveness::SERVER_KEEPALIVES {
        // Best effort: a server that lacks one still works, only slower to
        // notice a dead machine.
        if let Err(e) = client.batch_execute(setting).await {
            tracing::debug!(target: "baton_serve::store", error = %one_line(&e), setting, "server setting refused");
        }
    }
    client
        .batch_execute("LISTEN baton_jobs; LISTEN baton_cancel; LISTEN baton_supersede")
        .await
        .map_err(|e| one_line(&e))?;
    let host = baton_lock::hostname().to_string();
    let pid = i32::try_from(std::process::id()).unwrap_or(0);
    let row = client
        .query_one(
            "INSERT INTO baton_nodes (id, host, pid, started_at, heartbeat_at) \
             VALUES ($1, $2, $3, now(), now()) \
             ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3, heartbeat_at = now(), \
             started_at = CASE WHEN baton_nodes.pid IS DISTINCT FROM $3 \
                 OR baton_nodes.host IS DISTINCT FROM $2 THEN now() \
                 ELSE baton_nodes.started_at END \
             RETURNING num",
            &[&node, &host, &pid],
        )
        .await
        .map_err(|e| one_line(&e))?;
    let num: i32 = row.get(0);
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    let backend = loop {
        let row = client
            .query_one(
                "SELECT pg_try_advisory_lock($1::int4, $2::int4), pg_backend_pid()",
                &[&NODE_CLASS, &num],
            )
            .await
            .map_err(|e| one_line(&e))?;
        if row.get::<_, bool>(0) {
            break row.get::<_, i32>(1);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the liveness lock of node '{node}' is held by another session (is another \
                 `baton serve` using this baton dir's node id?)"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // Which session holds the lock, for the other nodes' listings.
    client
        .execute(
            "UPDATE baton_nodes SET backend_pid = $2 WHERE id = $1",
            &[&node, &backend],
        )
        .await
        .map_err(|e| one_line(&e))?;
    shared.num.store(num, Ordering::SeqCst);
    shared.backend.store(backend, Ordering::SeqCst);
    Ok(Connected { client, notes })
}

/// Holds the session until it drops: forwards notifications, heartbeats.
async fn hold(mut session: Connected, node: &str, shared: &Shared) {
    shared.live.store(true, Ordering::SeqCst);
    let _ = shared.events.send(StoreEvent::Live(true));
    // Notifications sent while there was no session are lost: look.
    let _ = shared.events.send(StoreEvent::Wake);
    let mut tick = baton_pg::liveness::ticker();
    loop {
        tokio::select! {
            note = session.notes.recv() => match note {
                Some((channel, payload)) => {
                    let event = match channel.as_str() {
                        "baton_cancel" => StoreEvent::Cancel(payload),
                        "baton_supersede" => {
                            let mut parts = payload.splitn(3, ' ');
                            match (
                                parts.next().and_then(|s| s.parse::<i64>().ok()),
                                parts.next(),
                                parts.next(),
                            ) {
                                (Some(seq), Some(by), Some(group)) => StoreEvent::Supersede {
                                    group: group.to_string(),
                                    by: by.to_string(),
                                    seq,
                                },
                                _ => StoreEvent::Wake,
                            }
                        }
                        _ => StoreEvent::Wake,
                    };
                    let _ = shared.events.send(event);
                }
                None => break,
            },
            _ = tick.tick() => {
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&node];
                let beat = session.client.execute(
                    "UPDATE baton_nodes SET heartbeat_at = now() WHERE id = $1",
                    &params,
                );
                match baton_pg::liveness::beat(beat).await {
                    Ok(sent) => {
                        let _ = shared.events.send(StoreEvent::Alive(sent));
                    }
                    Err(e) => {
                        tracing::warn!(target: "baton_serve::store", error = %e, "heartbeat failed");
                        break;
                    }
                }
            }
        }
    }
    shared.live.store(false, Ordering::SeqCst);
    tracing::error!(target: "baton_serve::store", node = %node, "lost the database session: this node's jobs are stopped and it claims none until the session is back");
    let _ = shared.events.send(StoreEvent::Live(false));
}
