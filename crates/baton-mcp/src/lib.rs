//! `baton mcp`: an MCP server over stdio that gives an AI agent baton's
//! coordination as tools, held for exactly as long as the agent's session.
//!
//! The server is built on the official Rust SDK of the Model Context
//! Protocol (`rmcp`). It only translates: the engines below decide
//! (baton-lock for path reservations and named locks, baton-state for state
//! files, baton-git for workspaces and pushes).
//!
//! # Tools
//!
//! | tool | arguments | result |
//! |---|---|---|
//! | `reserve` | `paths`, `mode` (`exclusive`/`shared`), `wait_seconds`, `reason?` | `granted`, `token`, `paths`, `conflicts`, `previous_holder_died`, `previous_holder` |
//! | `release` | `paths?` (default all of the session's) | `released` |
//! | `reservations` | `path?` | `reservations: [{path, mode, agent, pid, client_pid, since, reason, token, this_session}]` |
//! | `lock` / `unlock` | `name`, `wait_seconds`, `shared?`, `max?` / `name` | `name`, `token`, `mode`, `previous_holder_died` |
//! | `state_read` | `file` | `content`, `version` |
//! | `state_update` | `file`, `merge_patch` (RFC 7396), `expected_version?` | `content`, `version` |
//! | `state_append` | `file`, `record` | `file`, `records` |
//! | `workspace_create` / `workspace_remove` | `ref?`, `branch?` / `path`, `discard?` | `path`, `branch`, `id` |
//! | `push` | `path`, `branch?` | `landed`, `attempts`, `branch` |
//!
//! Every tool has an input and an output schema; a result is structured
//! content plus a one-line summary; a failure is a tool error (`isError`,
//! one line naming the thing and the reason; a [`ToolError`] in the code), never the end of the server;
//! arguments that do not fit the schema (a wrong type, an unknown name) are
//! refused before the tool runs. A waiting `reserve` or `lock` sends
//! progress notifications every half second when the client gave a
//! progress token, and stops waiting when the client cancels the request.
//!
//! # What the session holds, and for how long
//!
//! Everything a session takes (reservations, locks) is held by kernel locks
//! of the `baton mcp` process, whose stdin is the client. When the client
//! closes stdin, the server releases everything at once and exits 0; when
//! the client or the server dies, even by SIGKILL, the kernel releases it
//! (the client's death closes stdin; the server's death frees its locks).
//! There is no TTL and nothing to renew, and the next holder of an
//! overlapping reservation is told `previous_holder_died` when a holder
//! died holding it.
//!
//! With `baton mcp --backend URL` (or `BATON_BACKEND`), reservations live
//! in that PostgreSQL database ([`Config::reservations`]), shared by agents
//! on every machine using it: each is held by a database session of this
//! process, which ends with it. A reservation whose session ends while this
//! process lives (the server restarted) is dropped and the client told with
//! a logging notification (`reservation_lost`). Named locks and state files
//! stay in the baton dir.
//!
//! # What a reservation guarantees, and what it does not
//!
//! - Two sessions never hold overlapping reservations at once when one of
//!   them is exclusive; shared ones coexist; disjoint ones never wait on
//!   each other; waiting is first come, first served among overlapping
//!   requests; several paths are taken all or none, so one request never
//!   deadlocks with another.
//! - Reservations are advisory: they stop nobody who does not ask. An
//!   agent that edits files without reserving them is not stopped, except
//!   at commit time by baton's pre-commit guard (`baton git guard
//!   install`), which refuses a commit touching a path another live holder
//!   reserved exclusively.
//! - A session that holds some paths and then asks for more can deadlock
//!   with another doing the same in the other order, as with any lock
//!   manager: ask for everything in one request, or wait with a bound.
//!
//! # Identity
//!
//! The agent's name is `--agent NAME`, else the client's name from
//! `initialize` and the client's pid (`claude-code-4242`). A holder's `pid`
//! is the `baton mcp` process, `client_pid` its parent (the client); the
//! client's identity is the reservations' principal, so commits made by the
//! agent's own commands (its descendants) pass the pre-commit guard.
//!
//! # Setting up clients
//!
//! Claude Code: `claude mcp add baton -- baton mcp`, or in `.mcp.json`:
//!
//! ```json
//! { "mcpServers": { "baton": { "command": "baton", "args": ["mcp"] } } }
//! ```
//!
//! Codex (`~/.codex/config.toml`):
//!
//! ```toml
//! [mcp_servers.baton]
//! command = "baton"
//! args = ["mcp"]
//! ```
//!
//! Cursor (`.cursor/mcp.json`): the same JSON as Claude Code's. See
//! docs/src/concepts/agents.md for hooks.
//!
//! # Protocol
//!
//! The revisions of the `initialize` handshake the official SDKs speak
//! (2025-06-18, 2025-11-25) and the older ones rmcp knows; a client that
//! asks for an unknown one is answered with 2025-11-25, the newest with
//! the handshake, as the protocol's negotiation prescribes.
//!
//! # Platforms
//!
//! Linux, macOS and Windows: this crate calls no platform API itself.

mod error;
mod git;
mod locks;
mod repo;
mod reserve;
mod server;
mod session;
mod state;
mod stdin;
pub mod types;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

pub use error::ToolError;
pub use repo::RepoError;
pub use server::BatonServer;
pub use session::{Config, Identity, Session};
pub use state::merge_patch;

/// A tool's outcome: the result and its one-line summary, or why it failed.
pub(crate) type Outcome<T> = Result<(T, String), ToolError>;

/// Why the server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The async runtime could not be started.
    #[error("cannot start the MCP server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The `initialize` handshake failed.
    #[error("MCP initialize failed: {0}")]
    Initialize(String),
    /// The server's task failed.
    #[error("the MCP server failed: {0}")]
    Serve(String),
}

/// Serves one session on this process's stdin and stdout until the client
/// closes stdin; then everything the session holds is released and this
/// returns `Ok`. Builds its own runtime.
pub fn serve_stdio(config: Config) -> Result<(), ServeError> {
    // One thread for the protocol: a message crosses several tasks (reader,
    // service loop, handler, writer), and on one thread none of those hops
    // waits for another thread to be scheduled (what made the round trip's
    // tail on a loaded machine). Waits and git run on blocking threads.
    let rt = tokio::runtime::Builder::new_current_thread()
        .thread_name("baton-mcp")
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let session = Arc::new(Session::new(config));
    let result = rt.block_on(async {
        let (reader, writer) = rmcp::transport::stdio_pipes();
        serve(session.clone(), reader, writer).await
    });
    session.close();
    // Waits that are cancelled end within milliseconds; a read of stdin
    // that cannot be cancelled must not keep the process.
    rt.shutdown_timeout(Duration::from_millis(500));
    result
}

/// Serves one session over `reader` and `writer` until `reader` ends, then
/// closes the session (releases everything it holds).
pub async fn serve<R, W>(session: Arc<Session>, reader: R, writer: W) -> Result<(), ServeError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let on_eof = session.clone();
    let reader = stdin::EofWatch::new(reader, move || on_eof.close());
    let server = BatonServer::new(session.clone());
    let running = match server.serve((reader, writer)).await {
        Ok(r) => r,
        // The client went away before the handshake ended: nothing was held.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            session.close();
            return Ok(());
        }
        Err(e) => {
            session.close();
            return Err(ServeError::Initialize(e.to_string()));
        }
    };
    let watcher = reserve::watch_broken(session.clone(), running.peer().clone());
    let ended = running.waiting().await;
    watcher.abort();
    session.close();
    ended
        .map(|_| ())
        .map_err(|e| ServeError::Serve(e.to_string()))
}
