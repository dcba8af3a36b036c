//! One database session: the connection a holder keeps for as long as it
//! holds, since the server releases session advisory locks when it ends.
//!
//! The connection is driven by a task on a small runtime owned by the
//! session, so its end is noticed the instant it happens (the server
//! terminated it, restarted, or the socket failed), not at the next query.
//! Both ends watch for a dead peer, and while holding a heartbeat sent
//! every 2 s (at a fixed cadence, whatever the answers take) that does not
//! answer within 3 s counts as a lost session too: see [`crate::liveness`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use crate::error::{one_line, sqlstate, PgError};
use crate::liveness::{HEARTBEAT, HEARTBEAT_LIMIT};
use baton_lock::redact;

/// How long making a session may take (the TCP connection, the login, the
/// session's settings) before it counts as failed.
pub(crate) const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// How long each step of a release may take: a release after a lost
/// session, or on a network that black-holes packets, ends in bounded time
/// (the locks are free anyway once the session is closed).
pub(crate) const RELEASE_LIMIT: Duration = Duration::from_secs(5);

/// How long a holder's command may run past the sending of the last
/// heartbeat its session answered, when its supervisor stops vouching for
/// it (stalled, or cut off): the bound of its guardian's fence
/// (`baton_proc::Fence`). A live supervisor notices a lost session sooner
/// (interval + limit). Another machine takes over no earlier than this plus
/// 1 s (and the holder's grace) after it sees the session ended, and the
/// session ended after that heartbeat was sent: the command is stopped
/// first.
pub const FENCE: Duration = Duration::from_secs(7);

// A live session never trips its fence: a heartbeat is sent at most
// max(interval, limit) after the previous one and answered within the
// limit, before the previous proof's deadline; and a live supervisor notices
// a lost session within the fence.
const _: () = assert!(
    (if HEARTBEAT.as_secs() > HEARTBEAT_LIMIT.as_secs() {
        HEARTBEAT.as_secs()
    } else {
        HEARTBEAT_LIMIT.as_secs()
    }) + HEARTBEAT_LIMIT.as_secs()
        < FENCE.as_secs()
);
const _: () = assert!(HEARTBEAT.as_secs() + HEARTBEAT_LIMIT.as_secs() <= FENCE.as_secs());

/// A callback told a one-line message (see [`Database::on_notice`]).
pub(crate) type Notice = Arc<dyn Fn(&str) + Send + Sync>;

/// The pauses of a wait that lost its database session and connects again
/// ([`Database::pause_to_reconnect`]).
pub(crate) struct Reconnect {
    told: bool,
    backoff: Duration,
}

impl Default for Reconnect {
    fn default() -> Reconnect {
        Reconnect {
            told: false,
            backoff: Duration::from_millis(100),
        }
    }
}

/// Where the locks live: a parsed backend URL.
#[derive(Clone)]
pub struct Database {
    pub(crate) config: tokio_postgres::Config,
    /// The TLS connector `sslmode`/`sslrootcert` asked for (`crate::tls`).
    pub(crate) tls: crate::tls::Tls,
    /// The URL with its password replaced, for messages.
    pub(crate) shown: String,
    /// Told (once per wait) when a wait goes on through a lost session.
    pub(crate) notice: Option<Notice>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("url", &self.shown)
            .finish()
    }
}

impl Database {
    /// Before a wait whose session was lost (`e`) tries again: false when
    /// the next pause would pass `deadline` (give up with `e`). Else tells
    /// the notice once (`waiting on{what}, reconnecting`), logs `log` and
    /// sleeps, 100 ms at first, doubling up to 2 s.
    pub(crate) fn pause_to_reconnect(
        &self,
        r: &mut Reconnect,
        e: &PgError,
        deadline: Option<std::time::Instant>,
        what: &str,
        log: &str,
    ) -> bool {
        if deadline.is_some_and(|d| std::time::Instant::now() + r.backoff >= d) {
            return false;
        }
        if !r.told {
            r.told = true;
            if let Some(f) = &self.notice {
                f(&format!("{e}; waiting on{what}, reconnecting"));
            }
        }
        tracing::warn!(error = %e, "{log}");
        std::thread::sleep(r.backoff);
        r.backoff = (r.backoff * 2).min(Duration::from_secs(2));
        true
    }

    /// Parses a `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?options]` URL
    /// (or `postgresql://`). Nothing is connected yet.
    ///
    /// # Errors
    ///
    /// [`PgError::Url`] naming what is wrong with it.
    pub fn new(url: &str) -> Result<Database, PgError> {
        let shown = redact(url);
        let bad = |reason: String| PgError::Url {
            url: shown.clone(),
            reason,
        };
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad(
                "only postgres:// (or postgresql://) URLs are supported".into(),
            ));
        }
        let (mut config, tls) = crate::tls::client_config(url)?;
        if config.get_hosts().is_empty() {
            return Err(bad("it names no host".into()));
        }
        if config.get_dbname().is_none() {
            return Err(bad(
                "it names no database (postgres://USER@HOST/DATABASE)".into()
            ));
        }
        if config.get_user().is_none() {
            return Err(bad(
                "it names no user (postgres://USER@HOST/DATABASE)".into()
            ));
        }
        if config.get_application_name().is_none() {
            config.application_name("baton");
        }
        crate::liveness::client_keepalives(&mut config);
        Ok(Database {
            config,
            tls,
            shown,
            notice: None,
        })
    }

    /// Calls `f` with a one-line message when a wait for a lock loses its
    /// session (the server restarted, the connection broke) and goes on
    /// waiting on a new one: once per wait. The library prints nothing
    /// itself; a command-line front end shows it on stderr.
    #[must_use]
    pub fn on_notice(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Database {
        self.notice = Some(Arc::new(f));
        self
    }

    /// The URL, its password replaced by `***`.
    pub fn url(&self) -> &str {
        &self.shown
    }

    pub(crate) fn connect(&self) -> Result<Session, PgError> {
        Session::connect(self)
    }
}

/// Callbacks run once when the session ends unasked.
#[derive(Default)]
pub(crate) struct Lost {
    state: Mutex<LostState>,
}

#[derive(Default)]
struct LostState {
    lost: bool,
    closing: bool,
    callbacks: Vec<Box<dyn Fn() + Send>>,
    /// Told of each heartbeat answered, with the instant it was sent.
    alive: Vec<Box<dyn Fn(std::time::Instant) + Send>>,
}

impl Lost {
    fn lock(&self) -> std::sync::MutexGuard<'_, LostState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session ended: run the callbacks (once), unless we closed it.
    pub(crate) fn fire(&self) {
        let callbacks = {
            let mut s = self.lock();
            if s.lost || s.closing {
                return;
            }
            s.lost = true;
            std::mem::take(&mut s.callbacks)
        };
        for f in callbacks {
            f();
        }
    }

    /// Registers `f`; runs it at once if the session is already lost.
    pub(crate) fn on_lost(&self, f: Box<dyn Fn() + Send>) {
        let mut s = self.lock();
        if s.lost {
            drop(s);
            f();
        } else {
            s.callbacks.push(f);
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lock().lost
    }

    /// Registers `f`, told of every heartbeat answered while the session
    /// lives (with the instant the heartbeat was sent).
    pub(crate) fn on_alive(&self, f: Box<dyn Fn(std::time::Instant) + Send>) {
        self.lock().alive.push(f);
    }

    /// A heartbeat sent at `sent` was answered.
    fn alive(&self, sent: std::time::Instant) {
        let s = self.lock();
        if !s.lost {
            for f in &s.alive {
                f(sent);
            }
        }
    }

    /// We are ending the session ourselves: no callbacks.
    pub(crate) fn closing(&self) {
        self.lock().closing = true;
    }
}

/// A connected session.
pub(crate) struct Session {
    pub(crate) rt: Runtime,
    pub(crate) client: Arc<tokio_postgres::Client>,
    pub(crate) lost: Arc<Lost>,
    pub(crate) notes: mpsc::UnboundedReceiver<String>,
    pub(crate) db: Database,
}

impl Session {
    fn connect(db: &Database) -> Result<Session, PgError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("baton-pg")
            .enable_all()
            .build()
            .map_err(|e| PgError::Database {
                op: "start the database client",
                message: e.to_string(),
            })?;
        let lost = Arc::new(Lost::default());
        let (notes_tx, notes) = mpsc::unbounded_channel();
        let driver_lost = Arc::clone(&lost);
        let config = db.config.clone();
        let tls = db.tls.clone();
        let connected = rt.block_on(async move {
            let (client, mut connection) =
                match tokio::time::timeout(CONNECT_LIMIT, config.connect(tls)).await {
                    Ok(c) => c?,
                    Err(_) => return Ok(None),
                };
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            tokio::spawn(async move {
                while let Some(m) = messages.next().await {
                    match m {
                        Ok(AsyncMessage::Notification(n)) => {
                            let _ = notes_tx.send(n.payload().to_string());
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(error = %one_line(&e), "database session ended");
                            break;
                        }
                    }
                }
                driver_lost.fire();
            });
            Ok::<_, tokio_postgres::Error>(Some(client))
        });
        let client = match connected.map_err(|e| connect_error(db, &e))? {
            Some(c) => c,
            None => {
                return Err(PgError::Unavailable {
                    url: db.shown.clone(),
                    reason: format!(
                        "no answer within {} s (is the server up, and the host and port right?)",
                        CONNECT_LIMIT.as_secs()
                    ),
                })
            }
        };
        let client = Arc::new(client);
        // One round trip in the usual case. A client that dies while its
        // session waits in the server's lock queue (Ctrl-C, SIGKILL) must
        // leave the queue: the server does not read from a session blocked
        // in a lock wait, so without `client_connection_check_interval`
        // the dead waiter keeps its place (and its connection) until it is
        // granted the lock. It exists from PostgreSQL 14; before, the
        // setting fails the whole batch, and the rest is set alone.
        let keepalives = crate::liveness::SERVER_KEEPALIVES.join("; ");
        let c = Arc::clone(&client);
        let set = rt.block_on(async move {
            // Bounded: a server that accepted the connection and then
            // stopped answering must not hang the caller (a release after a
            // lost session connects anew).
            tokio::time::timeout(CONNECT_LIMIT, async move {
                let all = format!("{keepalives}; SET client_connection_check_interval = 1000");
                match c.batch_execute(&all).await {
                    Ok(()) => Ok(()),
                    Err(e) if sqlstate(&e) == Some("42704") => {
                        tracing::debug!(error = %one_line(&e), "no client_connection_check_interval");
                        c.batch_execute(&keepalives).await
                    }
                    Err(e) => Err(e),
                }
            })
            .await
        });
        let start_failed = |message: String| PgError::Database {
            op: "start a session",
            message,
        };
        match set {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(start_failed(one_line(&e))),
            Err(_) => {
                return Err(start_failed(format!(
                    "no answer within {} s",
                    CONNECT_LIMIT.as_secs()
                )))
            }
        }
        Ok(Session {
            rt,
            client,
            lost,
            notes,
            db: db.clone(),
        })
    }

    /// Runs `f` with the client on the session's runtime.
    pub(crate) fn run<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T, PgError>
    where
        F: FnOnce(Arc<tokio_postgres::Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        self.rt
            .block_on(f(Arc::clone(&self.client)))
            .map_err(|e| self.error(op, &e))
    }

    /// Like [`Session::run`], but gives up after `limit` (the server, or
    /// the network to it, stopped answering): for steps that must end in a
    /// bounded time whatever the network does, such as a release.
    pub(crate) fn run_within<T, F, Fut>(
        &self,
        op: &'static str,
        limit: Duration,
        f: F,
    ) -> Result<T, PgError>
    where
        F: FnOnce(Arc<tokio_postgres::Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        match self
            .rt
            .block_on(async { tokio::time::timeout(limit, f(Arc::clone(&self.client))).await })
        {
            Ok(r) => r.map_err(|e| self.error(op, &e)),
            Err(_) => Err(PgError::Database {
                op,
                message: format!("no answer within {} s", limit.as_secs()),
            }),
        }
    }

    /// A statement's error as a typed error.
    pub(crate) fn error(&self, op: &'static str, e: &tokio_postgres::Error) -> PgError {
        if crate::error::session_ended(e) || self.lost.is_lost() {
            return PgError::SessionLost {
                op,
                message: one_line(e),
            };
        }
        if sqlstate(e) == Some("42501") {
            return PgError::Permission {
                url: self.db.shown.clone(),
                op,
                reason: format!(
                    "{} (grant the user the privilege, or run `baton db migrate` once as the database's owner)",
                    one_line(e)
                ),
            };
        }
        PgError::Database {
            op,
            message: one_line(e),
        }
    }

    /// Starts the heartbeat: a session whose server stops answering counts
    /// as lost, even before TCP notices.
    pub(crate) fn start_heartbeat(&self) {
        let client = Arc::clone(&self.client);
        let lost = Arc::clone(&self.lost);
        self.rt.spawn(async move {
            // A fixed cadence: the next heartbeat does not wait for the
            // interval after a slow answer (a slow but live server must not
            // let the guardian's deadline pass).
            let mut tick = crate::liveness::ticker();
            tick.tick().await;
            loop {
                tick.tick().await;
                match crate::liveness::beat(client.simple_query("")).await {
                    Ok(sent) => lost.alive(sent),
                    Err(e) => {
                        tracing::debug!(error = %e, "heartbeat failed");
                        lost.fire();
                        return;
                    }
                }
            }
        });
    }

    /// Ends the session on purpose (its locks are released by the server).
    pub(crate) fn close(self) {
        self.lost.closing();
        let Session { rt, client, .. } = self;
        drop(client);
        rt.shutdown_background();
    }
}

/// Why a connection could not be made, in the words a user needs.
fn connect_error(db: &Database, e: &tokio_postgres::Error) -> PgError {
    if let Some(failure) = db.tls.failure(e) {
        return PgError::Tls {
            url: db.shown.clone(),
            failure,
        };
    }
    let user = db.config.get_user().unwrap_or("?");
    let dbname = db.config.get_dbname().unwrap_or("?");
    let reason = match sqlstate(e) {
        Some("28P01") | Some("28000") => format!(
            "the server refused the login of user '{user}' ({})",
            one_line(e)
        ),
        Some("3D000") => format!("database '{dbname}' does not exist (create it first)"),
        Some("42501") => format!(
            "user '{user}' may not connect to '{dbname}' ({})",
            one_line(e)
        ),
        _ => {
            let text = one_line(e);
            let text = if text.contains("timed out") {
                "no answer within 5 s (is the server up, and the host and port right?)".into()
            } else {
                text
            };
            // Refused, reset, starting up: a restart looks like this too.
            if sqlstate(e).is_none() || crate::error::session_ended(e) {
                return PgError::Unavailable {
                    url: db.shown.clone(),
                    reason: text,
                };
            }
            text
        }
    };
    PgError::Connect {
        url: db.shown.clone(),
        reason,
    }
}
