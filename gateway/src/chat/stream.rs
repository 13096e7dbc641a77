//! The body of a front-end stream: what the view writes for the events its
//! peer receives, until the view says it is over.
//!
//! As on the SSE route, what the outbox has ready is written as one body
//! chunk, a `: keep-alive` comment goes out every 15 s of quiet, and when
//! the gateway drains, what is queued (the endings of the turns the drain
//! wrote) still goes out before the stream ends. A peer closed under the
//! stream (a slow reader) ends the body with an error rather than a clean
//! end, so the client sees a cut stream and resumes, instead of taking a
//! partial answer for a whole one. When the client goes away, the peer
//! stops and detaches.
//!
//! A stream is a connection: it holds its place under the profile's
//! `connections` from before anything is asked to its end (taken by the
//! route, [`crate::limits::open_connection`]), watches the token
//! configuration (a reload has its peer check the token again) and ends at
//! its token's end (4401) or revocation (4403), first telling its client
//! why in the view's protocol ([`View::token_ended`]), so an app can fetch
//! a new token and resume.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use tether_actors::metrics::Transport;
use tether_actors::{CLOSE_TOKEN_EXPIRED, CLOSE_TOKEN_REVOKED};
use tokio::sync::watch;

use super::error::Refusal;
use super::event::TetherEvent;
use super::peer::{Next, ViewPeer};
use super::request::Asked;
use crate::server::AppState;

/// Interval of the `: keep-alive` comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A protocol's view of a session's events.
pub trait View: Send + 'static {
    /// Appends what these events are in the view's protocol to `out`;
    /// whether the stream is over.
    fn events(&mut self, events: Vec<TetherEvent>, out: &mut String) -> bool;

    /// Appends what says the stream ends because its token did (`code`
    /// 4401 expired, 4403 revoked).
    fn token_ended(&mut self, code: u16, out: &mut String);
}

/// What a client can act on when a stream's token ended: a stable code
/// and a sentence.
pub fn token_end(code: u16) -> (&'static str, &'static str) {
    if code == CLOSE_TOKEN_EXPIRED {
        (
            "token_expired",
            "the token expired (4401): fetch a new token and resume the stream",
        )
    } else {
        (
            "token_revoked",
            "the token was revoked (4403): sign in again before resuming",
        )
    }
}

/// Why a stream was cut rather than ended.
#[derive(Debug, thiserror::Error)]
#[error("the stream's peer was closed (a slow reader); resume it")]
struct Cut;

struct Live<V> {
    peer: ViewPeer,
    view: V,
    shutdown: watch::Receiver<bool>,
    done: bool,
    draining: bool,
    /// Changes at each reload of the token configuration.
    reloads: watch::Receiver<u64>,
    _open: tether_actors::metrics::OpenConnection,
    /// Its place under its profile's connections.
    _place: tether_actors::Hold,
}

/// A stream's response: `text/event-stream`, never cached nor buffered by a
/// proxy, with the chat's session id (`x-tether-session-id`) and `extra`
/// headers a front-end's client expects.
pub fn sse_response(body: Body, asked: &Asked, extra: &[(&'static str, &'static str)]) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    for (name, value) in extra {
        h.insert(*name, HeaderValue::from_static(value));
    }
    if let Ok(v) = HeaderValue::from_str(asked.session_id().as_str()) {
        h.insert("x-tether-session-id", v);
    }
    resp
}

/// A stream's place under its profile's `connections` (and its token's
/// own), or the 429 that refuses it before anything is asked.
pub fn open_stream(app: &AppState, asked: &Asked) -> Result<tether_actors::Hold, Refusal> {
    crate::limits::open_connection(app, asked.profile(), &asked.caller)
        .map_err(|limit| Refusal::from(crate::limits::too_many(&limit)))
}

/// The stream's body: `first` (already written by the view), then the
/// view of what the peer receives. `done`: `first` ended it already.
pub fn body<V: View>(
    app: &AppState,
    place: tether_actors::Hold,
    peer: ViewPeer,
    first: String,
    view: V,
    done: bool,
) -> Body {
    let live = Live {
        peer,
        view,
        shutdown: app.shutdown.clone(),
        done,
        draining: false,
        reloads: app.auth.reloads(),
        _open: app.ctx.metrics.open_connection(Transport::Sse),
        _place: place,
    };
    let first = (!first.is_empty()).then(|| Ok::<Bytes, Cut>(Bytes::from(first)));
    Body::from_stream(futures::stream::iter(first).chain(futures::stream::unfold(live, next)))
}

enum Woke {
    Ready(Option<Next>),
    Drain,
    Quiet,
    Reloaded,
}

async fn next<V: View>(mut st: Live<V>) -> Option<(Result<Bytes, Cut>, Live<V>)> {
    loop {
        if st.done {
            return None;
        }
        let got = if st.draining {
            match st.peer.try_next() {
                // Nothing more queued: the drain closes the connection.
                None => return None,
                Some(n) => Some(n),
            }
        } else {
            let woke = tokio::select! {
                n = st.peer.next() => Woke::Ready(n),
                _ = st.shutdown.wait_for(|s| *s) => Woke::Drain,
                Ok(()) = st.reloads.changed() => Woke::Reloaded,
                () = tokio::time::sleep(KEEP_ALIVE) => Woke::Quiet,
            };
            match woke {
                Woke::Ready(n) => n,
                Woke::Drain => {
                    st.draining = true;
                    continue;
                }
                Woke::Quiet => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st)),
                Woke::Reloaded => {
                    st.peer.recheck();
                    continue;
                }
            }
        };
        match got {
            None | Some(Next::Closed) => {
                st.done = true;
                let token = st
                    .peer
                    .close_reason()
                    .map(|(code, _)| *code)
                    .filter(|c| matches!(*c, CLOSE_TOKEN_EXPIRED | CLOSE_TOKEN_REVOKED));
                // A token's end is said, then the stream ends cleanly:
                // the client knows why and what to do.
                if let Some(code) = token {
                    let mut out = String::new();
                    st.view.token_ended(code, &mut out);
                    return Some((Ok(Bytes::from(out)), st));
                }
                return Some((Err(Cut), st));
            }
            Some(Next::Events(events)) => {
                let mut out = String::new();
                st.done = st.view.events(events, &mut out);
                if !out.is_empty() {
                    return Some((Ok(Bytes::from(out)), st));
                }
            }
        }
    }
}
