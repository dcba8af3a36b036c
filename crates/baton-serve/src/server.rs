//! The service's entry points, in the order a start takes them:
//! [`claim_instance`] (one service per baton dir), [`bind`], [`open`] (the
//! store), [`launch`] (recovery, then answering until the caller's shutdown
//! future completes, then the drain); and the router with its auth and body
//! limit. The process around it (the runtime, the signals) is the binary's:
//! `launch` is what tests run in process.
//!
//! Design: see `docs/src/design/service.md`.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use baton_lock::{BatonDir, LockError, LockName, LockRequest, WaitPolicy};

use crate::api::{self, ApiError, AppState};
use crate::config::Config;
use crate::service::Service;
use crate::store::{self, StoreError};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The store could not be opened or recovered.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another service uses this baton dir, or its lock could not be taken.
    #[error("{0}")]
    Instance(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The async runtime or the server failed.
    #[error("the service failed: {0}")]
    Runtime(#[source] std::io::Error),
    /// What was asked cannot be done on this platform (said in full).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The socket the service manager passed cannot be served.
    #[error(transparent)]
    Activation(#[from] crate::activation::ActivationError),
    /// The socket the service manager passed is on an address that needs a
    /// token, and none is configured.
    #[error(
        "refusing to serve the socket passed by the service manager on {0} without a token: \
         set `token` in the config file or BATON_SERVE_TOKEN (a loopback address needs none)"
    )]
    ActivatedWithoutToken(std::net::SocketAddr),
}

/// Where the service's listening socket comes from, which decides what it
/// does with it during the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    /// The service bound its address itself ([`bind`]): while it drains it
    /// keeps accepting and answers each request (new jobs: 503 `draining`
    /// with `Retry-After`), since closing the socket would refuse clients.
    Bound,
    /// The service manager passed the socket and keeps it open across
    /// restarts ([`adopt`], socket activation): the service stops accepting
    /// as soon as its drain begins and closes its idle connections, so a
    /// request that arrives meanwhile waits in the socket's queue for the
    /// next instance instead of being refused by this one. Requests under
    /// way are answered as in [`Listening::Bound`].
    Activated,
}

/// This baton dir's one service: while it is held, another service on the
/// same baton dir is refused ([`claim_instance`]).
#[must_use = "the baton dir is this service's only while the instance is held"]
pub struct Instance {
    _lock: baton_lock::LockGuard,
}

/// Takes the baton dir for one service (an exclusive baton lock,
/// `serve/instance`), without waiting.
///
/// Start-up takes, in this order, what only one service may have — the
/// baton dir (this), the address ([`bind`]), the store ([`open`]) — before
/// it reads or changes any job ([`launch`]): a start that fails for any
/// reason leaves every job as it was.
///
/// # Errors
///
/// [`ServeError::Instance`]: another service runs on this baton dir, or the
/// lock could not be taken.
pub fn claim_instance(dir: &BatonDir) -> Result<Instance, ServeError> {
    let name = LockName::new("serve/instance").map_err(|e| ServeError::Instance(e.to_string()))?;
    baton_lock::acquire(
        dir,
        &LockRequest::new(name)
            .wait(WaitPolicy::Immediately)
            .operation("baton serve"),
    )
    .map(|lock| Instance { _lock: lock })
    .map_err(|e| match e {
        LockError::Busy { .. } => ServeError::Instance(format!(
            "another `baton serve` is running on the baton dir '{}' (see `baton lock status serve/instance`)",
            dir.path().display()
        )),
        other => ServeError::Instance(other.to_string()),
    })
}

/// Binds the service's address.
///
/// # Errors
///
/// [`ServeError::Bind`], naming the address.
pub async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Takes the listening socket the service manager passed (see
/// [`crate::activation::inherited_listener`]) for the service: on a
/// non-loopback address it needs a token, as `listen` does. Serve it with
/// [`launch_with`] and [`Listening::Activated`]. Needs the runtime.
///
/// # Errors
///
/// [`ServeError::ActivatedWithoutToken`], or the socket cannot be
/// registered with the runtime.
pub fn adopt(
    listener: std::net::TcpListener,
    config: &Config,
) -> Result<tokio::net::TcpListener, ServeError> {
    let addr = listener.local_addr().map_err(ServeError::Runtime)?;
    if !addr.ip().is_loopback() && config.token.is_none() {
        return Err(ServeError::ActivatedWithoutToken(addr));
    }
    if addr != config.listen {
        tracing::info!(socket = %addr, listen = %config.listen, "serving the passed socket, not the listen address");
    }
    tokio::net::TcpListener::from_std(listener).map_err(ServeError::Runtime)
}

/// Opens the store `config` names (an SQLite store is then this service's
/// alone) and makes the service on it. Nothing runs and no job is read or
/// changed until [`launch`].
///
/// # Errors
///
/// The store cannot be opened (or is another service's), or the start
/// journal cannot be opened; nothing was changed then.
pub async fn open(config: Config, dir: BatonDir) -> Result<Arc<Service>, ServeError> {
    #[cfg(windows)]
    if config.store.is_shared() {
        return Err(ServeError::Unsupported(
            "a job store that several nodes share (PostgreSQL) is not supported on Windows: its \
             jobs must stop when this node stalls, which takes a guardian process that Windows \
             builds lack; use the SQLite store (the default)",
        ));
    }
    let store: Arc<dyn store::Store> = Arc::from(store::open(&config.store, dir.path()).await?);
    Service::new(Arc::new(config), store, dir).map_err(ServeError::Runtime)
}

/// Runs `service` on `listener` (bound by [`bind`]) until `shutdown`
/// completes, as [`launch_with`] with [`Listening::Bound`], telling no one
/// when it answers (the caller knows the listener's address).
///
/// # Errors
///
/// As [`launch_with`].
pub async fn launch<F>(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    shutdown: F,
) -> Result<(), ServeError>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    launch_with(listener, Listening::Bound, service, |_| {}, shutdown).await
}

/// Runs `service` on `listener` (bound by [`bind`], or passed by the
/// service manager: [`adopt`]; `listening` says which) until `shutdown`
/// completes; then it drains (see [`Service::drain`]) and
/// returns once the drain is over and the listener closed.
///
/// It first recovers what a previous instance left and starts the
/// scheduler (see [`Service::start`]), then calls `ready` with the address
/// it answers on (the binary prints the one line a supervisor or a test
/// waits for), and answers. The process's signals and output are the
/// caller's: the binary passes a future that completes on SIGTERM or
/// SIGINT, a test one it completes itself.
///
/// # Errors
///
/// Recovery cannot read the store (nothing was changed then), or the
/// listener has no local address.
pub async fn launch_with<F>(
    listener: tokio::net::TcpListener,
    listening: Listening,
    service: Arc<Service>,
    ready: impl FnOnce(std::net::SocketAddr),
    shutdown: F,
) -> Result<(), ServeError>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let local = listener.local_addr().map_err(ServeError::Runtime)?;
    service.start().await?;
    tracing::info!(address = %local, "listening");
    ready(local);

    let app = router(Arc::clone(&service), local);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let drainer = Arc::clone(&service);
    let draining = tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutdown requested: draining");
        let _ = drain_tx.send(());
        drainer.drain().await;
        let _ = stop_tx.send(());
    });
    let cap = crate::conn::connection_cap(&service.config);
    let header_timeout = service.config.connections.header_read_timeout;
    let phases = crate::conn::Phases {
        // Bound: the drain's start changes nothing for the listener.
        drain: (listening == Listening::Activated).then_some(drain_rx),
        stop: stop_rx,
    };
    crate::conn::accept_loop(listener, app, phases, header_timeout, cap).await;
    // Over once the drain is (it stopped the loop): nothing the service
    // started runs on.
    let _ = draining.await;
    Ok(())
}

/// Every route, with auth, the body limit and the [`crate::browser`] checks
/// (`local`: the address the service is bound to).
pub fn router(service: AppState, local: std::net::SocketAddr) -> Router {
    let limit = service.config.max_body_bytes;
    let guard = Arc::new(crate::browser::Guard {
        local,
        allowed_hosts: service.config.allowed_hosts.clone(),
        allowed_origins: service.config.allowed_origins.clone(),
    });
    let protected = Router::new()
        .route("/v1/jobs", get(api::list_jobs).post(api::post_job))
        .route("/v1/jobs/{id}", get(api::get_job).delete(api::delete_job))
        .route("/v1/jobs/{id}/cancel", post(api::cancel_job))
        .route("/v1/jobs/{id}/log", get(api::job_log))
        .route("/metrics", get(api::metrics))
        .merge(crate::compat::routes())
        .merge(crate::dashboard::api_routes())
        .route_layer(middleware::from_fn_with_state(Arc::clone(&service), auth));
    Router::new()
        .route("/health", get(api::health))
        .merge(crate::dashboard::page_routes())
        .merge(protected)
        .route_layer(middleware::from_fn(crate::browser::json_body))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such route (see /openapi.json)",
            )
        })
        .method_not_allowed_fallback(
            |method: axum::http::Method, uri: axum::http::Uri| async move {
                ApiError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    format!(
                        "method {method} is not allowed on {} (see /openapi.json)",
                        uri.path()
                    ),
                )
            },
        )
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&service),
            crate::conn::body_deadline,
        ))
        .layer(middleware::from_fn_with_state(guard, crate::browser::check))
        .layer(middleware::from_fn(api::log_errors))
        .with_state(service)
}

/// `Authorization: Bearer <token>` when a token is configured; compared in
/// constant time.
async fn auth(State(service): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = service.config.token.as_deref() else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return next.run(req).await;
    }
    let mut resp = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing or wrong token: send Authorization: Bearer <token>",
    )
    .into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        axum::http::HeaderValue::from_static("Bearer"),
    );
    resp
}

/// The credentials of `Bearer <token>` (the scheme is case-insensitive, RFC 9110).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Equal contents, in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(super::bearer("Bearer abc"), Some("abc"));
        assert_eq!(super::bearer("bearer abc"), Some("abc"));
        assert_eq!(super::bearer("BEARER  abc"), Some("abc"));
        assert_eq!(super::bearer("Basic abc"), None);
        assert_eq!(super::bearer("Bearerabc"), None);
    }

    #[test]
    fn constant_time_eq_compares_contents_and_length() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
