//! What the cluster tests do with clients and the database: read a
//! session's events, resume it through a node, follow a turn to its end,
//! and look at what is stored (fences, peer counts).

use std::time::Instant;

use serde_json::{json, Value};

use super::TestCluster;
use crate::common::{session, Client};

/// Resumes (attaching) `id` on `c`'s node with watermark `last_seen`;
/// the replayed events. A resume right after a node died may find the
/// dead node's lease still running (5072): retried within `bound`.
pub async fn resume_from(
    c: &mut Client,
    id: &str,
    last_seen: u64,
    bound: std::time::Duration,
) -> Value {
    let started = Instant::now();
    loop {
        let r = c
            .call(
                "session.resume",
                json!({"session_id": id, "last_seen": last_seen, "omit_messages": true}),
            )
            .await;
        if r.get("result").is_some() {
            return r["result"].clone();
        }
        assert!(
            started.elapsed() < bound,
            "no node took the session over within {bound:?}: {r}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A session created through node 0 with a client on node 1 attached to
/// it (a follower's peer): where most of these tests start.
pub async fn owner_and_follower(cluster: &TestCluster) -> (Client, Client, String) {
    let mut a = cluster.nodes[0].client().await;
    let id = session(&mut a).await;
    let mut b = cluster.nodes[1].client().await;
    b.ok(
        "session.resume",
        json!({"session_id": id, "last_seen": 1, "omit_messages": true}),
    )
    .await;
    (a, b, id)
}

/// The `message.complete`s of `turn_id` among `events`.
pub fn completes_of_turn<'a>(events: &'a [Value], turn_id: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "message.complete" && e["turn_id"] == turn_id)
        .collect()
}

/// Durable events of `c`'s stream until the first for which `last` holds
/// (inclusive), skipping transient ones.
pub async fn durable_until(c: &mut Client, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let e = c.next_event().await;
        if e.get("seq").and_then(Value::as_u64).is_none() {
            continue;
        }
        let done = last(&e);
        out.push(e);
        if done {
            return out;
        }
    }
}

/// Durable events of `c`'s stream until the `message.complete` of `turn`
/// (inclusive), skipping transient ones.
pub async fn durable_through(c: &mut Client, turn: &str) -> Vec<Value> {
    durable_until(c, |e| {
        e["type"] == "message.complete" && e["turn_id"] == turn
    })
    .await
}

/// The peers stored for `id`, over every node's row.
pub async fn peer_rows(url: &str, id: &str) -> i64 {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(url).await.expect("connect");
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COALESCE(SUM(peers), 0)::BIGINT FROM session_peers WHERE session_id = $1",
    )
    .bind(id)
    .fetch_one(&mut db)
    .await
    .expect("read peer counts");
    let _ = db.close().await;
    n
}

/// `(seq, fence)` of every stored event of `id`, in seq order.
pub async fn fences(url: &str, id: &str) -> Vec<(i64, i64)> {
    use sqlx::Connection;
    let mut db = sqlx::PgConnection::connect(url).await.expect("connect");
    let rows: Vec<(i64, i64)> =
        sqlx::query_as("SELECT seq, fence FROM events WHERE session_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(&mut db)
            .await
            .expect("read fences");
    let _ = db.close().await;
    rows
}
