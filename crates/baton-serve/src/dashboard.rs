//! The dashboard: one page served from the binary (no CDN, works offline),
//! and the read-only JSON it polls.
//!
//! The page (`dashboard.html`, with its script and style embedded) is served
//! without a token so that a browser can load it; everything it shows comes
//! from `GET /v1/overview` and the job API, which need the token when one is
//! configured. The page asks for the token on a 401 and keeps it in
//! `sessionStorage`.
//!
//! `GET /v1/overview` gathers in one call what an operator wants at a glance:
//! capacity (as `/health`), the running and queued jobs with their wait and
//! run times, recently finished jobs, the nodes sharing the store (with
//! PostgreSQL), the groups (the database's with a PostgreSQL store, else the
//! baton dir's), and the baton dir's locks and workspaces (the same
//! documents as `baton group status --json`, `baton lock status --json` and
//! `baton workspace list --json`). Those three
//! read files and probe processes, so they run on a blocking thread; a
//! section that cannot be read is empty and its error is named in `errors`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::{Json, Router};
use baton_lock::BatonDir;
use serde_json::{json, Map, Value};

use crate::api::{health_body, ApiError, AppState};
use crate::model::{now_ms, rfc3339, Job, JobStatus, ListFilter};

/// The page: markup, style and script in one document.
const PAGE: &str = include_str!("dashboard.html");

/// The most queued jobs listed (the total is in `health.queued`).
pub const QUEUED_SHOWN: u32 = 200;

/// The most finished jobs listed, newest end first.
pub const RECENT_SHOWN: usize = 25;

/// How long a workspace listing is reused while the service's jobs stay the
/// same: measuring workspaces walks their trees, too much work to repeat on
/// every poll. (Workspaces of `baton run` outside the service show up within
/// this time.)
const WORKSPACES_FRESH: Duration = Duration::from_secs(5);

/// Routes served without a token: the page itself and the OpenAPI document
/// (built for the running configuration, see [`crate::openapi`]).
pub fn page_routes() -> Router<AppState> {
    Router::new()
        .route("/", get(page))
        .route("/openapi.json", get(crate::openapi::serve))
}

/// The data routes the page polls (behind auth).
pub fn api_routes() -> Router<AppState> {
    Router::new().route("/v1/overview", get(overview))
}

async fn page() -> impl IntoResponse {
    (
        [
            // The page loads nothing from anywhere else, and says so.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                 frame-ancestors 'none'",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Html(PAGE),
    )
}

/// `GET /v1/overview`: `{generated_at, health, running, queued, recent,
/// nodes, groups, locks, workspaces, errors}` (`nodes` as in `/health`;
/// empty with a store only one node uses).
pub async fn overview(State(service): State<AppState>) -> Result<Json<Value>, ApiError> {
    let counts = service.store.counts().await?;
    let mut health = health_body(&service, &counts, service.is_draining());
    health["max_queue_depth"] = json!(service.config.max_queue_depth);
    let nodes = service.store.nodes().await?.unwrap_or_default();
    let running = jobs(&service, JobStatus::Running, 1000).await?;
    let mut queued = jobs(&service, JobStatus::Queued, QUEUED_SHOWN).await?;
    // The store lists newest first; the queue reads oldest (next) first.
    queued.reverse();
    let recent = recent(&service).await?;

    // Jobs create and remove workspaces: a change of the running or latest
    // finished jobs makes the cached workspace listing stale.
    let jobs_now: Vec<&str> = running
        .iter()
        .chain(recent.first())
        .map(|j| j.spec.id.as_str())
        .collect();
    let fingerprint = jobs_now.join(",");
    let dir = service.dir.clone();
    let groups = service.groups.clone();
    let (baton, errors) =
        tokio::task::spawn_blocking(move || baton_dir_sections(&dir, &groups, &fingerprint))
            .await
            .unwrap_or_else(|e| {
                let mut errors = Map::new();
                errors.insert(
                    "baton_dir".into(),
                    Value::String(format!("cannot read the baton dir: {e}")),
                );
                (Map::new(), errors)
            });
    let as_json = |list: &[Job]| -> Vec<Value> {
        list.iter()
            .map(|j| json!(baton_api::JobView::from(j)))
            .collect()
    };
    Ok(Json(json!({
        "generated_at": rfc3339(now_ms()),
        "health": health,
        "running": as_json(&running),
        "queued": as_json(&queued),
        "recent": as_json(&recent),
        "nodes": nodes,
        "groups": baton.get("groups").cloned().unwrap_or_else(|| json!([])),
        "locks": baton.get("locks").cloned().unwrap_or_else(|| json!([])),
        "workspaces": baton.get("workspaces").cloned().unwrap_or_else(|| json!([])),
        "errors": errors,
    })))
}

async fn jobs(service: &AppState, status: JobStatus, limit: u32) -> Result<Vec<Job>, ApiError> {
    Ok(service
        .store
        .list(&ListFilter {
            status: Some(status),
            limit,
            ..ListFilter::default()
        })
        .await?)
}

/// The latest finished jobs of every final status, newest end first.
async fn recent(service: &AppState) -> Result<Vec<Job>, ApiError> {
    let mut all = Vec::new();
    for status in JobStatus::ALL.into_iter().filter(|s| s.is_final()) {
        all.extend(jobs(service, status, RECENT_SHOWN as u32).await?);
    }
    all.sort_by_key(|j| std::cmp::Reverse((j.finished_at.unwrap_or(j.spec.created_at), j.seq)));
    all.truncate(RECENT_SHOWN);
    Ok(all)
}

/// Groups (of the baton dir, or of the database with a PostgreSQL store),
/// locks and workspaces of the baton dir (blocking), and the error
/// of each section that could not be read.
fn baton_dir_sections(
    dir: &BatonDir,
    groups: &baton_run::Backend,
    jobs: &str,
) -> (Map<String, Value>, Map<String, Value>) {
    let mut out = Map::new();
    let mut errors = Map::new();
    let mut put = |name: &str, r: Result<Value, String>| match r {
        Ok(v) => {
            out.insert(name.into(), v);
        }
        Err(e) => {
            errors.insert(name.into(), Value::String(e));
        }
    };
    put(
        "groups",
        groups
            .group_status(None)
            .map_err(|e| format!("cannot read the groups: {e}"))
            .and_then(to_json),
    );
    put(
        "locks",
        baton_lock::list(dir)
            .map_err(|e| format!("cannot list the locks: {e}"))
            .and_then(to_json),
    );
    put("workspaces", workspaces(dir, jobs));
    (out, errors)
}

fn to_json<T: serde::Serialize>(v: T) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| format!("cannot encode JSON: {e}"))
}

/// `baton_git::list`, reused for [`WORKSPACES_FRESH`] per baton dir while
/// `jobs` (the service's job fingerprint) stays the same.
fn workspaces(dir: &BatonDir, jobs: &str) -> Result<Value, String> {
    type Cache = Mutex<HashMap<PathBuf, (Instant, String, Value)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let key = dir.path().to_path_buf();
    if let Some((at, seen, v)) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        if at.elapsed() < WORKSPACES_FRESH && seen == jobs {
            return Ok(v.clone());
        }
    }
    let v = baton_git::list(dir)
        .map_err(|e| format!("cannot list the workspaces: {e}"))
        .and_then(to_json)?;
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, (Instant::now(), jobs.to_string(), v.clone()));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::PAGE;

    /// The page works offline: it names no other host.
    #[test]
    fn the_page_loads_nothing_from_other_hosts() {
        for scheme in ["http://", "https://", "//cdn", "@import"] {
            assert!(!PAGE.contains(scheme), "the dashboard mentions {scheme}");
        }
    }

    /// Job data goes into the page as text, never as markup.
    #[test]
    fn the_page_never_parses_strings_as_markup() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!PAGE.contains(sink), "the dashboard uses {sink}");
        }
    }
}
