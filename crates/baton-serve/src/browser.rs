//! What a browser may not do to the service (docs/src/design/architecture.md, decision 16: the
//! service is a trust boundary). A web page can make a browser send
//! requests to `127.0.0.1` without a CORS preflight (a form POST, `fetch`
//! with `text/plain`), and DNS rebinding lets a page on an attacker's name
//! reach the loopback service as if it were its own origin. So every
//! request passes three checks before routing and auth:
//!
//! - **Host**: the `Host` header names the service: its listen address, or
//!   `localhost` / `127.0.0.1` / `[::1]`, on its port; or an `allowed_hosts`
//!   entry (`name`: on the service's port, `name:port`: exactly). Else 403
//!   `forbidden_host` (this is what defeats DNS rebinding: the page's own
//!   name reaches the service in `Host`).
//! - **Origin**: a request that carries `Origin` (a browser's) comes from
//!   the service's own page (`http://` or `https://` + the request's `Host`)
//!   or from an origin listed in `allowed_origins`. Else 403
//!   `forbidden_origin`. Clients that are not browsers send no `Origin`.
//! - **Content type**: a `POST` body is `application/json` (parameters such
//!   as `charset` allowed). Else 415 `unsupported_media_type`: the types a
//!   page can send cross-site without a preflight are refused. This one is
//!   [`json_body`], a route layer: a method the route does not have gets
//!   405 first.
//!
//! Also a request target longer than [`MAX_URI_BYTES`] gets 414, and a
//! request with more than [`MAX_HEADERS`] header fields 431, with the JSON
//! error body. What the HTTP layer refuses before the service sees a
//! request is answered by it with the right status and an empty body: a
//! request that is not HTTP/1 (400), a target beyond 64 KiB (414), more
//! than [`crate::conn::PARSED_HEADERS`] fields or a head beyond ~400 KiB (431).

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;
use crate::config::hosts::split_host;

/// The longest request target (path and query) the service reads.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The most header fields a request may carry.
pub const MAX_HEADERS: usize = 100;

/// The names the checks accept, fixed at start.
#[derive(Clone, Debug)]
pub struct Guard {
    /// The address the service is bound to (its real port).
    pub local: SocketAddr,
    /// `allowed_hosts`, lowercased.
    pub allowed_hosts: Vec<String>,
    /// `allowed_origins`, lowercased, without a trailing `/`.
    pub allowed_origins: Vec<String>,
}

impl Guard {
    /// Whether `host` (a `Host` header's value) names this service.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let port = self.local.port();
        let (name, given_port) = split_host(&host);
        let given_port = match given_port {
            Some(p) => match p.parse::<u16>() {
                Ok(p) => p,
                Err(_) => return false,
            },
            None => 80,
        };
        let listen_ip = match self.local.ip() {
            std::net::IpAddr::V4(ip) => ip.to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        };
        let own = ["localhost", "127.0.0.1", "[::1]", listen_ip.as_str()];
        if given_port == port && own.contains(&name) {
            return true;
        }
        self.allowed_hosts.iter().any(|a| match split_host(a) {
            (n, None) => n == name && given_port == port,
            (n, Some(p)) => n == name && p.parse::<u16>().ok() == Some(given_port),
        })
    }

    /// Whether a request from `origin` (an `Origin` header's value) to
    /// `host` (its checked `Host`) may go on.
    pub fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        let host = host.trim().to_ascii_lowercase();
        if origin == format!("http://{host}") || origin == format!("https://{host}") {
            return true;
        }
        self.allowed_origins.contains(&origin)
    }
}

/// Whether the request's body is declared as JSON.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The middleware: the Host and Origin checks of the module doc, in order
/// (the content type is [`json_body`]'s).
pub async fn check(
    State(guard): State<std::sync::Arc<Guard>>,
    req: Request,
    next: Next,
) -> Response {
    match refusal(&guard, &req) {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    }
}

fn refusal(guard: &Guard, req: &Request) -> Option<ApiError> {
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return Some(ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is {uri_len} bytes; the limit is {MAX_URI_BYTES}"),
        ));
    }
    let headers = req.headers();
    if headers.len() > MAX_HEADERS {
        return Some(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "too_many_headers",
            format!(
                "the request has {} header fields; the limit is {MAX_HEADERS}",
                headers.len()
            ),
        ));
    }
    let given = headers.get(header::HOST);
    let host = match given {
        Some(v) => v.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    };
    let Some(host) = host.filter(|h| guard.host_allowed(h)) else {
        let shown = match (given, host) {
            (_, Some(h)) => format!("'{}'", h.escape_debug()),
            (Some(_), None) => "not text".to_string(),
            (None, None) => "absent".to_string(),
        };
        return Some(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            format!(
                "header 'Host' ({shown}) does not name this service: use {} or localhost:{}, or add the name to allowed_hosts",
                guard.local,
                guard.local.port()
            ),
        ));
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let text = origin.to_str().unwrap_or("");
        if !guard.origin_allowed(text, host) {
            return Some(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!(
                    "header 'Origin' ('{}') is not this service's own page: add it to allowed_origins to let that site's pages call the service",
                    text.escape_debug()
                ),
            ));
        }
    }
    None
}

/// The content-type check, as a route layer: it runs only on a request
/// that matches a route and method, so that a method a path does not have
/// gets 405 (as the OpenAPI document says), whatever its body.
pub async fn json_body(req: Request, next: Next) -> Response {
    match media_refusal(&req) {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    }
}

fn media_refusal(req: &Request) -> Option<ApiError> {
    let headers = req.headers();
    if req.method() == Method::POST && !is_json(headers) {
        let given = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        return Some(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "header 'Content-Type' ({}) is not application/json: the body must be JSON, declared so",
                given.map_or_else(|| "absent".to_string(), |g| format!("'{}'", g.escape_debug()))
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        Guard {
            local: "127.0.0.1:7420".parse().unwrap(),
            allowed_hosts: vec!["agents.internal".into(), "proxy.internal:443".into()],
            allowed_origins: vec!["https://tools.internal".into()],
        }
    }

    #[test]
    fn hosts_name_the_service_on_its_port() {
        let g = guard();
        for ok in [
            "127.0.0.1:7420",
            "localhost:7420",
            "LOCALHOST:7420",
            "[::1]:7420",
            "agents.internal:7420",
            "proxy.internal:443",
        ] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:7420",
            "127.0.0.1:80",
            "localhost",
            "proxy.internal:7420",
            "127.0.0.1:x",
            "",
        ] {
            assert!(!g.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn origins_are_the_own_page_or_listed() {
        let g = guard();
        assert!(g.origin_allowed("http://127.0.0.1:7420", "127.0.0.1:7420"));
        assert!(g.origin_allowed("https://tools.internal", "127.0.0.1:7420"));
        assert!(!g.origin_allowed("http://evil.example", "127.0.0.1:7420"));
        assert!(!g.origin_allowed("null", "127.0.0.1:7420"));
    }
}
