//! `baton group status`: the live runs of each group, from the group
//! documents of a baton dir or from the database.

use std::fs;

use serde::Serialize;

use baton_lock::{BatonDir, LockName};

use crate::error::RunError;
use crate::group::{prune, read_doc, GroupDoc, GroupMode, GroupRun, RunState};

/// Everything `baton group status` shows about one key.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupStatus {
    /// The key.
    pub key: String,
    /// Mode of the live runs (`null` when idle).
    pub mode: Option<GroupMode>,
    /// Slots.
    pub max: u32,
    /// Runs executing now.
    pub running: Vec<GroupRun>,
    /// Runs waiting, in arrival order.
    pub waiting: Vec<GroupRun>,
    /// Finished runs since the baton dir was created; `None` (`null` in
    /// JSON) where they are not counted: groups on PostgreSQL keep only
    /// their live runs.
    pub completed: Option<u64>,
    /// Superseded runs; `None` where not counted, as `completed`.
    pub superseded: Option<u64>,
    /// Refused runs (skip, --max-pending); `None` where not counted, as
    /// `completed`.
    pub skipped: Option<u64>,
    /// Supersede generation.
    pub generation: u64,
    /// Whether the holder of the group's slot before the current (or next)
    /// run ended without releasing it (its `baton run` died): its work may
    /// be half done. As `previous_holder_died` of `lock status`; always
    /// false for groups on PostgreSQL.
    pub previous_holder_died: bool,
    /// That holder, when `previous_holder_died`.
    pub previous_holder: Option<baton_lock::HolderInfo>,
    /// How the run before the current (or next) one on the group's (first)
    /// slot ended, as that run learns it (`BATON_PREVIOUS_OUTCOME`):
    /// `released`, `failed:<code>`, `killed:<signal>` or `died`; `null`
    /// before the first run, and for groups on PostgreSQL.
    pub previous_outcome: Option<baton_lock::HolderOutcome>,
}

/// Status of one group, or of all groups (sorted by key), in the baton dir.
pub(crate) fn local_group_status(
    dir: &BatonDir,
    key: Option<&LockName>,
) -> Result<Vec<GroupStatus>, RunError> {
    let root = dir.path().join("groups");
    let mut docs = Vec::new();
    match key {
        Some(k) => docs.push(read_doc(&root.join(format!("{}.json", k.file_stem())), k)?),
        None => {
            let entries = match fs::read_dir(&root) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(source) => {
                    return Err(RunError::File {
                        op: "list groups in",
                        path: root.clone(),
                        source,
                    })
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "json") {
                    if let Ok(bytes) = fs::read(&path) {
                        if let Ok(doc) = serde_json::from_slice::<GroupDoc>(&bytes) {
                            docs.push(doc);
                        }
                    }
                }
            }
        }
    }
    let mut out: Vec<GroupStatus> = docs
        .into_iter()
        .map(|mut doc| {
            prune(&mut doc);
            let (running, waiting): (Vec<GroupRun>, Vec<GroupRun>) = doc
                .runs
                .into_iter()
                .partition(|r| r.state == RunState::Running);
            let slot = slot_status(&root, &doc.key);
            let previous_outcome = slot.as_ref().and_then(|st| st.previous_outcome.clone());
            let previous = slot
                .filter(|st| st.previous_holder_died)
                .and_then(|st| st.previous_holder);
            GroupStatus {
                previous_outcome,
                previous_holder_died: previous.is_some(),
                previous_holder: previous,
                key: doc.key,
                mode: doc.mode,
                max: doc.max,
                running,
                waiting,
                completed: Some(doc.completed),
                superseded: Some(doc.superseded),
                skipped: Some(doc.skipped),
                generation: doc.generation,
            }
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

/// [`local_group_status`] for groups on PostgreSQL. Only live runs are kept
/// there: the counters (`completed`, `superseded`, `skipped`) are `None`,
/// and `generation` is 0.
#[cfg(feature = "postgres")]
pub(crate) fn remote_group_status(
    db: &baton_pg::Database,
    key: Option<&LockName>,
) -> Result<Vec<GroupStatus>, RunError> {
    let mut out: Vec<GroupStatus> = Vec::new();
    for row in db.group_runs(key)? {
        if out.last().is_none_or(|g| g.key != row.key) {
            out.push(GroupStatus {
                mode: serde_json::from_value(serde_json::Value::String(row.mode.clone())).ok(),
                max: row.slots,
                ..uncounted(&row.key)
            });
        }
        let run = GroupRun {
            run_id: row.run_id,
            process: row.process,
            seq: row.seq,
            state: if row.running {
                RunState::Running
            } else {
                RunState::Waiting
            },
            queued_at: row.queued_at,
            started_at: row.started_at,
            command: row.command,
            superseded_by: row.superseded_by,
        };
        if let Some(g) = out.last_mut() {
            match run.state {
                RunState::Running => g.running.push(run),
                RunState::Waiting => g.waiting.push(run),
            }
        }
    }
    if let (Some(k), true) = (key, out.is_empty()) {
        out.push(uncounted(k.as_str()));
    }
    Ok(out)
}

/// An idle group as PostgreSQL knows it: no runs, no counters.
#[cfg(feature = "postgres")]
fn uncounted(key: &str) -> GroupStatus {
    GroupStatus {
        key: key.to_string(),
        mode: None,
        max: 0,
        running: Vec::new(),
        waiting: Vec::new(),
        completed: None,
        superseded: None,
        skipped: None,
        generation: 0,
        previous_holder_died: false,
        previous_holder: None,
        previous_outcome: None,
    }
}

/// The `lock status` of group `key`'s slot under `root` (`<baton dir>/groups`),
/// if its slots dir exists (nothing is created).
fn slot_status(root: &std::path::Path, key: &str) -> Option<baton_lock::LockStatus> {
    let slots = root.join("slots");
    if !slots.join("locks").is_dir() {
        return None;
    }
    let dir = BatonDir::open(slots).ok()?;
    baton_lock::status(&dir, &LockName::new(key).ok()?).ok()
}
