//! What the registry asks of (or tells) every live session at once: the
//! stats of a profile, peer counts for listings, the drain's end of turns,
//! the drain's flush, the news of a restarted core actor. Each runs on a task
//! with a bound per session, so the registry never waits on its sessions and
//! a stuck session cannot hold the others' answer for ever.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ractor::RpcReplyPort;
use tether_protocol::{RingStats, SessionId, StatsResult};

use super::RegistryState;
use crate::session::SessionMsg;

/// The longest the registry waits for one session's drain or flush: the
/// whole SIGTERM drain may take 10 s, and its caller bounds it below that.
const FLEET_WAIT: Duration = Duration::from_secs(10);

impl RegistryState {
    /// Peers attached to each of `ids` that is live (for listings).
    pub(super) fn peer_counts(
        &self,
        profile: &str,
        ids: Vec<SessionId>,
        reply: RpcReplyPort<HashMap<SessionId, u32>>,
    ) {
        let counts = ids
            .into_iter()
            .filter_map(|id| {
                let live = self.live.get(&(profile.to_string(), id.clone()))?;
                // A session parking right now is as good as parked.
                (!live.gauges.parked()).then(|| (id, live.gauges.peers()))
            })
            .collect();
        let _ = reply.send(counts);
    }

    pub(super) fn peer_up(&mut self, profile: String) {
        *self.peers_by_profile.entry(profile).or_default() += 1;
    }

    pub(super) fn peer_down(&mut self, profile: &str) {
        if let Some(n) = self.peers_by_profile.get_mut(profile) {
            *n = n.saturating_sub(1);
        }
    }

    /// Tells every live session the same news (a core actor restarted).
    pub(super) fn tell_all(&self, msg: impl Fn() -> SessionMsg) {
        for live in self.live.values() {
            let _ = live.actor.cast(msg());
        }
    }

    /// Counts from the gauges; running turns and hosts are asked for on a
    /// task so the registry does not wait on sessions or the supervisor.
    /// Everything but the hosts' pids and states (and the process-wide
    /// outbox counters) is of `profile` alone.
    pub(super) fn stats(&self, profile: &str, reply: RpcReplyPort<StatsResult>) {
        let mut ring = RingStats {
            sessions: 0,
            events: 0,
            bytes: 0,
        };
        let mut sessions_live = 0;
        let mut running = Vec::new();
        for (key, live) in &self.live {
            if key.0 != profile {
                continue;
            }
            // A session on its way to being parked is not counted
            // (`bound.rs`).
            if self.counted(key) {
                sessions_live += 1;
            }
            let events = live.gauges.ring_events.load(Ordering::Relaxed);
            if events > 0 {
                ring.sessions += 1;
            }
            ring.events += events;
            ring.bytes += live.gauges.ring_bytes.load(Ordering::Relaxed);
            if live.gauges.running() {
                running.push(live.actor.clone());
            }
        }
        let mut result = StatsResult {
            sessions_live,
            peers: self.peers_by_profile.get(profile).copied().unwrap_or(0),
            ring,
            active_turns: Vec::new(),
            hosts: Vec::new(),
            // Process-wide, unlike the rest: outboxes belong to no profile.
            outbox: self.ctx.outbox_metrics.snapshot(),
            node_id: self.ctx.cluster.as_ref().map(|c| c.node_id().to_string()),
        };
        let hosts = self.ctx.hosts();
        tokio::spawn(async move {
            let wait = Some(Duration::from_secs(2));
            for actor in running {
                if let Ok(ractor::rpc::CallResult::Success(Some(turn))) = actor
                    .call(|reply| SessionMsg::ActiveTurn { reply }, wait)
                    .await
                {
                    result.active_turns.push(turn);
                }
            }
            if let Some(hosts) = hosts {
                if let Ok(ractor::rpc::CallResult::Success(h)) = hosts
                    .call(
                        |reply| crate::host_supervisor::HostSupervisorMsg::Hosts { reply },
                        wait,
                    )
                    .await
                {
                    result.hosts = h;
                }
            }
            // Every profile may see that the hosts are there (pid, state,
            // restarts), but not how busy other profiles keep them: a
            // host's count is of the caller's turns only.
            for host in &mut result.hosts {
                host.active_turns = result
                    .active_turns
                    .iter()
                    .filter(|t| t.host_id == host.host_id)
                    .count() as u32;
            }
            let _ = reply.send(result);
        });
    }

    /// The gateway drains: every live session ends its turns (`Drain`).
    /// Answered once each has committed and fanned out those endings, or
    /// has not within `FLEET_WAIT`; the caller bounds its own wait too.
    pub(super) fn drain_all(&self, reply: RpcReplyPort<()>) {
        let actors: Vec<_> = self.live.values().map(|l| l.actor.clone()).collect();
        tokio::spawn(async move {
            // At once, not one after another: each waits for its commit,
            // and the writer batches them together.
            let drains = actors.iter().map(|actor| {
                actor.call(|port| SessionMsg::Drain { reply: port }, Some(FLEET_WAIT))
            });
            futures::future::join_all(drains).await;
            let _ = reply.send(());
        });
    }

    /// Answered once every live session has committed what it emitted (or
    /// has not within `FLEET_WAIT`).
    pub(super) fn flush_all(&self, reply: RpcReplyPort<()>) {
        let actors: Vec<_> = self.live.values().map(|l| l.actor.clone()).collect();
        tokio::spawn(async move {
            // At once, as `drain_all`: one stuck session then costs the
            // bound once, not once per session after it.
            let flushes = actors.iter().map(|actor| {
                actor.call(|port| SessionMsg::Flush { reply: port }, Some(FLEET_WAIT))
            });
            futures::future::join_all(flushes).await;
            let _ = reply.send(());
        });
    }
}
