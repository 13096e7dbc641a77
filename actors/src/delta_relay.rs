//! Deltas of owned sessions to the other nodes (a cluster; transient
//! events cross nodes best effort, unstored: docs/ARCHITECTURE.md "Followers").
//!
//! A session that has peers on another node offers each transient event
//! here as it emits it, with the seq of the last durable event emitted
//! before it; the follower holds it until it has relayed that seq, so a
//! delta never overtakes the stored events it followed. One task per node
//! gathers what was offered, groups it by session into bodies that fit a
//! notification, and sends them in one statement (`Cluster::send_deltas`):
//! one round trip per batch, whatever the number of sessions. The queue is
//! bounded; what does not fit is dropped (and counted in the log): a
//! follower's clients miss some streaming, never a stored event, and the
//! `message.complete` carries the whole text.

use std::collections::HashMap;

use tether_protocol::SessionId;
use tether_store::cluster::{Cluster, MAX_DELTA_BODY};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::event::EventRecord;

/// Transient events waiting to be sent, at most (one notification each at
/// the least, so a few hundred kilobytes).
const QUEUE: usize = 4096;
/// Events gathered into one batch at most.
const BATCH: usize = 1024;

/// One offered event: its session, the durable seq it follows, and the
/// event, encoded (`EventRecord::to_forward`) only on the relay's task so
/// that the session's handler pays for a clone, not an encoding.
struct Offered {
    session_id: SessionId,
    after: u64,
    event: EventRecord,
}

/// The sending side, cloned into every session's context.
#[derive(Clone)]
pub(crate) struct DeltaRelay {
    tx: mpsc::Sender<Offered>,
}

impl std::fmt::Debug for DeltaRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaRelay").finish_non_exhaustive()
    }
}

impl DeltaRelay {
    /// Starts the node's sending task.
    pub(crate) fn start(cluster: Cluster) -> DeltaRelay {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(send_loop(cluster, rx));
        DeltaRelay { tx }
    }

    /// Offers `rec` (a transient event of `session_id`, emitted after the
    /// durable event `after`); never waits.
    pub(crate) fn offer(&self, session_id: &SessionId, after: u64, rec: &EventRecord) {
        let offered = Offered {
            session_id: session_id.clone(),
            after,
            event: rec.clone(),
        };
        if let Err(mpsc::error::TrySendError::Full(o)) = self.tx.try_send(offered) {
            debug!(session_id = %o.session_id, "delta relay full; a delta does not cross nodes");
        }
    }
}

async fn send_loop(cluster: Cluster, mut rx: mpsc::Receiver<Offered>) {
    let mut batch = Vec::with_capacity(BATCH);
    // While one batch is being sent, the next gathers in the channel.
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let bodies = bodies(std::mem::take(&mut batch));
        if let Err(e) = cluster.send_deltas(&bodies).await {
            warn!(node_id = %cluster.node_id(), error = %e, dropped = bodies.len(), "could not send deltas to other nodes");
        }
    }
}

/// Groups events by session, in order, into bodies of at most
/// `MAX_DELTA_BODY` bytes: `{"after": N, "events": [...]}`, a new body
/// whenever `after` changes or the next event would not fit. An event too
/// large for any body is left out.
fn bodies(offered: Vec<Offered>) -> Vec<(SessionId, String)> {
    let mut by_session: HashMap<SessionId, Vec<(u64, String)>> = HashMap::new();
    let mut order = Vec::new();
    for o in offered {
        let entry = by_session.entry(o.session_id.clone()).or_insert_with(|| {
            order.push(o.session_id.clone());
            Vec::new()
        });
        entry.push((o.after, o.event.to_forward().to_string()));
    }
    let mut out = Vec::new();
    for session in order {
        let Some(events) = by_session.remove(&session) else {
            continue;
        };
        let mut open: Option<(u64, String)> = None;
        for (after, event) in events {
            let head = format!(r#"{{"after":{after},"events":["#);
            if head.len() + event.len() + 2 > MAX_DELTA_BODY {
                continue;
            }
            match &mut open {
                Some((a, body))
                    if *a == after && body.len() + event.len() + 3 <= MAX_DELTA_BODY =>
                {
                    body.push(',');
                    body.push_str(&event);
                }
                _ => {
                    if let Some((_, body)) = open.take() {
                        out.push((session.clone(), body + "]}"));
                    }
                    open = Some((after, head + &event));
                }
            }
        }
        if let Some((_, body)) = open {
            out.push((session.clone(), body + "]}"));
        }
    }
    out
}

/// What a follower makes of a body: the durable seq the events follow and
/// the events; `None` for anything else.
pub(crate) fn parse_body(body: &str) -> Option<(u64, Vec<EventRecord>)> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let after = v.get("after")?.as_u64()?;
    let events = v
        .get("events")?
        .as_array()?
        .iter()
        .map(EventRecord::from_forward)
        .collect::<Option<Vec<_>>>()?;
    Some((after, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::TurnTag;
    use tether_protocol::{EventType, TraceId, TurnId};

    fn delta(text: &str, offset: u64) -> EventRecord {
        EventRecord::new(
            EventType::MessageDelta,
            &serde_json::json!({"text": text, "offset": offset}),
            Some(TurnTag {
                turn_id: TurnId::from("t_1"),
                trace_id: TraceId::from("tr"),
            }),
            1,
        )
    }

    fn offered(session: &str, after: u64, rec: &EventRecord) -> Offered {
        Offered {
            session_id: SessionId::from(session),
            after,
            event: rec.clone(),
        }
    }

    #[test]
    fn bodies_group_by_session_and_watermark_and_fit_a_notification() {
        let big = "x".repeat(MAX_DELTA_BODY / 3);
        let offered = vec![
            offered("s_a", 3, &delta("a", 0)),
            offered("s_b", 7, &delta("b", 0)),
            offered("s_a", 3, &delta("c", 1)),
            offered("s_a", 4, &delta("d", 2)),
            offered("s_a", 4, &delta(&big, 3)),
            offered("s_a", 4, &delta(&big, 3 + big.len() as u64)),
            offered("s_a", 4, &delta(&big, 3 + 2 * big.len() as u64)),
            offered("s_a", 4, &delta(&"y".repeat(MAX_DELTA_BODY), 0)),
        ];
        let out = bodies(offered);
        assert!(out.iter().all(|(_, b)| b.len() <= MAX_DELTA_BODY));
        let parsed: Vec<(&str, u64, Vec<String>)> = out
            .iter()
            .map(|(s, b)| {
                let (after, events) = parse_body(b).expect("parses");
                let texts = events
                    .iter()
                    .map(|e| {
                        let v: serde_json::Value =
                            serde_json::from_str(e.payload.get()).expect("payload");
                        v["text"].as_str().expect("text").chars().take(1).collect()
                    })
                    .collect();
                (s.as_str(), after, texts)
            })
            .collect();
        let s = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parsed,
            vec![
                ("s_a", 3, s(&["a", "c"])),
                ("s_a", 4, s(&["d", "x", "x"])),
                ("s_a", 4, s(&["x"])),
                ("s_b", 7, s(&["b"])),
            ]
        );
    }
}
