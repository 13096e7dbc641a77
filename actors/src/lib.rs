//! The tether actor system: a root `Gateway` supervising the `StoreWriter`,
//! the `Registry` of live `Session`s, the `HostSupervisor` and the `Reaper`,
//! and the `Peer` actors that speak for client connections. Knows nothing
//! of sockets beyond the outbox a transport drains.
//!
//! The public surface is what the binary and a transport need, and no more:
//!
//! - start and stop a gateway: [`GatewayHandle::start`] with
//!   [`GatewayArgs`] (settings in [`config`]), and the shared [`Ctx`] it
//!   hands out;
//! - the peer API: [`spawn_peer`] for each connection, the [`PeerMsg`]s a
//!   transport feeds it, and the [`OutboxReceiver`] of [`Outbound`] frames
//!   it writes;
//! - sessions created under an id the caller chose ([`create_with_id`]),
//!   for the front-end routes that name sessions by the client's ids;
//! - what `/metrics`, `/readyz` and the client rate limits read:
//!   [`metrics`], [`Lifecycle`], [`rate`];
//! - the start-up cleanup of host processes a crashed gateway left behind
//!   ([`kill_leftovers`]), and whether the hosts could start at all
//!   ([`HostStart`], in the [`Ctx`]).
//!
//! The actors themselves and their messages are private: they talk to each
//! other, a transport talks only to its peer. tether's own benchmarks and
//! tests reach a little further through the `hooks` module, behind the
//! `hooks` feature (see there).

mod branch;
pub mod config;
mod ctx;
mod delta_relay;
mod event;
mod gateway;
#[cfg(feature = "hooks")]
pub mod hooks;
mod host;
mod host_registry;
mod host_supervisor;
mod info;
mod late_acks;
mod lifecycle;
pub mod metrics;
mod named;
mod node;
mod outbox;
mod peer;
pub mod profile_limits;
pub mod rate;
mod reaper;
mod registry;
mod retention;
mod ring;
mod session;
mod sparse_log;
mod store_writer;
mod supervisor;
mod title;
mod transcript;
mod turn;

pub use config::{GatewayConfig, HostConfig, ProfileEngines};
pub use ctx::{Ctx, CtxParts};
pub use gateway::{spawn_peer, spawn_peer_with_token, GatewayArgs, GatewayHandle};
pub use host_registry::kill_leftovers;
pub use host_supervisor::{HostStart, StartState};
pub use lifecycle::Lifecycle;
pub use named::create_with_id;
pub use outbox::{Outbound, OutboxReceiver, CLOSE_GOING_AWAY, CLOSE_SLOW_CONSUMER};
pub use peer::admission::{admit_new_session, admit_session};
pub use peer::token::{
    own_limits, unix_now_ms, CheckFuture, TokenCheck, TokenGrant, Verified, CLOSE_TOKEN_EXPIRED,
    CLOSE_TOKEN_REVOKED,
};
pub use peer::{Identity, PeerMsg};
pub use registry::ledger::{Hold, Limit, LimitReached, ProfileLedger, TokenLimits};
pub use retention::{RetentionConfig, RetentionRules};
pub use supervisor::{AfterIntensity, Backoff, RestartPolicy, Strategy};
pub use tether_store::WriterFactory;
