//! The monkey: kills a random actor (or host process) every few hundred
//! milliseconds with `ActorRef::kill`, which skips `post_stop`, as a panic
//! or an abort would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tether_actors::hooks::{core_actor, host_stats, Child, LiveSession};
use tether_protocol::SessionId;

use super::{Harness, Rng, Shared};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Session,
    Peer,
    HostProcess,
    HostActor,
    HostSupervisor,
    Reaper,
    StoreWriter,
    Registry,
}

/// Relative odds of each kind: the leaves often, the core now and then.
const ODDS: &[(Kind, u64)] = &[
    (Kind::Session, 6),
    (Kind::Peer, 6),
    (Kind::HostProcess, 4),
    (Kind::HostActor, 2),
    (Kind::HostSupervisor, 1),
    (Kind::Reaper, 2),
    (Kind::StoreWriter, 2),
    (Kind::Registry, 1),
];

/// What the monkey did.
#[derive(Default, Debug)]
pub struct Report {
    pub kills: BTreeMap<Kind, u32>,
    /// Every host pid seen, to check none outlives the gateway.
    pub host_pids: BTreeSet<u32>,
}

/// Kills until `shared.stop`, one victim every 100–400 ms.
pub async fn run(
    h: Arc<Harness>,
    shared: Arc<Shared>,
    sessions: Vec<SessionId>,
    mut rng: Rng,
) -> Report {
    let mut report = Report::default();
    let total: u64 = ODDS.iter().map(|(_, w)| w).sum();
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        note_hosts(&h, &mut report).await;
        let mut roll = rng.below(total);
        let kind = ODDS
            .iter()
            .find(|(_, w)| {
                if roll < *w {
                    true
                } else {
                    roll -= w;
                    false
                }
            })
            .map_or(Kind::Session, |(k, _)| *k);
        if strike(&h, &shared, &sessions, kind, &mut rng, &report).await {
            *report.kills.entry(kind).or_default() += 1;
        }
    }
    note_hosts(&h, &mut report).await;
    report
}

async fn note_hosts(h: &Harness, report: &mut Report) {
    if let Some(stats) = host_stats(h.gw.ctx(), Duration::from_secs(2)).await {
        report.host_pids.extend(stats.iter().filter_map(|s| s.pid));
    }
}

/// Kills one victim of `kind`; whether there was one.
async fn strike(
    h: &Harness,
    shared: &Shared,
    sessions: &[SessionId],
    kind: Kind,
    rng: &mut Rng,
    report: &Report,
) -> bool {
    let ctx = h.gw.ctx();
    match kind {
        Kind::Session => {
            let id = &sessions[rng.below(sessions.len() as u64) as usize];
            match LiveSession::find(ctx, id).await {
                Ok(Some(live)) => {
                    live.kill();
                    true
                }
                _ => false,
            }
        }
        Kind::Peer => {
            let peers = shared.peers.lock().unwrap().clone();
            let live: Vec<_> = peers.into_iter().flatten().collect();
            if live.is_empty() {
                return false;
            }
            live[rng.below(live.len() as u64) as usize].kill();
            true
        }
        Kind::HostProcess => {
            let pids: Vec<u32> = report
                .host_pids
                .iter()
                .copied()
                .filter(|p| super::alive(*p))
                .collect();
            if pids.is_empty() {
                return false;
            }
            let pid = pids[rng.below(pids.len() as u64) as usize];
            std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        }
        Kind::HostActor => {
            let Some(hosts) = core_actor(ctx, Child::HostSupervisor) else {
                return false;
            };
            let children = hosts.get_children();
            if children.is_empty() {
                return false;
            }
            children[rng.below(children.len() as u64) as usize].kill();
            true
        }
        Kind::HostSupervisor => kill_core(ctx, Child::HostSupervisor),
        Kind::Reaper => kill_core(ctx, Child::Reaper),
        Kind::StoreWriter => kill_core(ctx, Child::StoreWriter),
        Kind::Registry => kill_core(ctx, Child::Registry),
    }
}

/// Kills the current actor of a core child; whether one was up.
fn kill_core(ctx: &tether_actors::Ctx, child: Child) -> bool {
    core_actor(ctx, child).map(|a| a.kill()).is_some()
}
