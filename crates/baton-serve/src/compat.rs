//! Compatibility routes: `POST /execute`, `GET /jobs/{id}` (the design this
//! service replaces), and the OpenAI-shaped `POST /v1/chat/completions` and
//! `GET /v1/models`.

use axum::Router;

use crate::api::AppState;

/// The compatibility routes (behind auth).
pub fn routes() -> Router<AppState> {
    Router::new()
}
