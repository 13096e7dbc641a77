//! Presence: who is attached to the session (here, and on a cluster on the
//! other nodes too, `presence_remote.rs`), answered by `session.presence`,
//! and the transient `presence.joined` / `presence.left` events that tell
//! the attached peers who came and went.
//!
//! The events are a diff, not a log: the session remembers what its peers
//! were last told (`announced`) and, at most once per [`WINDOW`], compares
//! it with who is attached now, sending one `presence.left` and one
//! `presence.joined` frame with every entry that changed. So a storm of
//! any size costs each peer at most two presence frames per window, a peer
//! that left and came back inside one window costs nothing, and the frames
//! never hold more entries than the session has peers. The first change
//! after a quiet window goes out at once.
//!
//! A reconnect is recognised by the peer's `instance` (`gateway.hello`):
//! an entry with an instance that disappears is kept as announced for
//! [`GRACE`]; an entry of the same profile and instance that appears
//! meanwhile (on any node, or even before the old one is gone) replaces it
//! silently, and only an entry not replaced by then is announced as left. A peer without an instance
//! cannot be told from a newcomer, so its leave goes out with the next
//! window.
//!
//! Nothing here is stored or replayed, and the frames take no seq. They go
//! only to the peers that sent `gateway.hello`: a client that does not know
//! presence is not sent frames it does not expect.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ractor::{ActorRef, RpcReplyPort};
use tether_protocol::{
    encode_event_frame, encode_event_params, format_ts, now_ms, to_raw, EventParams, EventType,
    PeerId, PresenceEntry, PresencePayload, PresenceResult, RpcError,
};
use tracing::debug;

use super::{SessionMsg, SessionState};
use crate::outbox::FrameClass;

/// At most one `presence.joined` and one `presence.left` frame per window.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);
/// How long a peer with an `instance` may be gone before its leave is told.
pub(crate) const GRACE: Duration = Duration::from_secs(5);

type Entries = BTreeMap<PeerId, Arc<PresenceEntry>>;

/// The session's presence bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Presence {
    /// What the peers were last told: the baseline of the next diff.
    announced: Entries,
    /// Announced entries gone from the attached set but inside their grace,
    /// since when they are gone.
    lingering: HashMap<PeerId, Instant>,
    /// The other nodes' peers, as last read (`presence_remote.rs`).
    pub(super) remote: Entries,
    /// When the last presence frame went out.
    last_sent: Option<Instant>,
    /// A `PresenceFlush` is due then.
    flush_at: Option<Instant>,
    /// The peers attached here changed since the last tick.
    local_changed: bool,
    /// Who is attached (here or elsewhere) changed since the last flush.
    changed: bool,
    /// On a cluster: a read of the other nodes' presence is in flight, and
    /// whether another was asked for meanwhile.
    pub(super) reading: bool,
    pub(super) read_again: bool,
}

impl Presence {
    /// A peer attached here or left.
    pub(super) fn local_changed(&mut self) {
        self.local_changed = true;
        self.changed = true;
    }

    /// The other nodes' peers changed.
    pub(super) fn remote_changed(&mut self, remote: Entries) {
        if remote != self.remote {
            self.remote = remote;
            self.changed = true;
        }
    }
}

/// What identifies one client object across its connections.
fn instance_of(e: &PresenceEntry) -> Option<(&str, &str)> {
    let instance = e.client.as_ref()?.instance.as_deref()?;
    Some((e.profile.as_str(), instance))
}

impl SessionState {
    /// The peers attached here, by peer id.
    pub(super) fn local_presence(&self) -> Entries {
        self.peers
            .iter()
            .map(|(id, slot)| (id.clone(), slot.presence.clone()))
            .collect()
    }

    /// Who is attached now, here and on the other nodes as last read.
    fn presence_now(&self) -> Entries {
        let mut all = self.presence.remote.clone();
        all.extend(self.local_presence());
        all
    }

    /// After every message: a change is published (on a cluster) and its
    /// flush scheduled.
    pub(super) fn presence_tick(&mut self, myself: &ActorRef<SessionMsg>) {
        if std::mem::take(&mut self.presence.local_changed) {
            self.publish_presence(myself);
        }
        if self.presence.changed {
            self.schedule_presence_flush(myself, Instant::now());
        }
    }

    /// Makes sure a flush comes at `due` or earlier (never before a window
    /// has passed since the last frame).
    fn schedule_presence_flush(&mut self, myself: &ActorRef<SessionMsg>, due: Instant) {
        let now = Instant::now();
        let window_end = self.presence.last_sent.map_or(now, |t| t + WINDOW);
        let due = due.max(window_end).max(now);
        if self.presence.flush_at.is_some_and(|at| at <= due) {
            return;
        }
        self.presence.flush_at = Some(due);
        let wait = due - now;
        if wait.is_zero() {
            let _ = myself.cast(SessionMsg::PresenceFlush);
        } else {
            myself.send_after(wait, || SessionMsg::PresenceFlush);
        }
    }

    /// `SessionMsg::PresenceFlush`: tells the peers the diff since the last
    /// frame, at most one frame of each kind.
    pub(super) fn presence_flush(&mut self, myself: &ActorRef<SessionMsg>) {
        let now = Instant::now();
        match self.presence.flush_at {
            // An earlier schedule's message; a later one is coming.
            Some(at) if at > now => return,
            _ => self.presence.flush_at = None,
        }
        if let Some(t) = self.presence.last_sent {
            if now < t + WINDOW {
                self.schedule_presence_flush(myself, t + WINDOW);
                return;
            }
        }
        self.presence.changed = false;
        let current = self.presence_now();
        let (left, joined, next) = diff(&mut self.presence, current, now);
        if !left.is_empty() || !joined.is_empty() {
            debug!(session_id = %self.id, joined = joined.len(), left = left.len(), "presence");
            self.presence.last_sent = Some(now);
        }
        if !left.is_empty() {
            self.send_presence(EventType::PresenceLeft, left);
        }
        if !joined.is_empty() {
            self.send_presence(EventType::PresenceJoined, joined);
        }
        if let Some(next) = next {
            self.schedule_presence_flush(myself, next);
        }
    }

    fn send_presence(&mut self, kind: EventType, peers: Vec<Arc<PresenceEntry>>) {
        let payload = PresencePayload {
            peers: peers.iter().map(|e| PresenceEntry::clone(e)).collect(),
        };
        let payload = to_raw(&payload);
        let ts = format_ts(now_ms());
        let params = encode_event_params(&EventParams {
            kind,
            session_id: Some(&self.id),
            seq: None,
            turn_id: None,
            trace_id: None,
            ts: &ts,
            payload: &payload,
        });
        let frame = Bytes::from(encode_event_frame(&params));
        // Only to the peers that said hello: a client that does not know
        // presence is not sent frames it does not expect.
        self.fan_out_to(&frame, FrameClass::Transient, |slot| {
            slot.presence.client.is_some()
        });
    }

    /// `session.presence`: the peers here, and on a cluster those every
    /// other live node wrote, read afresh on a task.
    pub(super) fn presence_answer(&self, reply: RpcReplyPort<Result<PresenceResult, RpcError>>) {
        let mut peers = self.local_presence();
        let session_id = self.id.clone();
        let Some(cluster) = self.ctx.cluster.clone() else {
            let _ = reply.send(Ok(result(session_id, peers)));
            return;
        };
        tokio::spawn(async move {
            let answer = match super::presence_remote::read_remote(&cluster, &session_id).await {
                Ok(remote) => {
                    for (id, e) in remote {
                        peers.entry(id).or_insert(e);
                    }
                    Ok(result(session_id, peers))
                }
                Err(e) => Err(RpcError::storage_unavailable(e.to_string())),
            };
            let _ = reply.send(answer);
        });
    }
}

fn result(session_id: tether_protocol::SessionId, peers: Entries) -> PresenceResult {
    PresenceResult {
        session_id,
        peers: peers
            .into_values()
            .map(|e| PresenceEntry::clone(&e))
            .collect(),
    }
}

/// Compares what was announced with `current`: the entries to tell as
/// left and as joined, and when a lingering entry's grace ends (the next
/// flush needed). `announced` becomes `current` plus the lingering entries.
///
/// An entry whose profile and instance were already announced is the same
/// client object on a new connection, whichever of its old entry's leave
/// and its new entry's join is seen first: it is not told, and the old
/// entry leaves silently once it is gone.
fn diff(
    p: &mut Presence,
    current: Entries,
    now: Instant,
) -> (
    Vec<Arc<PresenceEntry>>,
    Vec<Arc<PresenceEntry>>,
    Option<Instant>,
) {
    let keys = |entries: &Entries| -> HashSet<(String, String)> {
        entries
            .values()
            .filter_map(|e| instance_of(e))
            .map(|(profile, instance)| (profile.to_owned(), instance.to_owned()))
            .collect()
    };
    let was = keys(&p.announced);
    let is = keys(&current);
    let known = |e: &PresenceEntry| {
        instance_of(e).is_some_and(|(a, b)| was.contains(&(a.to_owned(), b.to_owned())))
    };
    let joined: Vec<Arc<PresenceEntry>> = current
        .iter()
        .filter(|(id, e)| !p.announced.contains_key(*id) && !known(e))
        .map(|(_, e)| e.clone())
        .collect();
    let gone: Vec<PeerId> = p
        .announced
        .keys()
        .filter(|id| !current.contains_key(*id))
        .cloned()
        .collect();
    let mut left = Vec::new();
    let mut next: Option<Instant> = None;
    for id in gone {
        let Some(entry) = p.announced.get(&id).cloned() else {
            continue;
        };
        let Some((profile, instance)) = instance_of(&entry) else {
            p.announced.remove(&id);
            left.push(entry);
            continue;
        };
        if is.contains(&(profile.to_owned(), instance.to_owned())) {
            // Back under another peer id: a reconnect, told to nobody.
            p.announced.remove(&id);
            p.lingering.remove(&id);
            continue;
        }
        let since = *p.lingering.entry(id.clone()).or_insert(now);
        if now.duration_since(since) < GRACE {
            let end = since + GRACE;
            next = Some(next.map_or(end, |n| n.min(end)));
            continue;
        }
        p.lingering.remove(&id);
        p.announced.remove(&id);
        left.push(entry);
    }
    // An entry seen again under its own peer id is no longer lingering.
    p.lingering.retain(|id, _| !current.contains_key(id));
    for (id, e) in current {
        p.announced.insert(id, e);
    }
    (left, joined, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::{ClientInfo, PeerTransport};

    fn entry(peer: &str, instance: Option<&str>) -> (PeerId, Arc<PresenceEntry>) {
        let id = PeerId::from(peer);
        let e = PresenceEntry {
            peer_id: id.clone(),
            profile: "default".into(),
            client: instance.map(|i| ClientInfo {
                instance: Some(i.into()),
                ..ClientInfo::default()
            }),
            transport: PeerTransport::WebSocket,
            node: None,
            attached_at: "2026-01-01T00:00:00.000Z".into(),
        };
        (id, Arc::new(e))
    }

    fn ids(v: &[Arc<PresenceEntry>]) -> Vec<&str> {
        v.iter().map(|e| e.peer_id.as_str()).collect()
    }

    #[test]
    fn joins_and_leaves_are_a_diff_and_reconnects_fold() {
        let mut p = Presence::default();
        let t0 = Instant::now();
        let cur: Entries = [entry("p_a", Some("ia")), entry("p_b", None)].into();
        let (left, joined, next) = diff(&mut p, cur, t0);
        assert!(left.is_empty());
        assert_eq!(ids(&joined), ["p_a", "p_b"]);
        assert_eq!(next, None);

        // p_a reconnects as p_a2 (same instance), p_b leaves, p_c comes and goes.
        let cur: Entries = [entry("p_a2", Some("ia"))].into();
        let (left, joined, next) = diff(&mut p, cur.clone(), t0 + WINDOW);
        assert_eq!(ids(&left), ["p_b"], "no instance: told at once");
        assert!(
            joined.is_empty(),
            "a reconnect is no join: {:?}",
            ids(&joined)
        );
        assert_eq!(next, None);

        // p_a2 drops: kept for the grace, then told.
        let (left, joined, next) = diff(&mut p, Entries::new(), t0 + 2 * WINDOW);
        assert!(left.is_empty() && joined.is_empty());
        assert_eq!(next, Some(t0 + 2 * WINDOW + GRACE));
        let (left, _, next) = diff(&mut p, Entries::new(), t0 + 2 * WINDOW + GRACE);
        assert_eq!(ids(&left), ["p_a2"]);
        assert_eq!(next, None);
        assert!(p.announced.is_empty() && p.lingering.is_empty());
    }

    #[test]
    fn a_return_inside_the_grace_is_silent() {
        let mut p = Presence::default();
        let t0 = Instant::now();
        let _ = diff(&mut p, [entry("p_1", Some("i"))].into(), t0);
        let (l, j, _) = diff(&mut p, Entries::new(), t0 + WINDOW);
        assert!(l.is_empty() && j.is_empty());
        let (l, j, next) = diff(&mut p, [entry("p_2", Some("i"))].into(), t0 + 2 * WINDOW);
        assert!(l.is_empty() && j.is_empty(), "{:?} {:?}", ids(&l), ids(&j));
        assert_eq!(next, None);
        assert!(p.lingering.is_empty());
        assert_eq!(p.announced.len(), 1);
    }

    #[test]
    fn a_return_seen_before_the_leave_is_silent_too() {
        let mut p = Presence::default();
        let t0 = Instant::now();
        let _ = diff(&mut p, [entry("p_1", Some("i"))].into(), t0);
        // The new connection attached before the old one's detach arrived.
        let both: Entries = [entry("p_1", Some("i")), entry("p_2", Some("i"))].into();
        let (l, j, _) = diff(&mut p, both, t0 + WINDOW);
        assert!(l.is_empty() && j.is_empty(), "{:?} {:?}", ids(&l), ids(&j));
        let (l, j, next) = diff(&mut p, [entry("p_2", Some("i"))].into(), t0 + 2 * WINDOW);
        assert!(l.is_empty() && j.is_empty(), "{:?} {:?}", ids(&l), ids(&j));
        assert_eq!(next, None);
        assert_eq!(p.announced.len(), 1);
    }
}
