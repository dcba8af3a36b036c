//! Where locks and groups live — the baton dir (kernel locks, group
//! documents) or a PostgreSQL database (session advisory locks, group rows)
//! — chosen once, from the `--backend` URL, and then used through one type:
//! every operation is a method of [`Backend`], so that no caller matches on
//! where the locks are, and no caller but [`Backend::open`] looks at a URL.

use std::sync::Arc;

use baton_lock::{BatonDir, LockName, LockRequest, LockStatus};
#[cfg(feature = "postgres")]
use baton_pg::Database;

use crate::control::RunControl;
use crate::error::RunError;
use crate::group::GroupRequest;
#[cfg(feature = "postgres")]
use crate::group_status::remote_group_status;
use crate::group_status::{local_group_status, GroupStatus};
use crate::locks::HeldLocks;
#[cfg(feature = "postgres")]
use crate::member::enter_remote;
use crate::member::{enter_local, Entered};

/// Where locks and groups are kept.
#[derive(Clone, Debug)]
pub enum Backend {
    /// Lock files and group documents in this baton dir: one machine.
    Local(BatonDir),
    /// A PostgreSQL database: every machine using it (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(Arc<Database>),
}

/// What [`Backend::migrate`] did.
#[derive(Clone, Debug)]
pub struct Migrated {
    /// The schema version baton's tables are at now.
    pub version: i32,
    /// Where they are: the database URL, its password hidden.
    pub place: String,
}

impl Backend {
    /// The backend a `--backend` value names: `None` (or empty) is the baton
    /// dir `dir`; anything else must be a `postgres://` (or
    /// `postgresql://`) URL. Nothing is connected yet.
    ///
    /// # Errors
    ///
    /// [`RunError::Database`] naming what is wrong with the URL; without
    /// the feature `postgres`, [`RunError::InvalidRequest`] for any URL.
    pub fn open(dir: &BatonDir, url: Option<&str>) -> Result<Backend, RunError> {
        Backend::open_with(dir, url, None)
    }

    /// [`Backend::open`], with `notice` called (one line) when a wait for a
    /// lock on the database loses its session and goes on waiting on a new
    /// one, so that a command-line front end can say so.
    ///
    /// # Errors
    ///
    /// As [`Backend::open`].
    pub fn open_noting(
        dir: &BatonDir,
        url: Option<&str>,
        notice: impl Fn(&str) + Send + Sync + 'static,
    ) -> Result<Backend, RunError> {
        Backend::open_with(dir, url, Some(Box::new(notice)))
    }

    #[allow(clippy::type_complexity)] // a boxed callback, used once
    fn open_with(
        dir: &BatonDir,
        url: Option<&str>,
        notice: Option<Box<dyn Fn(&str) + Send + Sync>>,
    ) -> Result<Backend, RunError> {
        match url.filter(|u| !u.is_empty()) {
            None => Ok(Backend::Local(dir.clone())),
            #[cfg(not(feature = "postgres"))]
            Some(_) => {
                drop(notice);
                Err(RunError::InvalidRequest(WITHOUT_POSTGRES.into()))
            }
            #[cfg(feature = "postgres")]
            Some(url) => {
                let db = Database::new(url)?;
                let db = match notice {
                    Some(f) => db.on_notice(f),
                    None => db,
                };
                Ok(Backend::Postgres(Arc::new(db)))
            }
        }
    }

    /// Where path reservations are kept beside these locks: the baton dir's
    /// reservations, or the database's (every machine using it).
    pub fn reservations(&self) -> Arc<dyn baton_lock::reserve::ReservationStore> {
        match self {
            Backend::Local(dir) => {
                Arc::new(baton_lock::reserve::LocalReservations::new(dir.clone()))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => Arc::new(baton_pg::PgReservations::new((**db).clone())),
        }
    }

    /// Whether other machines share these locks: a run there may be taken
    /// over by another machine, so its command must stop with the process
    /// that runs it (see [`Backend::guard`]).
    pub fn is_shared(&self) -> bool {
        match self {
            Backend::Local(_) => false,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => true,
        }
    }

    /// The guardian a run on this backend needs (see
    /// [`crate::RunRequest::guard`]): on a database, the command stops when
    /// this process stops vouching for its sessions within the database's
    /// fence. In the baton dir, whose kernel locks die with the process,
    /// [`baton_proc::GuardSpec::where_needed`]: none where the command dies
    /// with its supervisor anyway ([`baton_proc::DIES_WITH_SUPERVISOR`]:
    /// Linux, Windows); on macOS, which has no parent-death signal, a
    /// guardian without a fence (only the supervisor's death stops the
    /// command), so that a command never outlives a killed `baton run` and
    /// works beside the next holder — in a program that serves as a
    /// guardian (`baton`: its `main` calls [`baton_proc::dispatch_guardian`]).
    /// (macOS is type-checked only, see the README.)
    pub fn guard(&self) -> Option<baton_proc::GuardSpec> {
        match self {
            Backend::Local(_) => baton_proc::GuardSpec::where_needed(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => {
                let fence = baton_proc::Fence::new(baton_pg::FENCE);
                Some(baton_proc::GuardSpec::this_program(fence))
            }
        }
    }

    /// The guardian a background holder (`baton lock acquire`) needs for
    /// the script it holds for: always one, since the script is not the
    /// holder's child and nothing else ties it to the holder's life; on a
    /// database with the database's fence, as [`Backend::guard`]. See
    /// [`baton_proc::TreeGuard`].
    pub fn hold_guard(&self) -> baton_proc::GuardSpec {
        let bound = match self {
            Backend::Local(_) => std::time::Duration::ZERO,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => baton_pg::FENCE,
        };
        baton_proc::GuardSpec::this_program(baton_proc::Fence::new(bound))
    }

    /// Takes every lock of `reqs` (in name order, one deadline). On a
    /// database, `on_lost` runs if the session ends while they are held.
    ///
    /// # Errors
    ///
    /// [`RunError::Lock`] when a lock is busy, the wait elapsed or was
    /// cancelled, or the lock state cannot be used; [`RunError::Database`].
    pub fn acquire(
        &self,
        reqs: &[LockRequest],
        on_lost: impl Fn() + Send + 'static,
    ) -> Result<HeldLocks, RunError> {
        #[cfg(not(feature = "postgres"))]
        let _ = on_lost;
        match self {
            Backend::Local(dir) => Ok(HeldLocks::local(baton_lock::acquire_all(dir, reqs)?)),
            // No session for no locks: a group-only run holds none.
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) if reqs.is_empty() => Ok(HeldLocks::local(Vec::new())),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => {
                let holds = db.acquire_all(reqs)?;
                holds.on_lost(on_lost);
                Ok(HeldLocks::remote(holds))
            }
        }
    }

    /// Joins a group and waits for its slot (see [`crate::member`]).
    pub(crate) fn join_group(
        &self,
        req: &GroupRequest,
        run_id: &str,
        command: &str,
        control: &RunControl,
    ) -> Result<Entered, RunError> {
        match self {
            Backend::Local(dir) => enter_local(dir, req, run_id, command, control),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => enter_remote(db, req, run_id, command, control),
        }
    }

    /// The status of the lock `name`.
    ///
    /// # Errors
    ///
    /// The lock state (or the database) cannot be read.
    pub fn status(&self, name: &LockName) -> Result<LockStatus, RunError> {
        match self {
            Backend::Local(dir) => Ok(baton_lock::status(dir, name)?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => Ok(db.status(name)?),
        }
    }

    /// The status of every lock, by name.
    ///
    /// # Errors
    ///
    /// The lock state (or the database) cannot be read.
    pub fn list(&self) -> Result<Vec<LockStatus>, RunError> {
        match self {
            Backend::Local(dir) => Ok(baton_lock::list(dir)?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => Ok(db.list()?),
        }
    }

    /// The status of one group, or of every group (sorted by key). A
    /// database keeps only the live runs of its groups: there the counters
    /// (`completed`, `superseded`, `skipped`, `generation`) read 0.
    ///
    /// # Errors
    ///
    /// The group state (or the database) cannot be read.
    pub fn group_status(&self, key: Option<&LockName>) -> Result<Vec<GroupStatus>, RunError> {
        match self {
            Backend::Local(dir) => local_group_status(dir, key),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => remote_group_status(db, key),
        }
    }

    /// Creates or upgrades baton's tables.
    ///
    /// # Errors
    ///
    /// [`RunError::InvalidRequest`] in the baton dir, which has no tables;
    /// [`RunError::Database`].
    pub fn migrate(&self) -> Result<Migrated, RunError> {
        match self {
            Backend::Local(_) => Err(RunError::InvalidRequest(
                "`baton db` needs --backend postgres://USER@HOST/DATABASE (or BATON_BACKEND)"
                    .into(),
            )),
            #[cfg(feature = "postgres")]
            Backend::Postgres(db) => Ok(Migrated {
                version: db.migrate()?,
                place: db.url().to_string(),
            }),
        }
    }

    /// The database, when the locks are kept in one.
    #[cfg(feature = "postgres")]
    pub(crate) fn database(&self) -> Option<&Database> {
        match self {
            Backend::Local(_) => None,
            Backend::Postgres(db) => Some(db),
        }
    }
}

/// Why a `--backend` URL is refused by a baton built without the feature
/// `postgres`.
#[cfg(not(feature = "postgres"))]
const WITHOUT_POSTGRES: &str =
    "this baton was built without PostgreSQL support: --backend (BATON_BACKEND) cannot be used";

/// The facts `baton doctor` reports about a `--backend` database.
#[cfg(feature = "postgres")]
pub use baton_pg::Diagnosis;

/// Connects to the database `url` names and reports what baton needs of
/// it (reachable, tables, privileges), with the URL as shown (its password
/// hidden).
///
/// # Errors
///
/// [`DiagnoseError`]: the URL is not valid, or the database cannot be used.
#[cfg(feature = "postgres")]
pub fn diagnose_database(url: &str) -> Result<(Diagnosis, String), DiagnoseError> {
    let db = Database::new(url).map_err(|e| DiagnoseError::Url(e.into()))?;
    let shown = db.url().to_string();
    let d = db
        .diagnose()
        .map_err(|e| DiagnoseError::Unreachable(e.into()))?;
    Ok((d, shown))
}

/// Why [`diagnose_database`] has no diagnosis.
#[cfg(feature = "postgres")]
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    /// The URL is not a valid database URL.
    #[error(transparent)]
    Url(RunError),
    /// The database could not be reached or asked.
    #[error(transparent)]
    Unreachable(RunError),
}

#[cfg(all(test, not(feature = "postgres")))]
mod without_postgres {
    use super::{Backend, RunError};

    #[test]
    fn a_backend_url_is_refused_in_one_line() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let dir = baton_lock::BatonDir::open(tmp.path())?;
        match Backend::open(&dir, Some("postgres://u@127.0.0.1/db")) {
            Err(e @ RunError::InvalidRequest(_)) => {
                let shown = e.to_string();
                assert!(shown.contains("without PostgreSQL support"), "{shown}");
                assert!(!shown.contains('\n'), "{shown}");
            }
            other => panic!("not refused: {other:?}"),
        }
        assert!(matches!(Backend::open(&dir, None), Ok(Backend::Local(_))));
        Ok(())
    }
}
