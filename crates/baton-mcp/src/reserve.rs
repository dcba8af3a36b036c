//! Placeholder until the reservation engine lands.

use std::sync::Arc;

use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};

use crate::session::Session;
use crate::types::{
    ReleaseArgs, ReleaseOut, ReservationsArgs, ReservationsOut, ReserveArgs, ReserveOut,
};
use crate::Outcome;

/// A reservation held by the session.
pub(crate) struct Held;

impl Held {
    /// Releases it, logging a failure.
    pub(crate) fn release_quietly(self) {}
}

pub(crate) async fn reserve(
    _s: &Arc<Session>,
    _a: ReserveArgs,
    _c: &RequestContext<RoleServer>,
) -> Outcome<ReserveOut> {
    Err("not yet".into())
}
pub(crate) fn release(_s: &Arc<Session>, _a: ReleaseArgs) -> Outcome<ReleaseOut> {
    Err("not yet".into())
}
pub(crate) fn list(_s: &Arc<Session>, _a: ReservationsArgs) -> Outcome<ReservationsOut> {
    Err("not yet".into())
}
pub(crate) fn watch_broken(_s: Arc<Session>, _p: Peer<RoleServer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {})
}
