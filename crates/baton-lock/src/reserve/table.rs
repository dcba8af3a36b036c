//! The per-space table of live reservations and the liveness bytes of its
//! rows (`docs/src/design/reservations.md`).
//!
//! A space is the directory `<baton dir>/reservations/<sha256(key), 16 hex>/`
//! holding `space.lock` and `table.json`. `space.lock` carries byte-range
//! locks only: its META byte guards every read-modify-write of the table,
//! and byte `TICKET_BASE + ticket` is write-locked by the holder of row
//! `ticket`, on an open file description of the row's own, for as long as
//! the row lives. A row whose byte is free belongs to a holder that died.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{ReservationRecord, ReserveError, Space};
use crate::cancel::CancelToken;
use crate::dir::BatonDir;
use crate::layout::{TICKET_BASE, TICKET_END};
use crate::meta_lock::MetaLock;
use crate::ofd::{self, Kind};

/// The least a request waits for the table's META byte (see `meta`).
const META_FLOOR: std::time::Duration = std::time::Duration::from_secs(2);

/// How many dead granted rows are remembered for `previous_holder_died`.
const MAX_DIED: usize = 64;
/// How many broken tickets are remembered for `is_broken`.
const MAX_BROKEN: usize = 256;

/// The table as stored in `table.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Table {
    /// The space's key, to tell a (most unlikely) hash collision.
    #[serde(default)]
    pub key: String,
    /// The last ticket given.
    #[serde(default)]
    pub ticket: u64,
    /// The last fencing token given.
    #[serde(default)]
    pub token: u64,
    /// Live rows (and rows not yet found dead), in ticket order.
    #[serde(default)]
    pub rows: Vec<ReservationRecord>,
    /// Granted rows whose holder died, until a grant overlapping them.
    #[serde(default)]
    pub died: Vec<ReservationRecord>,
    /// Tickets of rows an operator broke, until their holder lets go.
    #[serde(default)]
    pub broken: Vec<u64>,
}

impl Table {
    /// Removes rows whose liveness byte is free (seen through `checker`):
    /// dead granted rows go to `died`. Returns whether anything changed.
    pub fn prune(&mut self, checker: &File) -> std::io::Result<bool> {
        let mut changed = false;
        let mut keep = Vec::with_capacity(self.rows.len());
        for row in std::mem::take(&mut self.rows) {
            if is_alive(checker, row.ticket)? {
                keep.push(row);
            } else {
                changed = true;
                if row.granted {
                    self.died.push(row);
                }
            }
        }
        self.rows = keep;
        if self.died.len() > MAX_DIED {
            let extra = self.died.len() - MAX_DIED;
            self.died.drain(..extra);
        }
        Ok(changed)
    }

    /// Remembers that `ticket` was broken.
    pub fn mark_broken(&mut self, ticket: u64) {
        self.broken.push(ticket);
        if self.broken.len() > MAX_BROKEN {
            let extra = self.broken.len() - MAX_BROKEN;
            self.broken.drain(..extra);
        }
    }

    /// The next fencing token: above the last and at least the wall clock
    /// in microseconds (so tokens keep increasing when the table is lost).
    pub fn next_token(&mut self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        self.token = self.token.saturating_add(1).max(now);
        self.token
    }
}

/// Rows for liveness bytes held by holders the table does not know: the
/// table was deleted or replaced under them (the filesystem is not trusted
/// to stay put). What they cover is lost, so each stands for an exclusive
/// reservation of the whole repository until its holder lets go: nobody is
/// granted beside a reservation the table forgot. `known` are tickets to
/// leave out (the caller's own).
pub(crate) fn orphans(
    checker: &File,
    table: &Table,
    known: &[u64],
) -> std::io::Result<Vec<ReservationRecord>> {
    let held = crate::layout::all_locks(checker, Kind::Read, TICKET_BASE, TICKET_END)?;
    let mut out = Vec::new();
    for (at, _) in held {
        let ticket = at - TICKET_BASE;
        // A broken row is out of the table on purpose, and out of the way.
        if known.contains(&ticket)
            || table.broken.contains(&ticket)
            || table.rows.iter().any(|r| r.ticket == ticket)
        {
            continue;
        }
        out.push(ReservationRecord {
            ticket,
            token: None,
            patterns: vec![super::Pattern::whole()],
            mode: crate::request::Mode::Exclusive,
            granted: true,
            holder: super::ReservationHolder {
                agent: "an unknown holder (its row was lost with the reservations table)".into(),
                pid: 0,
                client_pid: None,
                host: String::new(),
                since: String::new(),
                reason: None,
                principal: None,
                session: format!("lost-row-{ticket}"),
            },
        });
    }
    Ok(out)
}

/// Whether row `ticket`'s holder still holds its liveness byte.
pub(crate) fn is_alive(checker: &File, ticket: u64) -> std::io::Result<bool> {
    Ok(ofd::find_conflict(checker, Kind::Read, byte(ticket), 1)?.is_some())
}

/// The liveness byte of `ticket`.
pub(crate) fn byte(ticket: u64) -> u64 {
    TICKET_BASE + ticket
}

/// The highest ticket there are bytes for.
pub(crate) const MAX_TICKET: u64 = TICKET_END - TICKET_BASE - 1;

/// The files of one space.
#[derive(Clone, Debug)]
pub(crate) struct SpaceFiles {
    pub dir: PathBuf,
    pub lock: PathBuf,
    pub table: PathBuf,
    pub key: String,
}

impl SpaceFiles {
    /// The files of `space` in `dir`, creating the directories.
    pub fn of(dir: &BatonDir, space: &Space) -> Result<SpaceFiles, ReserveError> {
        let all = dir.path().join("reservations");
        let digest = Sha256::digest(space.key().as_bytes());
        let name: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let here = all.join(name);
        for d in [&all, &here] {
            crate::sharing::create_dir(d)
                .map_err(|e| ReserveError::io("cannot create the reservations directory", d, e))?;
        }
        crate::ofd::locks_work(&here)
            .map_err(|reason| crate::error::LockError::Unsupported { reason })?;
        Ok(SpaceFiles {
            lock: here.join("space.lock"),
            table: here.join("table.json"),
            dir: here,
            key: space.key().to_string(),
        })
    }

    /// A new open file description of `space.lock` (each row and each
    /// checker has its own).
    pub fn open_lock(&self) -> Result<File, ReserveError> {
        let options = crate::sys::lock_file_options();
        crate::sharing::open_or_create(&self.lock, &options, 0o600)
            .map_err(|e| ReserveError::io("cannot open the reservations lock file", &self.lock, e))
    }

    /// Reads the table (empty if there is none yet). Call under META.
    pub fn read(&self) -> Result<Table, ReserveError> {
        let mut text = String::new();
        match File::open(&self.table) {
            Ok(mut f) => f.read_to_string(&mut text).map_err(|e| {
                ReserveError::io("cannot read the reservations table", &self.table, e)
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Table {
                    key: self.key.clone(),
                    ..Table::default()
                })
            }
            Err(e) => {
                return Err(ReserveError::io(
                    "cannot open the reservations table",
                    &self.table,
                    e,
                ))
            }
        };
        let table: Table = serde_json::from_str(&text).map_err(|e| {
            ReserveError::io(
                "the reservations table is damaged (delete it while no reservation is held)",
                &self.table,
                std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            )
        })?;
        if !table.key.is_empty() && table.key != self.key {
            return Err(ReserveError::io(
                "the reservations table belongs to another repository",
                &self.table,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("'{}', not '{}'", table.key, self.key),
                ),
            ));
        }
        Ok(table)
    }

    /// Replaces the table atomically. Call under META.
    pub fn write(&self, table: &Table) -> Result<(), ReserveError> {
        let fail = |e: baton_fs::PathError| {
            ReserveError::io("cannot write the reservations table", &self.table, e.source)
        };
        let bytes = serde_json::to_vec_pretty(table).map_err(|e| {
            ReserveError::io(
                "cannot serialize the reservations table",
                &self.table,
                std::io::Error::other(e),
            )
        })?;
        let mode = if crate::sharing::is_shared(&self.dir) {
            0o660
        } else {
            0o600
        };
        let temp = baton_fs::TempFile::create(&self.dir, &baton_fs::temp_prefix(&self.table), mode)
            .map_err(fail)?;
        crate::sharing::share_new_file(temp.file(), temp.path())
            .and_then(|()| temp.file().write_all(&bytes))
            .map_err(|e| ReserveError::io("cannot write the reservations table", temp.path(), e))?;
        temp.persist(&self.table, baton_fs::Durability::Rename)
            .map_err(|e| fail(e.into_path_error()))
    }
}

/// The META lock of a space, held while the table is read and changed.
pub(crate) fn meta<'f>(
    files: &SpaceFiles,
    file: &'f File,
    deadline: Option<Instant>,
    cancel: Option<&CancelToken>,
) -> Result<Option<MetaLock<'f>>, ReserveError> {
    // However short the caller's wait: the table's sections are a read and
    // a small write, but many agents of one repository meet there, and where
    // waits poll (wine) a short floor lets a request that conflicts with
    // nobody give up as busy. Only a process stopped inside its section
    // makes a wait last this long.
    let deadline = deadline.map(|d| d.max(Instant::now() + META_FLOOR));
    MetaLock::write_until(file, deadline, cancel).map_err(|e| {
        if cancel.is_some_and(CancelToken::is_cancelled) {
            ReserveError::Cancelled
        } else {
            ReserveError::io("cannot lock the reservations table", &files.lock, e)
        }
    })
}

/// The META lock for bookkeeping (a release, a break, a listing): bounded.
pub(crate) fn meta_now<'f>(
    files: &SpaceFiles,
    file: &'f File,
) -> Result<MetaLock<'f>, ReserveError> {
    MetaLock::write(file)
        .map_err(|e| ReserveError::io("cannot lock the reservations table", &files.lock, e))
}

/// Takes the first free liveness byte at or after `from` on the row's own
/// file description; the ticket taken. A byte still held although the
/// table does not know it (a table deleted under live holders) is skipped.
pub(crate) fn take_ticket(row_file: &File, from: u64, lock: &Path) -> Result<u64, ReserveError> {
    let mut ticket = from.max(1);
    loop {
        if ticket > MAX_TICKET {
            return Err(ReserveError::io(
                "the reservation tickets are exhausted (delete the reservations directory while nothing is held)",
                lock,
                std::io::Error::other("ticket counter at its maximum"),
            ));
        }
        let taken = ofd::try_lock(row_file, Kind::Write, byte(ticket), 1)
            .map_err(|e| ReserveError::io("cannot lock a reservation's liveness byte", lock, e))?;
        if taken {
            return Ok(ticket);
        }
        ticket += 1;
    }
}
