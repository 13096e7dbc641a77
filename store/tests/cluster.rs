//! Several nodes on one PostgreSQL (the store's part): node identities and leases,
//! claims with fences, fenced writes, notifications of committed events, and the rules that
//! keep a PostgreSQL outage or a paused owner from turning into two owners.
//!
//! PostgreSQL only (a SQLite store is always one gateway). Each test runs in a database of its
//! own on the server `TETHER_TEST_POSTGRES` names, and is skipped (loudly) without one unless
//! `TETHER_REQUIRE_POSTGRES=1`. Leases are short (1 s); every wait is bounded, and no test
//! asserts how fast anything happened, only what happened and in which order.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::future::Future;
use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tether_protocol::SessionId;
use tether_store::cluster::{
    Cluster, ClusterConfig, ClusterError, EventListener, ForwardId, ForwardState, PreviousOwner,
    Wake,
};
use tether_store::testing::{postgres_server, PgServer, TestDatabase};
use tether_store::{open_postgres, OpenError, PostgresConfig, StoreError, StoreWrite};
use tokio::task::JoinHandle;

use common::{append, create, sid};

const LEASE: Duration = Duration::from_secs(1);
/// Upper bound of any wait for something that must happen (a lease to run out, a claim to
/// go through): generous, since the machine may be busy; never a speed assertion.
const BOUND: Duration = Duration::from_secs(20);

async fn database() -> Option<TestDatabase> {
    let server = postgres_server()?;
    Some(TestDatabase::create(&server).await)
}

fn config(db: &TestDatabase) -> PostgresConfig {
    let mut cfg = PostgresConfig::new(db.url.clone());
    cfg.connect_timeout = Duration::from_secs(5);
    cfg
}

async fn node(db: &TestDatabase) -> Cluster {
    Cluster::start(&config(db), ClusterConfig::with_lease(LEASE))
        .await
        .expect("node starts")
}

/// The node's heartbeats, every `heartbeat_every`, until aborted (which is how a test makes a
/// node die, or go through an outage) or dropped.
fn heartbeats(node: &Cluster) -> Beats {
    let node = node.clone();
    Beats(tokio::spawn(async move {
        loop {
            if let Err(e) = node.heartbeat().await {
                eprintln!("heartbeat of {}: {e}", node.node_id());
            }
            tokio::time::sleep(node.config().heartbeat_every).await;
        }
    }))
}

/// A node's heartbeat task, stopped when dropped.
struct Beats(JoinHandle<()>);

impl Beats {
    fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for Beats {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Polls `f` until it gives `Some`, at most [`BOUND`].
async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Claims `s` on `node`, retrying the refusals that time resolves (a live owner whose lease
/// has to run out, a run of heartbeats still too short).
async fn claim_when_allowed(node: &Cluster, s: &SessionId) -> tether_store::cluster::Claim {
    until("the claim", || async move {
        match node.claim(s).await {
            Ok(c) => Some(c),
            Err(e) if e.is_retryable() => None,
            Err(e) => panic!("claim: {e}"),
        }
    })
    .await
}

async fn admin(db: &TestDatabase) -> PgConnection {
    PgConnection::connect(&db.url).await.expect("connect")
}

/// Every session's fences in seq order, checked to never decrease; returns (seq, fence) of `s`.
async fn fences_along_seq(db: &TestDatabase, s: &str) -> Vec<(i64, i64)> {
    let mut c = admin(db).await;
    let decreasing: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT fence, lag(fence) OVER (PARTITION BY session_id ORDER BY seq) \
         AS prev FROM events) t WHERE fence < prev",
    )
    .fetch_one(&mut c)
    .await
    .expect("query");
    assert_eq!(decreasing, 0, "a fence decreased along seq");
    sqlx::query_as("SELECT seq, fence FROM events WHERE session_id = $1 ORDER BY seq")
        .bind(s)
        .fetch_all(&mut c)
        .await
        .expect("query")
}

/// The listener's next wake-up, within the bound.
async fn next(listener: &mut EventListener) -> Wake {
    tokio::time::timeout(BOUND, listener.recv())
        .await
        .expect("a wake-up within the bound")
        .expect("recv")
}

async fn commit_one(
    writer: &mut Box<dyn StoreWrite>,
    op: tether_store::WriteOp,
) -> Result<(), StoreError> {
    let mut results = writer.commit(vec![op]).await;
    assert_eq!(results.len(), 1);
    results.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_claim_an_unowned_session_and_one_is_refused_while_the_owner_lives() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    assert_ne!(a.node_id(), b.node_id());
    assert_eq!(a.epoch(), b.epoch(), "one epoch per database");
    let (_ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_unowned");

    let first = a.claim(&s).await.expect("claim of an unowned session");
    assert_eq!(first.fence, 1);
    assert_eq!(first.previous, PreviousOwner::None);
    assert_eq!(a.fence(&s), Some(1));
    assert_eq!(
        a.owner_of(&s).await.expect("owner"),
        Some((Some(a.node_id().clone()), 1))
    );

    // The owner claims again: the fence still moves (a batch planned under 1 is now refused).
    let again = a.claim(&s).await.expect("re-claim");
    assert_eq!((again.fence, again.previous), (2, PreviousOwner::Itself));

    // Another node, however long it waits, is refused while A heartbeats.
    for _ in 0..3 {
        match b.claim(&s).await {
            Err(ClusterError::OwnedElsewhere { owner, .. }) => assert_eq!(&owner, a.node_id()),
            other => panic!("expected OwnedElsewhere, got {other:?}"),
        }
        tokio::time::sleep(LEASE / 2).await;
    }
    assert_eq!(b.fence(&s), None);

    // Released: B claims at once, without waiting for A's lease.
    assert!(a.release(&s, 2).await.expect("release"));
    let taken = b.claim(&s).await.expect("claim of a released session");
    assert_eq!((taken.fence, taken.previous), (3, PreviousOwner::None));
    assert_eq!(a.fence(&s), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_is_taken_over_and_its_late_commit_writes_nothing() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let (s, kept) = (sid("s_taken"), sid("s_kept"));
    a.claim(&s).await.expect("claim");
    a.claim(&kept).await.expect("claim");
    let mut wa = a.open_writer().await;
    let results = wa
        .commit(vec![
            create("s_taken", "p", 1, 2),
            create("s_kept", "p", 2, 0),
        ])
        .await;
    assert_eq!(results, vec![Ok(()), Ok(())]);
    commit_one(&mut wa, append("s_taken", 4, 2, 4))
        .await
        .expect("append while owner");

    // A stops heartbeating (it is paused, or partitioned from the database; its writer's
    // connection still works). B takes over once A's lease has run out.
    ha.abort();
    let claim = claim_when_allowed(&b, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(a.node_id().clone()));
    assert_eq!(claim.fence, 2);

    let mut wb = b.open_writer().await;
    assert_eq!(wb.latest_seq(&s).await, Ok(5));
    commit_one(&mut wb, append("s_taken", 6, 1, 5))
        .await
        .expect("the new owner writes");

    // A comes back to life and commits what it had: the taken session's op is refused and
    // writes nothing, the op of the session nobody claimed from it is independent and commits.
    let results = wa
        .commit(vec![append("s_kept", 2, 1, 1), append("s_taken", 6, 2, 6)])
        .await;
    assert_eq!(results[0], Ok(()));
    assert_eq!(
        results[1],
        Err(StoreError::NotOwner {
            session_id: s.clone(),
            fence: 1
        })
    );
    // It forgot the fence: the next write is refused without asking the database.
    assert_eq!(a.fence(&s), None);
    assert!(matches!(
        commit_one(&mut wa, append("s_taken", 7, 1, 7)).await,
        Err(StoreError::NotOwner { fence: 0, .. })
    ));
    // A session created without a claim is refused too.
    assert!(matches!(
        commit_one(&mut wa, create("s_unclaimed", "p", 3, 0)).await,
        Err(StoreError::NotOwner { fence: 0, .. })
    ));

    let stored = fences_along_seq(&db, "s_taken").await;
    assert_eq!(
        stored,
        vec![(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 2)],
        "seqs 1..5 under A's fence, 6 under B's, nothing of A's late commit"
    );
    assert_eq!(wb.latest_seq(&s).await, Ok(6));
    let mut c = admin(&db).await;
    let unclaimed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sessions WHERE id = 's_unclaimed'")
            .fetch_one(&mut c)
            .await
            .expect("query");
    assert_eq!(unclaimed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_follows_each_committed_batch_and_none_a_refused_one() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_notified");
    let mut listener = b.listener().expect("listener");
    let first = tokio::time::timeout(BOUND, listener.recv())
        .await
        .expect("bounded")
        .expect("listening");
    assert_eq!(first, Wake::Resync, "listening starts with a resync");

    a.claim(&s).await.expect("claim");
    let mut wa = a.open_writer().await;
    commit_one(&mut wa, create("s_notified", "p", 1, 2))
        .await
        .expect("create");
    assert_eq!(
        next(&mut listener).await,
        Wake::Events {
            session_id: s.clone(),
            seq: 3
        }
    );
    // Two appends of one session in one batch: one notification, at the batch's last seq.
    let results = wa
        .commit(vec![
            append("s_notified", 4, 1, 3),
            append("s_notified", 5, 2, 5),
        ])
        .await;
    assert_eq!(results, vec![Ok(()), Ok(())]);
    assert_eq!(
        next(&mut listener).await,
        Wake::Events {
            session_id: s.clone(),
            seq: 6
        }
    );

    // A refused batch (A lost the session) sends nothing: the next notification is B's commit.
    ha.abort();
    claim_when_allowed(&b, &s).await;
    assert!(matches!(
        commit_one(&mut wa, append("s_notified", 7, 1, 6)).await,
        Err(StoreError::NotOwner { .. })
    ));
    let mut wb = b.open_writer().await;
    commit_one(&mut wb, append("s_notified", 7, 3, 8))
        .await
        .expect("new owner writes");
    assert_eq!(
        next(&mut listener).await,
        Wake::Events {
            session_id: s.clone(),
            seq: 9
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_resyncs_after_its_connection_is_lost() {
    let Some(db) = database().await else { return };
    let a = node(&db).await;
    let _ha = heartbeats(&a);
    let mut listener = a.listener().expect("listener");
    assert_eq!(listener.recv().await.expect("listening"), Wake::Resync);
    let mut c = admin(&db).await;
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name LIKE 'tether listener%'",
    )
    .fetch_one(&mut c)
    .await
    .expect("terminate");
    assert_eq!(killed, 1);
    // An error first (the connection could not be made again at once), or straight away the
    // resync; never an event without one.
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match tokio::time::timeout(BOUND, listener.recv()).await {
            Ok(Ok(Wake::Resync)) => break,
            Ok(Ok(other)) => panic!("expected a resync, got {other:?}"),
            Ok(Err(e)) => assert!(
                tokio::time::Instant::now() < deadline,
                "no resync within the bound: {e}"
            ),
            Err(_) => panic!("the listener did not notice"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And it listens again.
    let s = sid("s_after");
    a.claim(&s).await.expect("claim");
    let mut wa = a.open_writer().await;
    commit_one(&mut wa, create("s_after", "p", 1, 0))
        .await
        .expect("create");
    assert_eq!(
        tokio::time::timeout(BOUND, listener.recv())
            .await
            .expect("bounded")
            .expect("recv"),
        Wake::Events {
            session_id: s,
            seq: 1
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_a_node_claims_another_nodes_session_only_after_a_lease_of_its_own() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (ha, hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_outage");
    a.claim(&s).await.expect("claim");
    // B has been up for more than a lease.
    let (a_ref, b_ref, s_ref) = (&a, &b, &s);
    until("B's run to reach a lease", || async move {
        let beat = b_ref.heartbeat().await.expect("heartbeat");
        (beat.run >= LEASE).then_some(())
    })
    .await;

    // An outage, as both nodes see it: neither heartbeats for longer than a lease.
    ha.abort();
    hb.abort();
    tokio::time::sleep(LEASE * 2).await;

    // B is back first. Its first heartbeat starts a new run, and A looks dead; still B may
    // not take A's session: A may just not be back yet.
    let beat = b.heartbeat().await.expect("heartbeat");
    assert!(beat.run_restarted, "{beat:?}");
    match b.claim(&s).await {
        Err(ClusterError::NotSettled {
            run, lease, owner, ..
        }) => {
            assert!(run < lease, "{run:?}");
            assert_eq!(&owner, a.node_id());
        }
        other => panic!("expected NotSettled, got {other:?}"),
    }
    // A unowned session is another matter: nobody can be running it.
    b.claim(&sid("s_free")).await.expect("unowned session");

    // A does come back and heartbeats: its session stays A's.
    let _ha = heartbeats(&a);
    let _hb = heartbeats(&b);
    until("A to be live again", || async move {
        let refused = b_ref.claim(s_ref).await;
        matches!(refused, Err(ClusterError::OwnedElsewhere { ref owner, .. }) if owner == a_ref.node_id())
            .then_some(())
    })
    .await;
    tokio::time::sleep(LEASE * 2).await;
    assert!(
        matches!(b.claim(&s).await, Err(ClusterError::OwnedElsewhere { .. })),
        "a live owner keeps its session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_a_dead_owners_session_is_claimed_once_the_claimer_has_a_lease_of_heartbeats(
) {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (ha, hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_orphaned");
    a.claim(&s).await.expect("claim");
    // An outage for both; only B comes back (A died during it).
    ha.abort();
    hb.abort();
    tokio::time::sleep(LEASE * 2).await;
    assert!(b.heartbeat().await.expect("heartbeat").run_restarted);
    assert!(matches!(
        b.claim(&s).await,
        Err(ClusterError::NotSettled { .. })
    ));
    let _hb = heartbeats(&b);
    let claim = claim_when_allowed(&b, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(a.node_id().clone()));
    // By the database's clock, the claim came a full lease after B's run began.
    let mut c = admin(&db).await;
    let waited_ms: i64 = sqlx::query_scalar(
        "SELECT (EXTRACT(EPOCH FROM o.claimed_at - n.run_since) * 1000)::bigint \
         FROM session_owners o, nodes n WHERE o.session_id = $1 AND n.id = $2",
    )
    .bind(s.as_str())
    .bind(b.node_id().as_str())
    .fetch_one(&mut c)
    .await
    .expect("query");
    assert!(
        waited_ms >= LEASE.as_millis() as i64,
        "claimed {waited_ms} ms into B's run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_restart_longer_than_the_lease_is_not_a_node_death() {
    // A server of the test's own: it is stopped for longer than the lease.
    let Some(server) = PgServer::start() else {
        return;
    };
    let lease = Duration::from_secs(3);
    let mut cfg = PostgresConfig::new(server.url());
    cfg.connect_timeout = Duration::from_secs(10);
    let start = || Cluster::start(&cfg, ClusterConfig::with_lease(lease));
    let (a, b) = (start().await.expect("node"), start().await.expect("node"));
    let (_ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_through_the_outage");
    a.claim(&s).await.expect("claim");
    let b_ref = &b;
    until("B's run to reach a lease", || async move {
        let beat = b_ref.heartbeat().await.ok()?;
        (beat.run >= lease).then_some(())
    })
    .await;

    server.stop();
    tokio::time::sleep(lease + lease / 3).await;
    server.start_again();

    // Both nodes heartbeat again as soon as they can; B, however eager, never takes A's
    // session, because its own run must first be a lease long, by which time A is back.
    let watch_until = tokio::time::Instant::now() + lease * 2;
    let mut refusals = Vec::new();
    while tokio::time::Instant::now() < watch_until {
        match b.claim(&s).await {
            Ok(c) => panic!("B claimed a live node's session after the outage: {c:?}"),
            Err(e) => refusals.push(std::mem::discriminant(&e)),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!refusals.is_empty());
    assert!(matches!(
        b.claim(&s).await,
        Err(ClusterError::OwnedElsewhere { .. })
    ));
    assert_eq!(
        a.owner_of(&s).await.expect("owner"),
        Some((Some(a.node_id().clone()), 1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_was_not_heartbeating_may_claim_nothing_until_it_does() {
    let Some(db) = database().await else { return };
    let a = node(&db).await;
    a.heartbeat().await.expect("heartbeat");
    tokio::time::sleep(LEASE + LEASE / 2).await;
    assert!(matches!(
        a.claim(&sid("s_x")).await,
        Err(ClusterError::NotLive { .. })
    ));
    let beat = a.heartbeat().await.expect("heartbeat");
    assert!(beat.run_restarted);
    a.claim(&sid("s_x")).await.expect("claim after a heartbeat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_paused_inside_a_transaction_cannot_block_a_claim() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_paused");
    a.claim(&s).await.expect("claim");

    // A, on a connection of its kind, opens a transaction that holds the ownership row (as a
    // fenced batch does), and is paused before it commits; its heartbeats stop too.
    let mut paused = a.connection().await.expect("connection");
    sqlx::query("BEGIN")
        .execute(&mut paused)
        .await
        .expect("begin");
    sqlx::query("SELECT fence FROM session_owners WHERE session_id = $1 FOR UPDATE")
        .bind(s.as_str())
        .execute(&mut paused)
        .await
        .expect("lock");
    ha.abort();
    // The row is really held.
    let mut other = admin(&db).await;
    let nowait =
        sqlx::query("SELECT 1 FROM session_owners WHERE session_id = $1 FOR UPDATE NOWAIT")
            .bind(s.as_str())
            .execute(&mut other)
            .await;
    assert!(nowait.is_err(), "the paused transaction holds the row");

    // B takes the session anyway: the server ends A's idle transaction well within the lease.
    let claim = claim_when_allowed(&b, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(a.node_id().clone()));
    assert_eq!(claim.fence, 2);
    // A's paused connection was ended by the server (idle_in_transaction_session_timeout).
    assert!(
        sqlx::query("SELECT 1").execute(&mut paused).await.is_err(),
        "the paused owner's connection should have been terminated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_counts_of_a_dead_node_stop_counting() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_peers");
    a.set_peers(&s, 2).await.expect("peers");
    b.set_peers(&s, 1).await.expect("peers");
    assert_eq!(b.live_peers(&s).await.expect("count"), 3);
    ha.abort();
    let (b_ref, s_ref) = (&b, &s);
    until("A's peers to stop counting", || async move {
        (b_ref.live_peers(s_ref).await.expect("count") == 1).then_some(())
    })
    .await;
    b.set_peers(&s, 0).await.expect("peers");
    assert_eq!(b.live_peers(&s).await.expect("count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_gateway_and_cluster_nodes_keep_each_other_out() {
    let Some(db) = database().await else { return };
    let cfg = config(&db);
    let single = open_postgres(&cfg).await.expect("open");
    match Cluster::start(&cfg, ClusterConfig::with_lease(LEASE)).await {
        Err(ClusterError::Open(OpenError::Held { .. })) => {}
        other => panic!("expected Held, got {other:?}"),
    }
    drop(single);
    // The single gateway's writer lets go of the database as it closes.
    let cfg_ref = &cfg;
    let a = until("the single gateway to let go", || async move {
        Cluster::start(cfg_ref, ClusterConfig::with_lease(LEASE))
            .await
            .ok()
    })
    .await;
    let _b = node(&db).await;
    // Nodes hold the database through their writers' connections.
    let _writer = a.open_writer().await;
    match open_postgres(&cfg).await {
        Err(OpenError::Held { .. }) => {}
        other => panic!("expected Held, got {other:?}"),
    }
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_is_woken_by_a_commit_and_reads_the_events_by_seq() {
    let Some(db) = database().await else { return };
    let (a, b) = (node(&db).await, node(&db).await);
    let (_ha, _hb) = (heartbeats(&a), heartbeats(&b));
    let s = sid("s_followed");
    a.claim(&s).await.expect("claim");
    let mut owner = a.open().await.expect("owner's store");
    let follower = b.open().await.expect("follower's store");
    assert_eq!(owner.epoch, follower.epoch);
    let mut listener = b.listener().expect("listener");
    assert_eq!(next(&mut listener).await, Wake::Resync);
    let mut watermark = 0;

    for (op, upto) in [
        (create("s_followed", "p", 1, 2), 3),
        (append("s_followed", 4, 3, 5), 6),
    ] {
        assert_eq!(owner.writer.commit(vec![op]).await, vec![Ok(())]);
        match next(&mut listener).await {
            Wake::Events { session_id, seq } => {
                assert_eq!((session_id, seq), (s.clone(), upto));
            }
            other => panic!("expected events, got {other:?}"),
        }
        // The follower reads after its watermark; the payload only said there is something.
        let read = follower
            .reader
            .events_since(&s, watermark, 100)
            .await
            .expect("read");
        let seqs: Vec<u64> = read.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, ((watermark + 1)..=upto).collect::<Vec<_>>());
        watermark = upto;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_writer_cut_mid_batch_loses_and_doubles_nothing() {
    const SESSIONS: usize = 6;
    const EVENTS: u64 = 4;
    let Some(db) = database().await else { return };
    let a = node(&db).await;
    let _ha = heartbeats(&a);
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("s_cut_{i}")).collect();
    for id in &ids {
        a.claim(&sid(id)).await.expect("claim");
    }
    let mut store = a.open().await.expect("store");
    let creates = ids.iter().map(|id| create(id, "p", 1, 0)).collect();
    assert!(store.writer.commit(creates).await.iter().all(Result::is_ok));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let (stop, url) = (stop.clone(), db.url.clone());
        tokio::spawn(async move {
            let mut c = PgConnection::connect(&url).await.expect("connect");
            let mut cuts = 0i64;
            for i in 0..25u64 {
                tokio::time::sleep(Duration::from_millis(30 + (i * 37) % 90)).await;
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() \
                     AND application_name LIKE 'tether-node-writer %'",
                )
                .fetch_one(&mut c)
                .await
                .expect("terminate");
                cuts += n;
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            cuts
        })
    };
    let mut next_seq: Vec<u64> = vec![2; SESSIONS];
    let (mut ok, mut failed) = (0u64, 0u64);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let ops = ids
            .iter()
            .zip(&next_seq)
            .map(|(id, n)| append(id, *n, EVENTS, 0))
            .collect();
        let results = store.writer.commit(ops).await;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => {
                    ok += 1;
                    next_seq[i] += EVENTS;
                }
                // Never a conflict (an append answered failed that was written after all),
                // never NotOwner (nobody else claimed anything).
                Err(StoreError::Unavailable(_)) => failed += 1,
                Err(e) => panic!("{}: {e:?}", ids[i]),
            }
        }
        if failed > 0 && ok == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let cuts = killer.await.expect("killer");
    // Back to normal, then everything acknowledged is there, once, under fence 1.
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let op = append(&ids[0], next_seq[0], 1, 0);
        if store.writer.commit(vec![op]).await[0].is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer does not write again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    next_seq[0] += 1;
    for (id, n) in ids.iter().zip(&next_seq) {
        let stored = fences_along_seq(&db, id).await;
        let expected: Vec<(i64, i64)> = (1..*n as i64).map(|seq| (seq, 1)).collect();
        assert_eq!(stored, expected, "{id}");
    }
    println!("node writer cuts: {cuts}, appends acknowledged {ok}, failed {failed}");
    assert!(cuts > 0 && ok > 0);
}

/// A node owning `ids`, each created (seq 1) by its writer.
async fn owner_of_sessions(
    db: &TestDatabase,
    ids: &[&str],
) -> (Cluster, Beats, tether_store::Opened) {
    let a = node(db).await;
    let beats = heartbeats(&a);
    let mut store = a.open().await.expect("store");
    for id in ids {
        a.claim(&sid(id)).await.expect("claim");
    }
    let creates = ids.iter().map(|id| create(id, "p", 1, 0)).collect();
    assert!(store.writer.commit(creates).await.iter().all(Result::is_ok));
    (a, beats, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_is_accepted_with_its_first_write_and_answered() {
    let Some(db) = database().await else { return };
    let (a, _ha, mut owner) = owner_of_sessions(&db, &["s_fwd"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let s = sid("s_fwd");
    let mut listener = a.listener().expect("listener");
    assert_eq!(next(&mut listener).await, Wake::Resync);

    let id = b
        .forward(
            &s,
            "prompt.submit",
            r#"{"text":"hi"}"#,
            Duration::from_secs(30),
        )
        .await
        .expect("forward");
    assert_eq!(
        next(&mut listener).await,
        Wake::Forward {
            session_id: s.clone(),
            forward_id: id.clone()
        }
    );
    let pending = a.pending_forwards(&s).await.expect("pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (
            &pending[0].id,
            &pending[0].from_node,
            pending[0].method.as_str()
        ),
        (&id, b.node_id(), "prompt.submit")
    );
    assert_eq!(pending[0].state, ForwardState::Pending);

    // The owner runs it: its first write (seq 2) accepts it, in the same transaction.
    a.accept_with(&s, 2, &id);
    assert_eq!(
        owner.writer.commit(vec![append("s_fwd", 2, 1, 1)]).await,
        vec![Ok(())]
    );
    let row = b.forward_state(&id).await.expect("state").expect("row");
    assert_eq!(row.state, ForwardState::Accepted);
    // Too late to withdraw: it runs.
    assert!(!b.withdraw_forward(&id).await.expect("withdraw"));
    assert!(a.pending_forwards(&s).await.expect("pending").is_empty());
    // Only the owner answers what it accepted: a node that owned the session before (here
    // one that never did) must not replace it with an answer of its own.
    assert!(!b
        .answer_forward(&id, r#"{"error":{"code":5072,"message":"stale"}}"#)
        .await
        .expect("answer"));
    let row = b.forward_state(&id).await.expect("state").expect("row");
    assert_eq!(row.state, ForwardState::Accepted);

    assert!(a
        .answer_forward(&id, r#"{"accepted":true}"#)
        .await
        .expect("answer"));
    let row = b.forward_state(&id).await.expect("state").expect("row");
    assert_eq!(row.state, ForwardState::Answered);
    assert_eq!(row.answer.as_deref(), Some(r#"{"accepted":true}"#));
    // The events are the owner's, under its fence; the next notification is the event's.
    assert_eq!(fences_along_seq(&db, "s_fwd").await, vec![(1, 1), (2, 1)]);
    assert_eq!(
        next(&mut listener).await,
        Wake::Events {
            session_id: s.clone(),
            seq: 2
        }
    );
}

/// A forward of `method` from `from` whose deadline has passed by the server's clock.
async fn expired_forward(from: &Cluster, s: &SessionId, method: &str) -> ForwardId {
    let id = from
        .forward(s, method, "{}", Duration::from_millis(100))
        .await
        .expect("forward");
    let id_ref = &id;
    until(
        "the deadline to pass by the server's clock",
        || async move {
            let row = from.forward_state(id_ref).await.ok()??;
            row.expired.then_some(())
        },
    )
    .await;
    id
}

/// A request whose first write is not known in advance (`session.compress`) is accepted on
/// its own, before it runs: then the forwarder can no longer withdraw it; one withdrawn or
/// past its deadline cannot be accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_accepted_without_a_write_cannot_be_withdrawn() {
    let Some(db) = database().await else { return };
    let (a, _ha, _owner) = owner_of_sessions(&db, &["s_acc"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let s = sid("s_acc");

    let id = b
        .forward(&s, "session.compress", "{}", Duration::from_secs(30))
        .await
        .expect("forward");
    assert!(a.accept_forward(&id).await.expect("accept"));
    assert!(!a.accept_forward(&id).await.expect("accept twice"));
    assert!(!b.withdraw_forward(&id).await.expect("withdraw"));
    let row = b.forward_state(&id).await.expect("state").expect("row");
    assert_eq!(row.state, ForwardState::Accepted);

    let withdrawn = b
        .forward(&s, "session.compress", "{}", Duration::from_secs(30))
        .await
        .expect("forward");
    assert!(b.withdraw_forward(&withdrawn).await.expect("withdraw"));
    assert!(!a.accept_forward(&withdrawn).await.expect("accept"));

    let late = expired_forward(&b, &s, "session.compress").await;
    assert!(!a.accept_forward(&late).await.expect("accept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_past_its_deadline_or_withdrawn_never_runs() {
    let Some(db) = database().await else { return };
    let (a, _ha, mut owner) = owner_of_sessions(&db, &["s_late", "s_other"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let s = sid("s_late");

    let late = expired_forward(&b, &s, "prompt.submit").await;
    assert!(a.pending_forwards(&s).await.expect("pending").is_empty());
    // The owner tries anyway: that op fails and writes nothing; the other op of the batch
    // commits.
    a.accept_with(&s, 2, &late);
    let results = owner
        .writer
        .commit(vec![append("s_other", 2, 1, 1), append("s_late", 2, 1, 1)])
        .await;
    assert_eq!(results[0], Ok(()));
    assert_eq!(
        results[1],
        Err(StoreError::ForwardRefused {
            forward_id: late.to_string(),
            seq: 2
        })
    );
    assert_eq!(owner.writer.latest_seq(&s).await, Ok(1));
    assert!(b.withdraw_forward(&late).await.expect("withdraw"));
    let row = b.forward_state(&late).await.expect("state").expect("row");
    assert_eq!(row.state, ForwardState::Refused);

    // Withdrawn before the owner got to it: the same.
    let withdrawn = b
        .forward(&s, "prompt.submit", "{}", Duration::from_secs(30))
        .await
        .expect("forward");
    assert!(b.withdraw_forward(&withdrawn).await.expect("withdraw"));
    a.accept_with(&s, 2, &withdrawn);
    assert!(matches!(
        owner.writer.commit(vec![append("s_late", 2, 1, 1)]).await[0],
        Err(StoreError::ForwardRefused { .. })
    ));
    // Ops of the session before the one that was to accept a refused forward commit; that op
    // and the later ones do not.
    let cut = b
        .forward(&s, "prompt.submit", "{}", Duration::from_secs(30))
        .await
        .expect("forward");
    assert!(b.withdraw_forward(&cut).await.expect("withdraw"));
    a.accept_with(&s, 3, &cut);
    let results = owner
        .writer
        .commit(vec![
            append("s_late", 2, 1, 1),
            append("s_late", 3, 1, 2),
            append("s_late", 4, 1, 3),
        ])
        .await;
    assert_eq!(results[0], Ok(()));
    assert!(matches!(
        results[1],
        Err(StoreError::ForwardRefused { seq: 3, .. })
    ));
    assert!(matches!(
        results[2],
        Err(StoreError::ForwardRefused { seq: 3, .. })
    ));
    assert_eq!(owner.writer.latest_seq(&s).await, Ok(2));
    // The registration went with the refusal: the same seq written for the session's own
    // sake goes through.
    assert_eq!(
        owner.writer.commit(vec![append("s_late", 3, 1, 2)]).await,
        vec![Ok(())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_owner_dies_its_forwards_say_whether_they_ran() {
    let Some(db) = database().await else { return };
    let (a, ha, mut owner) = owner_of_sessions(&db, &["s_died"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let s = sid("s_died");
    let ran = b
        .forward(&s, "prompt.submit", "{}", Duration::from_secs(30))
        .await
        .expect("forward");
    let not_yet = b
        .forward(&s, "session.interrupt", "{}", Duration::from_secs(30))
        .await
        .expect("forward");
    a.accept_with(&s, 2, &ran);
    assert_eq!(
        owner.writer.commit(vec![append("s_died", 2, 1, 1)]).await,
        vec![Ok(())]
    );
    // A dies before it answers either; B (the forwarder) claims the session.
    ha.abort();
    let claim = claim_when_allowed(&b, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(a.node_id().clone()));
    let state = |id| {
        let b = &b;
        async move {
            b.forward_state(id)
                .await
                .expect("state")
                .expect("row")
                .state
        }
    };
    assert_eq!(state(&ran).await, ForwardState::Accepted, "it ran: say so");
    assert_eq!(state(&not_yet).await, ForwardState::Pending);
    // Never ran, and now never will (B may run it itself as the new owner, or answer so).
    assert!(b.withdraw_forward(&not_yet).await.expect("withdraw"));
    // The old owner, back, cannot accept it: its write fails on the fence first.
    a.accept_with(&s, 3, &not_yet);
    assert!(matches!(
        owner.writer.commit(vec![append("s_died", 3, 1, 2)]).await[0],
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(state(&not_yet).await, ForwardState::Refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_claims_back_a_session_continues_after_what_others_wrote() {
    let Some(db) = database().await else { return };
    let (a, ha, mut wa) = owner_of_sessions(&db, &["s_back"]).await;
    let s = sid("s_back");
    assert_eq!(
        wa.writer.commit(vec![append("s_back", 2, 2, 2)]).await,
        vec![Ok(())]
    );
    // A goes quiet (its writer never hears of what follows); B takes over and writes.
    ha.abort();
    let b = node(&db).await;
    let hb = heartbeats(&b);
    claim_when_allowed(&b, &s).await;
    let mut wb = b.open_writer().await;
    assert_eq!(commit_one(&mut wb, append("s_back", 4, 1, 3)).await, Ok(()));
    // Now B dies and A comes back: once its run is a lease long it claims the session back,
    // and its old writer continues after B's event, not after what it wrote itself.
    hb.abort();
    let _ha = heartbeats(&a);
    let claim = claim_when_allowed(&a, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(b.node_id().clone()));
    assert_eq!(claim.fence, 3);
    // No barrier read first: the writer itself must not trust what it knew under fence 1.
    assert_eq!(
        wa.writer.commit(vec![append("s_back", 5, 1, 4)]).await,
        vec![Ok(())]
    );
    assert_eq!(wa.writer.latest_seq(&s).await, Ok(5));
    assert_eq!(
        fences_along_seq(&db, "s_back").await,
        vec![(1, 1), (2, 1), (3, 1), (4, 2), (5, 3)]
    );
    // B, back too late, writes nothing.
    assert!(matches!(
        commit_one(&mut wb, append("s_back", 5, 1, 4)).await,
        Err(StoreError::NotOwner { fence: 2, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_is_written_only_by_the_owner_of_its_parent() {
    let Some(db) = database().await else { return };
    let (a, _ha, _wa) = owner_of_sessions(&db, &["s_parent"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let child = sid("s_child");
    b.claim(&child).await.expect("claim of the new id");
    let mut branch = create("s_child", "p", 2, 0);
    if let tether_store::WriteOp::CreateSession { session, .. } = &mut branch {
        session.parent_session_id = Some(sid("s_parent"));
    }
    let mut wb = b.open_writer().await;
    assert_eq!(
        commit_one(&mut wb, branch.clone()).await,
        Err(StoreError::NotOwner {
            session_id: sid("s_parent"),
            fence: 0
        })
    );
    // The parent's owner may branch it (once it holds the child's id too).
    a.claim(&child)
        .await
        .expect_err("B owns the child's id and is alive");
    assert!(b.release(&child, 1).await.expect("release"));
    a.claim(&child).await.expect("claim");
    let mut wa = a.open_writer().await;
    assert_eq!(commit_one(&mut wa, branch).await, Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_node_rechecks_its_ownerships_without_moving_a_fence() {
    let Some(db) = database().await else { return };
    let (a, ha, _wa) = owner_of_sessions(&db, &["s_lost", "s_still"]).await;
    let (lost, still) = (sid("s_lost"), sid("s_still"));
    assert_eq!(a.recheck().await.expect("recheck"), vec![]);
    ha.abort();
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    claim_when_allowed(&b, &lost).await;
    // A heartbeats again, late: it re-checks before doing anything for its sessions.
    assert!(a.heartbeat().await.expect("heartbeat").run_restarted);
    assert_eq!(a.recheck().await.expect("recheck"), vec![(lost.clone(), 1)]);
    assert_eq!((a.fence(&lost), a.fence(&still)), (None, Some(1)));
    assert_eq!(
        a.owner_of(&still).await.expect("owner"),
        Some((Some(a.node_id().clone()), 1)),
        "a re-check moves no fence"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_requests_a_handoff_of_its_session() {
    let Some(db) = database().await else { return };
    let (a, ha, owner) = owner_of_sessions(&db, &["s_handoff"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let other = b.open().await.expect("store");
    let s = sid("s_handoff");
    assert_eq!(
        other.handoffs.request("p", &s, "reviewer").await,
        Err(StoreError::NotOwner {
            session_id: s.clone(),
            fence: 0
        })
    );
    let first = owner
        .handoffs
        .request("p", &s, "reviewer")
        .await
        .expect("request");
    assert!(
        matches!(first, tether_store::RequestOutcome::Requested(_)),
        "{first:?}"
    );
    // Once B owns the session, A's next request is refused and writes nothing.
    ha.abort();
    claim_when_allowed(&b, &s).await;
    let done = owner.handoffs.claim("p", "reviewer").await.expect("claim");
    let done = done.expect("the pending handoff");
    // (Transitions of the handoff row itself are compare-and-sets, fine from any node.)
    other
        .handoffs
        .complete("p", &done.id)
        .await
        .expect("complete");
    assert!(matches!(
        owner.handoffs.request("p", &s, "reviewer").await,
        Err(StoreError::NotOwner { fence: 1, .. })
    ));
    assert!(matches!(
        other.handoffs.request("p", &s, "reviewer").await,
        Ok(tether_store::RequestOutcome::Requested(_))
    ));
    drop(a);
}

/// A Patch op that parks `id`.
fn park(id: &str) -> tether_store::WriteOp {
    tether_store::WriteOp::Patch {
        session_id: sid(id),
        patch: tether_store::SessionPatch {
            status: Some(tether_protocol::SessionStatus::Parked),
            ..tether_store::SessionPatch::default()
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_peers_on_a_live_node_is_not_parked() {
    let Some(db) = database().await else { return };
    let (a, _ha, mut owner) = owner_of_sessions(&db, &["s_park", "s_idle"]).await;
    let b = node(&db).await;
    let hb = heartbeats(&b);
    let s = sid("s_park");
    // A peer attaches on B; B learns who owns the session, under the same lock a park takes.
    let owned = b.set_peers(&s, 1).await.expect("peers");
    assert_eq!(owned, Some((Some(a.node_id().clone()), 1)));
    let results = owner
        .writer
        .commit(vec![park("s_park"), park("s_idle")])
        .await;
    assert_eq!(
        results,
        vec![
            Err(StoreError::InUse {
                session_id: s.clone(),
                peers: 1
            }),
            Ok(())
        ],
        "the idle session parks, the attached one does not"
    );
    // B dies with its peer count still stored: once B's lease has run out it no longer counts.
    hb.abort();
    let writer = &mut owner.writer;
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match writer.commit(vec![park("s_park")]).await.remove(0) {
            Ok(()) => break,
            Err(StoreError::InUse { .. }) => {}
            Err(e) => panic!("park: {e}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "still in use");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_leaves_cleanly_hands_its_sessions_over_at_once() {
    let Some(db) = database().await else { return };
    let (a, ha, mut owner) = owner_of_sessions(&db, &["s_handed"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let s = sid("s_handed");
    a.set_peers(&s, 1).await.expect("peers");
    ha.abort();
    assert_eq!(a.leave().await.expect("leave"), 1);
    assert_eq!(b.live_peers(&s).await.expect("count"), 0);
    // No lease to wait for, and no run of heartbeats needed: the session is unowned.
    let claim = b.claim(&s).await.expect("claim at once");
    assert_eq!((claim.fence, claim.previous), (2, PreviousOwner::None));
    // The node that left writes nothing more.
    assert!(matches!(
        owner.writer.commit(vec![append("s_handed", 2, 1, 1)]).await[0],
        Err(StoreError::NotOwner { .. })
    ));
    assert!(matches!(
        a.heartbeat().await,
        Err(ClusterError::UnknownNode { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_polls_ownerships_and_housekeeping_forgets_long_dead_nodes() {
    let Some(db) = database().await else { return };
    let (a, ha, _owner) = owner_of_sessions(&db, &["s_polled"]).await;
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    let s = sid("s_polled");
    a.set_peers(&s, 1).await.expect("peers");
    let seen = b
        .owners(&[s.clone(), sid("s_never_claimed")])
        .await
        .expect("owners");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (
            &seen[0].session_id,
            seen[0].owner.as_ref(),
            seen[0].fence,
            seen[0].owner_live
        ),
        (&s, Some(a.node_id()), 1, true)
    );
    let forward = b
        .forward(&s, "prompt.submit", "{}", Duration::from_millis(100))
        .await
        .expect("forward");
    ha.abort();
    let (b_ref, s_ref) = (&b, &s);
    until("the owner to look dead", || async move {
        let seen = b_ref.owners(std::slice::from_ref(s_ref)).await.ok()?;
        (!seen[0].owner_live).then_some(())
    })
    .await;
    // Long dead (here: two leases, the least `sweep` keeps): A's row, its peer count and the
    // expired forward go; the ownership row stays and still names a dead owner.
    let mut swept = (0, 0);
    let deadline = tokio::time::Instant::now() + BOUND;
    while swept != (1, 1) {
        let more = b.sweep(Duration::ZERO).await.expect("sweep");
        swept = (swept.0 + more.0, swept.1 + more.1);
        assert!(swept.0 <= 1 && swept.1 <= 1, "{swept:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "swept only {swept:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(b.live_peers(&s).await.expect("count"), 0);
    assert_eq!(b.forward_state(&forward).await.expect("state"), None);
    assert!(matches!(
        a.heartbeat().await,
        Err(ClusterError::UnknownNode { .. })
    ));
    let claim = claim_when_allowed(&b, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(a.node_id().clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_under_load_leaves_one_history_with_fences_that_never_decrease() {
    let Some(db) = database().await else { return };
    let (a, ha, mut wa) = owner_of_sessions(&db, &["s_load"]).await;
    let s = sid("s_load");
    let b = node(&db).await;
    let _hb = heartbeats(&b);
    // A appends as fast as it can; from the moment its heartbeats stop until B has claimed,
    // its appends keep committing (fencing, not timing); after that every one is refused.
    let appender = {
        let s = s.clone();
        tokio::spawn(async move {
            let mut next = 2u64;
            let mut acked = Vec::new();
            let mut refused = 0u64;
            while refused < 20 {
                let r = wa
                    .writer
                    .commit(vec![append("s_load", next, 2, next + 1)])
                    .await
                    .remove(0);
                match r {
                    Ok(()) => {
                        acked.push((next, next + 1));
                        next += 2;
                    }
                    Err(StoreError::NotOwner { session_id, .. }) => {
                        assert_eq!(session_id, s);
                        refused += 1;
                        // It keeps trying as a confused old owner would, with the seqs it has.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(e) => panic!("append: {e}"),
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    ha.abort();
    let claim = claim_when_allowed(&b, &s).await;
    assert_eq!(claim.previous, PreviousOwner::Dead(a.node_id().clone()));
    let mut wb = b.open_writer().await;
    let from = wb.latest_seq(&s).await.expect("latest");
    for i in 0..10 {
        commit_one(&mut wb, append("s_load", from + 1 + i, 1, 0))
            .await
            .expect("the new owner writes");
    }
    let acked = tokio::time::timeout(BOUND, appender)
        .await
        .expect("the old owner gives up in time")
        .expect("appender");
    assert!(!acked.is_empty());

    let stored = fences_along_seq(&db, "s_load").await;
    let seqs: Vec<i64> = stored.iter().map(|e| e.0).collect();
    assert_eq!(
        seqs,
        (1..=(from as i64 + 10)).collect::<Vec<_>>(),
        "one gap-free history"
    );
    // Everything A was told is committed is there under A's fence, before B's first event.
    let a_part = stored.iter().take_while(|e| e.1 == 1).count() as u64;
    assert_eq!(a_part, from, "A's events are exactly those before B's");
    for (first, last) in acked {
        assert!(
            last <= from,
            "acked {first}..={last} past the takeover at {from}"
        );
    }
    assert!(stored.iter().skip(from as usize).all(|e| e.1 == 2));
}

/// Not a test of behaviour: what fencing costs per batch, single gateway against node writer,
/// on the same server. `cargo test -p tether-store --test cluster -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn cost_of_a_fenced_batch() {
    const BATCHES: u64 = 1000;
    let Some(server) = postgres_server() else {
        return;
    };
    let single_db = TestDatabase::create(&server).await;
    let mut single = open_postgres(&config(&single_db)).await.expect("open");
    assert!(single
        .writer
        .commit(vec![create("s_cost", "p", 1, 0)])
        .await[0]
        .is_ok());
    let started = std::time::Instant::now();
    for i in 0..BATCHES {
        let r = single
            .writer
            .commit(vec![append("s_cost", 2 + i, 1, 0)])
            .await;
        assert!(r[0].is_ok());
    }
    let single_time = started.elapsed();

    let node_db = TestDatabase::create(&server).await;
    let (_a, _ha, mut owner) = owner_of_sessions(&node_db, &["s_cost"]).await;
    let started = std::time::Instant::now();
    for i in 0..BATCHES {
        let r = owner
            .writer
            .commit(vec![append("s_cost", 2 + i, 1, 0)])
            .await;
        assert!(r[0].is_ok());
    }
    let node_time = started.elapsed();
    println!(
        "{BATCHES} one-append batches: single gateway {:?} ({:.0} µs each), node {:?} ({:.0} µs each)",
        single_time,
        single_time.as_micros() as f64 / BATCHES as f64,
        node_time,
        node_time.as_micros() as f64 / BATCHES as f64
    );
}
