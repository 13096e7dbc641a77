//! Presence on one gateway, black-box: peers describe themselves
//! (`gateway.hello`), see each other's `presence.joined` / `presence.left`
//! and read `session.presence`; a reconnect inside the grace is no leave;
//! a reconnect storm costs each peer a bounded number of presence frames
//! (docs/PROTOCOL.md, 1.4 and 1.5, "Presence"). Across cluster nodes:
//! `presence_cluster.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure it reports

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{session, tempdir, Client, Gateway};
use serde_json::{json, Value};

/// The coalescing window and the reconnect grace (`actors/src/session/presence.rs`).
const WINDOW: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(5);

/// A connection that said who it is.
async fn described(gw: &Gateway, name: &str, instance: &str) -> Client {
    let mut c = gw.client().await;
    let hello = c
        .ok(
            "gateway.hello",
            json!({"name": name, "device": "laptop", "app": "tests",
                   "instance": instance, "meta": {"seat": name}}),
        )
        .await;
    assert_eq!(hello["peer_id"], c.ready["peer_id"], "{hello}");
    c
}

fn peer_id(c: &Client) -> String {
    c.ready["peer_id"].as_str().expect("peer_id").to_owned()
}

async fn attach(c: &mut Client, id: &str) {
    c.ok(
        "session.resume",
        json!({"session_id": id, "omit_messages": true}),
    )
    .await;
}

/// The next presence event within `wait`, skipping other events.
async fn next_presence(c: &mut Client, wait: Duration) -> Option<Value> {
    let until = Instant::now() + wait;
    loop {
        let left = until.checked_duration_since(Instant::now())?;
        // In pieces shorter than the harness's own wait for a frame.
        let Ok(e) = tokio::time::timeout(left.min(Duration::from_secs(5)), c.next_event()).await
        else {
            continue;
        };
        let kind = e["type"].as_str().unwrap_or_default();
        if kind.starts_with("presence.") {
            assert!(e.get("seq").is_none(), "presence takes no seq: {e}");
            return Some(e);
        }
    }
}

/// Applies presence events to `seen` until it equals `want`.
async fn until_present(c: &mut Client, seen: &mut BTreeSet<String>, want: &BTreeSet<String>) {
    while seen != want {
        let e = next_presence(c, GRACE * 3)
            .await
            .unwrap_or_else(|| panic!("presence never became {want:?}: {seen:?}"));
        for p in e["payload"]["peers"].as_array().expect("peers") {
            let id = p["peer_id"].as_str().expect("peer_id").to_owned();
            match e["type"].as_str() {
                Some("presence.joined") => seen.insert(id),
                Some("presence.left") => seen.remove(&id),
                other => panic!("{other:?}"),
            };
        }
    }
}

fn ids(result: &Value) -> BTreeSet<String> {
    result["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .map(|p| p["peer_id"].as_str().expect("peer_id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_peers_see_each_others_joins_and_leaves() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut a = described(&gw, "ann", "i-ann").await;
    let mut b = described(&gw, "bob", "i-bob").await;
    let mut c = described(&gw, "cy", "i-cy").await;
    let id = session(&mut a).await;
    // Who was there before each attached: the snapshot; who came after:
    // the events (its own join included).
    attach(&mut b, &id).await;
    let mut b_seen = ids(&b.ok("session.presence", json!({"session_id": id})).await);
    attach(&mut c, &id).await;
    let mut c_seen = ids(&c.ok("session.presence", json!({"session_id": id})).await);
    let all: BTreeSet<String> = [&a, &b, &c].into_iter().map(peer_id).collect();
    until_present(&mut a, &mut BTreeSet::new(), &all).await;
    until_present(&mut b, &mut b_seen, &all).await;
    until_present(&mut c, &mut c_seen, &all).await;

    let presence = a.ok("session.presence", json!({"session_id": id})).await;
    assert_eq!(ids(&presence), all, "{presence}");
    assert_eq!(presence["session_id"], id.as_str());
    let cy = presence["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["peer_id"] == c.ready["peer_id"])
        .expect("cy listed")
        .clone();
    assert_eq!(cy["profile"], c.ready["profile"]);
    assert_eq!(
        cy["client"],
        json!({"name":"cy","device":"laptop","app":"tests","instance":"i-cy","meta":{"seat":"cy"}})
    );
    assert_eq!(cy["transport"], "ws");
    assert_eq!(cy["node"], Value::Null, "a single gateway has no node");
    assert!(
        cy["attached_at"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{cy}"
    );

    // cy goes: after its grace, ann and bob hear it, and only that.
    let gone = peer_id(&c);
    c.close().await;
    for peer in [&mut a, &mut b] {
        let e = next_presence(peer, GRACE * 3).await.expect("a leave");
        assert_eq!(e["type"], "presence.left", "{e}");
        assert_eq!(e["session_id"], id.as_str());
        let left: Vec<&str> = e["payload"]["peers"]
            .as_array()
            .expect("peers")
            .iter()
            .filter_map(|p| p["peer_id"].as_str())
            .collect();
        assert_eq!(left, [gone.as_str()], "{e}");
    }
    let presence = b.ok("session.presence", json!({"session_id": id})).await;
    let mut two = all.clone();
    two.remove(&gone);
    assert_eq!(ids(&presence), two);

    // A detach is a leave too (bob has an instance: after the grace).
    let bob = peer_id(&b);
    b.ok("session.detach", json!({"session_id": id})).await;
    let e = next_presence(&mut a, GRACE * 3).await.expect("bob's leave");
    assert_eq!(e["type"], "presence.left");
    assert_eq!(e["payload"]["peers"][0]["peer_id"], bob.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_description_is_bounded_and_the_profile_is_the_connections() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut a = gw.client().await;
    let long = "x".repeat(129);
    for (params, field) in [
        (json!({"name": long}), "name"),
        (json!({"device": "a\u{1b}[2J"}), "device"),
        (json!({"instance": "i".repeat(65)}), "instance"),
        (json!({"meta": {"blob": "m".repeat(1100)}}), "meta"),
        (json!({"meta": "not an object"}), "meta"),
    ] {
        let e = a.err("gateway.hello", params).await;
        assert_eq!(e["code"], -32602, "{e}");
        assert_eq!(e["data"]["field"], field, "{e}");
    }
    // A refused hello changed nothing: a good one is still taken, once.
    let hello = a
        .ok(
            "gateway.hello",
            json!({"name": "ann", "profile": "someone-else"}),
        )
        .await;
    assert_eq!(
        hello["profile"], a.ready["profile"],
        "the profile is not the client's word"
    );
    let e = a.err("gateway.hello", json!({"name": "again"})).await;
    assert_eq!(e["code"], -32602, "{e}");

    let id = session(&mut a).await;
    let presence = a.ok("session.presence", json!({"session_id": id})).await;
    assert_eq!(presence["peers"][0]["client"], json!({"name": "ann"}));
    assert_eq!(presence["peers"][0]["profile"], a.ready["profile"]);

    // Attached first: a hello then is refused (the session keeps what it has).
    let mut b = gw.client().await;
    attach(&mut b, &id).await;
    let e = b.err("gateway.hello", json!({"name": "late"})).await;
    assert_eq!(e["code"], -32602, "{e}");

    // Presence frames go only to peers that said hello: ann hears dee
    // come, b (no hello) hears nothing.
    let mut dee = described(&gw, "dee", "i-dee").await;
    attach(&mut dee, &id).await;
    let mut seen = ids(&a.ok("session.presence", json!({"session_id": id})).await);
    seen.remove(&peer_id(&dee));
    let want = ids(&a.ok("session.presence", json!({"session_id": id})).await);
    until_present(&mut a, &mut seen, &want).await;
    b.expect_silence(3 * WINDOW).await;

    let e = a
        .err("session.presence", json!({"session_id": "s_nothing_here"}))
        .await;
    assert_eq!(e["code"], 4001, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_inside_the_grace_is_no_leave_and_no_join() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut a = described(&gw, "ann", "i-ann").await;
    let b = described(&gw, "bob", "i-bob").await;
    let id = session(&mut a).await;
    let mut b = b;
    attach(&mut b, &id).await;
    let mut seen = BTreeSet::new();
    let both: BTreeSet<String> = [peer_id(&a), peer_id(&b)].into();
    until_present(&mut a, &mut seen, &both).await;

    // bob's connection drops; the same client object comes back at once.
    b.close().await;
    let mut b2 = described(&gw, "bob", "i-bob").await;
    attach(&mut b2, &id).await;

    // Neither a leave nor a join, for longer than the grace.
    if let Some(e) = next_presence(&mut a, GRACE + 3 * WINDOW).await {
        panic!("a reconnect was announced: {e}");
    }
    let presence = a.ok("session.presence", json!({"session_id": id})).await;
    assert_eq!(ids(&presence), [peer_id(&a), peer_id(&b2)].into());

    // Without an instance a reconnect cannot be told from a newcomer: a
    // leave and a join (in the same window or the next).
    let mut c = gw.client().await;
    attach(&mut c, &id).await;
    let cy = peer_id(&c);
    let e = next_presence(&mut a, GRACE).await.expect("cy's join");
    assert_eq!(e["type"], "presence.joined", "{e}");
    c.close().await;
    let e = next_presence(&mut a, GRACE).await.expect("cy's leave");
    assert_eq!(e["type"], "presence.left", "{e}");
    assert_eq!(e["payload"]["peers"][0]["peer_id"], cy.as_str());
}

/// Counts what `observer` hears within a window and a grace of the last
/// frame: the frames, and the peer ids told as joined and as left.
async fn heard(observer: &mut Client) -> (usize, BTreeSet<String>, BTreeSet<String>) {
    let (mut frames, mut joined, mut left) = (0, BTreeSet::new(), BTreeSet::new());
    while let Some(e) = next_presence(observer, GRACE + 2 * WINDOW).await {
        frames += 1;
        let into = if e["type"] == "presence.joined" {
            &mut joined
        } else {
            &mut left
        };
        for p in e["payload"]["peers"].as_array().expect("peers") {
            into.insert(p["peer_id"].as_str().expect("peer_id").to_owned());
        }
    }
    (frames, joined, left)
}

/// Drops each of `peers` and connects it again at once (described with
/// `instance` or not), one after another as fast as the machine allows.
async fn storm(
    gw: &Gateway,
    id: &str,
    peers: Vec<Client>,
    instance: bool,
) -> (Vec<Client>, Duration) {
    let started = Instant::now();
    let mut back = Vec::with_capacity(peers.len());
    for (i, p) in peers.into_iter().enumerate() {
        p.close().await;
        let mut p = if instance {
            described(gw, &format!("p{i}"), &format!("i-{i}")).await
        } else {
            gw.client().await
        };
        attach(&mut p, id).await;
        back.push(p);
    }
    (back, started.elapsed())
}

/// 500 peers each drop and reconnect, twice. The bound stated in
/// docs/PROTOCOL.md: each attached peer gets at most one `presence.joined`
/// and one `presence.left` frame per window (1 s), the first change after a
/// quiet window going out at once; so over a storm an observer gets at most
/// 2 × (windows the storm and its settling span + 1) presence frames,
/// whatever the number of peers, and still hears every change. Peers
/// without an instance cannot be recognised: each reconnect is a leave and
/// a join, coalesced. Peers with one that come back inside the grace are
/// neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_storm_costs_each_peer_a_bounded_number_of_presence_events() {
    const PEERS: usize = 500;
    let dir = tempdir();
    let gw = Gateway::start(
        dir.path(),
        &[
            "--max-peers-per-session",
            "600",
            "--rate-limit-rps",
            "100000",
        ],
    );
    let mut observer = described(&gw, "observer", "i-observer").await;
    let id = session(&mut observer).await;
    let mut peers = Vec::with_capacity(PEERS);
    for _ in 0..PEERS {
        let mut p = gw.client().await;
        attach(&mut p, &id).await;
        peers.push(p);
    }
    let mut everyone: BTreeSet<String> = peers.iter().map(peer_id).collect();
    everyone.insert(peer_id(&observer));
    let mut seen = BTreeSet::new();
    until_present(&mut observer, &mut seen, &everyone).await;
    tokio::time::sleep(2 * WINDOW).await;

    // Unrecognisable reconnects: every change told, in few frames.
    let before: BTreeSet<String> = peers.iter().map(peer_id).collect();
    let (peers, took) = storm(&gw, &id, peers, true).await;
    let (frames, joined, left) = heard(&mut observer).await;
    let after: BTreeSet<String> = peers.iter().map(peer_id).collect();
    let windows = (took + GRACE + 2 * WINDOW).as_secs_f64() / WINDOW.as_secs_f64();
    let bound = 2 * (windows.ceil() as usize + 1);
    eprintln!("{PEERS} reconnects took {took:?}: {frames} presence frames (bound {bound})");
    assert!(frames <= bound, "{frames} frames > {bound}");
    assert_eq!(left, before, "every old peer id told as left");
    assert_eq!(joined, after, "every new peer id told as joined");

    // Recognisable reconnects (same instance, inside the grace): nothing.
    let (peers, took) = storm(&gw, &id, peers, true).await;
    let (frames, joined, left) = heard(&mut observer).await;
    eprintln!("{PEERS} reconnects with an instance took {took:?}: {frames} presence frames");
    assert_eq!(
        (frames, joined.len(), left.len()),
        (0, 0, 0),
        "{joined:?} {left:?}"
    );

    let presence = observer
        .ok("session.presence", json!({"session_id": id}))
        .await;
    let mut now: BTreeSet<String> = peers.iter().map(peer_id).collect();
    now.insert(peer_id(&observer));
    assert_eq!(ids(&presence), now);
}

/// `tether attach` says who it is and prints a line when someone else
/// joins or leaves (on stderr, beside its other notes), never its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tether_attach_prints_joins_and_leaves() {
    let dir = tempdir();
    let gw = Gateway::start(dir.path(), &[]);
    let mut a = gw.client().await;
    let id = session(&mut a).await;
    let url = gw.url();
    let attached = common::terminal::Attached::start(&url, &id);
    attached.wait_stderr("the banner", |e| e.contains("attached to"));
    // attach described itself: its app, and an instance of its own.
    let presence = a.ok("session.presence", json!({"session_id": id})).await;
    let it = presence["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["peer_id"] != a.ready["peer_id"])
        .expect("attach listed")
        .clone();
    assert_eq!(it["client"]["app"], "tether attach", "{it}");
    assert!(it["client"]["instance"].as_str().is_some(), "{it}");

    let zoe = described(&gw, "zoe", "i-zoe").await;
    let mut zoe = zoe;
    attach(&mut zoe, &id).await;
    attached.wait_stderr("zoe's join", |e| e.contains("[zoe (laptop, tests) joined]"));
    zoe.close().await;
    attached.wait_stderr("zoe's leave", |e| e.contains("[zoe (laptop, tests) left]"));
    let err = attached.stderr();
    assert!(
        !err.contains("attach) joined"),
        "its own join is not printed: {err}"
    );
    drop(attached);
}
