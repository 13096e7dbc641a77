//! Being woken by committed events of other nodes: `LISTEN tether_events`.
//!
//! A notification is a hint, never the data: a follower reads the events from the database by
//! seq after its own watermark (docs/ARCHITECTURE.md "Followers"). Notifications sent while the listening
//! connection was down are lost for good, so every (re)connect yields [`Wake::Resync`] once
//! `LISTEN` is in place again: the caller then reads each followed session once,
//! unconditionally. The first [`EventListener::recv`] is such a connect, so "start following"
//! and "recover from a reconnect" are one code path.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tether_protocol::SessionId;

use crate::postgres::errors::map_sqlx;

use super::deltas::{self, Deltas, DELTA_CHANNEL};
use super::erased::ERASED_CHANNEL;
use super::forwards::FORWARD_CHANNEL;
use super::peers::PRESENCE_CHANNEL;
use super::ClusterError;
use super::NodeId;
use crate::postgres::fencing::ForwardId;
/// The channel every node's writer notifies (`postgres/fencing.rs`).
pub use crate::postgres::fencing::CHANNEL;

/// What woke the listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// Events of `session_id` up to `seq` were committed (by some node). Read after your
    /// watermark; `seq` only tells that there is something to read.
    Events {
        /// The session.
        session_id: SessionId,
        /// Its `latest_seq` as that commit left it.
        seq: u64,
    },
    /// A request was forwarded to the owner of `session_id` (`forwards.rs`). A hint too: the
    /// owner reads the session's pending forwards.
    Forward {
        /// The session.
        session_id: SessionId,
        /// The forward.
        forward_id: ForwardId,
    },
    /// Transient events of a session, sent by its owner (`deltas.rs`): not stored, and not
    /// sent again if lost.
    Deltas(Deltas),
    /// Node `from_node` wrote who is attached to `session_id` there (`peers.rs`). A hint:
    /// read the presence rows again.
    Presence {
        /// The session.
        session_id: SessionId,
        /// The node that wrote.
        from_node: NodeId,
    },
    /// Some or all of session `session_id` was erased: deleted, or events trimmed
    /// (`erased.rs`). A hint: read its row.
    Erased {
        /// The session.
        session_id: SessionId,
    },
    /// Listening (again) after a connect or a reconnect, or a notification that could not be
    /// read: something may have been missed, so read every followed session once.
    Resync,
}

/// A `LISTEN` connection of its own, reconnected on demand (module doc).
pub struct EventListener {
    options: PgConnectOptions,
    inner: Option<PgListener>,
}

impl std::fmt::Debug for EventListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventListener")
            .field("listening", &self.inner.is_some())
            .finish_non_exhaustive()
    }
}

impl EventListener {
    pub(crate) fn new(options: PgConnectOptions) -> EventListener {
        EventListener {
            options,
            inner: None,
        }
    }

    /// The next wake-up. An `Err` means the connection could not be (re)made: call again
    /// (after a backoff); the call that succeeds in listening again returns
    /// [`Wake::Resync`].
    pub async fn recv(&mut self) -> Result<Wake, ClusterError> {
        let Some(listener) = self.inner.as_mut() else {
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .min_connections(0)
                .idle_timeout(None)
                .max_lifetime(None)
                .acquire_timeout(Duration::from_secs(5))
                .connect_lazy_with(self.options.clone());
            let mut listener = PgListener::connect_with(&pool).await.map_err(map_sqlx)?;
            listener
                .listen_all([
                    CHANNEL,
                    FORWARD_CHANNEL,
                    DELTA_CHANNEL,
                    PRESENCE_CHANNEL,
                    ERASED_CHANNEL,
                ])
                .await
                .map_err(map_sqlx)?;
            self.inner = Some(listener);
            tracing::info!(channel = CHANNEL, "listening for committed events");
            return Ok(Wake::Resync);
        };
        match listener.try_recv().await {
            Ok(Some(n)) if n.channel() == FORWARD_CHANNEL => {
                Ok(match n.payload().rsplit_once(':') {
                    Some((session, id)) if !session.is_empty() && !id.is_empty() => Wake::Forward {
                        session_id: SessionId::from(session),
                        forward_id: ForwardId::from(id.to_owned()),
                    },
                    _ => {
                        tracing::warn!(payload = n.payload(), "unreadable forward notification");
                        Wake::Resync
                    }
                })
            }
            Ok(Some(n)) if n.channel() == PRESENCE_CHANNEL => {
                Ok(match n.payload().rsplit_once(':') {
                    Some((session, node)) if !session.is_empty() && !node.is_empty() => {
                        Wake::Presence {
                            session_id: SessionId::from(session),
                            from_node: NodeId::from(node.to_owned()),
                        }
                    }
                    _ => {
                        tracing::warn!(payload = n.payload(), "unreadable presence notification");
                        Wake::Resync
                    }
                })
            }
            Ok(Some(n)) if n.channel() == ERASED_CHANNEL => Ok(if n.payload().is_empty() {
                tracing::warn!("unreadable erased-session notification");
                Wake::Resync
            } else {
                Wake::Erased {
                    session_id: SessionId::from(n.payload()),
                }
            }),
            Ok(Some(n)) if n.channel() == DELTA_CHANNEL => Ok(match deltas::parse(n.payload()) {
                Some(d) => Wake::Deltas(d),
                None => {
                    // Nothing to resync for: deltas are never read back.
                    tracing::debug!(payload = n.payload(), "unreadable delta notification");
                    return Box::pin(self.recv()).await;
                }
            }),
            Ok(Some(n)) => Ok(match parse(n.payload()) {
                Some((session_id, seq)) => Wake::Events { session_id, seq },
                None => {
                    tracing::warn!(payload = n.payload(), "unreadable event notification");
                    Wake::Resync
                }
            }),
            // The connection was lost and (eager reconnect) made again, LISTEN included.
            Ok(None) => {
                tracing::warn!(channel = CHANNEL, "event listener reconnected; resync");
                Ok(Wake::Resync)
            }
            Err(e) => {
                // Start over on the next call, with a fresh connection and a Resync.
                self.inner = None;
                let e = map_sqlx(e);
                tracing::warn!(error = %e, "event listener lost its connection");
                Err(e.into())
            }
        }
    }
}

/// `<session_id>:<seq>`; the seq is the part after the last colon (client-chosen session ids
/// may hold colons of their own).
pub fn parse(payload: &str) -> Option<(SessionId, u64)> {
    let (session, seq) = payload.rsplit_once(':')?;
    if session.is_empty() {
        return None;
    }
    Some((SessionId::from(session), seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_from_the_last_colon() {
        assert_eq!(parse("s_1:42"), Some((SessionId::from("s_1"), 42)));
        assert_eq!(parse("a:b:7"), Some((SessionId::from("a:b"), 7)));
        assert_eq!(parse(":7"), None);
        assert_eq!(parse("s_1:x"), None);
        assert_eq!(parse("s_1"), None);
    }
}
