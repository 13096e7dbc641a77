//! The Origin rule of PROTOCOL 1.1: a request that carries `Origin` (one
//! made by a browser) is served only when that origin is the gateway's own
//! or is on the allow-list; otherwise it is refused with 403 before any
//! handler runs. This closes the DNS-rebinding hole of loopback services.
//!
//! Decisions:
//!
//! - **Own origin** is `http://` + the request's `Host` header (which
//!   carries the port when it is not 80), compared ASCII
//!   case-insensitively. A request with `Origin` but no `Host` is refused.
//! - **Allow-list** entries (`AppState::allowed_origins`) are compared the
//!   same way, ignoring a trailing `/`. `Origin: null` (sandboxed frames,
//!   `file:` pages) is refused unless `null` is listed.
//! - Requests without `Origin` are not affected. The rule covers every
//!   route: `/ws`, `/rpc`, `/v1/...`.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::http::status_text;
use crate::server::AppState;

/// Middleware for `axum::middleware::from_fn_with_state`.
pub async fn check_origin(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return next.run(req).await;
    };
    let origin = origin.to_str().unwrap_or("").trim();
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::trim);
    if allowed(origin, host, &app.allowed_origins) {
        next.run(req).await
    } else {
        status_text(StatusCode::FORBIDDEN, "origin not allowed")
    }
}

fn allowed(origin: &str, host: Option<&str>, list: &[String]) -> bool {
    let origin = origin.trim_end_matches('/');
    if origin.is_empty() {
        return false;
    }
    if let Some(host) = host.filter(|h| !h.is_empty()) {
        if origin.eq_ignore_ascii_case(&format!("http://{host}")) {
            return true;
        }
    }
    list.iter()
        .any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn own_origin_and_list() {
        let list = vec!["https://app.example/".to_string()];
        assert!(allowed(
            "http://127.0.0.1:7878",
            Some("127.0.0.1:7878"),
            &[]
        ));
        assert!(allowed("HTTP://LOCALHOST:1", Some("localhost:1"), &[]));
        assert!(!allowed(
            "http://127.0.0.1:7879",
            Some("127.0.0.1:7878"),
            &[]
        ));
        assert!(!allowed("http://evil.example", Some("127.0.0.1:7878"), &[]));
        assert!(!allowed("http://127.0.0.1:7878", None, &[]));
        assert!(!allowed("null", Some("127.0.0.1:7878"), &[]));
        assert!(allowed(
            "https://app.example",
            Some("127.0.0.1:7878"),
            &list
        ));
        assert!(!allowed("https://app.example.evil", Some("x"), &list));
    }
}
