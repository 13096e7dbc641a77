//! Failover: kill -9 of a session's owner node while a turn runs there,
//! timed at a client attached to the session through the other node.
//!
//! Each round: a session created through node X (so X owns it), a client
//! on node Y attached to it (Y follows it), a turn that sleeps on X's host
//! (`/sleep 60000`, still running whenever the kill comes), seen started at
//! Y's client; then SIGKILL to X and its hosts. Y's follower, having peers,
//! claims the session once X's heartbeat is older than the lease (it polls
//! the owners every second) and ends the running turn with one
//! `message.complete {"failure_reason":"node_lost"}`: the new owner's first
//! write, and the figure. The first event with a new seq at Y's client is
//! timed too (it is the same one unless something X had committed was
//! still on its way). The kill comes at a random moment within a second
//! of the turn's start (see [`jitter`]). X is then started again, and the
//! next round kills the other node, so each node is owner and follower in
//! turn.
//!
//! Events are read with a full JSON parse: a few per round.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::node::{Node, NodeSpec};
use crate::harness::{connect, request, Ws};

/// A turn that outlives any round.
const SLEEPING_TURN: &str = "/sleep 60000\nnever finished";
/// How long the follower's client may wait for the turn to start on the
/// owner's host: bounds a stall only.
const START_WAIT: Duration = Duration::from_secs(10);

/// One kill, as the follower's client saw it.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    /// Index of the node killed.
    pub killed: usize,
    /// Kill → the first event with a new seq.
    pub first_event: Duration,
    /// Kill → the `node_lost` ending of the running turn.
    pub node_lost: Duration,
}

/// Runs `kills` rounds on `nodes` (two or more), restarting each killed
/// node on its CPU with a fresh data directory.
pub async fn run(
    nodes: &mut [Node],
    spec: &NodeSpec,
    kills: usize,
    lease: Duration,
) -> anyhow::Result<Vec<Round>> {
    let mut rounds = Vec::with_capacity(kills);
    // A failover that takes this long has failed; bounds a stall only.
    let bound = lease * 10 + Duration::from_secs(10);
    for k in 0..kills {
        let (x, y) = (k % nodes.len(), (k + 1) % nodes.len());
        // The follower must be allowed to claim the moment the lease ends.
        tokio::time::sleep(nodes[y].settled_in(lease)).await;
        let (owner, mut follower, turn) = set_up(&nodes[x].url, &nodes[y].url).await?;
        let watermark = started(&mut follower, &turn).await?;
        tokio::time::sleep(jitter()).await;
        let killed_at = nodes[x].kill_9();
        // Its node is gone; nothing to close.
        drop(owner);
        let (first_event, node_lost) =
            tokio::time::timeout(bound, ending(&mut follower, &turn, watermark, killed_at))
                .await
                .with_context(|| format!("round {k}: no node_lost ending within {bound:?}"))??;
        let _ = follower.close(None).await;
        eprintln!(
            "bench: kill {k} (node {x}): node_lost at the follower's client after {node_lost:.3?}"
        );
        rounds.push(Round {
            killed: x,
            first_event,
            node_lost,
        });
        let cpu = nodes[x].cpu;
        nodes[x] = Node::start(spec, cpu)?;
    }
    Ok(rounds)
}

/// A delay in [0, 1 s), different each round. Without it every kill
/// would come at the same phase of the follower's once-a-second owner
/// poll (rounds start a fixed time after a node's start, and so does its
/// poll), and the figure would be that one phase's, not the spread a kill
/// at any moment sees. The nanoseconds of the clock are random enough.
fn jitter() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_nanos(u64::from(nanos.wrapping_mul(2_654_435_761) % 1_000_000_000))
}

/// A session owned by the node at `owner_url` with a client attached
/// through `follower_url`, and a sleeping turn submitted by the owner's
/// client: both clients and the turn's id.
async fn set_up(owner_url: &str, follower_url: &str) -> anyhow::Result<(Ws, Ws, String)> {
    let mut owner = connect(owner_url).await?;
    let created = request(&mut owner, "session.create", json!({"attach": true})).await?;
    let id = created["session"]["session_id"]
        .as_str()
        .context("session.create without a session_id")?
        .to_owned();
    let mut follower = connect(follower_url).await?;
    request(
        &mut follower,
        "session.resume",
        json!({"session_id": id, "last_seen": 0, "attach": true, "omit_messages": true}),
    )
    .await?;
    let submitted = request(
        &mut owner,
        "prompt.submit",
        json!({"session_id": id, "text": SLEEPING_TURN}),
    )
    .await?;
    let turn = submitted["turn_id"]
        .as_str()
        .context("prompt.submit without a turn_id")?
        .to_owned();
    Ok((owner, follower, turn))
}

/// Reads the follower's client until the turn's `message.start` (it runs
/// on the owner's host); the highest seq seen.
async fn started(follower: &mut Ws, turn: &str) -> anyhow::Result<u64> {
    let mut seen = 0;
    tokio::time::timeout(START_WAIT, async {
        loop {
            let e = next_event(follower).await?;
            seen = seen.max(e["seq"].as_u64().unwrap_or(0));
            if e["type"] == "message.start" && e["turn_id"] == turn {
                return anyhow::Ok(seen);
            }
        }
    })
    .await
    .context("the sleeping turn did not start on the owner")?
}

/// Reads the follower's client until the turn's `node_lost` ending: the
/// times from the kill to the first new seq and to that ending.
async fn ending(
    follower: &mut Ws,
    turn: &str,
    watermark: u64,
    killed_at: Instant,
) -> anyhow::Result<(Duration, Duration)> {
    let mut first = None;
    loop {
        let e = next_event(follower).await?;
        let at = killed_at.elapsed();
        if e["seq"].as_u64().is_some_and(|s| s > watermark) {
            first.get_or_insert(at);
        }
        if e["type"] == "message.complete" && e["turn_id"] == turn {
            let reason = &e["payload"]["failure_reason"];
            if reason != "node_lost" {
                bail!("the turn ended otherwise than node_lost: {e}");
            }
            return Ok((first.unwrap_or(at), at));
        }
    }
}

/// The next event frame's `params`, skipping anything else.
async fn next_event(ws: &mut Ws) -> anyhow::Result<Value> {
    loop {
        let msg = ws.next().await.context("connection closed")??;
        let Message::Text(t) = msg else {
            if let Message::Close(c) = msg {
                bail!("closed by the node: {c:?}");
            }
            continue;
        };
        let v: Value = serde_json::from_str(&t)?;
        if v["method"] == "event" {
            return Ok(v["params"].clone());
        }
    }
}
