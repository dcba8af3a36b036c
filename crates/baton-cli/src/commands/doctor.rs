//! `baton doctor`: checks that baton can work where it is pointed, and says
//! what to do about anything that is not right.
//!
//! The facts come from the libraries (`baton_lock::BatonDir::locate`,
//! `baton_lock::{filesystem, probe_locks, inotify, free_space}`,
//! `baton_git::{git_version, dead_owners}`); this module only judges them
//! and words the remedies. The JSON shape is `baton_contract::json::DOCTOR`.
//! The filesystem judgement is shared with `run` and `lock acquire`
//! ([`crate::filesystem`]).

use std::path::{Path, PathBuf};

use baton_contract::exit;
use baton_lock::{BatonDir, DirRule, FsClass, LockError, LockProbe};
use serde::Serialize;
use serde_json::json;

mod backend;
pub(crate) mod check;
#[cfg(feature = "schema")]
pub(crate) mod schema;

use self::check::{Check, Status};
use crate::exit_codes::BATON_FAILED;
use crate::filesystem::{danger, local_dir_remedy, FsProbe};
use crate::size::human_size;

/// Less free space than this for workspaces is a warning.
const LOW_SPACE: u64 = 1 << 30;
/// Fewer free inodes than this is a warning.
const LOW_INODES: u64 = 10_000;

/// What `baton doctor` found: the checks, in the order they ran, and the
/// verdict.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub(crate) struct Report {
    /// The baton dir checked (`null` when none could be located).
    baton_dir: Option<PathBuf>,
    /// The rule that chose it: `explicit` (`--dir`), `env` (`BATON_DIR`) or
    /// `temp_dir`; `null` when none could be located.
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::commands::doctor::schema::doctor_rule")
    )]
    rule: Option<&'static str>,
    /// The worst status of the checks (a skipped check counts as none):
    /// `ok`, `warning` (exit 1) or `error` (exit 125).
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::commands::doctor::schema::doctor_status")
    )]
    status: Status,
    /// The checks, in the order they ran.
    checks: Vec<Check>,
}

/// `baton doctor [--json]`: runs every check, prints them, returns 0 (all
/// well), 1 (warnings) or 125 (baton cannot work there).
pub(crate) fn cmd_doctor(explicit: Option<&Path>, backend: Option<&str>, json: bool) -> u8 {
    let outcome = doctor(explicit, backend, baton_lock::filesystem);
    if json {
        match &outcome.json {
            Ok(s) => outln!("{s}"),
            Err(e) => {
                errln!("baton: cannot encode JSON: {e}");
                return BATON_FAILED;
            }
        }
    } else {
        for line in outcome.text.lines() {
            outln!("{line}");
        }
    }
    outcome.code
}

/// What `baton doctor` found: the `--json` document, the text, the exit code.
#[derive(Debug)]
pub struct Doctor {
    /// The `--json` document (`baton_contract::json::DOCTOR`), pretty-printed
    /// (an error for a path that is not UTF-8).
    pub json: Result<String, serde_json::Error>,
    /// The text report, one line per check and remedy, then the verdict.
    pub text: String,
    /// The exit code: 0, 1 (warnings) or 125.
    pub code: u8,
}

/// Runs every check of `baton doctor` (the dir `explicit`, else the usual
/// rules; the backend at `backend`), finding filesystems with `probe`.
pub fn doctor(explicit: Option<&Path>, backend: Option<&str>, probe: FsProbe) -> Doctor {
    let mut report = run_checks(explicit, probe);
    report.checks.push(backend::backend_check(backend));
    report.status = report
        .checks
        .iter()
        .map(|c| c.status)
        .filter(|s| *s != Status::Skipped)
        .max()
        .unwrap_or(Status::Ok);
    let code = match report.status {
        Status::Ok | Status::Skipped => exit::SUCCESS,
        Status::Warning => exit::DOCTOR_WARNINGS,
        Status::Error => exit::BATON_FAILED,
    };
    Doctor {
        json: serde_json::to_string_pretty(&report),
        text: text(&report),
        code: exit::to_status(code),
    }
}

fn run_checks(explicit: Option<&Path>, probe: FsProbe) -> Report {
    let mut checks = Vec::new();
    let (path, rule) = match BatonDir::locate(explicit) {
        Ok(found) => found,
        Err(e) => {
            checks.push(
                Check::new("baton_dir", Status::Error, baton_lock::one_line(&e))
                    .remedy("name a baton dir with --dir DIR or BATON_DIR=DIR"),
            );
            // Every check but the backend's (`doctor` adds that one) needs the dir.
            for name in baton_contract::json::DOCTOR_CHECKS[1..]
                .iter()
                .filter(|n| **n != "backend")
            {
                checks.push(Check::skipped(name, "no baton dir"));
            }
            return report(None, None, checks);
        }
    };
    let path = std::path::absolute(&path).unwrap_or(path);
    checks.push(dir_check(&path, &rule));
    let existed = path.exists();
    let dir = match BatonDir::open(&path) {
        Ok(dir) => {
            checks.push(permissions(&dir, existed));
            Some(dir)
        }
        Err(e) => {
            checks.push(refused(&e));
            None
        }
    };
    checks.push(filesystem(&path, probe));
    match &dir {
        Some(d) => checks.push(locks(d)),
        None => checks.push(Check::skipped("locks", "the baton dir cannot be used")),
    }
    checks.push(inotify(dir.as_ref().map_or(path.as_path(), |d| d.path())));
    checks.push(git());
    checks.push(space(&path));
    // Workspaces belong to their repository (README "Git").
    let named = matches!(rule, DirRule::Explicit | DirRule::Env);
    let ws_dir = dir.as_ref().map(|d| {
        std::env::current_dir()
            .ok()
            .and_then(|cwd| baton_git::workspaces_of(d, named, &cwd).ok())
            .unwrap_or_else(|| d.clone())
    });
    match &ws_dir {
        Some(d) => checks.push(workspaces(d)),
        None => checks.push(Check::skipped("workspaces", "the baton dir cannot be used")),
    }
    checks.push(pid_namespace());
    report(Some(path), Some(rule.as_str()), checks)
}

/// Which baton dir is used and why; a warning when the per-clone dir an
/// older baton used by default still has holders, who do not exclude those
/// of the dir used now (README "Upgrading").
fn dir_check(path: &Path, rule: &DirRule) -> Check {
    let previous = std::env::current_dir()
        .ok()
        .and_then(|cwd| baton_lock::previous_default(&cwd, path));
    let held = previous
        .as_deref()
        .map(baton_lock::held_locks_in)
        .unwrap_or_default();
    let detail = json!({
        "path": path,
        "rule": rule.as_str(),
        "previous_default": previous,
        "held_in_previous_default": held,
    });
    let summary = format!("{} ({rule})", path.display());
    match previous {
        Some(old) if !held.is_empty() => Check::new(
            "baton_dir",
            Status::Warning,
            format!(
                "{summary}; but {} lock(s) are held in '{}', this clone's baton dir before lock names became per machine ({}): those holders do not exclude holders here",
                held.len(),
                old.display(),
                held.join(", ")
            ),
        )
        .remedy(format!(
            "let those holders (an older baton) finish before running this one, or join them with --dir '{}' until they have",
            old.display()
        ))
        .detail(detail),
        _ => Check::new("baton_dir", Status::Ok, summary).detail(detail),
    }
}

fn report(baton_dir: Option<PathBuf>, rule: Option<&'static str>, checks: Vec<Check>) -> Report {
    // A skipped check follows from another one's error; it adds nothing.
    let status = checks
        .iter()
        .map(|c| c.status)
        .filter(|s| *s != Status::Skipped)
        .max()
        .unwrap_or(Status::Ok);
    Report {
        baton_dir,
        rule,
        status,
        checks,
    }
}

/// Windows: a directory has an ACL, not an owner and mode bits: what it
/// inherited is not judged, and `baton init --shared` (a set-group-ID
/// directory) does not exist there.
#[cfg(windows)]
fn permissions(dir: &BatonDir, existed: bool) -> Check {
    let created = if existed { "" } else { "; created just now" };
    Check::new(
        "permissions",
        Status::Ok,
        format!(
            "Windows: '{}' has the access its ACL gives (inherited from its parent; not checked), and cannot be shared between users with `baton init --shared`{created}",
            dir.path().display()
        ),
    )
    .detail(json!({ "created": !existed }))
}

#[cfg(unix)]
fn permissions(dir: &BatonDir, existed: bool) -> Check {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = match std::fs::metadata(dir.path()) {
        Ok(m) => m,
        Err(e) => {
            return Check::new(
                "permissions",
                Status::Error,
                format!("cannot inspect '{}': {e}", dir.path().display()),
            )
        }
    };
    let mode = meta.permissions().mode() & 0o7777;
    let created = if existed { "" } else { "; created just now" };
    let detail = json!({ "uid": meta.uid(), "gid": meta.gid(), "mode": format!("{mode:04o}"), "created": !existed });
    if let baton_lock::Sharing::Group { gid } = dir.sharing() {
        return Check::new(
            "permissions",
            Status::Ok,
            format!(
                "shared with group {} (`baton init --shared`), owned by uid {}, mode {mode:04o}: every member may use it{created}",
                baton_lock::sharing::describe_group(gid),
                meta.uid()
            ),
        )
        .detail(detail);
    }
    if mode & 0o020 != 0 {
        return Check::new(
            "permissions",
            Status::Warning,
            format!("owned by you (uid {}), mode {mode:04o}: writable by its group, whose members could replace lock files{created}", meta.uid()),
        )
        .remedy(format!("chmod g-w '{}'", dir.path().display()))
        .detail(detail);
    }
    Check::new(
        "permissions",
        Status::Ok,
        format!(
            "owned by you (uid {}), mode {mode:04o}{created}",
            meta.uid()
        ),
    )
    .detail(detail)
}

fn refused(e: &LockError) -> Check {
    let remedy = match e {
        LockError::UnsafeDir { path, reason } if reason.contains("writable by every user") => format!(
            "chmod o-w '{}' if it is yours to change, or choose a directory of your own with --dir or BATON_DIR",
            path.display()
        ),
        LockError::UnsafeDir { reason, .. } if reason.contains("symbolic link") => {
            "give the real directory path (--dir or BATON_DIR), not a symbolic link".into()
        }
        LockError::UnsafeDir { reason, .. } if reason.contains("usermod") => {
            "ask an administrator to add you to the dir's group (then log in again), or use a directory you own: --dir DIR or BATON_DIR=DIR".into()
        }
        LockError::UnsafeDir { .. } => {
            "use a directory you own (--dir DIR or BATON_DIR=DIR), or have its owner share it with a group you are in: baton init --shared GROUP DIR".into()
        }
        _ => "check that the parent directory exists and that you may write to it, or choose another with --dir or BATON_DIR".into(),
    };
    Check::new(
        "permissions",
        Status::Error,
        format!("refused: {}", baton_lock::one_line(e)),
    )
    .remedy(remedy)
}

fn filesystem(path: &Path, probe: FsProbe) -> Check {
    // The type of the nearest existing ancestor: where the dir would be created.
    let existing = path.ancestors().find(|p| p.exists()).unwrap_or(path);
    let fs = match probe(existing) {
        Ok(fs) => fs,
        Err(e) => {
            return Check::new("filesystem", Status::Warning, baton_lock::one_line(&e))
                .remedy(local_dir_remedy())
        }
    };
    let detail =
        json!({ "type": format!("{:#x}", fs.magic), "name": fs.name, "class": fs.class.as_str() });
    match fs.class {
        FsClass::Local => Check::new(
            "filesystem",
            Status::Ok,
            format!("{} (local, statfs type {:#x})", fs.name, fs.magic),
        ),
        FsClass::Network | FsClass::Fuse => Check::new(
            "filesystem",
            Status::Warning,
            format!(
                "NOT A LOCAL FILESYSTEM: {} (statfs type {:#x}); baton's guarantees (a dead holder's lock is released at once, one holder at a time) do not hold there",
                danger(&fs),
                fs.magic
            ),
        )
        .remedy(local_dir_remedy()),
        FsClass::Unknown => Check::new(
            "filesystem",
            Status::Warning,
            format!(
                "unrecognised filesystem type {:#x}: baton cannot tell whether it is local",
                fs.magic
            ),
        )
        .remedy(format!("if it is a network or FUSE filesystem, {}", local_dir_remedy())),
    }
    .detail(detail)
}

fn locks(dir: &BatonDir) -> Check {
    let bad =
        |summary: String| Check::new("locks", Status::Error, summary).remedy(local_dir_remedy());
    match baton_lock::probe_locks(dir.path()) {
        Ok(LockProbe::Works) => Check::new(
            "locks",
            Status::Ok,
            "OFD locks work: of two descriptions of one file, the second was refused and blocked until the first released",
        ),
        Ok(LockProbe::Unsupported(e)) => bad(format!("the filesystem refuses OFD locks ({e}): baton cannot lock here")),
        Ok(LockProbe::NotExclusive) => bad("OFD locks do not exclude here: two descriptions held one lock at once".into()),
        Ok(LockProbe::NotReleased) => bad("a released OFD lock was not handed to the waiting description within 2 s".into()),
        Err(e) => bad(format!("cannot probe locks: {}", baton_lock::one_line(&e))),
    }
}

fn inotify(dir: &Path) -> Check {
    let i = baton_lock::inotify(dir);
    let detail = json!({
        "usable": i.usable.is_ok(),
        "max_user_instances": i.max_user_instances,
        "max_user_watches": i.max_user_watches,
        "max_queued_events": i.max_queued_events,
    });
    let show = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let limits = format!(
        "limits: {} instances, {} watches, {} queued events per user",
        show(i.max_user_instances),
        show(i.max_user_watches),
        show(i.max_queued_events)
    );
    match &i.usable {
        Ok(()) => Check::new("inotify", Status::Ok, format!("available; {limits}")),
        Err(e) => Check::new(
            "inotify",
            Status::Warning,
            format!("unavailable ({e}); waiters for semaphore slots poll every 1-50 ms instead; {limits}"),
        )
        .remedy("raise fs.inotify.max_user_instances and fs.inotify.max_user_watches (sysctl), or close programs that use many"),
    }
    .detail(detail)
}

/// Which PID namespace this is, and whether `/proc` is its own (README
/// "Containers and sandboxes").
#[cfg(windows)]
fn pid_namespace() -> Check {
    Check::skipped(
        "pid_namespace",
        "Windows has no PID namespaces: every holder on this machine is seen by its pid and creation time",
    )
}

/// Which PID namespace this is, and whether `/proc` is its own (README
/// "Containers and sandboxes").
#[cfg(unix)]
fn pid_namespace() -> Check {
    use baton_proc::pidns::{current_pid_ns, INITIAL_PID_NS};
    let me = std::process::id();
    let proc_self = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok());
    let ns = current_pid_ns();
    let detail = json!({ "pid_ns": ns, "initial": ns == Some(INITIAL_PID_NS), "proc_is_own": proc_self == Some(me) });
    if proc_self != Some(me) {
        return Check::new(
            "pid_namespace",
            Status::Warning,
            format!("/proc is not this PID namespace's (it calls this process {}, its pid is {me}): holders' pids and liveness are misjudged", proc_self.map_or_else(|| "nothing".to_string(), |p| p.to_string())),
        )
        .remedy("give the container or sandbox its own /proc (unshare --pid --fork --mount-proc; container runtimes do)")
        .detail(detail);
    }
    let summary = match ns {
        Some(INITIAL_PID_NS) => "the initial PID namespace: holders in every container of this machine can be seen (and broken) from here".to_string(),
        Some(ns) => format!("PID namespace {ns} (a container or sandbox): holders on the host or in other containers show as \"not visible from here\"; break them from the host"),
        None => "cannot read /proc/self/ns/pid: holders in other PID namespaces cannot be told apart".to_string(),
    };
    let unreaped = baton_proc::procfs::unreaped_by_init();
    if ns.is_some_and(|ns| ns != INITIAL_PID_NS) && !unreaped.is_empty() {
        let init = baton_proc::procfs::stat(1).map_or_else(|| "?".into(), |st| st.comm);
        return Check::new(
            "pid_namespace",
            Status::Warning,
            format!("{summary}; pid 1 ({init}) does not reap the processes it adopts ({} defunct): every background holder of `baton lock acquire` stays defunct when it ends", unreaped.len()),
        )
        .remedy("start the container with an init (`docker run --init`, tini), or take locks with `baton run --lock`, which leaves no process behind")
        .detail(detail);
    }
    let status = if ns.is_some() {
        Status::Ok
    } else {
        Status::Warning
    };
    Check::new("pid_namespace", status, summary).detail(detail)
}

fn git() -> Check {
    let v = match baton_git::git_version() {
        Ok(v) => v,
        Err(e) => {
            return Check::new(
                "git",
                Status::Warning,
                format!("cannot run git ({}); locks, runs and state files work, workspaces and `baton git` do not", baton_lock::one_line(&e)),
            )
            .remedy("install git, or put it on PATH")
        }
    };
    let detail = json!({ "version": v.text, "supported": v.is_supported() });
    if v.is_supported() {
        return Check::new("git", Status::Ok, v.text).detail(detail);
    }
    let (a, b, c) = baton_git::MIN_GIT_VERSION;
    Check::new(
        "git",
        Status::Warning,
        format!("{}: older than {a}.{b}.{c}; `baton workspace`, `baton git` and `run --workspace` need {a}.{b}.{c} or later", v.text),
    )
    .remedy(format!("install git {a}.{b} or later"))
    .detail(detail)
}

fn space(path: &Path) -> Check {
    let existing = path.ancestors().find(|p| p.exists()).unwrap_or(path);
    let s = match baton_lock::free_space(existing) {
        Ok(s) => s,
        Err(e) => return Check::new("free_space", Status::Warning, baton_lock::one_line(&e)),
    };
    let detail = json!({ "available_bytes": s.available_bytes, "total_bytes": s.total_bytes, "available_inodes": s.available_inodes });
    let summary = format!(
        "{} free of {}, {} inodes free (workspaces are created under the baton dir)",
        human_size(s.available_bytes),
        human_size(s.total_bytes),
        s.available_inodes
    );
    if s.available_bytes < LOW_SPACE || s.available_inodes < LOW_INODES {
        Check::new("free_space", Status::Warning, format!("low: {summary}"))
            .remedy("free some space (`baton workspace gc` removes leftover workspaces), or use a baton dir on a roomier filesystem")
            .detail(detail)
    } else {
        Check::new("free_space", Status::Ok, summary).detail(detail)
    }
}

fn workspaces(dir: &BatonDir) -> Check {
    let found = match baton_git::dead_owners(dir) {
        Ok(found) => found,
        Err(e) => {
            return Check::new(
                "workspaces",
                Status::Warning,
                format!(
                    "cannot read the workspace registry: {}",
                    baton_lock::one_line(&e)
                ),
            )
        }
    };
    if found.is_empty() {
        return Check::new("workspaces", Status::Ok, "no leftover workspaces");
    }
    let mut ids = Vec::new();
    let mut names = Vec::new();
    for r in &found {
        match r {
            Ok(ws) => {
                ids.push(json!({ "id": ws.id, "path": ws.path, "run_id": ws.run_id }));
                names.push(format!("{} ({})", ws.id, ws.path.display()));
            }
            Err(e) => names.push(format!("unreadable record: {}", baton_lock::one_line(e))),
        }
    }
    Check::new(
        "workspaces",
        Status::Warning,
        format!(
            "{} leftover workspace(s) of dead owners: {}",
            found.len(),
            names.join(", ")
        ),
    )
    .remedy("baton workspace gc (removes workspaces whose owner is dead; never a live owner's)")
    .detail(json!({ "leftovers": ids }))
}

fn text(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for c in &r.checks {
        let tag = match c.status {
            Status::Ok => "ok",
            Status::Skipped => "skipped",
            Status::Warning => "WARNING",
            Status::Error => "ERROR",
        };
        let _ = writeln!(out, "{tag:<8} {:<12} {}", c.name, c.summary);
        if let Some(remedy) = &c.remedy {
            let _ = writeln!(out, "{:<8} {:<12} remedy: {remedy}", "", "");
        }
    }
    let count = |s: Status| r.checks.iter().filter(|c| c.status == s).count();
    out.push('\n');
    let _ = match r.status {
        Status::Error => writeln!(
            out,
            "baton cannot work here: {} error(s), {} warning(s)",
            count(Status::Error),
            count(Status::Warning)
        ),
        Status::Warning => writeln!(
            out,
            "baton works here, with {} warning(s): see the remedies above",
            count(Status::Warning)
        ),
        _ => writeln!(out, "all good"),
    };
    out
}
