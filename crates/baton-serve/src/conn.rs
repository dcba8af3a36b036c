//! Connections: how many the service keeps open and how long a client may
//! take, so that slow or hostile clients cannot use up its descriptors.
//!
//! - A request's headers must arrive within `header_read_timeout` (an idle
//!   keep-alive connection included), its body within
//!   `request_body_timeout` of its headers (else 408 and the connection is
//!   closed).
//! - At most `max_connections` connections are served at once, and never
//!   more than the descriptor limit leaves room for beside the store, the
//!   logs and the jobs' pipes ([`connection_cap`]); a connection beyond that
//!   is answered 503 (`too_many_connections`, `Retry-After`) and closed —
//!   except `GET /health`, which is answered from a reserve of 64 such
//!   connections, so that a monitor still sees the service while clients
//!   use up its connections.
//! - [`raise_nofile_limit`] (called by the binary before it starts the
//!   runtime) raises the soft descriptor limit to the hard one at start,
//!   and [`hide_from_jobs`] hides the process's environment from its jobs.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use crate::api::{ApiError, AppState};
use crate::config::Config;

/// The most header fields the HTTP layer parses; the service itself
/// refuses more than [`crate::browser::MAX_HEADERS`] with its JSON error.
pub const PARSED_HEADERS: usize = 1000;

/// Descriptors kept for everything but connections: the store, the
/// journal, locks, plus per job its pipes, logs and locks.
fn reserved_descriptors(config: &Config) -> u64 {
    64 + 16 * config.node_cap()
}

/// Raises the soft limit on open descriptors to the hard limit; returns
/// the soft limit now in force (`None`: unlimited or unknown; always on
/// Windows, which has no such limit).
pub fn raise_nofile_limit() -> Option<u64> {
    crate::sys::raise_open_files_limit()
}

/// Hides the service's environment (its token, the secrets templates take
/// from it) from the other processes of its user, its jobs included (see
/// `sys.rs`); called by the binary at start, as it changes the process.
pub fn hide_from_jobs() {
    crate::sys::hide_from_same_user();
}

/// Makes the service a child subreaper for its jobs: a process a job's
/// command started that left its process group (`setsid`) comes back to
/// the service when its parent exits, and is stopped at the end of its job
/// (attributed by its `BATON_RUN_ID`, the job's id), before the job's slot,
/// group and locks are released (see `sys.rs`); called by the binary at
/// start, as it changes the process.
pub fn adopt_orphans() {
    crate::sys::adopt_orphans();
}

/// How many connections the service serves at once: `max_connections`,
/// lowered to what the current descriptor limit leaves room for.
pub fn connection_cap(config: &Config) -> usize {
    let soft = crate::sys::open_files_limit();
    let room = soft.map_or(usize::MAX, |n| {
        usize::try_from(n.saturating_sub(reserved_descriptors(config)).max(16))
            .unwrap_or(usize::MAX)
    });
    if room < config.connections.max_connections {
        tracing::warn!(
            max_connections = config.connections.max_connections,
            open_files_limit = ?soft,
            cap = room,
            "the open files limit leaves room for fewer connections than max_connections"
        );
    }
    config.connections.max_connections.min(room)
}

/// When the accept loop changes course.
pub(crate) struct Phases {
    /// The drain began: stop accepting (the socket stays with the service
    /// manager) and close idle connections. `None`: keep accepting until
    /// `stop` (the service bound the socket itself).
    pub(crate) drain: Option<tokio::sync::oneshot::Receiver<()>>,
    /// The drain is over: stop.
    pub(crate) stop: tokio::sync::oneshot::Receiver<()>,
}

/// Serves connections until `phases.stop` fires (or stops accepting at
/// `phases.drain`), at most `cap` at once, then lets open ones finish their
/// current response (at most 2 s: streams that follow a log may outlive the
/// drain).
pub(crate) async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: Router,
    phases: Phases,
    header_read_timeout: Duration,
    cap: usize,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let Phases { drain, mut stop } = phases;
    let (closing_tx, closing_rx) = tokio::sync::watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let open = Arc::new(AtomicUsize::new(0));
    let refusing = Arc::new(AtomicUsize::new(0));
    let drain = async move {
        match drain {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let mut drain = std::pin::pin!(drain);
    let mut stopped = false;
    loop {
        let stream = tokio::select! {
            _ = &mut stop => {
                stopped = true;
                break;
            }
            () = &mut drain => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was accepted: wait a little and go on.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while conns.try_join_next().is_some() {}
        if open.load(Ordering::SeqCst) >= cap {
            refuse(stream, cap, &refusing, &app);
            continue;
        }
        let count = Counted::new(&open);
        let service = TowerToHyperService::new(app.clone());
        let mut closing = closing_rx.clone();
        conns.spawn(async move {
            let _count = count;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .max_headers(PARSED_HEADERS)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    if !stopped {
        // Socket activation: what connects from now on waits in the
        // socket's queue, which the service manager keeps, for the next
        // instance. Connections under way finish their request (a chat
        // call waits for its job); idle ones are closed now, so that their
        // clients' next request goes to the queue too.
        drop(listener);
        let _ = closing_tx.send(true);
        tracing::info!(
            "draining: no longer accepting; new connections wait in the socket for the next instance"
        );
        // The connections run on their own tasks meanwhile.
        let _ = stop.await;
    }
    let _ = closing_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    // The rest are cut: none outlives the service.
    conns.shutdown().await;
}

/// One in a counter for as long as it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(counter: &Arc<AtomicUsize>) -> Counted {
        counter.fetch_add(1, Ordering::SeqCst);
        Counted(Arc::clone(counter))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves a connection beyond the cap from the reserve: one request,
/// `GET /health` answered as usual, anything else 503; then closed, in
/// at most 2 s. At most 64 such connections at once: beyond that a
/// connection is closed at once.
fn refuse(stream: tokio::net::TcpStream, cap: usize, refusing: &Arc<AtomicUsize>, app: &Router) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    if refusing.load(Ordering::SeqCst) >= 64 {
        return;
    }
    let count = Counted::new(refusing);
    let app = TowerToHyperService::new(app.clone());
    tokio::spawn(async move {
        let _count = count;
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let health = req.method() == axum::http::Method::GET && req.uri().path() == "/health";
            let app = app.clone();
            async move {
                if health {
                    hyper::service::Service::call(&app, req).await
                } else {
                    Ok(too_many_connections(cap))
                }
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(Duration::from_secs(2))
            .keep_alive(false)
            .serve_connection(TokioIo::new(stream), service);
        let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
    });
}

/// The answer to a request beyond the connection cap.
fn too_many_connections(cap: usize) -> Response {
    let mut resp = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_connections",
        format!(
            "the service has {cap} connections open, as many as it serves at once \
             (max_connections, or its open files limit): try again later"
        ),
    )
    .into_response();
    let headers = resp.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// The most of a refused body read and dropped before the connection closes.
const LINGER_BYTES: usize = 64 * 1024 * 1024;
/// The longest a refused body is read for, and the longest pause in it.
const LINGER_TIME: Duration = Duration::from_secs(30);
const LINGER_PAUSE: Duration = Duration::from_secs(5);

/// Reads and drops a refused request's body until it ends, LINGER_BYTES
/// have come, LINGER_TIME has passed or the client pauses LINGER_PAUSE.
async fn linger(body: Body) {
    use futures_util::StreamExt;
    let mut data = body.into_data_stream();
    let read = async {
        let mut read = 0usize;
        while let Ok(Some(Ok(chunk))) = tokio::time::timeout(LINGER_PAUSE, data.next()).await {
            read = read.saturating_add(chunk.len());
            if read > LINGER_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, read).await;
}

/// Middleware: a request's body must arrive within `request_body_timeout`
/// of its headers; else 408 and the connection is closed. One declared
/// larger than `max_body_bytes` is refused at once (413, closed).
pub(crate) async fn body_deadline(
    State(service): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    // A body declared (`Content-Length`) past the limit is refused from its
    // headers: reading it would only end in the same 413, or in a 408 if
    // its client sends less than it declared.
    let max = service.config.max_body_bytes;
    let declared = req.body().size_hint().exact();
    if let Some(declared) = declared.filter(|&n| n > max as u64) {
        // Answered at once, and what the client goes on sending is read and
        // dropped (bounded) meanwhile, as nginx's lingering close does: a
        // client that sends its whole body before it reads (Python's
        // urllib, requests, httpx) would otherwise find the connection
        // reset under it and never see the 413.
        tokio::spawn(linger(req.into_body()));
        let mut resp = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is {declared} bytes (Content-Length); the limit is {max} (max_body_bytes)"),
        )
        .into_response();
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    }
    let limit = service.config.connections.request_body_timeout;
    let expired = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&expired);
    let req = req.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            sleep: Box::pin(tokio::time::sleep(limit)),
            expired: flag,
            limit,
        })
    });
    let resp = next.run(req).await;
    if !expired.load(Ordering::SeqCst) {
        return resp;
    }
    let mut resp = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        format!(
            "the request body did not arrive within {} (request_body_timeout)",
            humantime::format_duration(limit)
        ),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A request body that fails once its deadline has passed.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
    limit: Duration,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if std::future::Future::poll(this.sleep.as_mut(), cx).is_ready() {
            this.expired.store(true, Ordering::SeqCst);
            let e = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the request body did not arrive within {}",
                    humantime::format_duration(this.limit)
                ),
            );
            return Poll::Ready(Some(Err(axum::Error::new(e))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
