//! The dashboard: one page served from the binary (no CDN), and the
//! read-only JSON it polls.

use axum::response::Html;
use axum::routing::get;
use axum::Router;

use crate::api::AppState;

/// Routes served without a token: the page itself and the OpenAPI document.
pub fn page_routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Html(include_str!("dashboard.html")) }))
        .route(
            "/openapi.json",
            get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    include_str!("openapi.json"),
                )
            }),
        )
}

/// The data routes the page polls (behind auth).
pub fn api_routes() -> Router<AppState> {
    Router::new()
}
