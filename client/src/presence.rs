//! What `tether attach` says of presence: it describes itself
//! (`gateway.hello`) on every connection with the same `instance`, so that
//! its own reconnects are not announced to the other peers, and prints a
//! line on stderr when someone else joins or leaves.

use serde_json::{json, Value};
use tether_protocol::{PresenceEntry, PresencePayload};

use super::conn::{ClientError, Conn, Event};
use super::view::{bracket, clip};

/// Who this `tether attach` process is, the same on every connection.
pub struct Me {
    instance: String,
    /// The current connection's peer id (its own join is not printed).
    pub peer_id: Option<String>,
}

impl Me {
    pub fn new() -> Me {
        Me {
            instance: format!("attach-{}", tether_protocol::PeerId::new().as_str()),
            peer_id: None,
        }
    }

    /// Says who we are on a fresh connection. A gateway that does not know
    /// the method (-32601) is left alone: presence is not essential.
    pub async fn hello(&mut self, conn: &mut Conn) -> Result<(), ClientError> {
        let mut params = json!({"app": "tether attach", "instance": self.instance});
        if let Some(user) = std::env::var("USER").ok().filter(|u| !u.is_empty()) {
            params["name"] = Value::String(clip(&user, 100));
        }
        match conn.call::<Value>("gateway.hello", params).await {
            Ok(answer) => {
                self.peer_id = answer["peer_id"].as_str().map(str::to_owned);
                Ok(())
            }
            Err(e) if e.rpc_code() == Some(tether_protocol::codes::METHOD_NOT_FOUND) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The lines a presence event prints (none for other events, or for
    /// our own join).
    pub fn lines(&self, e: &Event, styled: bool) -> Option<Vec<String>> {
        let verb = match e.kind.as_str() {
            "presence.joined" => "joined",
            "presence.left" => "left",
            _ => return None,
        };
        let payload: PresencePayload = serde_json::from_value(e.payload.clone()).ok()?;
        Some(
            payload
                .peers
                .iter()
                .filter(|p| Some(p.peer_id.as_str()) != self.peer_id.as_deref())
                .map(|p| bracket(&format!("{} {verb}", who(p)), styled))
                .collect(),
        )
    }
}

/// "ann (laptop, web)", or the peer id when it said nothing.
fn who(p: &PresenceEntry) -> String {
    let client = p.client.clone().unwrap_or_default();
    let name = client
        .name
        .map_or_else(|| p.peer_id.as_str().to_owned(), |n| clip(&n, 40));
    let about: Vec<String> = [client.device, client.app]
        .into_iter()
        .flatten()
        .map(|s| clip(&s, 30))
        .collect();
    if about.is_empty() {
        name
    } else {
        format!("{name} ({})", about.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, peers: Value) -> Event {
        serde_json::from_value(json!({"type": kind, "payload": {"peers": peers}})).unwrap()
    }

    #[test]
    fn joins_and_leaves_print_one_line_each_but_not_our_own() {
        let me = Me {
            instance: "i".into(),
            peer_id: Some("p_me".into()),
        };
        let entry = |id: &str, client: Value| {
            json!({"peer_id": id, "profile": "default", "client": client,
                   "transport": "ws", "node": null, "attached_at": "t"})
        };
        let e = event(
            "presence.joined",
            json!([
                entry("p_me", json!({"name":"me"})),
                entry("p_1", json!({"name":"ann","device":"phone","app":"web"})),
                entry("p_2", Value::Null)
            ]),
        );
        assert_eq!(
            me.lines(&e, false).unwrap(),
            ["[ann (phone, web) joined]", "[p_2 joined]"]
        );
        let e = event(
            "presence.left",
            json!([entry("p_1", json!({"name":"ann"}))]),
        );
        assert_eq!(me.lines(&e, false).unwrap(), ["[ann left]"]);
        assert!(me
            .lines(&event("message.delta", json!([])), false)
            .is_none());
    }
}
