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
//! - Requests without `Origin` are not affected by the Origin rule. The
//!   rule covers every route: `/ws`, `/rpc`, `/v1/...`.
//!
//! The Host rule closes the rest of the DNS-rebinding hole: a page of
//! `evil.example` whose name is rebound to 127.0.0.1 is same-origin with
//! itself, so its `Origin` matches its `Host`. On a connection accepted on
//! a loopback address, the `Host` must therefore name a loopback host
//! (`localhost` or `*.localhost`, an address in 127.0.0.0/8, `[::1]`) or
//! the host of an allow-listed origin; otherwise 403. A request without
//! `Host` (HTTP/1.0) is not affected.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::http::status_text;
use crate::listen::LocalAddr;
use crate::server::AppState;

/// Middleware for `axum::middleware::from_fn_with_state`.
pub async fn check_origin(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("").trim());
    let on_loopback = req
        .extensions()
        .get::<LocalAddr>()
        .is_some_and(|l| l.0.ip().is_loopback());
    if on_loopback {
        if let Some(host) = host {
            if !loopback_host(host, &app.allowed_origins) {
                return status_text(StatusCode::FORBIDDEN, "host not allowed");
            }
        }
    }
    let Some(origin) = req.headers().get(header::ORIGIN) else {
        return next.run(req).await;
    };
    let origin = origin.to_str().unwrap_or("").trim();
    if allowed(origin, host, &app.allowed_origins) {
        next.run(req).await
    } else {
        status_text(StatusCode::FORBIDDEN, "origin not allowed")
    }
}

/// Whether a `Host` header names this machine (or an allow-listed
/// origin's host), port ignored.
fn loopback_host(host: &str, list: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]:7878`
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Ok(ip) = name.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    list.iter().any(|o| {
        let o = o.trim_end_matches('/');
        let o_host = o.split_once("://").map_or(o, |(_, h)| h);
        o_host.eq_ignore_ascii_case(host)
            || o_host
                .rsplit_once(':')
                .is_some_and(|(n, _)| n.eq_ignore_ascii_case(&name))
            || o_host.eq_ignore_ascii_case(&name)
    })
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
    use super::{allowed, loopback_host};

    #[test]
    fn only_loopback_names_or_listed_hosts_pass_the_host_rule() {
        for ok in [
            "127.0.0.1:7878",
            "127.1.2.3",
            "localhost:7878",
            "LOCALHOST",
            "app.localhost:1",
            "[::1]:7878",
        ] {
            assert!(loopback_host(ok, &[]), "{ok}");
        }
        for bad in [
            "evil.example:7878",
            "10.0.0.1:7878",
            "evil.example",
            "[::2]:1",
        ] {
            assert!(!loopback_host(bad, &[]), "{bad}");
        }
        let list = vec!["http://dev.box:7878".to_string()];
        assert!(loopback_host("dev.box:7878", &list));
        assert!(!loopback_host("other.box:7878", &list));
    }

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
