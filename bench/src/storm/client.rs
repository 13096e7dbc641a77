//! One storm client: what it holds, how it talks to the controller, and
//! its life (stream, drop, reconnect, resume, catch up, read to the end).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::{CLIENT_READ_BUFFER, STALL};
use crate::harness::Ws;

/// What the controller tells every client task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Stream,
    Drop,
    Reconnect,
}

/// What a client task tells the controller.
pub(super) enum Ack {
    Dropped,
    CaughtUp,
}

/// The seqs one client holds, counted over both of its connections.
#[derive(Default)]
pub(super) struct Held {
    /// `counts[seq]`: how many times that seq arrived.
    pub(super) counts: Vec<u32>,
    /// Every seq in 1..=upto is held.
    pub(super) upto: u64,
}

impl Held {
    fn add(&mut self, seq: u64) {
        let i = seq as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        while self
            .counts
            .get(self.upto as usize + 1)
            .is_some_and(|c| *c > 0)
        {
            self.upto += 1;
        }
    }
}

/// Shared between the controller and the client tasks.
#[derive(Clone)]
pub(super) struct Control {
    pub(super) url: String,
    pub(super) phase: watch::Receiver<Phase>,
    pub(super) acks: mpsc::UnboundedSender<Ack>,
    /// Latest seq emitted per session, written by the gateway side.
    pub(super) latest: Arc<Vec<AtomicU64>>,
    /// The last seq of every session, once appends stopped.
    pub(super) finals: watch::Receiver<Option<Arc<Vec<u64>>>>,
}

pub(super) struct ClientOutcome {
    pub(super) session: usize,
    pub(super) watermark: u64,
    /// Latest seq emitted when the client started reconnecting.
    pub(super) target: u64,
    pub(super) replayed: u64,
    pub(super) resync: bool,
    pub(super) reconnect_at: Instant,
    /// `gateway.ready` arrived on the new connection.
    pub(super) ready_at: Instant,
    pub(super) resumed_at: Instant,
    pub(super) caught_up_at: Instant,
    pub(super) held: Held,
}

/// Connects `clients` clients, client i to session i mod `sessions`: the
/// first of each session creates it, the others resume it from seq 1 (so
/// that every client must end holding 1..latest). Returns each client with
/// its session's index, and the sessions' ids.
pub(super) async fn attach_all(
    url: &str,
    clients: usize,
    sessions: usize,
) -> anyhow::Result<(Vec<(Ws, usize, Held)>, Vec<String>)> {
    let mut ids: Vec<String> = Vec::new();
    let mut attached = Vec::with_capacity(clients);
    for i in 0..clients {
        let session = i % sessions;
        let mut ws = connect_lean(url).await?;
        let mut held = Held::default();
        if session == ids.len() {
            let r = call(
                &mut ws,
                &mut held,
                "session.create",
                json!({"attach": true}),
            )
            .await?;
            let id = r["session"]["session_id"]
                .as_str()
                .context("session id")?
                .to_string();
            ids.push(id);
        } else {
            let id = ids.get(session).context("session id")?;
            let r = call(
                &mut ws,
                &mut held,
                "session.resume",
                json!({"session_id": id, "last_seen": 0, "omit_messages": true}),
            )
            .await?;
            add_replay(&r, &mut held)?;
        }
        attached.push((ws, session, held));
    }
    Ok((attached, ids))
}

/// One client: stream, drop abruptly, reconnect, resume, catch up, and
/// read until the session's last seq.
pub(super) async fn client(
    mut ws: Ws,
    session: usize,
    id: String,
    mut held: Held,
    mut ctl: Control,
) -> anyhow::Result<ClientOutcome> {
    loop {
        tokio::select! {
            biased;
            _ = ctl.phase.wait_for(|p| *p != Phase::Stream) => break,
            msg = ws.next() => record(msg, &mut held)?,
        }
    }
    let watermark = held.upto;
    // No close frame: the socket just goes away, as with a lost network.
    drop(ws);
    let _ = ctl.acks.send(Ack::Dropped);
    ctl.phase.wait_for(|p| *p == Phase::Reconnect).await?;

    let reconnect_at = Instant::now();
    let target = ctl
        .latest
        .get(session)
        .map(|c| c.load(Ordering::Acquire))
        .context("session index")?;
    let back = reconnect(&ctl.url, &id, watermark, &mut held).await?;
    let mut ws = back.ws;
    while held.upto < target {
        let msg = tokio::time::timeout(STALL, ws.next())
            .await
            .context("catch-up stalled")?;
        record(msg, &mut held)?;
    }
    let caught_up_at = Instant::now();
    let _ = ctl.acks.send(Ack::CaughtUp);
    read_to_the_end(&mut ws, &mut held, &mut ctl, session).await?;
    Ok(ClientOutcome {
        session,
        watermark,
        target,
        replayed: back.replayed,
        resync: back.resync,
        reconnect_at,
        ready_at: back.ready_at,
        resumed_at: back.resumed_at,
        caught_up_at,
        held,
    })
}

/// A client back on a new connection, resumed from its watermark.
struct Back {
    ws: Ws,
    ready_at: Instant,
    resumed_at: Instant,
    replayed: u64,
    resync: bool,
}

async fn reconnect(url: &str, id: &str, watermark: u64, held: &mut Held) -> anyhow::Result<Back> {
    let mut ws = tokio::time::timeout(STALL, connect_lean(url))
        .await
        .context("reconnect stalled")??;
    let ready_at = Instant::now();
    let r = tokio::time::timeout(
        STALL,
        call(
            &mut ws,
            held,
            "session.resume",
            json!({"session_id": id, "last_seen": watermark,
                "attach": true, "omit_messages": true}),
        ),
    )
    .await
    .context("resume stalled")??;
    let resumed_at = Instant::now();
    let resync = r["resync"].as_bool().unwrap_or(false);
    let replayed = add_replay(&r, held)?;
    Ok(Back {
        ws,
        ready_at,
        resumed_at,
        replayed,
        resync,
    })
}

/// Reads until the client holds its session's last seq, once appends
/// stopped and the controller published the last seqs.
async fn read_to_the_end(
    ws: &mut Ws,
    held: &mut Held,
    ctl: &mut Control,
    session: usize,
) -> anyhow::Result<()> {
    loop {
        let last = ctl
            .finals
            .borrow_and_update()
            .as_ref()
            .and_then(|f| f.get(session).copied());
        if last.is_some_and(|l| held.upto >= l) {
            return Ok(());
        }
        tokio::select! {
            changed = ctl.finals.changed() => changed?,
            msg = tokio::time::timeout(STALL, ws.next()) => record(msg.context("stream stalled")?, held)?,
        }
    }
}

/// Connects like `harness::connect`, with a small read buffer: tungstenite
/// zeroes its whole read buffer (128 KiB by default) before every socket
/// read, which made the generator, not the gateway, the slow side of a
/// storm (a third of the generator's CPU in `perf`).
pub(super) async fn connect_lean(url: &str) -> anyhow::Result<Ws> {
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER);
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true).await?;
    ws.next().await.context("no ready frame")??;
    Ok(ws)
}

/// Counts the seq of an event frame; other frames are ignored.
fn record(
    msg: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
    held: &mut Held,
) -> anyhow::Result<()> {
    let msg = msg.context("connection closed")??;
    if let Message::Text(t) = msg {
        if let Some(seq) = seq_of(&t) {
            held.add(seq);
        }
    }
    Ok(())
}

/// The `seq` of an event frame, read without a full JSON parse (the load
/// generator must not be the bottleneck). The gateway writes every event
/// frame with this head; a reply (whose result may hold replayed events
/// with their own `seq`) never starts with it.
fn seq_of(frame: &str) -> Option<u64> {
    const EVENT_HEAD: &str = r#"{"jsonrpc":"2.0","method":"event","params":"#;
    if !frame.starts_with(EVENT_HEAD) {
        return None;
    }
    let at = frame.find("\"seq\":")? + 6;
    let end = frame[at..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(frame.len(), |e| at + e);
    frame[at..end].parse().ok()
}

/// Sends a request and waits for its reply; events that arrive meanwhile
/// are counted (a creator's `session.created` may precede the reply).
async fn call(ws: &mut Ws, held: &mut Held, method: &str, params: Value) -> anyhow::Result<Value> {
    let frame = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params});
    ws.send(Message::Text(frame.to_string().into())).await?;
    loop {
        let msg = tokio::time::timeout(STALL, ws.next())
            .await
            .context("reply stalled")?
            .context("closed")??;
        let Message::Text(t) = msg else { continue };
        if let Some(seq) = seq_of(&t) {
            held.add(seq);
            continue;
        }
        let v: Value = serde_json::from_str(&t)?;
        if v.get("id") == Some(&json!(1)) {
            if let Some(e) = v.get("error") {
                bail!("{method}: {e}");
            }
            return Ok(v["result"].clone());
        }
    }
}

/// Counts the events replayed in a resume result; how many there were.
fn add_replay(result: &Value, held: &mut Held) -> anyhow::Result<u64> {
    let Some(events) = result["events"].as_array() else {
        return Ok(0);
    };
    for e in events {
        held.add(e["seq"].as_u64().context("replayed event without seq")?);
    }
    Ok(events.len() as u64)
}
