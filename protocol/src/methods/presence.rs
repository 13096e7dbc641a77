//! Presence: who a peer says it is (`gateway.hello`), who is attached to a
//! session (`session.presence`), and the entries `presence.joined` /
//! `presence.left` carry (PROTOCOL 1.4, 1.5).
//!
//! A peer describes itself once per connection, not on every attach: the
//! description is the connection's (one app on one device), it holds for
//! every session the connection attaches, and a resume (which a client
//! sends on every reconnect, to every session it shows) stays the small
//! request it is. Everything in it is bounded here, before any actor sees
//! it, so a presence list is at most `peers × MAX_ENTRY_BYTES`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::results::PeerTransport;
use super::Params;
use crate::error::RpcError;
use crate::ids::{PeerId, SessionId};

/// The most bytes (UTF-8) of `name`, `device` and `app`.
pub const MAX_LABEL_BYTES: usize = 128;
/// The most bytes of `instance`.
pub const MAX_INSTANCE_BYTES: usize = 64;
/// The most bytes of `meta` as compact JSON text.
pub const MAX_META_BYTES: usize = 1024;

/// `gateway.hello`'s params, and what a presence entry says of its peer:
/// every field is the client's own word except the profile, which is the
/// connection's and therefore kept outside this object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Who uses it (a user's display name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it runs on (`"phone"`, `"laptop"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Which program (`"tether attach"`, `"web"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Stable across the reconnects of one client object: a peer that
    /// leaves and comes back with the same instance (and profile) within
    /// the grace is a reconnect, not a leave and a join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Anything else, as a JSON object of at most [`MAX_META_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

impl Params for ClientInfo {
    fn validate(&self) -> Result<(), RpcError> {
        label("name", self.name.as_deref(), MAX_LABEL_BYTES)?;
        label("device", self.device.as_deref(), MAX_LABEL_BYTES)?;
        label("app", self.app.as_deref(), MAX_LABEL_BYTES)?;
        label("instance", self.instance.as_deref(), MAX_INSTANCE_BYTES)?;
        if let Some(meta) = &self.meta {
            let len = serde_json::to_string(meta).map_or(usize::MAX, |s| s.len());
            if len > MAX_META_BYTES {
                return Err(RpcError::invalid_params(
                    "meta",
                    format!("{len} bytes as JSON; at most {MAX_META_BYTES}"),
                ));
            }
        }
        Ok(())
    }
}

/// A label: at most `max` bytes, no control characters (it is printed by
/// terminals and consoles as it is).
fn label(field: &str, value: Option<&str>, max: usize) -> Result<(), RpcError> {
    let Some(v) = value else {
        return Ok(());
    };
    if v.len() > max {
        return Err(RpcError::invalid_params(
            field,
            format!("{} bytes; at most {max}", v.len()),
        ));
    }
    if v.chars().any(char::is_control) {
        return Err(RpcError::invalid_params(
            field,
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// `gateway.hello`'s answer: the connection's peer id and the profile it
/// was given (which a client cannot choose through the hello).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloResult {
    pub peer_id: PeerId,
    pub profile: String,
}

/// `session.presence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceParams {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Params for PresenceParams {}

/// One attached peer, as `session.presence` and the presence events tell it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresenceEntry {
    pub peer_id: PeerId,
    /// The connection's profile (from its token, or the one it connected
    /// with): never the client's word.
    pub profile: String,
    /// What the peer said of itself (`gateway.hello`), `null` if nothing.
    pub client: Option<ClientInfo>,
    pub transport: PeerTransport,
    /// The cluster node it is connected to (`null` on a single gateway).
    pub node: Option<String>,
    /// When it attached (RFC 3339 UTC).
    pub attached_at: String,
}

/// `session.presence`'s answer: every peer attached now, on every node, in
/// peer id order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresenceResult {
    pub session_id: SessionId,
    pub peers: Vec<PresenceEntry>,
}

/// The payload of `presence.joined` and `presence.left`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PresencePayload {
    pub peers: Vec<PresenceEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::Request;
    use serde_json::json;

    fn hello(params: Value) -> Result<Request, RpcError> {
        Request::from_parts("gateway.hello", params)
    }

    #[test]
    fn a_bounded_description_is_accepted() {
        let r = hello(json!({"name":"ann","device":"phone","app":"web",
            "instance":"i-1","meta":{"k":[1,2]}}))
        .unwrap();
        let Request::GatewayHello(info) = r else {
            panic!("not a hello: {r:?}")
        };
        assert_eq!(info.name.as_deref(), Some("ann"));
        assert_eq!(
            hello(json!({})).unwrap(),
            Request::GatewayHello(ClientInfo::default())
        );
    }

    #[test]
    fn oversized_or_odd_fields_name_themselves() {
        let long = "x".repeat(MAX_LABEL_BYTES + 1);
        let field = |params| hello(params).unwrap_err().field().map(str::to_owned);
        assert_eq!(field(json!({"name": long})).as_deref(), Some("name"));
        assert_eq!(field(json!({"device":"a\nb"})).as_deref(), Some("device"));
        let inst = "i".repeat(MAX_INSTANCE_BYTES + 1);
        assert_eq!(
            field(json!({"instance": inst})).as_deref(),
            Some("instance")
        );
        let big = "m".repeat(MAX_META_BYTES);
        assert_eq!(field(json!({"meta":{"b": big}})).as_deref(), Some("meta"));
        assert_eq!(field(json!({"meta":[1]})).as_deref(), Some("meta"));
        assert_eq!(field(json!({"app":"a\u{0}"})).as_deref(), Some("app"));
    }
}
