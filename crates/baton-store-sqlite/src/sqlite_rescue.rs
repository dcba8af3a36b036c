//! What the service keeps of a store whose files were removed or replaced
//! under it. The service still has them open: a removed `-wal` file holds
//! every job acknowledged since the last checkpoint, a removed store file
//! all the others. Refusing from then on is not enough: after a `kill -9`
//! and a restart those jobs would be gone. So, when the service notices
//! (`StoreFiles::check`, before any operation runs), it first writes what
//! the open connection holds to where a restart finds it, then refuses:
//!
//! - **The `-wal` file removed or replaced** (the store file is the one
//!   opened): a checkpoint (`wal_checkpoint(TRUNCATE)`) through the open
//!   connection copies the open log into the store file and syncs it. A
//!   file put in the log's place is moved aside (`<store>-wal.replaced-<ms>`):
//!   SQLite would replay any valid log at that path over the store at the
//!   next start. Checked: an independent reader of the store file
//!   (`immutable=1`, no locks) counts the jobs the connection sees.
//! - **The store file removed**: a checkpoint (so the open log, wherever it
//!   is, is empty), then `VACUUM INTO` a new private file next to it: the
//!   whole store, read through the open connection, then synced, checked as
//!   above and renamed to the store's path, the directory synced. Chosen
//!   over the backup API: one statement, a compact file in rollback mode
//!   (no log to go with it), and it never writes to the live connection's
//!   files. A non-empty file at the `-wal` path is moved aside as above.
//! - **The store file replaced** by another (a restored copy, say): that
//!   file is not overwritten; the copy is kept next to it
//!   (`<store>.rescued-<ms>`) and the message names it.
//!
//! Each is done once, under the connection's lock; nothing is committed
//! after it (every later operation is refused). Not covered: a file
//! removed, then the service killed before any operation ran on the store
//! (requests, the scheduler's poll every 2 s while a slot is free and the
//! cleaner's, at most a minute apart, run them).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

/// Which of the store's files is no longer the one opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lost {
    /// The `-wal` file (removed or replaced).
    Wal,
    /// The store file, removed.
    Removed,
    /// The store file, replaced by another.
    Replaced,
}

/// Writes what `conn` holds to where a restart finds it (see the module
/// documentation): a sentence saying where it is, or why it could not be.
pub(super) fn rescue(conn: &Connection, path: &Path, wal: &Path, lost: Lost) -> String {
    let done = match lost {
        Lost::Wal => checkpoint(conn)
            .and_then(|()| set_aside_foreign_wal(wal, true))
            .and_then(|()| verify(conn, path))
            .map(|()| {
                format!(
                    "every job stored until then was copied from the open log into '{}'",
                    path.display()
                )
            }),
        Lost::Removed | Lost::Replaced => copy_out(conn, path, wal, lost),
    };
    match done {
        Ok(said) => {
            tracing::warn!(target: "baton_serve::store", store = %path.display(), ?lost, "{said}");
            said
        }
        Err(e) => {
            tracing::error!(target: "baton_serve::store", store = %path.display(), ?lost, error = %e, "cannot keep what the store held");
            format!("keeping what it held failed ({e}): do not stop the service before copying it")
        }
    }
}

/// Copies the open log into the open store file, truncates the log, and
/// checks that nothing was left.
fn checkpoint(conn: &Connection) -> Result<(), String> {
    let (busy, log, done): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(|e| format!("checkpoint: {e}"))?;
    if busy != 0 || log != done {
        return Err(format!(
            "the checkpoint copied {done} of {log} pages of the log (busy: {busy})"
        ));
    }
    Ok(())
}

/// Moves a file at the `-wal` path aside (`all`: whatever it holds; else
/// only one that is not empty), so that the next start does not replay it.
fn set_aside_foreign_wal(wal: &Path, all: bool) -> Result<(), String> {
    let Ok(meta) = std::fs::metadata(wal) else {
        return Ok(());
    };
    if !all && meta.len() == 0 {
        return Ok(());
    }
    let aside = suffixed(wal, "replaced");
    std::fs::rename(wal, &aside)
        .map_err(|e| format!("cannot move '{}' aside: {e}", wal.display()))?;
    tracing::warn!(target: "baton_serve::store", from = %wal.display(), to = %aside.display(), "moved a log that is not the store's aside");
    Ok(())
}

/// Writes the whole store, read through `conn`, to a new file and puts it
/// at `path` (removed) or next to it (replaced).
fn copy_out(conn: &Connection, path: &Path, wal: &Path, lost: Lost) -> Result<String, String> {
    // The open log, wherever it is, emptied into the open store: a log left
    // at the `-wal` path would be replayed over the copy at the next start.
    if let Err(e) = checkpoint(conn) {
        tracing::warn!(target: "baton_serve::store", error = %e, "checkpoint before copying the store out");
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_os_string();
    let mut prefix = name;
    prefix.push(".rescue-");
    let temp = baton_fs::TempFile::create(dir, &prefix, 0o600).map_err(|e| e.to_string())?;
    let temp_path = temp.path().to_string_lossy().into_owned();
    conn.execute("VACUUM INTO ?1", [&temp_path])
        .map_err(|e| format!("VACUUM INTO '{temp_path}': {e}"))?;
    verify(conn, temp.path())?;
    let (target, said) = match lost {
        Lost::Replaced => {
            let target = suffixed(path, "rescued");
            let said = format!(
                "a copy of the store as this service had it, every job it acknowledged, is at \
                 '{}' (the file now at '{}' is not the one it opened)",
                target.display(),
                path.display()
            );
            (target, said)
        }
        _ => {
            set_aside_foreign_wal(wal, false)?;
            let said = format!(
                "every job stored until then was written back to '{}' from the open store",
                path.display()
            );
            (path.to_path_buf(), said)
        }
    };
    if lost == Lost::Removed && path.exists() {
        return Err(format!("'{}' appeared meanwhile", path.display()));
    }
    temp.persist(&target, baton_fs::Durability::DataAndDir)
        .map_err(|e| e.to_string())?;
    Ok(said)
}

/// An independent reader of the file at `file` (no locks: the service's
/// connection holds the store exclusively) sees the jobs `conn` sees.
fn verify(conn: &Connection, file: &Path) -> Result<(), String> {
    let count = |c: &Connection| {
        c.query_row(
            "SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM jobs",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
        )
    };
    let want = count(conn).map_err(|e| format!("count the jobs: {e}"))?;
    let mut uri = url_path(file);
    uri.push_str("?immutable=1");
    let reader = Connection::open_with_flags(
        format!("file:{uri}"),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
    .map_err(|e| format!("cannot read '{}': {e}", file.display()))?;
    let got = count(&reader).map_err(|e| format!("cannot read '{}': {e}", file.display()))?;
    if got != want {
        return Err(format!(
            "'{}' holds {} jobs (last {}), the open store {} (last {})",
            file.display(),
            got.0,
            got.1,
            want.0,
            want.1
        ));
    }
    Ok(())
}

/// `path` as the path of a `file:` URI (`%`, `?` and `#` escaped).
fn url_path(path: &Path) -> String {
    let mut out = String::new();
    for ch in path.to_string_lossy().chars() {
        match ch {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            #[cfg(windows)]
            '\\' => out.push('/'),
            c => out.push(c),
        }
    }
    out
}

/// `<path>.<what>-<unix ms>`.
fn suffixed(path: &Path, what: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{what}-{}", baton_store::now_ms()));
    PathBuf::from(name)
}
