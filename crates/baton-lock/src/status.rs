//! Reporting who holds a lock, who waits, and whether a holder died.
//!
//! The kernel says whether a lock is held and how many wait; the metadata says
//! who. A record whose slot the kernel no longer sees held belongs to a holder
//! that ended without releasing (a clean release removes its record), which is
//! reported as "free, last holder died".

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::dir::BatonDir;
use crate::error::LockError;
use crate::identity::{Liveness, ProcessIdentity};
use crate::layout::{count_tickets, held_slots};
use crate::meta::{read_doc, CommandGroup, DocRead, HolderKind, HolderRecord};
use crate::meta_lock::MetaLock;
use crate::name::LockName;
use crate::ofd::Kind;
use crate::replaced::{holders_elsewhere, marker};
use baton_fs::IoResultExt;

/// One holder as shown by `status`.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HolderInfo {
    /// Process id of the holding process.
    pub pid: i32,
    /// Host it runs on.
    pub host: String,
    /// Who it acts for.
    pub owner: String,
    /// What it does.
    pub operation: Option<String>,
    /// Its run id.
    pub run_id: String,
    /// When it was granted the lock (RFC 3339).
    pub acquired_at: String,
    /// Its fencing token.
    pub token: u64,
    /// Whether the process still runs: false only when `liveness` is `dead`
    /// (assumed true on another host, or in a PID namespace not visible from here).
    pub alive: bool,
    /// `alive`, `dead`, `unknown` (another host), `not_visible` (another PID
    /// namespace, not visible from here) or `inherited` (gone, but its open
    /// lock file still holds the lock: see `kernel_holders`).
    pub liveness: Liveness,
    /// `exclusive`, `shared` or `semaphore`.
    pub mode: String,
    /// Slot held (semaphores).
    pub slot: u32,
    /// What kind of process holds it.
    pub kind: HolderKind,
    /// Process start time in clock ticks since boot.
    pub start_time: u64,
    /// Boot id of its machine.
    pub boot_id: String,
    /// The process it holds the lock for (`baton lock acquire`: the calling script).
    pub acquired_for: Option<ProcessIdentity>,
    /// The PID namespace `pid` belongs to (inode of `/proc/<pid>/ns/pid`).
    pub pid_ns: Option<u64>,
    /// Its pid as seen from here, when it runs and is visible from here (it
    /// differs from `pid` when it runs in another PID namespace).
    pub local_pid: Option<i32>,
    /// The holder's identity and the process group of the command it runs
    /// under the lock, as recorded: for [`HolderInfo::stop_command`]. Not
    /// part of the JSON.
    #[serde(skip)]
    #[cfg_attr(feature = "schema", schemars(skip))]
    command: Option<(ProcessIdentity, CommandGroup)>,
}

impl HolderInfo {
    /// What `status` shows for a holder record; its liveness is judged
    /// from this machine (see [`ProcessIdentity::liveness`]).
    pub fn from_record(r: &HolderRecord) -> HolderInfo {
        let seen = r.process.sighting();
        let liveness = seen.liveness;
        HolderInfo {
            pid: r.process.pid,
            host: r.process.host.clone(),
            owner: r.owner.clone(),
            operation: r.operation.clone(),
            run_id: r.run_id.clone(),
            acquired_at: r.acquired_at.clone(),
            token: r.token,
            alive: liveness != Liveness::Dead,
            liveness,
            mode: r.mode.clone(),
            slot: r.slot,
            kind: r.kind,
            start_time: r.process.start_time,
            boot_id: r.process.boot_id.clone(),
            acquired_for: r.acquired_for.clone(),
            pid_ns: r.process.pid_ns,
            local_pid: seen.local_pid,
            command: r.command_group.map(|g| (r.process.clone(), g)),
        }
    }

    /// Stops what is left of the process group of the command this holder
    /// ran under the lock (a `baton run` command, a `baton state edit`
    /// filter): TERM, `grace`, KILL, only if the group's leader is still
    /// the recorded process (its start time), and not when the group's PID
    /// namespace is not visible from here. Nothing when no group was
    /// recorded.
    ///
    /// For `lock break` once it has stopped the holder itself: the holder's
    /// command may ignore the TERM the holder forwarded, and would otherwise
    /// run on until the next holder's grant stops it.
    pub fn stop_command(&self, grace: Duration) {
        if let Some((process, group)) = &self.command {
            let group = CommandGroup {
                grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                ..*group
            };
            #[cfg(unix)]
            crate::grant::terminate_leftover(process.ns_id(), group);
            #[cfg(windows)]
            {
                let _ = process;
                crate::grant::terminate_leftover((), group);
            }
        }
    }
}

/// The state of the lock file's metadata document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Content {
    /// A valid document.
    Ok,
    /// Nothing written yet.
    Empty,
    /// Garbage, truncated or non-UTF-8 content (see `content_error`).
    Unreadable,
    /// No lock file exists yet.
    Missing,
}

/// Everything known about one lock.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LockStatus {
    /// The lock's name.
    pub name: String,
    /// Its lock file.
    pub path: PathBuf,
    /// Whether anyone holds it now (from the kernel).
    pub held: bool,
    /// `exclusive`, `shared` or `semaphore` while held; `null` when free.
    pub mode: Option<String>,
    /// Number of slots (1 unless a semaphore).
    pub max: u32,
    /// The (first) current holder.
    pub holder: Option<HolderInfo>,
    /// All current holders (several for shared locks and semaphores).
    pub holders: Vec<HolderInfo>,
    /// How many wait in line.
    pub waiters: usize,
    /// True when the lock is free and its last holder ended without releasing.
    pub last_holder_died: bool,
    /// That holder, when `last_holder_died`.
    pub last_holder: Option<HolderInfo>,
    /// What the holder that is (or will be) granted the lock learns: true
    /// when the holder before it ended without releasing (died, or the
    /// script it held the lock for did), so its work may be half done. For a
    /// held lock, about the (first) current holder's grant; for a free
    /// lock, the same as `last_holder_died`.
    pub previous_holder_died: bool,
    /// That holder, when `previous_holder_died`.
    pub previous_holder: Option<HolderInfo>,
    /// How the holder before the current (or next) grant ended, as that
    /// grant learns it (`BATON_PREVIOUS_OUTCOME`): `released`,
    /// `failed:<code>`, `killed:<signal>` or `died`; `null` for a lock
    /// never granted (or whose (first) holder's record predates outcomes).
    pub previous_outcome: Option<crate::HolderOutcome>,
    /// The last fencing token granted.
    pub last_token: u64,
    /// State of the metadata document.
    pub content: Content,
    /// Why the content is unreadable, when it is.
    pub content_error: Option<String>,
    /// The inode the document was last granted in (internal).
    #[serde(skip)]
    inode: Option<u64>,
    /// Lock files (`device:inode`) that are no longer at this lock's path
    /// (deleted, renamed or replaced) but through which someone still holds
    /// the lock. New acquirers wait until they are released.
    pub held_through_replaced_file: Vec<String>,
    /// True when this lock file is new to the lock (or missing) and this
    /// system cannot see whether someone still holds the lock through an
    /// older file that was deleted or replaced (macOS has no `/proc/locks`):
    /// then `held: false` means "not held through this file", and the lock
    /// may still be held through the deleted one.
    pub replaced_file_unknown: bool,
    /// The processes that hold the lock according to the kernel (the `lock:`
    /// lines of their fdinfo), looked up when a holder's record cannot be
    /// confirmed from here (or names none). Empty otherwise, and when the
    /// holder cannot be seen from here (another PID namespace, another user).
    pub kernel_holders: Vec<crate::kernel_holders::KernelHolder>,
}

/// Status of one lock. Never creates anything.
pub fn status(dir: &BatonDir, name: &LockName) -> Result<LockStatus, LockError> {
    crate::ofd::locks_work(&dir.locks_dir()).map_err(|reason| LockError::Unsupported { reason })?;
    let path = dir.lock_path(name);
    let mut st = status_of_file(&path, Some(name.as_str()))?;
    see_replaced_files(&mut st, dir, name.as_str());
    Ok(st)
}

/// Adds holders through files no longer at the lock's path. Only a file whose
/// document does not name its own inode (or no file at all) can have such a
/// predecessor; where the system cannot tell (macOS), says so.
fn see_replaced_files(st: &mut LockStatus, dir: &BatonDir, name: &str) {
    let ours = crate::sys::path_id(&st.path).ok();
    if ours.is_some_and(|id| st.inode == Some(id.ino)) {
        return;
    }
    match holders_elsewhere(marker(dir.path(), name), ours) {
        Some(found) => st.held_through_replaced_file = found,
        None => st.replaced_file_unknown = true,
    }
    if !st.held_through_replaced_file.is_empty() {
        st.held = true;
    }
}

/// Status of every lock in the baton dir, sorted by name.
pub fn list(dir: &BatonDir) -> Result<Vec<LockStatus>, LockError> {
    crate::ofd::locks_work(&dir.locks_dir()).map_err(|reason| LockError::Unsupported { reason })?;
    let locks = dir.locks_dir();
    let entries = std::fs::read_dir(&locks).context("cannot list", &locks)?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.context("cannot list", &locks)?;
        let file_name = entry.file_name();
        let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
            continue;
        };
        let guess = LockName::from_file_stem(stem).map(|n| n.to_string());
        let mut st = status_of_file(&entry.path(), guess.as_deref().or(Some(stem)))?;
        let name = st.name.clone();
        see_replaced_files(&mut st, dir, &name);
        out.push(st);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// What is held now in the baton dir at `path` (say, the per-clone dir an
/// older baton used by default, [`crate::previous_default`]), sorted: the
/// names of its locks, and `group KEY` for its groups' slots; not the locks
/// that belong there (the repository lock `git/…`, a local remote's push
/// queue `git-push/…`, workspaces' `workspace/…`, or anything held by
/// baton's git operations). Creates nothing; an unreadable dir has none.
pub fn held_locks_in(path: &Path) -> Vec<String> {
    let mut held = Vec::new();
    for (sub, prefix) in [("locks", ""), ("groups/slots/locks", "group ")] {
        let locks = path.join(sub);
        let Ok(entries) = std::fs::read_dir(&locks) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            let guess = LockName::from_file_stem(stem).map(|n| n.to_string());
            let Ok(st) = status_of_file(&entry.path(), guess.as_deref().or(Some(stem))) else {
                continue;
            };
            // What baton's git operations keep there by name, whoever holds it.
            let of_git = ["git/", "git-push/", "workspace/"]
                .iter()
                .any(|p| prefix.is_empty() && st.name.starts_with(p));
            let git_only =
                !st.holders.is_empty() && st.holders.iter().all(|h| h.kind == HolderKind::Git);
            if st.held && !git_only && !of_git {
                held.push(format!("{prefix}{}", st.name));
            }
        }
    }
    held.sort();
    held
}

impl LockStatus {
    /// The status of a free lock that nobody has used yet, at `path` (for
    /// a lock kept elsewhere than in a file, where it is kept).
    pub fn unused(name: &str, path: PathBuf) -> LockStatus {
        LockStatus {
            name: name.to_string(),
            path,
            held: false,
            mode: None,
            max: 1,
            holder: None,
            holders: Vec::new(),
            waiters: 0,
            last_holder_died: false,
            last_holder: None,
            previous_holder_died: false,
            previous_holder: None,
            previous_outcome: None,
            last_token: 0,
            content: Content::Missing,
            content_error: None,
            held_through_replaced_file: Vec::new(),
            replaced_file_unknown: false,
            kernel_holders: Vec::new(),
            inode: None,
        }
    }
}

fn status_of_file(path: &Path, fallback_name: Option<&str>) -> Result<LockStatus, LockError> {
    let mut st = LockStatus::unused(fallback_name.unwrap_or_default(), path.to_path_buf());
    let file = match open_for_status(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(st),
        Err(e) => {
            return Err(e)
                .context("cannot open lock file", path)
                .map_err(Into::into)
        }
    };
    let fd = &file;
    // Read under META for a consistent view; a writer never holds it for more
    // than a few system calls, so one that holds it for seconds is stopped or
    // stuck, and a best-effort view beats hanging.
    let _meta =
        MetaLock::read(&file, Duration::from_secs(2)).context("cannot lock metadata of", path)?;
    let doc = match read_doc(&file).context("cannot read lock file", path)? {
        DocRead::Valid(doc) => {
            st.content = Content::Ok;
            Some(doc)
        }
        DocRead::Empty => {
            st.content = Content::Empty;
            None
        }
        DocRead::Unreadable(why, _) => {
            st.content = Content::Unreadable;
            st.content_error = Some(why);
            None
        }
    };
    let max = doc.as_ref().map_or(1, |d| d.max.max(1));
    st.max = max;
    let held = held_slots(fd, max).context("cannot inspect lock", path)?;
    st.waiters = count_tickets(fd).context("cannot inspect lock", path)?;
    st.held = !held.is_empty();
    if st.held {
        st.mode = Some(
            if max > 1 {
                "semaphore"
            } else if held.iter().any(|(_, k)| *k == Kind::Read) {
                "shared"
            } else {
                "exclusive"
            }
            .to_string(),
        );
    }
    if let Some(doc) = doc {
        if !doc.name.is_empty() {
            st.name = doc.name.clone();
        }
        st.last_token = doc.token;
        st.inode = doc.inode;
        let (live, dead): (Vec<&HolderRecord>, Vec<&HolderRecord>) =
            doc.holders.iter().partition(|r| {
                let slot_held = held.iter().any(|(s, _)| *s == r.slot);
                let shared_dead = r.mode == "shared" && r.process.liveness() == Liveness::Dead;
                slot_held && !shared_dead
            });
        if let Some(first) = live.first() {
            st.previous_outcome = first.previous_outcome.clone();
        }
        if let Some(prev) = live.first().and_then(|r| r.previous.as_deref()) {
            st.previous_holder_died = true;
            st.previous_holder = Some(HolderInfo::from_record(prev));
        }
        st.holders = live.into_iter().map(HolderInfo::from_record).collect();
        // The kernel says the slot is held: its recorded holder is gone only
        // if someone inherited the open lock file (never "dead" while held).
        for h in &mut st.holders {
            if h.liveness == Liveness::Dead {
                h.liveness = Liveness::Inherited;
            }
        }
        // A record left on a free lock by a process that still runs is a
        // release in progress (the slot is freed before the record), not a
        // death, unless it was abandoned.
        if !st.held {
            if let Some(last) = dead.iter().rev().find(|r| r.ended_without_release()) {
                st.last_holder_died = true;
                st.last_holder = Some(HolderInfo::from_record(last));
                st.previous_holder_died = true;
                st.previous_holder = st.last_holder.clone();
            }
            // What the next grant of the first slot would learn.
            st.previous_outcome = if st.last_holder_died {
                Some(crate::HolderOutcome::Died)
            } else {
                crate::grant::outcome_before(&doc, 0, None)
            };
        }
    }
    let unconfirmed = st.holders.is_empty()
        || st
            .holders
            .iter()
            .any(|h| matches!(h.liveness, Liveness::Inherited | Liveness::NotVisible));
    if st.held && unconfirmed {
        if let Ok(id) = crate::sys::file_id(&file) {
            st.kernel_holders = crate::kernel_holders::kernel_holders(id, max);
        }
    }
    st.holder = st.holders.first().cloned();
    Ok(st)
}

fn open_for_status(path: &Path) -> std::io::Result<File> {
    crate::sys::open_for_status(path)
}
