//! The seam between the front ends (`baton reserve`, `baton reservations`,
//! the pre-commit guard, `baton mcp`, the Python bindings) and where the
//! reservations are kept: the baton dir ([`LocalReservations`], this
//! crate's engine) or a PostgreSQL database (`baton_pg::PgReservations`).
//! Front ends hold an `Arc<dyn ReservationStore>` chosen once at start-up
//! and never ask which it is; both keep to the same rules (`rules.rs`).

use std::fmt::Debug;

use super::{
    break_reservation, check, check_files, reservations, reserve, Conflict, Pattern, Reservation,
    ReservationRecord, ReserveError, ReserveRequest, Space,
};
use crate::dir::BatonDir;
use crate::request::Mode;

/// Where reservations are kept, and the operations on them.
pub trait ReservationStore: Send + Sync + Debug {
    /// Reserves `req.patterns` in `space`, waiting as `req.wait` says
    /// ([`reserve`]).
    ///
    /// # Errors
    ///
    /// [`ReserveError::Busy`] when not granted in time,
    /// [`ReserveError::Cancelled`], else the store's failure.
    fn reserve(
        &self,
        space: &Space,
        req: &ReserveRequest,
    ) -> Result<Box<dyn HeldReservation>, ReserveError>;

    /// Live rows in ticket order; with `filter`, only rows overlapping it
    /// ([`reservations`]).
    ///
    /// # Errors
    ///
    /// The store cannot be read.
    fn reservations(
        &self,
        space: &Space,
        filter: Option<&Pattern>,
    ) -> Result<Vec<ReservationRecord>, ReserveError>;

    /// Live granted rows of others that conflict with `patterns` in `mode`
    /// ([`check`]).
    ///
    /// # Errors
    ///
    /// The store cannot be read.
    fn check(
        &self,
        space: &Space,
        patterns: &[Pattern],
        mode: Mode,
        session: Option<&str>,
    ) -> Result<Vec<Conflict>, ReserveError>;

    /// The files another holder reserved exclusively ([`check_files`]).
    ///
    /// # Errors
    ///
    /// The store cannot be read.
    fn check_files(
        &self,
        space: &Space,
        files: &[String],
        session: Option<&str>,
    ) -> Result<Vec<(String, Conflict)>, ReserveError>;

    /// Removes a live reservation by token ([`break_reservation`]).
    ///
    /// # Errors
    ///
    /// [`ReserveError::NotFound`], else the store's failure.
    fn break_reservation(
        &self,
        space: &Space,
        token: u64,
    ) -> Result<ReservationRecord, ReserveError>;

    /// Where the reservations are, for messages: a baton dir, a database
    /// URL (password hidden).
    fn place(&self) -> String;
}

/// A granted reservation, whichever store keeps it: released by
/// [`HeldReservation::release`], on drop, or when its holder dies.
pub trait HeldReservation: Send + Debug {
    /// Its row as the store keeps it.
    fn record(&self) -> &ReservationRecord;

    /// The fencing token of this grant.
    fn token(&self) -> u64 {
        self.record().token.unwrap_or(0)
    }

    /// What it covers.
    fn patterns(&self) -> &[Pattern] {
        &self.record().patterns
    }

    /// Exclusive or shared.
    fn mode(&self) -> Mode {
        self.record().mode
    }

    /// The holder of an overlapping reservation that died holding it.
    fn previous_holder_died(&self) -> Option<&ReservationRecord>;

    /// Whether an operator broke it. Checked on call.
    ///
    /// # Errors
    ///
    /// The store cannot be read.
    fn is_broken(&self) -> Result<bool, ReserveError>;

    /// Whether it was lost without a release: on a database, the session
    /// that held it ended (the server or the network failed). Never in the
    /// baton dir, whose kernel locks end only with this process.
    fn is_lost(&self) -> bool {
        false
    }

    /// Runs `f` once, from another thread, if it is lost (see
    /// [`HeldReservation::is_lost`]); at once if it already was.
    fn on_lost(&self, f: Box<dyn Fn() + Send>) {
        let _ = f;
    }

    /// Releases it now.
    ///
    /// # Errors
    ///
    /// The row could not be removed (it is let go of regardless: others
    /// see it dead).
    fn release(self: Box<Self>) -> Result<(), ReserveError>;

    /// Lets go of it as a holder that died would: its row stays, so the
    /// next holder of its paths is told `previous_holder_died`. In the
    /// baton dir that happens when this process exits (the kernel frees its
    /// lock then); on a database at once.
    fn abandon(self: Box<Self>);
}

/// Reservations in a baton dir: one machine, one user's dir.
#[derive(Clone, Debug)]
pub struct LocalReservations {
    dir: BatonDir,
}

impl LocalReservations {
    /// The reservations of baton dir `dir`.
    pub fn new(dir: BatonDir) -> LocalReservations {
        LocalReservations { dir }
    }
}

impl ReservationStore for LocalReservations {
    fn reserve(
        &self,
        space: &Space,
        req: &ReserveRequest,
    ) -> Result<Box<dyn HeldReservation>, ReserveError> {
        Ok(Box::new(reserve(&self.dir, space, req)?))
    }

    fn reservations(
        &self,
        space: &Space,
        filter: Option<&Pattern>,
    ) -> Result<Vec<ReservationRecord>, ReserveError> {
        reservations(&self.dir, space, filter)
    }

    fn check(
        &self,
        space: &Space,
        patterns: &[Pattern],
        mode: Mode,
        session: Option<&str>,
    ) -> Result<Vec<Conflict>, ReserveError> {
        check(&self.dir, space, patterns, mode, session)
    }

    fn check_files(
        &self,
        space: &Space,
        files: &[String],
        session: Option<&str>,
    ) -> Result<Vec<(String, Conflict)>, ReserveError> {
        check_files(&self.dir, space, files, session)
    }

    fn break_reservation(
        &self,
        space: &Space,
        token: u64,
    ) -> Result<ReservationRecord, ReserveError> {
        break_reservation(&self.dir, space, token)
    }

    fn place(&self) -> String {
        self.dir.path().display().to_string()
    }
}

impl HeldReservation for Reservation {
    fn record(&self) -> &ReservationRecord {
        Reservation::record(self)
    }

    fn previous_holder_died(&self) -> Option<&ReservationRecord> {
        Reservation::previous_holder_died(self)
    }

    fn is_broken(&self) -> Result<bool, ReserveError> {
        Reservation::is_broken(self)
    }

    fn release(self: Box<Self>) -> Result<(), ReserveError> {
        Reservation::release(*self)
    }

    fn abandon(self: Box<Self>) {
        // The engine cannot free the liveness lock and keep the row: the
        // file stays open until this process exits, and the kernel frees
        // the lock then.
        std::mem::forget(self);
    }
}
