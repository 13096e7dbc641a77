//! Transient events across nodes (docs/ARCHITECTURE.md "Followers": transient events cross nodes
//! best effort, unstored): the owner of a session that has peers on other nodes sends its deltas
//! with `pg_notify` on a channel of their own, and every node's listener hands them to its
//! follower of that session. Nothing is written to a table, and a notification lost (the
//! listener reconnecting, the queue full, the owner dying) is not sent again: the stored
//! events that follow carry the truth (`message.complete` has the whole text).
//!
//! A payload is `{"s": session, "n": node, "b": body}`, the body being the caller's JSON;
//! PostgreSQL refuses a payload of 8000 bytes or more, so a body that would not fit is not
//! sent (the caller splits what it sends to fit [`MAX_BODY`]).

use serde::Deserialize;
use serde_json::value::RawValue;
use sqlx::postgres::PgPool;
use tether_protocol::SessionId;

use crate::postgres::errors::map_sqlx;

use super::{ClusterError, NodeId};

/// The channel deltas are sent on.
pub const DELTA_CHANNEL: &str = "tether_deltas";

/// The largest body [`send`] sends: what is left of PostgreSQL's 8000-byte payload limit
/// after the envelope and a session id of up to 128 bytes.
pub const MAX_BODY: usize = 7600;

/// One payload, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deltas {
    /// The session they belong to.
    pub session_id: SessionId,
    /// The node that sent them (a listener hears its own node too).
    pub from_node: NodeId,
    /// The sender's JSON.
    pub body: String,
}

/// Sends each `(session, body)` as one notification, all in one statement (one round trip,
/// one commit). Bodies over [`MAX_BODY`] are left out; the count sent is returned.
pub(crate) async fn send(
    pool: &PgPool,
    me: &NodeId,
    batch: &[(SessionId, String)],
) -> Result<usize, ClusterError> {
    let payloads: Vec<String> = batch
        .iter()
        .filter(|(_, body)| body.len() <= MAX_BODY)
        .filter_map(|(session, body)| {
            let session = serde_json::to_string(session.as_str()).ok()?;
            let node = serde_json::to_string(me.as_str()).ok()?;
            Some(format!(r#"{{"s":{session},"n":{node},"b":{body}}}"#))
        })
        .collect();
    if payloads.is_empty() {
        return Ok(0);
    }
    sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
        .bind(DELTA_CHANNEL)
        .bind(&payloads)
        .execute(pool)
        .await
        .map_err(map_sqlx)?;
    Ok(payloads.len())
}

/// A received payload; `None` if it is not one of [`send`]'s.
pub(crate) fn parse(payload: &str) -> Option<Deltas> {
    #[derive(Deserialize)]
    struct Payload<'a> {
        s: String,
        n: String,
        #[serde(borrow)]
        b: &'a RawValue,
    }
    let p: Payload = serde_json::from_str(payload).ok()?;
    Some(Deltas {
        session_id: SessionId::from(p.s),
        from_node: NodeId::from(p.n),
        body: p.b.get().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_parses_back_to_its_parts() {
        let p = r#"{"s":"s_1","n":"n_2","b":{"after":3,"events":[{"x":"a\"b"}]}}"#;
        let d = parse(p).expect("parses");
        assert_eq!(d.session_id, SessionId::from("s_1"));
        assert_eq!(d.from_node, NodeId::from("n_2".to_string()));
        assert_eq!(d.body, r#"{"after":3,"events":[{"x":"a\"b"}]}"#);
        assert_eq!(parse("s_1:3"), None);
        assert_eq!(parse(r#"{"s":"s_1","n":"n_2"}"#), None);
    }
}
