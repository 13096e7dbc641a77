//! The peer a front-end request or stream speaks through.
//!
//! The front-end routes are views: each request or stream is a peer like a
//! WebSocket connection, and does what it does with the methods of
//! PROTOCOL 1.4 (`session.resume` with `attach`, `prompt.submit`,
//! `session.interrupt`, ...). So the session, its bounds and its
//! exactly-once promises are the same ones every other transport gets.
//! Events that arrive while a call waits for its reply are kept, in order,
//! for the stream that reads them next.

use std::collections::VecDeque;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::{json, Value};
use tether_actors::{Outbound, OutboxReceiver, PeerMsg};
use tether_protocol::EventType;

use super::error::Refusal;
use super::event::TetherEvent;
use crate::auth::Caller;
use crate::server::AppState;

/// Margin over `call_timeout` for a reply.
const ANSWER_MARGIN: Duration = Duration::from_secs(5);

/// Why a call got no result.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The JSON-RPC error the gateway answered.
    Rpc { code: i64, message: String },
    /// No reply within `call_timeout` + 5 s.
    Timeout,
    /// The peer ended (its outbox closed) before the reply.
    Ended,
}

/// Stops the peer when dropped (the request or stream is over).
pub struct PeerGuard(ActorRef<PeerMsg>);

impl Drop for PeerGuard {
    fn drop(&mut self) {
        self.0.stop(None);
    }
}

/// What the outbox handed over next.
pub enum Next {
    /// Events, in order (at least one).
    Events(Vec<TetherEvent>),
    /// The peer was closed (a slow reader, a rate limit): the stream
    /// cannot go on.
    Closed,
}

/// One request's or stream's peer.
pub struct ViewPeer {
    peer: ActorRef<PeerMsg>,
    rx: OutboxReceiver,
    /// Events read while waiting for a reply.
    pending: VecDeque<TetherEvent>,
    next_id: u64,
    wait: Duration,
    batch: Vec<Outbound>,
    closed: bool,
    /// The code and reason of the close, once closed.
    close: Option<(u16, String)>,
    _guard: PeerGuard,
}

impl ViewPeer {
    /// Starts a peer for `caller`; 503 when the gateway cannot start one
    /// (it is shutting down; logged).
    pub async fn open(
        app: &AppState,
        caller: Caller,
        can_attach: bool,
        transport: tether_protocol::PeerTransport,
    ) -> Result<ViewPeer, Refusal> {
        let Some((peer, rx)) = app.start_peer(caller, can_attach, transport).await else {
            return Err(crate::http::unavailable().into());
        };
        Ok(ViewPeer {
            _guard: PeerGuard(peer.clone()),
            peer,
            rx,
            pending: VecDeque::new(),
            next_id: 0,
            wait: app.ctx.config.call_timeout + ANSWER_MARGIN,
            batch: Vec::new(),
            closed: false,
            close: None,
        })
    }

    /// Calls `method` and waits (bounded) for its result.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        self.next_id += 1;
        let id = format!("view-{}", self.next_id);
        let text = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let msg = PeerMsg::Text {
            text: text.to_string(),
            permit: None,
        };
        if self.peer.cast(msg).is_err() {
            return Err(CallError::Ended);
        }
        match tokio::time::timeout(self.wait, self.reply(&id)).await {
            Err(_) => Err(CallError::Timeout),
            Ok(None) => Err(CallError::Ended),
            Ok(Some(reply)) => match reply.get("error") {
                Some(err) => Err(CallError::Rpc {
                    code: err["code"].as_i64().unwrap_or(0),
                    message: err["message"].as_str().unwrap_or("failed").to_string(),
                }),
                None => Ok(reply.get("result").cloned().unwrap_or(Value::Null)),
            },
        }
    }

    /// Reads frames up to the reply to `id`, keeping the events.
    async fn reply(&mut self, id: &str) -> Option<Value> {
        loop {
            let bytes = match self.rx.recv().await? {
                Outbound::Frame(bytes) => bytes,
                Outbound::Close { code, reason } => {
                    self.closed = true;
                    self.close = Some((code, reason));
                    return None;
                }
            };
            let Ok(frame) = serde_json::from_slice::<Value>(&bytes) else {
                continue;
            };
            if frame.get("method").is_some() {
                self.keep(&frame);
            } else if frame["id"] == id {
                return Some(frame);
            }
        }
    }

    fn keep(&mut self, frame: &Value) {
        if frame["method"] != "event" {
            return;
        }
        if let Some(ev) = TetherEvent::from_params(&frame["params"]) {
            if ev.kind != EventType::GatewayReady {
                self.pending.push_back(ev);
            }
        }
    }

    /// Why the peer's connection was closed, once it was: the close code
    /// (4401 token expired, 4403 revoked, 4008 slow reader, ...) and reason.
    pub fn close_reason(&self) -> Option<&(u16, String)> {
        self.close.as_ref()
    }

    /// The gateway reloaded its tokens: the peer checks its own again
    /// (and closes, 4403, if it is no longer accepted).
    pub fn recheck(&self) {
        let _ = self.peer.cast(PeerMsg::Recheck);
    }

    /// The events kept while calls waited, handed over once.
    pub fn take_pending(&mut self) -> Vec<TetherEvent> {
        self.pending.drain(..).collect()
    }

    /// The next events: what the outbox has ready, as one batch; `None`
    /// when the outbox ended.
    pub async fn next(&mut self) -> Option<Next> {
        if !self.pending.is_empty() {
            return Some(Next::Events(self.take_pending()));
        }
        if self.closed {
            return Some(Next::Closed);
        }
        loop {
            if !self.rx.recv_batch(&mut self.batch).await {
                return None;
            }
            let batch = std::mem::take(&mut self.batch);
            for item in batch {
                match item {
                    Outbound::Frame(bytes) => {
                        if let Ok(frame) = serde_json::from_slice::<Value>(&bytes) {
                            self.keep(&frame);
                        }
                    }
                    Outbound::Close { code, reason } => {
                        self.closed = true;
                        self.close = Some((code, reason));
                    }
                }
            }
            if !self.pending.is_empty() {
                return Some(Next::Events(self.take_pending()));
            }
            if self.closed {
                return Some(Next::Closed);
            }
        }
    }

    /// What the outbox holds now, without waiting (the gateway drains:
    /// the endings of the turns it just wrote); `None` once it is empty.
    pub fn try_next(&mut self) -> Option<Next> {
        if !self.pending.is_empty() {
            return Some(Next::Events(self.take_pending()));
        }
        while let Some(item) = self.rx.try_recv() {
            match item {
                Outbound::Frame(bytes) => {
                    if let Ok(frame) = serde_json::from_slice::<Value>(&bytes) {
                        self.keep(&frame);
                    }
                }
                Outbound::Close { code, reason } => {
                    self.closed = true;
                    self.close = Some((code, reason));
                    break;
                }
            }
        }
        if !self.pending.is_empty() {
            return Some(Next::Events(self.take_pending()));
        }
        self.closed.then_some(Next::Closed)
    }
}
