//! The web console at `/`: a page that speaks the WebSocket protocol of
//! PROTOCOL Part 1 from a browser, so a person can watch and drive sessions
//! without installing a client (docs/CONSOLE.md).
//!
//! Its files are embedded with `include_str!`: nothing to build, nothing to
//! find on disk at run time, and the page always matches the binary that
//! serves it. Its connection is the JavaScript client library's
//! (`clients/typescript/src`, served under `/console/tether-client/`), so
//! reconnects and the exactly-once rules live in one implementation.
//!
//! They hold no data (everything comes over `/ws`), which is why
//! they are served without a token (`crate::auth` lets these paths through)
//! while the socket they open needs one.
//!
//! The Content-Security-Policy allows the page's own script, style and
//! socket and nothing else: no inline code, no other origin, no framing.
//! The token travels in the page's URL, so `Referrer-Policy: no-referrer`
//! keeps it from leaking into any request the page might cause.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::http::status_text;
use crate::server::AppState;

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_JS: &str = include_str!("console/console.js");
const SESSION_VIEW_JS: &str = include_str!("console/session_view.js");
const TRANSCRIPT_JS: &str = include_str!("console/transcript.js");
const ENDINGS_JS: &str = include_str!("console/endings.js");
const CONSOLE_CSS: &str = include_str!("console/console.css");
const ICON_SVG: &str = include_str!("console/icon.svg");

/// One module of tether-client, as `(file name, source)`.
macro_rules! client_module {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../../clients/typescript/src/", $name)),
        )
    };
}

/// tether-client's modules (clients/typescript/src), which import each
/// other by relative path, hence one directory of their own.
const CLIENT_LIBRARY: &[(&str, &str)] = &[
    client_module!("index.js"),
    client_module!("gateway.js"),
    client_module!("connection.js"),
    client_module!("session.js"),
    client_module!("attach.js"),
    client_module!("delivery.js"),
    client_module!("stream.js"),
    client_module!("turn.js"),
    client_module!("text.js"),
    client_module!("transport.js"),
    client_module!("backoff.js"),
    client_module!("emitter.js"),
    client_module!("errors.js"),
    client_module!("decode.js"),
    client_module!("options.js"),
    client_module!("requests.js"),
];

/// Same-origin only. `connect-src 'self'` covers `ws://` to the page's own
/// host and port (CSP Level 3).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// Whether a path is one of the console's (served without a token).
pub fn is_console_path(path: &str) -> bool {
    path == "/" || path.starts_with("/console/")
}

/// The console's routes, to merge into the gateway's router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/console/{file}", get(asset))
        .route("/console/tether-client/{file}", get(client_library))
}

async fn index() -> Response {
    file(INDEX_HTML, "text/html; charset=utf-8")
}

const JS: &str = "text/javascript; charset=utf-8";

async fn asset(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "console.js" => file(CONSOLE_JS, JS),
        "session_view.js" => file(SESSION_VIEW_JS, JS),
        "transcript.js" => file(TRANSCRIPT_JS, JS),
        "endings.js" => file(ENDINGS_JS, JS),
        "console.css" => file(CONSOLE_CSS, "text/css; charset=utf-8"),
        "icon.svg" => file(ICON_SVG, "image/svg+xml"),
        _ => status_text(StatusCode::NOT_FOUND, "not found"),
    }
}

async fn client_library(Path(name): Path<String>) -> Response {
    match CLIENT_LIBRARY.iter().find(|(n, _)| *n == name) {
        Some((_, body)) => file(body, JS),
        None => status_text(StatusCode::NOT_FOUND, "not found"),
    }
}

fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Revalidate every time: after an upgrade the page must match the
    // gateway that serves it.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::is_console_path;

    #[test]
    fn only_the_console_paths_skip_the_token() {
        for ok in [
            "/",
            "/console/console.js",
            "/console/x",
            "/console/tether-client/index.js",
        ] {
            assert!(is_console_path(ok), "{ok}");
        }
        for no in ["/ws", "/rpc", "/console", "/v1/sessions/x/events", "//"] {
            assert!(!is_console_path(no), "{no}");
        }
    }
}
