//! In-process chaos: a gateway with real compute-host processes
//! under load (several sessions, several clients each, turns streaming,
//! clients reconnecting with their watermarks) while a monkey kills its
//! actors at random: sessions, peers, host processes and Host actors, the
//! HostSupervisor, the Reaper, the StoreWriter and the Registry. Then the
//! invariants: every client holds exactly 1..latest, every accepted turn
//! ended exactly once, the store is contiguous, a fresh turn works, and no
//! host process outlives the gateway.
//!
//! `TETHER_CHAOS_SECS` (default 15) and `TETHER_CHAOS_SEED` set the run;
//! the seed is printed so a failure replays.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod chaos;
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chaos::{monkey, Rng, Shared};
use common::Backend;
use tether_actors::hooks::{core_actor, host_stats, Child};
use tether_actors::{AfterIntensity, Backoff, RestartPolicy, Strategy};

const SESSIONS: usize = 6;
const CLIENTS_PER_SESSION: usize = 3;

async fn killing_actors_at_random_loses_nothing_and_leaves_nothing_stuck(b: Backend) {
    chaos::logs();
    let seed = chaos::seed();
    let secs = chaos::duration(15);
    println!(
        "chaos seed {seed} for {} s (TETHER_CHAOS_SEED / TETHER_CHAOS_SECS)",
        secs.as_secs()
    );
    let mut rng = Rng::new(seed);
    let server = match &b {
        Backend::Sqlite => None,
        Backend::Postgres(server) => Some(server.as_str()),
    };
    let h = Arc::new(chaos::start_on(server, 2, 3, None).await);
    let ids = chaos::sessions(&h, SESSIONS).await;
    let shared = Shared::new(SESSIONS * CLIENTS_PER_SESSION);

    let mut clients = Vec::new();
    for (s, id) in ids.iter().enumerate() {
        for c in 0..CLIENTS_PER_SESSION {
            let index = s * CLIENTS_PER_SESSION + c;
            let task = chaos::client(
                h.clone(),
                shared.clone(),
                index,
                id.clone(),
                c == 0,
                Rng::new(rng.next()),
            );
            clients.push((id.clone(), tokio::spawn(task)));
        }
    }
    let monkey = tokio::spawn(monkey::run(
        h.clone(),
        shared.clone(),
        ids.clone(),
        Rng::new(rng.next()),
    ));

    tokio::time::sleep(secs).await;
    shared.stop.store(true, Ordering::Relaxed);
    let report = monkey.await.expect("monkey");

    // Every driver ends its last turn and every client catches up: bounded,
    // so a turn left spinning fails the test instead of hanging it.
    let mut held = Vec::new();
    for (id, task) in clients {
        let seqs = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .unwrap_or_else(|_| {
                panic!("seed {seed}: a client of {id} never finished (a turn stuck?)")
            })
            .expect("client task");
        held.push((id, seqs));
    }
    held.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    // Clients stopped on their own clock: the last events of a session may
    // have landed after a client left. Catch each one up from its watermark,
    // exactly as a reconnecting client would.
    for (id, seqs) in &mut held {
        chaos::catch_up(&h, id, seqs).await;
    }
    let problems = chaos::check_store(&h, &shared, &held).await;
    let fresh = chaos::check_fresh_turn(&h).await;

    let counts = &shared.counts;
    println!(
        "chaos seed {seed}: kills {:?}; turns accepted {}; compressions {}; events delivered {}; reconnects {}; \
         prompts sent while a turn ran {}; duplicates {}",
        report.kills,
        counts.turns_accepted.load(Ordering::Relaxed),
        counts.compressions.load(Ordering::Relaxed),
        counts.events_seen.load(Ordering::Relaxed),
        counts.reconnects.load(Ordering::Relaxed),
        counts.second_prompts.load(Ordering::Relaxed),
        counts.duplicates.load(Ordering::Relaxed),
    );
    assert!(problems.is_empty(), "seed {seed}: {problems:#?}");
    fresh.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert!(
        counts.turns_accepted.load(Ordering::Relaxed) > 0,
        "seed {seed}: no turn ran at all"
    );

    // (4) No host process outlives the gateway.
    let h = Arc::into_inner(h).expect("every task is done");
    h.gw.shutdown(Duration::from_secs(10)).await;
    let pids: Vec<u32> = report.host_pids.iter().copied().collect();
    chaos::wait_gone(&pids, &format!("seed {seed}: host processes left running")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_actor_past_its_restart_intensity_shuts_the_gateway_down_cleanly() {
    let strict = RestartPolicy {
        strategy: Strategy::OneForOne,
        intensity: 2,
        period: Duration::from_secs(60),
        backoff: Backoff::None,
        after_intensity: AfterIntensity::Escalate,
    };
    let mut h = chaos::start(1, 0, Some(strict)).await;
    let mut pids = Vec::new();
    let mut killed = None;
    for _ in 0..3 {
        // Wait for the restarted writer (a new actor), then kill it again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let writer = loop {
            if let Some(w) =
                core_actor(h.gw.ctx(), Child::StoreWriter).filter(|w| Some(w.get_id()) != killed)
            {
                break w;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the writer never came back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if let Some(stats) = host_stats(h.gw.ctx(), Duration::from_secs(2)).await {
            pids.extend(stats.iter().filter_map(|s| s.pid));
        }
        killed = Some(writer.get_id());
        writer.kill();
    }
    // The third stop within the period exceeds an intensity of 2: the root
    // stops itself, and so its hosts, instead of serving with a broken core.
    tokio::time::timeout(Duration::from_secs(20), h.gw.stopped())
        .await
        .expect("the gateway should stop after its writer exceeded its intensity");
    chaos::wait_gone(&pids, "host processes left running").await;
}

backends!(killing_actors_at_random_loses_nothing_and_leaves_nothing_stuck,);
