//! Concurrency groups: per key, modes queue / supersede / coalesce / skip.
//!
//! A group key is a lock (the *slot*, FIFO, `--max N` slots) plus a small
//! JSON document listing the group's live runs, protected by a second lock
//! (the group's *meta* lock, held for a few system calls at a time):
//!
//! ```text
//! <baton dir>/groups/<key>.json             the document: mode, generation, runs, counters
//! <baton dir>/groups/locks/<key>.lock       meta lock (short critical sections)
//! <baton dir>/groups/slots/locks/<key>.lock the slot: holding it = running
//! ```
//!
//! Every run registers in the document on arrival (state `waiting`), switches
//! to `running` under the meta lock once it holds the slot, and removes itself
//! when done; entries of processes that died are pruned by the next writer.
//!
//! Superseding (decision 7 of docs/src/design/architecture.md): the newer run, under the meta lock,
//! bumps the generation and marks every older live run (`supersede`) or every
//! older *waiting* run (`coalesce`) with `superseded_by`, then sends each of
//! their baton processes SIGUSR1. A marked run that is still waiting exits 79
//! at once (leaving the FIFO line); a running one has its supervisor stop the
//! command (TERM, grace, KILL) and then exits 79. The slot is FIFO, and a run
//! that obtains the slot re-checks its mark under the meta lock before
//! starting, so a marked run never executes and no run can overtake the
//! newest: the newest is always next in line.
//!
//! Ordering keys (`--order`, modes supersede and coalesce): without one,
//! the newest *arrival* wins. A run that brings a key (an integer, or an
//! RFC 3339 time: the event it answers) is compared, under the meta lock,
//! with the newest key the group has seen (`order` in the document, kept
//! while the group is idle): an older key never joins, and ends at once
//! as superseded (79) by the run that brought the newest, without running
//! its command; an equal or newer key becomes the newest and supersedes as
//! above (equal keys: the later arrival wins, as without keys). A run
//! without a key is ordered by arrival, as before, and leaves the newest
//! key as it is; a key of the other kind (an integer where the group's
//! newest is a time) is refused (125).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use baton_lock::{
    acquire, BatonDir, CancelToken, Liveness, LockGuard, LockName, LockRequest, Mode,
    ProcessIdentity, WaitPolicy,
};
use serde::{Deserialize, Serialize};

use baton_fs::{Durability, IoResultExt, TempFile, WriteError};

use crate::error::RunError;
use crate::events::{self, Event};

/// How runs of one group key relate: the one group mode of baton, defined
/// with the service's wire model (a job's `mode` is the same value).
pub use baton_api::GroupMode;

/// A run's ordering key in its group (`--order`): an integer or an RFC 3339
/// time, defined with the service's wire model (a job's `order`).
pub use baton_api::{Order, OrderKind};

/// What a run asks of its group.
#[derive(Clone, Debug)]
pub struct GroupRequest {
    /// The group key (lock-name rules).
    pub key: LockName,
    /// The group's mode; every run of a key must use the same.
    pub mode: GroupMode,
    /// Runs executing at once (queue mode); 1 otherwise.
    pub max: u32,
    /// Queue mode: an arrival beyond this many waiting runs is refused (exit 75).
    pub max_pending: Option<u32>,
    /// How long to wait for the slot.
    pub wait: WaitPolicy,
    /// The run's ordering key (`--order`; modes supersede and coalesce
    /// only): see the module documentation.
    pub order: Option<Order>,
}

/// Where a live run of a group is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Registered, waiting for the group's slot.
    Waiting,
    /// Holding the slot; its command runs.
    Running,
}

/// What the group's event log records about a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// Registered in the group.
    Queued,
    /// Refused (mode skip while busy, or `--max-pending` reached).
    Skipped,
    /// Took the slot; its command starts.
    Started,
    /// Its command ended (the code says how).
    Finished,
    /// A newer run superseded it.
    Superseded,
    /// Left without running (wait elapsed, cancelled, an error).
    GaveUp,
    /// Its command left processes running, which were terminated.
    Leftovers,
}

impl GroupEvent {
    /// The name written to the event log.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupEvent::Queued => "queued",
            GroupEvent::Skipped => "skipped",
            GroupEvent::Started => "started",
            GroupEvent::Finished => "finished",
            GroupEvent::Superseded => "superseded",
            GroupEvent::GaveUp => "gave_up",
            GroupEvent::Leftovers => "leftovers",
        }
    }
}

/// One live run as recorded in the group document.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupRun {
    /// The run id.
    pub run_id: String,
    /// The baton process supervising the run.
    #[serde(flatten)]
    pub process: ProcessIdentity,
    /// Arrival order within the key.
    pub seq: u64,
    /// Waiting for the slot, or running.
    pub state: RunState,
    /// When it arrived (RFC 3339).
    pub queued_at: String,
    /// When it started running (RFC 3339).
    #[serde(default)]
    pub started_at: Option<String>,
    /// The command line.
    pub command: String,
    /// The run that superseded this one, once marked.
    #[serde(default)]
    pub superseded_by: Option<String>,
}

/// The group document.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GroupDoc {
    /// The key.
    pub key: String,
    /// Mode of the live runs.
    pub mode: Option<GroupMode>,
    /// Slots of the live runs.
    #[serde(default)]
    pub max: u32,
    /// Bumped by every superseding arrival.
    #[serde(default)]
    pub generation: u64,
    /// Last arrival number handed out.
    #[serde(default)]
    pub seq: u64,
    /// Runs that finished (whatever their exit code) since the baton dir was created.
    #[serde(default)]
    pub completed: u64,
    /// Runs that were superseded.
    #[serde(default)]
    pub superseded: u64,
    /// Runs refused by `skip` or `--max-pending`.
    #[serde(default)]
    pub skipped: u64,
    /// Live runs, in arrival order.
    #[serde(default)]
    pub runs: Vec<GroupRun>,
    /// The newest ordering key a run of the group brought (kept when the
    /// group is idle, so that a late older event is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<NewestOrder>,
}

/// The newest ordering key seen for a group, and the run that brought it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewestOrder {
    /// `integer` or `time`.
    pub kind: String,
    /// The integer, or the time in microseconds since the Unix epoch.
    pub value: i64,
    /// The key as the run gave it.
    pub key: String,
    /// The run that brought it.
    pub run_id: String,
}

impl NewestOrder {
    /// As an [`Order`]; `None` if the document holds an unknown kind.
    pub(crate) fn order(&self) -> Option<Order> {
        OrderKind::parse(&self.kind).map(|k| Order::from_parts(k, self.value, self.key.clone()))
    }
}

/// Where a group's files are.
pub(crate) struct GroupPaths {
    meta: BatonDir,
    slots: BatonDir,
    doc: PathBuf,
    events: PathBuf,
}

impl GroupPaths {
    pub(crate) fn new(dir: &BatonDir, key: &LockName) -> Result<GroupPaths, RunError> {
        let root = dir.path().join("groups");
        let meta = BatonDir::open(&root)?;
        let slots = BatonDir::open(root.join("slots"))?;
        Ok(GroupPaths {
            doc: root.join(format!("{}.json", key.file_stem())),
            meta,
            slots,
            events: events::log_path(dir),
        })
    }
}

fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

pub(crate) fn read_doc(path: &Path, key: &LockName) -> Result<GroupDoc, RunError> {
    match fs::read(path) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes).unwrap_or_else(|_| GroupDoc {
            key: key.to_string(),
            ..GroupDoc::default()
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(GroupDoc {
            key: key.to_string(),
            ..GroupDoc::default()
        }),
        Err(source) => Err(RunError::File {
            op: "read the group document",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Replaces the document atomically (temp file + rename in the same
/// directory), so a reader or a crash never sees half of it. No fsync
/// ([`Durability::Rename`]): the document describes live processes, which a
/// power loss ends anyway.
fn write_doc(path: &Path, doc: &GroupDoc) -> Result<(), RunError> {
    let io = |source| RunError::File {
        op: "write the group document",
        path: path.to_path_buf(),
        source,
    };
    let bytes = serde_json::to_vec_pretty(doc).map_err(|e| io(e.into()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let written = TempFile::create(dir, &baton_fs::temp_prefix(path), 0o666)
        .map_err(WriteError::NotWritten)
        .and_then(|temp| {
            // Others of a shared baton dir's group rewrite it too.
            baton_lock::sharing::share_new_file(temp.file(), temp.path())
                .and_then(|()| std::io::Write::write_all(&mut temp.file(), &bytes))
                .context("cannot write", temp.path())
                .map_err(WriteError::NotWritten)?;
            temp.persist(path, Durability::Rename)
        });
    written.map_err(|e| io(e.into_path_error().source))
}

/// Drops runs whose process is gone (killed while waiting or running).
pub(crate) fn prune(doc: &mut GroupDoc) {
    doc.runs.retain(|r| r.process.liveness() != Liveness::Dead);
    if doc.runs.is_empty() {
        doc.mode = None;
        doc.max = 0;
    }
}

/// A registered run.
pub(crate) struct Membership {
    paths: GroupPaths,
    key: LockName,
    pub(crate) run_id: String,
    /// Slots of the group (1 unless mode queue with `--max`).
    max: u32,
}

/// Result of joining a group.
pub(crate) enum Joined {
    /// Registered; wake these older runs (they were marked superseded).
    Member(Membership, Vec<String>),
    /// Not admitted (skip mode busy, or --max-pending reached): exit 75.
    Refused(String),
    /// Its ordering key is older than the newest the group has seen: it
    /// never joins, and ends as superseded by the run that brought that key.
    Outdated(Outdated),
}

/// A run refused for its ordering key: who outranked it, with what key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outdated {
    /// The run that brought the newest key.
    pub by: String,
    /// That key.
    pub newest: String,
}

/// Whether `order` may join a group whose newest key is `newest`:
/// `Ok(None)` when it is as new or newer (equal keys count as newer: the
/// later arrival wins, as without keys), `Ok(Some(outdated))` when older.
///
/// # Errors
///
/// [`RunError::InvalidRequest`] when the kinds differ (an integer against
/// a time).
pub(crate) fn compare_order(
    key: &LockName,
    order: &Order,
    newest: Option<(Order, String)>,
) -> Result<Option<Outdated>, RunError> {
    let Some((newest, by)) = newest else {
        return Ok(None);
    };
    match order.compare(&newest) {
        None => Err(kind_mismatch(
            key,
            order,
            newest.kind().as_str(),
            newest.text(),
        )),
        Some(std::cmp::Ordering::Less) => Ok(Some(Outdated {
            by,
            newest: newest.text().to_string(),
        })),
        Some(_) => Ok(None),
    }
}

/// A key of another kind than the group's newest (`newest_kind`, `newest`).
pub(crate) fn kind_mismatch(
    key: &LockName,
    order: &Order,
    newest_kind: &str,
    newest: &str,
) -> RunError {
    let article = match order.kind() {
        OrderKind::Integer => "an",
        OrderKind::Time => "a",
    };
    RunError::InvalidRequest(format!(
        "--order '{order}' is {article} {}, but group '{key}' is ordered by {newest_kind}s (newest '{newest}')",
        order.kind().as_str(),
    ))
}

/// Refuses flags that the mode does not take.
pub(crate) fn check_request(req: &GroupRequest) -> Result<(), RunError> {
    if req.mode != GroupMode::Queue && req.max > 1 {
        return Err(RunError::InvalidRequest(format!(
            "--max {} applies to mode queue only; mode {} runs one at a time",
            req.max,
            req.mode.as_str()
        )));
    }
    if req.mode != GroupMode::Queue && req.max_pending.is_some() {
        return Err(RunError::InvalidRequest(format!(
            "--max-pending applies to mode queue only, not {}",
            req.mode.as_str()
        )));
    }
    if let (Some(order), GroupMode::Queue | GroupMode::Skip) = (&req.order, req.mode) {
        return Err(RunError::InvalidRequest(format!(
            "--order '{order}' applies to modes supersede and coalesce only, not {}",
            req.mode.as_str()
        )));
    }
    Ok(())
}

/// Registers a new run: checks the mode, applies skip / max-pending, marks
/// runs it supersedes. Returns whom to signal.
pub(crate) fn join(
    dir: &BatonDir,
    req: &GroupRequest,
    run_id: &str,
    command: &str,
) -> Result<Joined, RunError> {
    check_request(req)?;
    let paths = GroupPaths::new(dir, &req.key)?;
    let _meta = meta_lock(&paths, &req.key)?;
    let mut doc = read_doc(&paths.doc, &req.key)?;
    prune(&mut doc);
    let max = if req.mode == GroupMode::Queue {
        req.max.max(1)
    } else {
        1
    };
    // A skip run that finds the group busy never joins it, so it is refused
    // as skipped whatever mode the group's runs use (not as a mismatch).
    let busy_skip = req.mode == GroupMode::Skip && !doc.runs.is_empty();
    if let Some(mode) = doc.mode {
        if !busy_skip && !doc.runs.is_empty() && (mode != req.mode || doc.max != max) {
            return Err(RunError::GroupModeMismatch {
                key: req.key.to_string(),
                existing: format!("mode {} with --max {}", mode.as_str(), doc.max),
                requested: format!("mode {} with --max {max}", req.mode.as_str()),
            });
        }
    }
    // Waiting runs that a free slot awaits (arrived, not yet started) are
    // not pending: only those beyond the free slots are.
    let waiting = doc
        .runs
        .iter()
        .filter(|r| r.state == RunState::Waiting)
        .count();
    let free = (max as usize).saturating_sub(doc.runs.len() - waiting);
    let waiting = waiting.saturating_sub(free);
    let refusal = match req.mode {
        GroupMode::Skip if !doc.runs.is_empty() => Some(format!(
            "group '{}' is busy ({} running or waiting); mode skip",
            req.key,
            doc.runs.len()
        )),
        GroupMode::Queue => req.max_pending.and_then(|cap| {
            (waiting >= cap as usize).then(|| {
                format!(
                    "group '{}' already has {waiting} waiting run(s), --max-pending {cap}",
                    req.key
                )
            })
        }),
        _ => None,
    };
    if let Some(why) = refusal {
        doc.skipped += 1;
        write_doc(&paths.doc, &doc)?;
        events::append(
            &paths.events,
            &Event::new(req.key.as_str(), run_id, GroupEvent::Skipped.as_str()).detail(&why),
        );
        return Ok(Joined::Refused(why));
    }
    if let Some(order) = &req.order {
        let newest = doc
            .order
            .as_ref()
            .and_then(|n| Some((n.order()?, n.run_id.clone())));
        if let Some(out) = compare_order(&req.key, order, newest)? {
            doc.superseded += 1;
            write_doc(&paths.doc, &doc)?;
            events::append(
                &paths.events,
                &Event {
                    by: Some(out.by.clone()),
                    ..Event::new(req.key.as_str(), run_id, GroupEvent::Superseded.as_str())
                        .detail(&format!("order '{order}' is older than '{}'", out.newest))
                },
            );
            return Ok(Joined::Outdated(out));
        }
        doc.order = Some(NewestOrder {
            kind: order.kind().as_str().to_string(),
            value: order.value(),
            key: order.text().to_string(),
            run_id: run_id.to_string(),
        });
    }
    let mut to_signal = Vec::new();
    if matches!(req.mode, GroupMode::Supersede | GroupMode::Coalesce) {
        doc.generation += 1;
        for r in doc.runs.iter_mut() {
            let marked = r.superseded_by.is_some();
            let targeted = req.mode == GroupMode::Supersede || r.state == RunState::Waiting;
            if targeted && !marked {
                r.superseded_by = Some(run_id.to_string());
                to_signal.push(r.run_id.clone());
            }
        }
    }
    doc.seq += 1;
    doc.mode = Some(req.mode);
    doc.max = max;
    doc.runs.push(GroupRun {
        run_id: run_id.to_string(),
        process: ProcessIdentity::current(),
        seq: doc.seq,
        state: RunState::Waiting,
        queued_at: now(),
        started_at: None,
        command: command.to_string(),
        superseded_by: None,
    });
    write_doc(&paths.doc, &doc)?;
    events::append(
        &paths.events,
        &Event::new(req.key.as_str(), run_id, GroupEvent::Queued.as_str())
            .detail(req.mode.as_str()),
    );
    Ok(Joined::Member(
        Membership {
            paths,
            key: req.key.clone(),
            run_id: run_id.to_string(),
            max,
        },
        to_signal,
    ))
}

fn meta_lock(paths: &GroupPaths, key: &LockName) -> Result<LockGuard, RunError> {
    // Held for a few system calls at a time: a long wait means a process
    // stopped inside its bookkeeping; never wait for it forever.
    Ok(acquire(
        &paths.meta,
        &LockRequest::new(key.clone())
            .operation("group bookkeeping")
            .wait(std::time::Duration::from_secs(5)),
    )?)
}

impl Membership {
    /// Waits for the group's slot.
    pub(crate) fn take_slot(
        &self,
        wait: WaitPolicy,
        cancel: CancelToken,
    ) -> Result<LockGuard, RunError> {
        let mode = Mode::Semaphore(self.max); // Semaphore(1) is exclusive
        Ok(acquire(
            &self.paths.slots,
            &LockRequest::new(self.key.clone())
                .mode(mode)
                .wait(wait)
                .run_id(self.run_id.clone())
                .kind(baton_lock::HolderKind::Run)
                .cancel(cancel),
        )?)
    }

    /// Who superseded this run, if anyone (read under the meta lock).
    pub(crate) fn superseded_by(&self) -> Result<Option<String>, RunError> {
        let _meta = meta_lock(&self.paths, &self.key)?;
        let doc = read_doc(&self.paths.doc, &self.key)?;
        Ok(doc
            .runs
            .iter()
            .find(|r| r.run_id == self.run_id)
            .and_then(|r| r.superseded_by.clone()))
    }

    /// Holding the slot: start unless superseded meanwhile. `Ok(Some(by))`
    /// when superseded (do not run).
    pub(crate) fn start(&self) -> Result<Option<String>, RunError> {
        let _meta = meta_lock(&self.paths, &self.key)?;
        let mut doc = read_doc(&self.paths.doc, &self.key)?;
        let Some(me) = doc.runs.iter_mut().find(|r| r.run_id == self.run_id) else {
            return Ok(Some(
                "unknown (the group record of this run was lost)".into(),
            ));
        };
        if let Some(by) = me.superseded_by.clone() {
            return Ok(Some(by));
        }
        me.state = RunState::Running;
        me.started_at = Some(now());
        write_doc(&self.paths.doc, &doc)?;
        events::append(
            &self.paths.events,
            &Event::new(
                self.key.as_str(),
                &self.run_id,
                GroupEvent::Started.as_str(),
            ),
        );
        Ok(None)
    }

    /// Logs an event about this run.
    pub(crate) fn log(&self, event: GroupEvent, detail: &str) {
        events::append(
            &self.paths.events,
            &Event::new(self.key.as_str(), &self.run_id, event.as_str()).detail(detail),
        );
    }

    /// Removes the run from the group and logs how it ended.
    pub(crate) fn finish(
        &self,
        event: GroupEvent,
        code: Option<i32>,
        by: Option<&str>,
        pushed: bool,
    ) {
        let result = (|| -> Result<(), RunError> {
            let _meta = meta_lock(&self.paths, &self.key)?;
            let mut doc = read_doc(&self.paths.doc, &self.key)?;
            doc.runs.retain(|r| r.run_id != self.run_id);
            prune(&mut doc);
            if event == GroupEvent::Superseded {
                doc.superseded += 1;
            } else {
                doc.completed += 1;
            }
            write_doc(&self.paths.doc, &doc)
        })();
        let mut ev = Event::new(self.key.as_str(), &self.run_id, event.as_str());
        ev.code = code;
        ev.by = by.map(String::from);
        ev.pushed = pushed;
        if let Err(e) = result {
            ev.detail = Some(format!("group bookkeeping failed: {e}"));
        }
        events::append(&self.paths.events, &ev);
    }
}
