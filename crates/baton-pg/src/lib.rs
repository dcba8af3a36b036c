//! baton's locks on PostgreSQL, for holders on many machines.
//!
//! Exclusion comes from the server, not from rows a client promises to
//! delete: a lock is a session-level advisory lock held on the holder's own
//! connection, so a holder whose process or machine dies loses it when its
//! session ends (at once for a process, within about 11 s for a machine,
//! through TCP keepalives on both ends). Waiting happens in the server's
//! lock queue (FIFO, no polling). Fencing tokens come from the database,
//! strictly increasing per lock and issued in the same transaction as the
//! holder's row. A holder whose session ends is told ([`Holds::on_lost`])
//! so it can stop its work, and a new holder does not start while an ended
//! holder's command may still run (see the `settle` module).
//!
//! TLS follows the URL's `sslmode` (`disable`, `prefer` — the default —,
//! `require`, `verify-ca`, `verify-full`) and `sslrootcert` (a PEM file, or
//! `system`) with libpq's meaning, on rustls; [`client_config`] turns a URL
//! into the driver's configuration and the TLS connector, for this crate's
//! sessions and for any other client of the same database (the job
//! service's store). A failed check is [`PgError::Tls`], naming it
//! ([`TlsFailure`]). [`client_config`] lists the modes, and where they
//! differ from libpq.
//!
//! Path reservations live here too ([`PgReservations`], the
//! `ReservationStore` of `baton_lock::reserve` on this database): the same
//! rules as in the baton dir, with a row's liveness a session advisory lock.
//!
//! The tables (`baton_locks`, `baton_lock_holders`, `baton_lock_schema`,
//! `baton_group_runs`, `baton_group_order`, `baton_reservation_spaces`,
//! `baton_reservations`) belong to this crate and are created on first use,
//! or by [`Database::migrate`].
//!
//! Platforms: Linux, macOS and Windows, with no platform API of this
//! crate's own. Windows has no Unix sockets: a socket directory as the host
//! is refused there ([`PgError::Url`]). A holder of this machine whose
//! session ended and whose supervisor does not confirm in time has its
//! command's process group terminated on unix; on Windows the supervisor
//! itself is terminated (identity-checked), and its Job Object takes the
//! command with it.
//!
//! ```no_run
//! use baton_lock::{LockRequest, Mode};
//! use baton_pg::Database;
//!
//! let db = Database::new("postgres://agent@db.internal/coordination?sslmode=verify-full")?;
//! let req = LockRequest::new("deploy".parse()?).mode(Mode::Exclusive);
//! let holds = db.acquire_all(&[req])?;
//! holds.on_lost(|| eprintln!("lost the lock: stop working"));
//! println!("token {}", holds.grants()[0].token);
//! holds.release()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

mod acquire;
mod diagnose;
mod error;
mod group;
mod holds;
pub mod liveness;
mod reserve;
mod schema;
mod session;
mod settle;
mod ssl;
mod status;
mod tls;

pub use acquire::MAX_SLOTS;
pub use baton_lock::redact;
pub use diagnose::Diagnosis;
pub use error::{one_line, PgError};
pub use group::{GroupJoin, GroupOrder, GroupRunRow, GroupSlot, Joined};
pub use holds::{Grant, Holds};
pub use reserve::{PgReservations, RESERVATION_KEY};
pub use schema::SCHEMA_VERSION;
pub use session::{Database, FENCE};
pub use ssl::{SslMode, TlsFailure};
pub use status::Terminated;
pub use tls::{client_config, Tls};
