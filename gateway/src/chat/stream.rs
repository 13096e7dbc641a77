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

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use tether_actors::metrics::Transport;
use tokio::sync::watch;

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
    _open: tether_actors::metrics::OpenConnection,
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

/// The stream's body: `first` (already written by the view), then the
/// view of what the peer receives. `done`: `first` ended it already.
pub fn body<V: View>(app: &AppState, peer: ViewPeer, first: String, view: V, done: bool) -> Body {
    let live = Live {
        peer,
        view,
        shutdown: app.shutdown.clone(),
        done,
        draining: false,
        _open: app.ctx.metrics.open_connection(Transport::Sse),
    };
    let first = (!first.is_empty()).then(|| Ok::<Bytes, Cut>(Bytes::from(first)));
    Body::from_stream(futures::stream::iter(first).chain(futures::stream::unfold(live, next)))
}

enum Woke {
    Ready(Option<Next>),
    Drain,
    Quiet,
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
                () = tokio::time::sleep(KEEP_ALIVE) => Woke::Quiet,
            };
            match woke {
                Woke::Ready(n) => n,
                Woke::Drain => {
                    st.draining = true;
                    continue;
                }
                Woke::Quiet => return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st)),
            }
        };
        match got {
            None | Some(Next::Closed) => {
                st.done = true;
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
