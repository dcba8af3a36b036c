//! Every `--json` output: the command, the library type it serializes, and
//! its top-level fields. Fields are only ever added; scripts may ignore
//! fields they do not know. `null` stands for "none" where a field is optional.
//!
//! | command | type | shape |
//! |---|---|---|
//! | `lock status NAME --json` | `baton_lock::LockStatus` | object, [`LOCK_STATUS`] |
//! | `lock status --json`, `lock list --json` | `Vec<LockStatus>` | array of [`LOCK_STATUS`] |
//! | `lock acquire --json` | `Held` of the CLI's holder (`commands/hold.rs`) | object, [`LOCK_ACQUIRE`] |
//! | `lock release --json` | `baton_run::hold::ReleaseReport` | object, [`LOCK_RELEASE`] |
//! | `lock break --json` | `baton_run::hold::BreakReport` | object, [`LOCK_BREAK`] |
//! | `group status KEY --json` | `baton_run::GroupStatus` | object, [`GROUP_STATUS`] |
//! | `group status --json` | `Vec<GroupStatus>` | array of [`GROUP_STATUS`] |
//! | `state get --json` | `baton_state` read result | object, [`STATE_GET`] |
//! | `state edit --json` | `baton_state::Edited` | object, [`STATE_EDIT`] |
//! | `workspace create --json` | `baton_git::Workspace` | object, [`WORKSPACE`] |
//! | `workspace list --json` | workspace records | array of [`WORKSPACE_LISTED`] |
//! | `workspace gc --json` | `baton_git::GcReport` | object, [`WORKSPACE_GC`] |
//! | `git push --json` | `baton_git::PushReport` | object, [`GIT_PUSH`] |
//! | `events` (one JSON object a line) | `baton_run::events::Event` | object, [`EVENT`] |
//! | `doctor --json` | the CLI's doctor report | object, [`DOCTOR`]; each of `checks`, [`DOCTOR_CHECK`] |
//! | `job submit --json` | `baton_api::Queued` | object, `baton_api::contract::job_submitted` |
//! | `job submit --wait --json`, `job status --json` | `baton_api::JobView` | object, `baton_api::contract::job` |
//! | `job cancel --json` | `baton_api::JobView` | object, `baton_api::contract::job_listed` |
//! | `job list --json` | `baton_api::JobList` | object, `baton_api::contract::job_list`; each of `jobs`, `job_listed` |
//!
//! The `job` outputs are the job service's own answers (`baton-api`'s types,
//! as `GET /v1/jobs...` returns them), printed as the client received them:
//! their fields are those types' own, read from them (`baton_api::contract`)
//! rather than restated here. Their statuses are [`JOB_STATUSES`].
//!
//! `replaced_file_unknown` (in `lock status`) is true when the lock file is
//! new to the lock, or missing, and this system cannot see whether the lock
//! is still held through an older file that was deleted or replaced (macOS);
//! `held: false` then only means "not held through this file".
//!
//! `previous_holder_died` (in `lock status` and `lock acquire`) is true when
//! the holder before the current (or next) grant ended without releasing —
//! it died, or the script it held the lock for did — so its work may be half
//! done; `previous_holder` is that holder (or `null`). A command run under
//! `baton run --lock`/`--group` learns the same from
//! `BATON_PREVIOUS_HOLDER_DIED=1`.
//!
//! `previous_outcome` (in `lock status`, `lock acquire` and `group status`)
//! says how that holder ended, as `BATON_PREVIOUS_OUTCOME` tells a command:
//! `released`, `failed:<code>` (its command's non-zero exit, or the code
//! `baton run` exits with: 124 after `--timeout`, 79 when superseded),
//! `killed:<signal>` (`killed:SIGKILL`; a script hold stopped by `--ttl`
//! or `lock break` is `killed:SIGTERM`) or `died` (it ended without
//! releasing: `previous_holder_died`); `null` before the first grant.
//!
//! A holder inside `holders`/`holder`/`last_holder`/`previous_holder` has the fields [`HOLDER`],
//! its `liveness` one of [`LIVENESS`]; an element of `kernel_holders` has the
//! fields [`KERNEL_HOLDER`].
//!
//! # Schemas and stability
//!
//! Each output (and each body of the job API) has a JSON Schema in
//! `schemas/` at the top of the repository, generated from the type in the
//! table above (`baton::schema::OUTPUTS` names the file of each; `cargo run
//! -p baton-schema` rewrites them). Its fields are exactly the shape's here,
//! all required (present, `null` for "none") unless the schema says
//! otherwise; a test holds each schema to its shape, another validates the
//! real binary's output against it.
//!
//! The rule: within a version, fields (and values of an enumeration) are
//! only added, and schemas never forbid unknown fields, so a reader of one
//! version reads every later output of it. A removal, a rename, a change of
//! type, or a field no longer always present is a new version of that
//! output: the version is in its schema's `$id`
//! (`urn:baton:schema:lock-status:v1`), not in the output itself, because
//! several outputs are arrays (no place for a field), and a `"schema"` field
//! in every object would repeat in each element and change the library
//! types' Rust API. The generator refuses such a change under the same
//! version.

/// One JSON output: the command that prints it and its top-level fields.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// The command, without `--json`.
    pub command: &'static str,
    /// Its top-level fields, sorted.
    pub fields: &'static [&'static str],
}

/// `baton lock status NAME --json` (and each element of `lock list --json`).
pub const LOCK_STATUS: Shape = Shape {
    command: "lock status NAME",
    fields: &[
        "content",
        "content_error",
        "held",
        "held_through_replaced_file",
        "holder",
        "holders",
        "kernel_holders",
        "last_holder",
        "last_holder_died",
        "last_token",
        "max",
        "mode",
        "name",
        "path",
        "previous_holder",
        "previous_holder_died",
        "previous_outcome",
        "replaced_file_unknown",
        "waiters",
    ],
};

/// A holder in `lock status`.
pub const HOLDER: Shape = Shape {
    command: "lock status NAME (a holder)",
    fields: &[
        "acquired_at",
        "acquired_for",
        "alive",
        "boot_id",
        "host",
        "kind",
        "liveness",
        "local_pid",
        "mode",
        "operation",
        "owner",
        "pid",
        "pid_ns",
        "run_id",
        "slot",
        "start_time",
        "token",
    ],
};

/// The values of a holder's `liveness`: `alive`; `dead`; `unknown` (another
/// host, or this one before a reboot); `not_visible` (same kernel, in a PID
/// namespace that cannot be seen from where `status` runs: alive as far as
/// it can tell); `inherited` (the recorded process is gone, but its open lock
/// file still holds the lock: see `kernel_holders`). A held lock's holder is
/// never `dead`.
pub const LIVENESS: &[&str] = &["alive", "dead", "inherited", "not_visible", "unknown"];

/// A process in `kernel_holders` of `lock status`: one that holds the lock
/// according to the kernel (its fdinfo), listed when a holder's record
/// cannot be confirmed from here.
pub const KERNEL_HOLDER: Shape = Shape {
    command: "lock status NAME (a kernel holder)",
    fields: &["command", "pid", "slots", "start_time"],
};

/// `baton lock acquire --json`.
pub const LOCK_ACQUIRE: Shape = Shape {
    command: "lock acquire NAME",
    fields: &[
        "holder_pid",
        "name",
        "previous_holder",
        "previous_holder_died",
        "previous_outcome",
        "run_id",
        "token",
    ],
};

/// `baton lock release --json`.
pub const LOCK_RELEASE: Shape = Shape {
    command: "lock release NAME",
    fields: &["holder_pid", "name", "token"],
};

/// `baton lock break --json`.
pub const LOCK_BREAK: Shape = Shape {
    command: "lock break NAME",
    fields: &["free_now", "name", "stopped", "was_held"],
};

/// `baton group status KEY --json`.
pub const GROUP_STATUS: Shape = Shape {
    command: "group status KEY",
    fields: &[
        "completed",
        "generation",
        "key",
        "max",
        "mode",
        "previous_holder",
        "previous_holder_died",
        "previous_outcome",
        "running",
        "skipped",
        "superseded",
        "waiting",
    ],
};

/// A line of `baton events` (of `<baton dir>/events.jsonl`): one lifecycle
/// event of a group run. `code` (for `finished`), `by` (for
/// `superseded`), `pushed` (true when a `baton git push` of the run's
/// command landed; absent otherwise) and `detail` may be absent.
pub const EVENT: Shape = Shape {
    command: "events",
    fields: &[
        "by", "code", "detail", "event", "group", "pid", "pushed", "run_id", "ts",
    ],
};

/// `baton state get --json`.
pub const STATE_GET: Shape = Shape {
    command: "state get FILE",
    fields: &["content", "version"],
};

/// `baton state edit --json`.
pub const STATE_EDIT: Shape = Shape {
    command: "state edit FILE",
    fields: &["changed", "path", "previous", "version"],
};

/// `baton workspace create --json`.
pub const WORKSPACE: Shape = Shape {
    command: "workspace create",
    fields: &[
        "abandoned_commit",
        "abandoned_ref",
        "base_git_dir",
        "base_repo",
        "branch",
        "commit",
        "created_at",
        "id",
        "owner",
        "path",
        "reference",
        "root",
        "run_id",
        "strategy",
    ],
};

/// Each element of `baton workspace list --json`.
pub const WORKSPACE_LISTED: Shape = Shape {
    command: "workspace list",
    fields: &[
        "abandoned_commit",
        "abandoned_ref",
        "age_secs",
        "base_git_dir",
        "base_repo",
        "branch",
        "commit",
        "created_at",
        "exists",
        "id",
        "owner",
        "owner_alive",
        "path",
        "reference",
        "root",
        "run_id",
        "size_bytes",
        "strategy",
    ],
};

/// `baton workspace gc --json`.
pub const WORKSPACE_GC: Shape = Shape {
    command: "workspace gc",
    fields: &[
        "discarded",
        "failed",
        "kept",
        "pruned",
        "removed",
        "skipped",
        "unreadable",
    ],
};

/// `baton git push --json`.
pub const GIT_PUSH: Shape = Shape {
    command: "git push",
    fields: &[
        "attempts", "branch", "commit", "rebases", "remote", "repo", "run_id",
    ],
};

/// `baton doctor --json`. `status` is the worst status of the checks (`ok`,
/// `warning` or `error`), `baton_dir` and `rule` (see [`DIR_RULES`]) are
/// `null` when no baton dir could be located.
pub const DOCTOR: Shape = Shape {
    command: "doctor",
    fields: &["baton_dir", "checks", "rule", "status"],
};

/// One check of `baton doctor --json`: `name` (one of [`DOCTOR_CHECKS`]),
/// `status` (`ok`, `warning`, `error` or `skipped`), a one-line `summary`,
/// the `remedy` (`null` when all is well) and a `detail` object of facts.
pub const DOCTOR_CHECK: Shape = Shape {
    command: "doctor (a check)",
    fields: &["detail", "name", "remedy", "status", "summary"],
};

/// A job's `status`, in lifecycle order.
pub const JOB_STATUSES: &[&str] = &[
    "queued",
    "running",
    "succeeded",
    "failed",
    "timed_out",
    "cancelled",
    "superseded",
    "skipped",
    "interrupted",
];

/// The checks of `baton doctor`, in the order they run.
pub const DOCTOR_CHECKS: &[&str] = &[
    "baton_dir",
    "permissions",
    "filesystem",
    "locks",
    "inotify",
    "git",
    "free_space",
    "workspaces",
    "pid_namespace",
    "backend",
];

/// The rules that choose a baton dir (`rule` of `baton doctor --json`), in
/// resolution order (docs/src/design/architecture.md, decision 10).
pub const DIR_RULES: &[&str] = &["explicit", "env", "temp_dir"];

/// Every shape written here, for tests and documentation (the `job`
/// outputs' are `baton_api::contract::all`).
pub const ALL: &[Shape] = &[
    LOCK_STATUS,
    HOLDER,
    LOCK_ACQUIRE,
    LOCK_RELEASE,
    LOCK_BREAK,
    GROUP_STATUS,
    EVENT,
    STATE_GET,
    STATE_EDIT,
    WORKSPACE,
    WORKSPACE_LISTED,
    WORKSPACE_GC,
    GIT_PUSH,
    DOCTOR,
    DOCTOR_CHECK,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_sorted_and_unique() {
        for s in ALL {
            assert!(
                s.fields.windows(2).all(|w| w[0] < w[1]),
                "{}: fields must be sorted and unique",
                s.command
            );
        }
    }
}
