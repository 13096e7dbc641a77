//! The tether actor system: a root `Gateway` supervising the `StoreWriter`,
//! the `Registry` of live `Session`s, the `HostSupervisor` and the `Reaper`,
//! and the `Peer` actors that speak for client connections. Knows nothing of sockets beyond the [`outbox`].
#![forbid(unsafe_code)]

pub mod config;
pub mod ctx;
pub mod event;
pub mod gateway;
pub mod host;
pub mod host_registry;
pub mod host_supervisor;
mod info;
pub mod late_acks;
pub mod lifecycle;
pub mod metrics;
pub mod outbox;
pub mod peer;
pub mod rate;
pub mod reaper;
pub mod registry;
pub mod ring;
pub mod session;
pub mod sparse_log;
pub mod store_writer;
pub mod supervisor;
mod title;
pub mod transcript;
pub mod turn;

pub use config::{GatewayConfig, HostConfig};
pub use ctx::Ctx;
pub use gateway::{spawn_peer, GatewayArgs, GatewayHandle};
pub use outbox::{Outbound, OutboxReceiver};
pub use peer::{Identity, PeerMsg};
