//! The error a tool answers: the class of the failure and its one line.
//!
//! What an agent receives is the one line alone, as a tool error (`isError:
//! true`, one text content block, no structured content); the class is for
//! the code in between (and for a later revision of the protocol that may
//! carry it).

use baton_git::GitError;
use baton_lock::reserve::ReserveError;
use baton_lock::LockError;
use baton_state::StateError;
use rmcp::model::{ContentBlock, IntoContents};

/// Why a tool failed. Each variant carries the one line the agent reads,
/// naming the thing and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// An argument the tool cannot use: a path outside the repository, a
    /// bad lock name or version, a wait that is not a number of seconds,
    /// arguments that contradict each other.
    #[error("{0}")]
    Invalid(String),
    /// Held by others: not granted when the wait ended.
    #[error("{0}")]
    Busy(String),
    /// The wait was cancelled (by the client, or the session ended).
    #[error("{0}")]
    Cancelled(String),
    /// The thing named is not there, or not this session's: a lock it does
    /// not hold, a path it did not reserve, a workspace that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The thing changed, or is in a state that refuses the change: a state
    /// file no longer at the expected version, a push whose rebase
    /// conflicts, a workspace with unpushed commits.
    #[error("{0}")]
    Conflict(String),
    /// The engine underneath failed (I/O, git, the lock backend, a
    /// worker thread).
    #[error("{0}")]
    Engine(String),
}

impl ToolError {
    /// The same failure, its line prefixed with `prefix` and ": ".
    pub(crate) fn prefixed(self, prefix: &str) -> ToolError {
        let line = format!("{prefix}: {self}");
        self.with_line(line)
    }

    /// The same class with the line `line` (a wrapping error's, which
    /// says more than the wrapped one's).
    fn with_line(self, line: String) -> ToolError {
        match self {
            ToolError::Invalid(_) => ToolError::Invalid(line),
            ToolError::Busy(_) => ToolError::Busy(line),
            ToolError::Cancelled(_) => ToolError::Cancelled(line),
            ToolError::NotFound(_) => ToolError::NotFound(line),
            ToolError::Conflict(_) => ToolError::Conflict(line),
            ToolError::Engine(_) => ToolError::Engine(line),
        }
    }
}

/// A tool error's content: its one line as text. rmcp makes the `Err` of a
/// tool's `Result` a result with `isError: true` and no structured content.
impl IntoContents for ToolError {
    fn into_contents(self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(self.to_string())]
    }
}

impl From<LockError> for ToolError {
    fn from(e: LockError) -> ToolError {
        let line = baton_lock::one_line(&e);
        match e {
            LockError::InvalidName { .. }
            | LockError::Reentrant { .. }
            | LockError::HeldByAncestor { .. } => ToolError::Invalid(line),
            LockError::Busy { .. } | LockError::ModeMismatch { .. } => ToolError::Busy(line),
            LockError::Cancelled { .. } => ToolError::Cancelled(line),
            LockError::NotHeld { .. } => ToolError::NotFound(line),
            LockError::StaleToken { .. } => ToolError::Conflict(line),
            _ => ToolError::Engine(line),
        }
    }
}

impl From<ReserveError> for ToolError {
    fn from(e: ReserveError) -> ToolError {
        let line = baton_lock::one_line(&e);
        match e {
            ReserveError::Lock(e) => ToolError::from(e).with_line(line),
            ReserveError::BadPath { .. } => ToolError::Invalid(line),
            ReserveError::Busy { .. } => ToolError::Busy(line),
            ReserveError::Cancelled => ToolError::Cancelled(line),
            ReserveError::NotFound { .. } => ToolError::NotFound(line),
            _ => ToolError::Engine(line),
        }
    }
}

impl From<GitError> for ToolError {
    fn from(e: GitError) -> ToolError {
        let line = baton_lock::one_line(&e);
        match e {
            GitError::Lock(e) => ToolError::from(*e).with_line(line),
            GitError::Invalid(_)
            | GitError::BadBranchName { .. }
            | GitError::UnknownRef { .. }
            | GitError::NotARepo { .. }
            | GitError::DetachedHead { .. } => ToolError::Invalid(line),
            GitError::NoSuchWorkspace { .. } => ToolError::NotFound(line),
            GitError::RepoLock { .. } | GitError::PushLock { .. } => ToolError::Busy(line),
            GitError::WorkspaceExists { .. }
            | GitError::BranchHeld(_)
            | GitError::BranchNotAtRef { .. }
            | GitError::Unpushed { .. }
            | GitError::RebaseInProgress { .. }
            | GitError::Conflict { .. }
            | GitError::Superseded { .. } => ToolError::Conflict(line),
            _ => ToolError::Engine(line),
        }
    }
}

impl From<StateError> for ToolError {
    fn from(e: StateError) -> ToolError {
        let line = baton_lock::one_line(&e);
        match e {
            StateError::Lock(e) => ToolError::from(e).with_line(line),
            StateError::NoFileName { .. }
            | StateError::NotAFile { .. }
            | StateError::SymlinkOutside { .. }
            | StateError::SymlinkLoop { .. }
            | StateError::InvalidJson { .. }
            | StateError::InvalidJsonLine { .. }
            | StateError::InvalidRecord { .. }
            | StateError::AppendToJson { .. }
            | StateError::InvalidVersion { .. } => ToolError::Invalid(line),
            StateError::VersionMismatch { .. } => ToolError::Conflict(line),
            _ => ToolError::Engine(line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ToolError;
    use rmcp::handler::server::tool::IntoCallToolResult;
    use rmcp::model::{CallToolResponse, CallToolResult};

    fn answered(r: Result<CallToolResult, impl IntoCallToolResult>) -> serde_json::Value {
        match r.into_call_tool_result() {
            Ok(CallToolResponse::Complete(result)) => {
                serde_json::to_value(&result).unwrap_or_default()
            }
            other => panic!("not a complete result: {other:?}"),
        }
    }

    /// An agent receives a typed error exactly as it received the line
    /// alone: `isError`, one text block, no structured content.
    #[test]
    fn a_tool_error_reads_as_its_line_did() {
        let line = "lock 'db' is not held by this session";
        let typed = answered(Err(ToolError::NotFound(line.to_string())));
        let plain = answered(Err::<CallToolResult, String>(line.to_string()));
        assert_eq!(typed, plain);
        assert_eq!(typed["isError"], serde_json::json!(true));
        assert_eq!(typed["content"][0]["text"], serde_json::json!(line));
        assert!(typed.get("structuredContent").is_none());
    }

    #[test]
    fn a_prefix_keeps_the_class() {
        let e = ToolError::Busy("busy".to_string()).prefixed("lock 'db'");
        assert_eq!(e, ToolError::Busy("lock 'db': busy".to_string()));
    }
}
