//! The tools' arguments and results: what the input and output schemas
//! (schemars) describe. Unknown arguments are refused, as a wrong type or a
//! missing required one is, before a tool runs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a path is reserved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReserveMode {
    /// Nobody else may reserve an overlapping path (the default).
    #[default]
    Exclusive,
    /// Coexists with other shared reservations of overlapping paths.
    Shared,
}

/// `reserve`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveArgs {
    /// Paths or globs inside the repository (relative to its root, or absolute inside it);
    /// a path covers itself and everything below it. All are reserved together, or none.
    pub paths: Vec<String>,
    /// "exclusive" (default) or "shared".
    #[serde(default)]
    pub mode: ReserveMode,
    /// How long to wait for overlapping reservations of others to go (seconds; 0, the default:
    /// answer at once). Waiting is first come, first served among overlapping requests.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub wait_seconds: f64,
    /// Why, shown to others who find the paths reserved.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Who holds a reservation.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct HolderOut {
    /// The agent's name.
    pub agent: String,
    /// The process holding it (a `baton mcp` or `baton reserve`).
    pub pid: i32,
    /// The MCP client (the parent of `baton mcp`), if any.
    pub client_pid: Option<i32>,
    /// The host.
    pub host: String,
    /// When it was granted (or queued), RFC 3339 UTC.
    pub since: String,
    /// Why, as its holder said.
    pub reason: Option<String>,
}

/// A reservation in the way.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ConflictOut {
    /// The other reservation's path or glob that overlaps.
    pub path: String,
    /// Its mode.
    pub mode: ReserveMode,
    /// Whether it is granted (false: an earlier waiter this request queues behind).
    pub granted: bool,
    /// Its holder.
    pub holder: HolderOut,
}

/// `reserve`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReserveOut {
    /// Whether the paths are now reserved by this session.
    pub granted: bool,
    /// The fencing token of the grant (strictly increasing per repository); null when not granted.
    pub token: Option<u64>,
    /// The paths as reserved (normalized, relative to the repository's root).
    pub paths: Vec<String>,
    /// What is in the way, when not granted.
    pub conflicts: Vec<ConflictOut>,
    /// Whether a holder of an overlapping reservation died holding it since the last grant:
    /// its work may be half done.
    pub previous_holder_died: bool,
    /// That holder, when `previous_holder_died`.
    pub previous_holder: Option<HolderOut>,
}

/// `release`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseArgs {
    /// The paths to release, as reserved (a reservation of several paths is released whole);
    /// default: every reservation of this session.
    #[serde(default)]
    pub paths: Option<Vec<String>>,
}

/// `release`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReleaseOut {
    /// The paths released.
    pub released: Vec<String>,
}

/// `reservations`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReservationsArgs {
    /// Only reservations overlapping this path or glob.
    #[serde(default)]
    pub path: Option<String>,
}

/// One reserved (or awaited) path.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReservationOut {
    /// The path or glob.
    pub path: String,
    /// Its mode.
    pub mode: ReserveMode,
    /// Whether it is granted (false: waiting).
    pub granted: bool,
    /// The holder's agent name.
    pub agent: String,
    /// The holding process.
    pub pid: i32,
    /// The MCP client of the holding `baton mcp`, if any.
    pub client_pid: Option<i32>,
    /// The host.
    pub host: String,
    /// When it was granted (or queued), RFC 3339 UTC.
    pub since: String,
    /// Why.
    pub reason: Option<String>,
    /// The fencing token; null while waiting.
    pub token: Option<u64>,
    /// Whether this session holds it.
    pub this_session: bool,
}

/// `reservations`' result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ReservationsOut {
    /// Live reservations, in arrival order.
    pub reservations: Vec<ReservationOut>,
}

/// `lock`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LockArgs {
    /// The lock's name (the same namespace as `baton run --lock NAME`).
    pub name: String,
    /// How long to wait for it (seconds; 0: answer at once).
    #[schemars(range(min = 0))]
    pub wait_seconds: f64,
    /// Take it shared (readers) instead of exclusive.
    #[serde(default)]
    pub shared: Option<bool>,
    /// A semaphore: at most this many holders at once (as `baton run --lock NAME --max N`).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max: Option<u32>,
}

/// `lock`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LockOut {
    /// The lock's name.
    pub name: String,
    /// The fencing token of the grant.
    pub token: u64,
    /// "exclusive", "shared" or "semaphore".
    pub mode: String,
    /// Whether the previous holder ended without releasing it (its work may be half done).
    pub previous_holder_died: bool,
}

/// `unlock`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnlockArgs {
    /// The lock's name, as given to `lock`.
    pub name: String,
}

/// `unlock`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct UnlockOut {
    /// The lock released.
    pub name: String,
}

/// `state_read`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateReadArgs {
    /// The state file, relative to the repository's root (or absolute).
    pub file: String,
}

/// A state file's content and version.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct StateOut {
    /// The parsed JSON of a `.json` file; the text of any other file; null if it does not exist.
    pub content: serde_json::Value,
    /// Its version (a content hash; "absent" for a missing file): give it as
    /// `expected_version` to make an update a compare-and-swap.
    pub version: String,
}

/// `state_update`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateUpdateArgs {
    /// The JSON state file (`.json`), relative to the repository's root (or absolute).
    pub file: String,
    /// A JSON merge patch (RFC 7396): objects merge, null removes a member, anything else replaces.
    pub merge_patch: serde_json::Value,
    /// Update only if the file's version is still this (else an error naming both versions).
    #[serde(default)]
    pub expected_version: Option<String>,
}

/// `state_append`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateAppendArgs {
    /// The JSON Lines file (`.jsonl`), relative to the repository's root (or absolute).
    pub file: String,
    /// The record: any JSON value, written as one line.
    pub record: serde_json::Value,
}

/// `state_append`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct AppendOut {
    /// The file appended to.
    pub file: String,
    /// Records appended (1).
    pub records: usize,
}

/// `workspace_create`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceCreateArgs {
    /// The commit to start from (any rev of the repository); default HEAD.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    /// A branch to work on (created at `ref` if missing).
    #[serde(default)]
    pub branch: Option<String>,
}

/// `workspace_create`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WorkspaceOut {
    /// Where the workspace is (a clone of the repository).
    pub path: String,
    /// The branch checked out; null when detached.
    pub branch: Option<String>,
    /// Its id.
    pub id: String,
}

/// `workspace_remove`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceRemoveArgs {
    /// The workspace's path (or its id).
    pub path: String,
    /// Remove it even if its branch has commits that exist nowhere else (they are lost).
    #[serde(default)]
    pub discard: Option<bool>,
}

/// `workspace_remove`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct RemovedOut {
    /// The workspace's path.
    pub path: String,
    /// Its id.
    pub id: String,
    /// How many commits were discarded with it.
    pub discarded_commits: usize,
}

/// `push`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushArgs {
    /// A work tree (a workspace) whose HEAD is pushed.
    pub path: String,
    /// The remote branch; default the current branch's name.
    #[serde(default)]
    pub branch: Option<String>,
}

/// `push`'s result.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct PushOut {
    /// The commit now at the remote branch.
    pub landed: String,
    /// Pushes tried (a rejected push is rebased onto the remote branch and tried again).
    pub attempts: u32,
    /// The remote branch.
    pub branch: String,
}
