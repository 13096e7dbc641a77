//! An in-process client: a Peer actor of the gateway under test, spoken to
//! with JSON-RPC text frames, its outbox read directly (no socket).

use std::collections::VecDeque;
use std::time::Duration;

use ractor::ActorRef;
use serde_json::{json, Value};
use tether_actors::{Ctx, Identity, Outbound, OutboxReceiver, PeerMsg};

/// Why a call gave no result.
#[derive(Debug)]
pub enum CallError {
    /// The JSON-RPC error object.
    Rpc(Value),
    /// The connection closed (its peer or one of its sessions died) or no
    /// answer came in time.
    Gone,
}

pub struct Conn {
    pub peer: ActorRef<PeerMsg>,
    rx: OutboxReceiver,
    next_id: u64,
    events: VecDeque<Value>,
}

/// How long a call may wait for its answer before the client gives up on
/// the connection (the gateway's own call timeout is 30 s; chaos slows it).
const CALL_WAIT: Duration = Duration::from_secs(20);

impl Conn {
    /// A new connection, past its `gateway.ready`; `None` if the gateway
    /// cannot take one right now.
    pub async fn open(ctx: &Ctx) -> Option<Conn> {
        let identity = Identity {
            profile: "default".into(),
            fixed: false,
            can_attach: true,
            transport: tether_protocol::PeerTransport::WebSocket,
            limits: None,
        };
        let (peer, rx) = tether_actors::spawn_peer(ctx, identity).await.ok()?;
        let mut c = Conn {
            peer,
            rx,
            next_id: 1,
            events: VecDeque::new(),
        };
        let ready = c.frame(CALL_WAIT).await.ok()??;
        (ready["params"]["type"] == "gateway.ready").then_some(c)
    }

    /// Next frame; `Ok(None)` on timeout, `Err` once the connection closed.
    async fn frame(&mut self, wait: Duration) -> Result<Option<Value>, CallError> {
        match tokio::time::timeout(wait, self.rx.recv()).await {
            Err(_) => Ok(None),
            Ok(None) | Ok(Some(Outbound::Close { .. })) => Err(CallError::Gone),
            Ok(Some(Outbound::Frame(bytes))) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|_| CallError::Gone),
        }
    }

    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.next_id;
        self.next_id += 1;
        let text = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
        self.peer
            .cast(PeerMsg::Text { text, permit: None })
            .map_err(|_| CallError::Gone)?;
        let deadline = tokio::time::Instant::now() + CALL_WAIT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(frame) = self.frame(left).await? else {
                return Err(CallError::Gone);
            };
            if frame["id"] == id {
                return match frame.get("error") {
                    Some(e) => Err(CallError::Rpc(e.clone())),
                    None => Ok(frame["result"].clone()),
                };
            }
            if frame["method"] == "event" {
                self.events.push_back(frame["params"].clone());
            }
        }
    }

    /// Next event; `Ok(None)` when none came within `wait`.
    pub async fn event(&mut self, wait: Duration) -> Result<Option<Value>, CallError> {
        if let Some(e) = self.events.pop_front() {
            return Ok(Some(e));
        }
        loop {
            let Some(frame) = self.frame(wait).await? else {
                return Ok(None);
            };
            if frame["method"] == "event" {
                return Ok(Some(frame["params"].clone()));
            }
        }
    }

    /// Leaves as a client that goes away does: the transport ends and the
    /// peer stops.
    pub fn close(self) {
        self.peer.stop(None);
    }
}
