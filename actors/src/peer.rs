//! `Peer`: one client connection, whatever its transport.
//!
//! The transport hands the peer raw text frames; the peer validates them
//! into typed requests (protocol crate), sends each to the actor that owns
//! it (the Registry for create and list; the Session for session methods,
//! by way of the Registry, which delivers them in order with parking: see
//! `registry/route.rs`) and queues the answer in its own outbox, the same
//! ordered queue that carries the session's live frames. A reply goes only
//! to this peer.
//!
//! Requests of one peer are answered in order; a slow session method only
//! delays this peer. When the transport ends, the peer stops and, in
//! `post_stop`, sends `Detach` to every session it was attached to.
//!
//! Who supervises a peer: its connection, not an actor. A peer is spawned
//! unlinked (`spawn_peer`) by the transport task that owns the socket
//! (`gateway/src/ws.rs`, `sse.rs`, `http.rs`, `stdio.rs`); that task feeds it
//! frames, and stops it when the socket ends or the gateway drains. A peer
//! that fails (a panic, a kill) is not restarted: its state is its
//! connection, which the gateway cannot rebuild. Instead its `Drop` (below)
//! detaches it from every session and closes the connection with 1011, and
//! the client's reconnect and resume from its watermark is the restart: the
//! OTP "temporary child" policy, applied by the connection. A ractor
//! supervisor would only add a place to hear of the failure, which the
//! peer's own `Drop` already handles.

pub mod admission;
mod attached;
mod branch;
mod dispatch;
mod handoff;
mod list_page;
mod presence;
pub mod token;
mod write;

pub(crate) use dispatch::ask;

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tether_protocol::{
    encode_batch, encode_error, encode_event_frame, encode_event_params, format_ts, now_ms,
    parse_frame, to_raw, EventParams, EventType, GatewayReadyPayload, Incoming, Item, Limits,
    PeerId, PeerTransport, RpcError,
};
use tracing::debug;

use crate::ctx::Ctx;
use crate::outbox::{FrameClass, Outbox, Pushed};
use crate::rate::{RateLimiter, Verdict};
use crate::registry::RegistryMsg;
use crate::session::{PeerLink, SessionMsg};

/// Who the peer is: its profile, whether a token fixed it, and whether its
/// transport can receive live frames (a `POST /rpc` peer cannot attach).
#[derive(Debug, Clone)]
pub struct Identity {
    pub profile: String,
    pub fixed: bool,
    pub can_attach: bool,
    /// Told to the sessions it attaches to (`SessionInfo.attached`).
    pub transport: PeerTransport,
    /// The limits its token sets for its own work (its `limits` claim).
    pub limits: Option<crate::registry::ledger::TokenLimits>,
}

pub enum PeerMsg {
    /// A text frame from the client. The permit, if any, bounds how many
    /// frames the transport may have queued for this peer.
    Text {
        text: String,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    },
    /// A binary frame: answered with -32700, the connection stays open.
    Binary,
    /// A frame over `max_frame_bytes` (but within 4×): answered with 4013.
    TooLarge { len: usize },
    /// The transport asks to close the connection with this code.
    Close { code: u16, reason: String },
    /// A timer of the token of `generation`: `gateway.token_expiring`, or
    /// (`expired`) the close at its `exp`. Ignored once refreshed.
    TokenTimer { generation: u64, expired: bool },
    /// The gateway reloaded its token configuration: the token is checked
    /// again, and the connection closed (4403) if it is no longer valid.
    Recheck,
}

pub struct PeerArgs {
    pub peer_id: PeerId,
    pub identity: Identity,
    pub outbox: Outbox,
    pub ctx: Ctx,
    /// The token the connection presented, if it can expire or be revoked.
    pub token: Option<token::TokenGrant>,
}

pub struct PeerState {
    peer_id: PeerId,
    identity: Identity,
    outbox: Outbox,
    ctx: Ctx,
    /// Sessions this peer is attached to, to detach from on disconnect.
    attached: attached::Attached,
    limiter: RateLimiter,
    /// Counted in the registry's peers (`PeerUp` sent, `PeerDown` not yet).
    counted: bool,
    /// The connection's token and the generation of its timers.
    token: Option<token::TokenGrant>,
    token_generation: u64,
    token_timers: Vec<tokio::task::JoinHandle<Result<(), ractor::MessagingErr<PeerMsg>>>>,
    /// What it said of itself in `gateway.hello` (`peer/presence.rs`).
    client: Option<std::sync::Arc<tether_protocol::ClientInfo>>,
    /// `gateway.hello` was answered: it is not taken twice.
    described: bool,
}

pub struct Peer;

impl Actor for Peer {
    type Msg = PeerMsg;
    type State = PeerState;
    type Arguments = PeerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: PeerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let rps = args.ctx.config.rate_limit_rps;
        let mut state = PeerState {
            peer_id: args.peer_id,
            identity: args.identity,
            outbox: args.outbox,
            ctx: args.ctx,
            attached: attached::Attached::default(),
            limiter: RateLimiter::new(rps, rps.saturating_mul(2), std::time::Instant::now()),
            counted: true,
            token: args.token,
            token_generation: 0,
            token_timers: Vec::new(),
            client: None,
            described: false,
        };
        // Counted before the client can see `gateway.ready` (and so before
        // anything it does next can ask for the count).
        if let Ok(registry) = state.ctx.registry() {
            let _ = registry.cast(RegistryMsg::PeerUp {
                profile: state.identity.profile.clone(),
            });
        }
        state.send_ready();
        state.arm_token_timers(&myself);
        debug!(peer_id = %state.peer_id, profile = %state.identity.profile, "peer connected");
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            // A closed outbox (slow consumer, rate limit, a transport
            // close) takes no answer: executing what the client still
            // sends would only build replies to throw away.
            PeerMsg::Text { .. } if state.outbox.is_closed() => {
                debug!(peer_id = %state.peer_id, "frame after the close; ignored");
            }
            PeerMsg::Text { text, permit } => {
                // Boxed: ractor keeps this handler's future inline in the
                // actor's loop, which lives as long as the connection; the
                // request path's future is kilobytes, and every idle peer
                // would carry it. One small allocation per request instead.
                let generation = state.token_generation;
                Box::pin(state.on_text(&text)).await;
                drop(permit);
                // A `gateway.refresh_token` moved the token's clock.
                if state.token_generation != generation {
                    state.arm_token_timers(&myself);
                }
            }
            PeerMsg::TokenTimer {
                generation,
                expired,
            } => {
                if generation == state.token_generation {
                    state.on_token_timer(expired);
                }
            }
            PeerMsg::Recheck => Box::pin(state.recheck_token(&myself)).await,
            PeerMsg::Close { code, reason } => state.outbox.close(code, &reason),
            PeerMsg::Binary => {
                let err = state.admit().err().unwrap_or_else(|| {
                    RpcError::parse_error("binary frames are not JSON-RPC; send text frames")
                });
                state.reply_error(&err);
            }
            PeerMsg::TooLarge { len } => {
                debug!(peer_id = %state.peer_id, len, "frame too large");
                let err = state
                    .admit()
                    .err()
                    .unwrap_or_else(|| RpcError::frame_too_large(state.ctx.config.max_frame_bytes));
                state.reply_error(&err);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.leave();
        debug!(peer_id = %state.peer_id, "peer disconnected");
        Ok(())
    }
}

impl PeerState {
    /// Detaches from every session and stops being counted. Idempotent.
    fn leave(&mut self) {
        for timer in self.token_timers.drain(..) {
            timer.abort();
        }
        for session in self.attached.drain() {
            let _ = session.cast(SessionMsg::Detach {
                peer_id: self.peer_id.clone(),
                reply: None,
            });
        }
        if std::mem::take(&mut self.counted) {
            if let Ok(registry) = self.ctx.registry() {
                let _ = registry.cast(RegistryMsg::PeerDown {
                    profile: self.identity.profile.clone(),
                });
            }
        }
    }
}

/// A peer killed (or crashed in a handler) skips `post_stop`: leave the
/// sessions and close the connection here, so that its sessions do not
/// keep a dead peer attached and its client reconnects.
impl Drop for PeerState {
    fn drop(&mut self) {
        self.leave();
        if !self.outbox.is_closed() {
            self.outbox.close(CLOSE_PEER_LOST, "peer restarted");
        }
    }
}

/// WebSocket close code for a connection whose peer actor died.
pub const CLOSE_PEER_LOST: u16 = 1011;

/// Work to do once a frame's answer is queued: sessions waiting for this
/// peer to confirm that a resume reply is in its outbox.
#[derive(Default)]
struct AfterReply {
    joins: Vec<ActorRef<SessionMsg>>,
}

impl PeerState {
    fn send_ready(&self) {
        let payload = GatewayReadyPayload {
            server: "tether".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: 1,
            epoch: self.ctx.epoch.to_string(),
            peer_id: self.peer_id.clone(),
            profile: self.identity.profile.clone(),
            heartbeat_s: self.ctx.config.heartbeat_s,
            limits: Limits {
                max_frame_bytes: self.ctx.config.max_frame_bytes as u64,
            },
        };
        let payload = to_raw(&payload);
        let ts = format_ts(now_ms());
        let params = encode_event_params(&EventParams {
            kind: EventType::GatewayReady,
            session_id: None,
            seq: None,
            turn_id: None,
            trace_id: None,
            ts: &ts,
            payload: &payload,
        });
        self.push_reply(encode_event_frame(&params));
    }

    /// Queues an answer. Replies count against the outbox bound: one over
    /// it closes the peer as a slow consumer (PROTOCOL 1.8).
    fn push_reply(&self, text: String) {
        let len = text.len();
        if self.outbox.push(Bytes::from(text), FrameClass::Reply) == Pushed::Closed {
            debug!(peer_id = %self.peer_id, len, "reply not queued: the peer is closed");
        }
    }

    fn reply_error(&self, err: &RpcError) {
        self.push_reply(encode_error(&Value::Null, err));
    }

    /// This peer as a session attaches it, with the latency budget it
    /// asked that session for (validated by the protocol crate: ≤ 1000 ms).
    fn link(&self, delivery: Option<tether_protocol::Delivery>) -> PeerLink {
        let ms = delivery.map_or(0, |d| d.max_delay_ms);
        PeerLink {
            peer_id: self.peer_id.clone(),
            transport: self.identity.transport,
            outbox: self.outbox.clone(),
            max_delay: std::time::Duration::from_millis(u64::from(ms)),
            presence: self.presence_entry(),
        }
    }

    async fn on_text(&mut self, text: &str) {
        let mut after = AfterReply::default();
        match parse_frame(text) {
            Incoming::Invalid(err) => {
                let err = self.admit().err().unwrap_or(err);
                self.reply_error(&err);
            }
            Incoming::Single(item) => {
                if let Some(answer) = self.answer(item, &mut after).await {
                    self.push_reply(answer);
                }
            }
            Incoming::Batch(items) => {
                let mut answers = Vec::with_capacity(items.len());
                for item in items {
                    if let Some(answer) = self.answer(item, &mut after).await {
                        answers.push(answer);
                    }
                }
                // A batch of notifications only gets no answer at all.
                if !answers.is_empty() {
                    self.push_reply(encode_batch(&answers));
                }
            }
        }
        for session in after.joins {
            let _ = session.cast(SessionMsg::Joined {
                peer_id: self.peer_id.clone(),
            });
        }
    }

    /// Takes a token for one unit of work (PROTOCOL 1.10): 4029 when the
    /// peer is over its rate; a peer over it for 3 s in a row is closed.
    /// Then one of its profile's, shared by all of the profile's
    /// connections: 4290 `requests_per_s` past that.
    fn admit(&mut self) -> Result<(), RpcError> {
        let now = std::time::Instant::now();
        match self.limiter.check(now) {
            Verdict::Allow => self
                .ctx
                .profiles
                .take_request(&self.identity.profile, self.identity.limits.as_ref(), now)
                .map_err(|limit| limit.to_rpc()),
            Verdict::Limit { retry_after } => {
                Err(RpcError::rate_limited(retry_after.as_millis().max(1) as u64))
            }
            Verdict::Close => {
                tracing::warn!(peer_id = %self.peer_id, "peer kept exceeding its rate limit; closing");
                self.outbox.close(1008, "rate limit exceeded");
                Err(RpcError::rate_limited(1000))
            }
        }
    }

    /// Executes one batch member; `None` for notifications.
    async fn answer(&mut self, item: Item, after: &mut AfterReply) -> Option<String> {
        if let Err(e) = self.admit() {
            return match item {
                Item::Error { id, .. } => id.map(|id| encode_error(&id, &e)),
                Item::Call(call) => call.id.map(|id| encode_error(&id, &e)),
            };
        }
        match item {
            Item::Error { id, error } => id.map(|id| encode_error(&id, &error)),
            Item::Call(call) => {
                let method = call.request.method();
                // The one admission (`admission.rs`): nothing runs past it
                // that the token may not do.
                if let Err(e) = self.admit_request(&call.request).await {
                    tracing::debug!(peer_id = %self.peer_id, method, code = e.code, "request refused by the admission");
                    return call.id.map(|id| encode_error(&id, &e));
                }
                let result = self.dispatch(call.request, after).await;
                if let Err(e) = &result {
                    if e.code == tether_protocol::codes::INTERNAL_ERROR {
                        tracing::error!(peer_id = %self.peer_id, method, error = %e, "internal error");
                    }
                }
                let id = call.id?;
                Some(match result {
                    Ok(raw) => tether_protocol::encode_result(&id, &raw),
                    Err(e) => encode_error(&id, &e),
                })
            }
        }
    }
}
