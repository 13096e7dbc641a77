//! tether's wire types: JSON-RPC 2.0 envelopes, the client methods' params
//! and results, server-to-client events, compute-host frames, error codes and
//! ids (see `docs/PROTOCOL.md`).
//!
//! This crate is plain data: serde derives plus the validation that turns an
//! untrusted frame into a typed [`Request`]. It does no I/O and knows nothing
//! of tokio, so every other crate (store, actors, bin, tests, clients) can
//! share exactly one definition of the contract.

#[macro_use]
mod macros;

pub mod envelope;
pub mod error;
pub mod error_table;
pub mod events;
pub mod host;
pub mod ids;
pub mod methods;
pub mod secrets;
pub mod time;

pub use envelope::*;
pub use error::*;
pub use error_table::*;
pub use events::*;
pub use host::*;
pub use ids::*;
pub use methods::*;
pub use secrets::*;
pub use time::*;
