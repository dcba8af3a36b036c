//! The MCP server: one method per tool, each translating its arguments for
//! an engine module (`locks`, `state`, `git`, `reserve`) and its answer into
//! a tool result (structured content and a one-line summary), or a tool
//! error (`isError`, one line naming the thing and the reason).

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use serde::Serialize;

use crate::session::Session;
use crate::types::{
    AppendOut, LockArgs, LockOut, PushArgs, PushOut, ReleaseArgs, ReleaseOut, RemovedOut,
    ReservationsArgs, ReservationsOut, ReserveArgs, ReserveOut, StateAppendArgs, StateOut,
    StateReadArgs, StateUpdateArgs, UnlockArgs, UnlockOut, WorkspaceCreateArgs, WorkspaceOut,
    WorkspaceRemoveArgs,
};
use crate::{Outcome, ToolError};

/// What the server tells the client about itself in `initialize`.
const INSTRUCTIONS: &str = "baton coordinates agents sharing a repository. Before editing \
files another agent may edit, reserve them (`reserve`, paths relative to the repository root; \
wait_seconds to queue); release them when done (`release`). Everything this session holds is \
released when the session ends. `lock`/`unlock` take the named locks of `baton run --lock`; \
`state_*` change shared JSON state files atomically; `workspace_create` gives an isolated clone; \
`push` lands commits, rebasing and retrying.";

/// The MCP server of one session.
#[derive(Clone)]
pub struct BatonServer {
    session: Arc<Session>,
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: structured content and a one-line summary.
fn answer<T: Serialize>(outcome: Outcome<T>) -> Result<CallToolResult, ToolError> {
    let (value, summary) = outcome?;
    let value = serde_json::to_value(&value)
        .map_err(|e| ToolError::Engine(format!("cannot write the result: {e}")))?;
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(summary)];
    Ok(result)
}

/// Runs a blocking engine call (git, a state file's short lock) off the
/// async threads.
async fn off_thread<T, F>(what: &str, f: F) -> Outcome<T>
where
    T: Send + 'static,
    F: FnOnce() -> Outcome<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(ToolError::Engine(format!(
            "{what}: the working thread failed: {e}"
        )))
    })
}

#[tool_router]
impl BatonServer {
    /// A server for `session`.
    pub fn new(session: Arc<Session>) -> BatonServer {
        BatonServer {
            session,
            tool_router: Self::tool_router(),
        }
    }

    /// Notes the client's name (for the agent's name) once it is known.
    fn note_client(&self, ctx: &RequestContext<RoleServer>) {
        if let Some(info) = ctx.peer.peer_info() {
            self.session.set_client_name(&info.client_info.name);
        }
    }

    #[tool(
        description = "Reserve paths or globs of the repository (relative to its root) for this session: exclusive (default) or shared. All or none; waits up to wait_seconds behind overlapping reservations (first come, first served), reporting progress. Released by `release` or when the session ends, at once, however it ends.",
        output_schema = schema_for_output::<ReserveOut>()
    )]
    async fn reserve(
        &self,
        Parameters(args): Parameters<ReserveArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        self.note_client(&ctx);
        answer(crate::reserve::reserve(&self.session, args, &ctx).await)
    }

    #[tool(
        description = "Release reservations of this session: the named paths (a reservation of several paths goes whole), or all of them.",
        output_schema = schema_for_output::<ReleaseOut>()
    )]
    async fn release(
        &self,
        Parameters(args): Parameters<ReleaseArgs>,
    ) -> Result<CallToolResult, ToolError> {
        answer(crate::reserve::release(&self.session, args))
    }

    #[tool(
        description = "List the live reservations of the repository (granted and waiting), optionally only those overlapping a path.",
        output_schema = schema_for_output::<ReservationsOut>()
    )]
    async fn reservations(
        &self,
        Parameters(args): Parameters<ReservationsArgs>,
    ) -> Result<CallToolResult, ToolError> {
        answer(crate::reserve::list(&self.session, args))
    }

    #[tool(
        description = "Take a named lock (the same locks as `baton run --lock NAME`): exclusive, shared, or a semaphore of max holders; waits up to wait_seconds. Held until `unlock` or the end of the session.",
        output_schema = schema_for_output::<LockOut>()
    )]
    async fn lock(
        &self,
        Parameters(args): Parameters<LockArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        self.note_client(&ctx);
        answer(crate::locks::lock(&self.session, args, &ctx).await)
    }

    #[tool(
        description = "Release a named lock this session holds.",
        output_schema = schema_for_output::<UnlockOut>()
    )]
    async fn unlock(
        &self,
        Parameters(args): Parameters<UnlockArgs>,
    ) -> Result<CallToolResult, ToolError> {
        answer(crate::locks::unlock(&self.session, args))
    }

    #[tool(
        description = "Read a state file (relative to the repository root): its content (parsed JSON for .json) and version.",
        output_schema = schema_for_output::<StateOut>()
    )]
    async fn state_read(
        &self,
        Parameters(args): Parameters<StateReadArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let session = self.session.clone();
        answer(off_thread("state_read", move || crate::state::read(&session, args)).await)
    }

    #[tool(
        description = "Apply a JSON merge patch (RFC 7396) to a .json state file atomically under its lock; with expected_version, only if the file is still at that version (compare-and-swap).",
        output_schema = schema_for_output::<StateOut>()
    )]
    async fn state_update(
        &self,
        Parameters(args): Parameters<StateUpdateArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let session = self.session.clone();
        answer(off_thread("state_update", move || crate::state::update(&session, args)).await)
    }

    #[tool(
        description = "Append one JSON record as a line to a .jsonl state file, atomically under its lock.",
        output_schema = schema_for_output::<AppendOut>()
    )]
    async fn state_append(
        &self,
        Parameters(args): Parameters<StateAppendArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let session = self.session.clone();
        answer(off_thread("state_append", move || crate::state::append(&session, args)).await)
    }

    #[tool(
        description = "Create an isolated workspace (a clone of the repository) at ref (default HEAD), optionally on a branch.",
        output_schema = schema_for_output::<WorkspaceOut>()
    )]
    async fn workspace_create(
        &self,
        Parameters(args): Parameters<WorkspaceCreateArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let session = self.session.clone();
        answer(
            off_thread("workspace_create", move || {
                crate::git::create(&session, args)
            })
            .await,
        )
    }

    #[tool(
        description = "Remove a workspace; refused if its branch has commits that exist nowhere else, unless discard.",
        output_schema = schema_for_output::<RemovedOut>()
    )]
    async fn workspace_remove(
        &self,
        Parameters(args): Parameters<WorkspaceRemoveArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let session = self.session.clone();
        answer(
            off_thread("workspace_remove", move || {
                crate::git::remove(&session, args)
            })
            .await,
        )
    }

    #[tool(
        description = "Push HEAD of a work tree (a workspace) to its branch; a rejected push is rebased onto the remote branch and retried, never forced.",
        output_schema = schema_for_output::<PushOut>()
    )]
    async fn push(
        &self,
        Parameters(args): Parameters<PushArgs>,
    ) -> Result<CallToolResult, ToolError> {
        let session = self.session.clone();
        answer(off_thread("push", move || crate::git::push(&session, args)).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BatonServer {
    fn get_info(&self) -> ServerConfig {
        // Logging: how a session is told that an operator broke one of its
        // reservations (the contract); SEP-2577 deprecates it for a
        // later revision, which clients of today's revisions do not speak.
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
            .with_instructions(INSTRUCTIONS)
    }

    /// Any level is accepted: the only messages are warnings of broken reservations.
    #[allow(deprecated)] // logging: see get_info
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }
}
